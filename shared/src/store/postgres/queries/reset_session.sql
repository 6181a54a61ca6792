UPDATE sessions
SET reset_at = now(), updated_at = now()
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
RETURNING reset_at
