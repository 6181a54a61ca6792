-- Success without a new summary: the stored one stays. $1 session, $2-$4 tenant, $5 token
UPDATE session_compactions
SET status = 'success',
    claim_token = NULL,
    claimed_at = NULL,
    lease_until = NULL,
    retry_at = NULL,
    error = NULL,
    attempts = 0,
    updated_at = now()
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
  AND status = 'pending'
  AND claim_token = $5
