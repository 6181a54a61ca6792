-- Newest first, so a context call can stop reading once the window is full.
-- $1 session, $2-$4 tenant, $5 after_seq, $6 before_seq, $7 since (NULL: no reset), $8 limit
SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id,
       created_at, task
FROM messages
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
  AND seq > $5
  AND seq < $6
  AND ($7::timestamptz IS NULL OR created_at > $7)
ORDER BY seq DESC
LIMIT $8
