-- Owners with an L1 batch after their last run and nothing scheduled, lease free. $1 now,
-- $2 limit
SELECT team_id, agent_id, user_id
FROM scene_schedule
WHERE due_at IS NULL
  AND last_l1_at IS NOT NULL
  AND (last_run_at IS NULL OR last_l1_at > last_run_at)
  AND (lease_until IS NULL OR lease_until <= $1)
ORDER BY last_l1_at, team_id, agent_id, user_id
LIMIT $2
