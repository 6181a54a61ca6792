-- Creates the tenant's session unless it exists.
INSERT INTO sessions (session_id, team_id, agent_id, user_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (team_id, agent_id, user_id, session_id) DO NOTHING
