-- Queues a job unless a live one holds the session. Inserting from `sessions` filtered by the
-- tenant makes another tenant's (or an unknown) session insert nothing. Concurrent requests
-- serialize on the row: the loser re-checks the WHERE against the winner's pending row and
-- returns no row.
-- Unless forced, it also requires the stored summary to be the one the caller saw ($8), so a
-- caller that decided on a summary a finished job has since replaced queues nothing.
-- $1 session, $2-$4 tenant, $5 now, $6 lease_until, $7 force, $8 seen summary last_seq
INSERT INTO session_compactions AS c
    (session_id, team_id, agent_id, user_id, status, attempts, requested_at, lease_until, updated_at)
SELECT s.session_id, s.team_id, s.agent_id, s.user_id, 'pending', 0, $5, $6, $5
FROM sessions s
WHERE s.session_id = $1
  AND s.team_id = $2
  AND s.agent_id = $3
  AND s.user_id = $4
ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE
SET status = 'pending',
    attempts = CASE WHEN $7 THEN 0 ELSE c.attempts END,
    requested_at = excluded.requested_at,
    claim_token = NULL,
    claimed_at = NULL,
    lease_until = excluded.lease_until,
    retry_at = NULL,
    updated_at = excluded.updated_at
WHERE c.team_id = excluded.team_id
  AND c.agent_id = excluded.agent_id
  AND c.user_id = excluded.user_id
  AND (c.status = 'success'
       OR (c.status = 'pending' AND c.lease_until <= excluded.requested_at)
       OR (c.status = 'failed' AND ($7 OR c.retry_at <= excluded.requested_at)))
  AND ($7 OR c.last_seq IS NOT DISTINCT FROM $8)
RETURNING c.status
