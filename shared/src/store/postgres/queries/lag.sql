SELECT COALESCE(SUM(s.last_seq - COALESCE(c.seq, 0)), 0)::BIGINT AS turns,
       COUNT(*) AS sessions
FROM sessions s
LEFT JOIN cursors c ON c.consumer = $1
    AND c.team_id = s.team_id AND c.agent_id = s.agent_id AND c.user_id = s.user_id
    AND c.session_id = s.session_id
WHERE s.last_seq > COALESCE(c.seq, 0)
