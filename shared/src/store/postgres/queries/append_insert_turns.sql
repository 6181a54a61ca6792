-- Inserts a batch of turns, one array element per turn.
INSERT INTO messages
    (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at, task)
SELECT t.id, $1, $2, $3, $4, t.seq, t.role, t.content, t.metadata, t.client_id, t.created_at, t.task
FROM UNNEST(
    $5::uuid[], $6::bigint[], $7::text[], $8::text[], $9::jsonb[], $10::text[], $11::timestamptz[],
    $12::text[]
) AS t(id, seq, role, content, metadata, client_id, created_at, task)
