-- No row: the tenant has no such session. One row with a NULL id: no turns in range.
SELECT m.id, m.session_id, m.team_id, m.agent_id, m.user_id, m.seq, m.role, m.content,
       m.metadata, m.client_id, m.created_at, m.task
FROM sessions s
LEFT JOIN LATERAL (
    SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id,
           created_at, task
    FROM messages
    WHERE messages.session_id = $1
      AND messages.team_id = $2
      AND messages.agent_id = $3
      AND messages.user_id = $4
      AND messages.seq > $5
    ORDER BY messages.seq
    LIMIT $6
) m ON true
WHERE s.session_id = $1
  AND s.team_id = $2
  AND s.agent_id = $3
  AND s.user_id = $4
ORDER BY m.seq
