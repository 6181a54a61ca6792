SELECT last_seq, reset_at
FROM sessions
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
