-- V007: an append writes fewer pages. Forward-only.
--
-- Every append moves its session's `last_seq` and `updated_at`. With `updated_at` in two
-- indexes, each append inserted an entry into both (and into the primary key: an update that
-- changes an indexed column cannot be HOT), at random pages, each a full-page image in the WAL
-- after every checkpoint. No query reads through these indexes: every session read names its
-- session id, and the backlog sweep, which orders by `updated_at`, must visit every caught-up
-- session to find the few behind whichever way it walks, so it costs one scan either way.
DROP INDEX sessions_tenant_idx;
DROP INDEX sessions_updated_at_idx;

-- Likewise every turn inserted an entry here, on the page of its tenant and session.
-- Every read of turns names its session, and `messages_session_seq_key` (session_id, seq)
-- finds them in seq order; the tenant columns are then checked on the rows themselves.
DROP INDEX messages_tenant_session_seq_idx;

-- Now that an append changes no indexed column of `sessions`, its update can stay on the
-- same page (HOT) and leave the primary key alone, if the page has room: keep half of each
-- page free for the next versions. Cursors are rewritten the same way on every advance.
ALTER TABLE sessions SET (fillfactor = 50);
ALTER TABLE cursors SET (fillfactor = 50);
