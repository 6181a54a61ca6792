SELECT client_id, id, seq, created_at
FROM messages
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
  AND client_id = ANY($5)
