-- Jobs a worker could claim now (the claim's own condition). $1 now, $2 max_attempts, $3 limit
SELECT session_id, team_id, agent_id, user_id
FROM session_compactions
WHERE status <> 'success'
  AND ((status = 'pending' AND (claim_token IS NULL OR lease_until <= $1))
       OR (status = 'failed' AND retry_at <= $1 AND attempts < $2))
ORDER BY requested_at
LIMIT $3
