-- $1-$3 tenant
SELECT due_at, last_run_at, last_l1_at, memory_watermark
FROM scene_schedule
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
