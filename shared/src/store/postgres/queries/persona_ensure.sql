-- Creates the owner's persona row (version 0) if absent, so that there is a row to lock.
-- $1-$3 tenant
INSERT INTO personas (team_id, agent_id, user_id)
VALUES ($1, $2, $3)
ON CONFLICT (team_id, agent_id, user_id) DO NOTHING
