-- The row lock serializes appends to one session until commit; `now` is the transaction time.
SELECT team_id, agent_id, user_id, last_seq, now() AS now
FROM sessions
WHERE session_id = $1
FOR UPDATE
