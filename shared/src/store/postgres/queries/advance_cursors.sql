-- Moves one cursor per session (the owner $2[i], $3[i], $4[i] and session $5[i], to $6[i]) in
-- one statement. A cursor never moves back, so a late or duplicate advance is harmless; a
-- session listed twice takes its larger seq (one INSERT .. ON CONFLICT may not touch a row
-- twice). Rows are written in key order, so two workers advancing overlapping sessions lock
-- them in the same order and cannot deadlock.
--
-- Committed without waiting for the WAL flush (`synchronous_commit` off for this statement's
-- transaction alone): an advance lost in a Postgres crash moves the cursor back to an earlier
-- seq, and the consumer then redoes work it has already made durable, which its idempotence
-- makes harmless (see `TranscriptStore::advance_cursors`). The turns themselves, and everything
-- else, keep the server's setting.
INSERT INTO cursors (consumer, team_id, agent_id, user_id, session_id, seq, updated_at)
SELECT $1::text, a.team_id, a.agent_id, a.user_id, a.session_id, max(a.seq), now()
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
         AS a(team_id, agent_id, user_id, session_id, seq),
     (SELECT set_config('synchronous_commit', 'off', true)) AS this_transaction
GROUP BY a.team_id, a.agent_id, a.user_id, a.session_id
ORDER BY a.team_id, a.agent_id, a.user_id, a.session_id
ON CONFLICT (consumer, team_id, agent_id, user_id, session_id) DO UPDATE
SET seq = GREATEST(cursors.seq, excluded.seq), updated_at = now()
