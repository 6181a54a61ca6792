-- $1-$3 tenant, $4 token
UPDATE personas
SET lease_token = NULL,
    lease_claimed_at = NULL,
    lease_until = NULL,
    updated_at = now()
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
  AND lease_token = $4
