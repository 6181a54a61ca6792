-- Stamps a new scene lease on the locked row (the caller checked it is free).
-- $1-$3 tenant, $4 token, $5 now, $6 lease_until
UPDATE scene_schedule
SET lease_token = $4,
    lease_claimed_at = $5,
    lease_until = $6,
    updated_at = now()
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
