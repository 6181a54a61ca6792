-- Always at least one row: the cursor, with NULL turn columns when nothing is pending.
SELECT c.cursor_seq, m.id, m.session_id, m.team_id, m.agent_id, m.user_id, m.seq, m.role,
       m.content, m.metadata, m.client_id, m.created_at, m.task
FROM (
    SELECT COALESCE(
        (SELECT seq FROM cursors
         WHERE consumer = $1 AND team_id = $4 AND agent_id = $5 AND user_id = $6 AND session_id = $2),
        0
    ) AS cursor_seq
) c
LEFT JOIN LATERAL (
    SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id,
           created_at, task
    FROM messages
    WHERE messages.team_id = $4
      AND messages.agent_id = $5
      AND messages.user_id = $6
      AND messages.session_id = $2
      AND messages.seq > c.cursor_seq
    ORDER BY messages.seq
    LIMIT $3
) m ON true
ORDER BY m.seq
