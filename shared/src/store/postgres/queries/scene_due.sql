-- Owners whose run is due and whose lease is free, earliest first. $1 now, $2 limit
SELECT team_id, agent_id, user_id
FROM scene_schedule
WHERE due_at IS NOT NULL
  AND due_at <= $1
  AND (lease_until IS NULL OR lease_until <= $1)
ORDER BY due_at, team_id, agent_id, user_id
LIMIT $2
