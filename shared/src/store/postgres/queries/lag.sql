SELECT COALESCE(SUM(s.last_seq - COALESCE(c.seq, 0)), 0)::BIGINT AS turns,
       COUNT(*) AS sessions
FROM sessions s
LEFT JOIN cursors c ON c.consumer = $1 AND c.session_id = s.session_id
WHERE s.last_seq > COALESCE(c.seq, 0)
