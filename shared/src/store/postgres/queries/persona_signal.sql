-- Records a scene edit's request for a persona update, creating the row (version 0) if absent.
-- The later of two pending signals is kept (GREATEST ignores NULL). $1-$3 tenant, $4 signal_at
INSERT INTO personas AS p (team_id, agent_id, user_id, signal_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (team_id, agent_id, user_id) DO UPDATE
SET signal_at = GREATEST(p.signal_at, excluded.signal_at),
    updated_at = now()
