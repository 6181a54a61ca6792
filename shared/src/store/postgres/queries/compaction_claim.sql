-- $1 session, $2-$4 tenant, $5 now, $6 lease_until, $7 token, $8 max_attempts
UPDATE session_compactions
SET status = 'pending',
    claim_token = $7,
    claimed_at = $5,
    lease_until = $6,
    attempts = attempts + 1,
    retry_at = NULL,
    updated_at = $5
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
  AND ((status = 'pending' AND (claim_token IS NULL OR lease_until <= $5))
       OR (status = 'failed' AND retry_at <= $5 AND attempts < $8))
RETURNING attempts, lease_until
