-- MATERIALIZED pins the plan to primary-key lookups first: otherwise the planner may take the
-- tenant index and walk every turn of the tenant (30 ms at 100k turns, seen in the bench).
WITH hits AS MATERIALIZED (
    SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id,
           created_at, task
    FROM messages
    WHERE id = ANY($1)
)
SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id,
       created_at, task
FROM hits
WHERE team_id = $2
  AND agent_id = $3
  AND user_id = $4
