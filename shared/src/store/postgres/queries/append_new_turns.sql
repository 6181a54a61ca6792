-- Appends turns that carry no client id, in one statement: claims the next `n` seqs of the
-- session (creating it for this tenant if absent) and inserts the turns under them. The
-- session's row lock, taken by the claim, serializes appends to one session until commit.
WITH claimed AS (
    INSERT INTO sessions (session_id, team_id, agent_id, user_id, last_seq)
    VALUES ($1, $2, $3, $4, cardinality($5::uuid[]))
    ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE
    SET last_seq = sessions.last_seq + cardinality($5::uuid[]), updated_at = now()
    RETURNING last_seq - cardinality($5::uuid[]) AS base_seq
)
INSERT INTO messages
    (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at, task)
SELECT t.id, $1, $2, $3, $4, claimed.base_seq + t.ord, t.role, t.content, t.metadata, NULL,
       COALESCE(t.created_at, now()), t.task
FROM claimed,
     UNNEST($5::uuid[], $6::text[], $7::text[], $8::jsonb[], $9::timestamptz[], $10::text[])
         WITH ORDINALITY AS t(id, role, content, metadata, created_at, task, ord)
RETURNING id, seq, created_at
