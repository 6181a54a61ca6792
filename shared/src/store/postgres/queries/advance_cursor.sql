-- A cursor never moves back, so a late or duplicate advance is harmless.
--
-- Committed without waiting for the WAL flush (`synchronous_commit` off for this statement's
-- transaction alone): an advance lost in a Postgres crash moves the cursor back to an earlier
-- seq, and the consumer then redoes work it has already made durable, which its idempotence
-- makes harmless (see `TranscriptStore::advance_cursor`). The turns themselves, and everything
-- else, keep the server's setting.
INSERT INTO cursors (consumer, session_id, seq, updated_at)
SELECT $1::text, $2::text, $3::bigint, now()
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS this_transaction
ON CONFLICT (consumer, session_id) DO UPDATE
SET seq = GREATEST(cursors.seq, excluded.seq), updated_at = now()
