UPDATE sessions
SET last_seq = $2, updated_at = now()
WHERE session_id = $1
