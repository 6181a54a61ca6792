-- Creates the owner's schedule row if absent, so that there is a row to lock. $1-$3 tenant
INSERT INTO scene_schedule (team_id, agent_id, user_id)
VALUES ($1, $2, $3)
ON CONFLICT (team_id, agent_id, user_id) DO NOTHING
