-- $1 session, $2-$4 tenant, $5 token, $6 error, $7 retry_at
UPDATE session_compactions
SET status = 'failed',
    claim_token = NULL,
    claimed_at = NULL,
    lease_until = NULL,
    error = $6,
    retry_at = $7,
    updated_at = now()
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
  AND status = 'pending'
  AND claim_token = $5
