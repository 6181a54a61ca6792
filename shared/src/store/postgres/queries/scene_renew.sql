-- $1-$3 tenant, $4 token, $5 the lease's new end
UPDATE scene_schedule
SET lease_until = $5,
    updated_at = now()
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
  AND lease_token = $4
