SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id,
       created_at
FROM messages
WHERE id = ANY($1)
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
