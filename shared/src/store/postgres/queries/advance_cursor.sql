-- A cursor never moves back, so a late or duplicate advance is harmless.
INSERT INTO cursors (consumer, session_id, seq, updated_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (consumer, session_id) DO UPDATE
SET seq = GREATEST(cursors.seq, excluded.seq), updated_at = now()
