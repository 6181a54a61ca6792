-- The embedded transcript schema (SQLite), the twin of migrations/V001__init.sql.
-- Idempotent: run on every open. Timestamps are INTEGER unix microseconds; ids are
-- lowercase hyphenated UUID text; metadata is a JSON object as text.

CREATE TABLE IF NOT EXISTS sessions (
    session_id  TEXT    NOT NULL PRIMARY KEY,
    team_id     TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    last_seq    INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    reset_at    INTEGER NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

-- No index on updated_at: every append moves it, and with it each index entry that holds it,
-- while no read needs one (see migrations/V007__append_write_volume.sql). Files from before
-- V007 drop theirs here.
DROP INDEX IF EXISTS sessions_tenant_idx;
DROP INDEX IF EXISTS sessions_updated_at_idx;

-- `task` comes last, where `ALTER TABLE ... ADD COLUMN` puts it in a file from before it (see
-- `apply_schema` in sqlite.rs), so every file has the same columns in the same order.
CREATE TABLE IF NOT EXISTS messages (
    id          TEXT    NOT NULL PRIMARY KEY,
    session_id  TEXT    NOT NULL REFERENCES sessions (session_id),
    team_id     TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq > 0),
    role        TEXT    NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    -- Postgres text cannot hold NUL; refuse it here too so both backends store the same.
    content     TEXT    NOT NULL CHECK (instr(content, char(0)) = 0),
    metadata    TEXT    NOT NULL CHECK (json_valid(metadata)),
    client_id   TEXT    NULL,
    created_at  INTEGER NOT NULL,
    task        TEXT    NULL,
    UNIQUE (session_id, seq)
) STRICT;

CREATE UNIQUE INDEX IF NOT EXISTS messages_session_client_id_key
    ON messages (session_id, client_id)
    WHERE client_id IS NOT NULL;
-- Every read of turns names the session: UNIQUE (session_id, seq) serves them all.
DROP INDEX IF EXISTS messages_tenant_session_seq_idx;

CREATE TABLE IF NOT EXISTS cursors (
    consumer    TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (consumer, session_id)
) STRICT;
