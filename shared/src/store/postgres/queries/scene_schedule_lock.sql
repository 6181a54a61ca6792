-- Locks the owner's schedule row until the transaction ends: concurrent read-modify-writes,
-- claims and commits of one owner run one after another. $1-$3 tenant
SELECT due_at, last_run_at, last_l1_at, memory_watermark, lease_token, lease_claimed_at, lease_until
FROM scene_schedule
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
FOR UPDATE
