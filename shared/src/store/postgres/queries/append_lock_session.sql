-- The row lock serializes appends to one session until commit; `now` is the transaction time.
SELECT last_seq, now() AS now
FROM sessions
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
FOR UPDATE
