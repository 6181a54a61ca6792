-- Creates the session for this tenant unless it exists (for anyone).
INSERT INTO sessions (session_id, team_id, agent_id, user_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id) DO NOTHING
