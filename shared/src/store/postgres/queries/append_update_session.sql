UPDATE sessions
SET last_seq = $2, updated_at = now()
WHERE session_id = $1
  AND team_id = $3
  AND agent_id = $4
  AND user_id = $5
