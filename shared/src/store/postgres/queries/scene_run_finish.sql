-- Writes the timer after a run and releases the run's lease. $1-$3 tenant, $4 due_at,
-- $5 last_run_at, $6 last_l1_at, $7 memory_watermark, $8 token
UPDATE scene_schedule
SET due_at = $4,
    last_run_at = $5,
    last_l1_at = $6,
    memory_watermark = $7,
    lease_token = NULL,
    lease_claimed_at = NULL,
    lease_until = NULL,
    updated_at = now()
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
  AND lease_token = $8
