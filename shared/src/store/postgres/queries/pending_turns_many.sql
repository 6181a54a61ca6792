-- Up to $3 turns past both the cursor and $4[i] for each session (the owner $5[i], $6[i],
-- $7[i] and session $2[i]), in one round trip: the index worker reads every session woken in a
-- round at once, and passes in $4 what it has indexed but not yet recorded in the cursor.
-- Sessions with nothing pending yield no row; a session listed twice is read once, past its
-- larger $4.
SELECT m.id, m.session_id, m.team_id, m.agent_id, m.user_id, m.seq, m.role, m.content,
       m.metadata, m.client_id, m.created_at, m.task
FROM (
    SELECT a.team_id, a.agent_id, a.user_id, a.session_id, max(a.after) AS after
    FROM unnest($5::text[], $6::text[], $7::text[], $2::text[], $4::bigint[])
             AS a(team_id, agent_id, user_id, session_id, after)
    GROUP BY a.team_id, a.agent_id, a.user_id, a.session_id
) s
CROSS JOIN LATERAL (
    SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id,
           created_at, task
    FROM messages
    WHERE messages.team_id = s.team_id
      AND messages.agent_id = s.agent_id
      AND messages.user_id = s.user_id
      AND messages.session_id = s.session_id
      AND messages.seq > GREATEST(
          s.after,
          COALESCE((
              SELECT seq FROM cursors
              WHERE consumer = $1
                AND cursors.team_id = s.team_id
                AND cursors.agent_id = s.agent_id
                AND cursors.user_id = s.user_id
                AND cursors.session_id = s.session_id
          ), 0)
      )
    ORDER BY messages.seq
    LIMIT $3
) m
ORDER BY m.team_id, m.agent_id, m.user_id, m.session_id, m.seq
