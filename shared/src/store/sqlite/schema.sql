-- The embedded transcript schema (SQLite), the twin of migrations/V001__init.sql as V012 left it.
-- Idempotent: run on every open. Timestamps are INTEGER unix microseconds; ids are
-- lowercase hyphenated UUID text; metadata is a JSON object as text.

-- A session id is the client's, unique only within its owner (two users may both have a
-- session "s1"): the owner leads the key of every table that names a session, as in
-- migrations/V012__owner_scoped_sessions.sql, so that listing or erasing an owner's rows reads
-- a prefix of it. `CREATE TABLE IF NOT EXISTS` leaves the tables of a file from before schema
-- version 8 as they were: `rekey_sessions` in sqlite.rs rebuilds them first.
CREATE TABLE IF NOT EXISTS sessions (
    session_id  TEXT    NOT NULL,
    team_id     TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    last_seq    INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    reset_at    INTEGER NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (team_id, agent_id, user_id, session_id)
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
    session_id  TEXT    NOT NULL,
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
    UNIQUE (team_id, agent_id, user_id, session_id, seq),
    FOREIGN KEY (team_id, agent_id, user_id, session_id)
        REFERENCES sessions (team_id, agent_id, user_id, session_id)
) STRICT;

CREATE UNIQUE INDEX IF NOT EXISTS messages_session_client_id_key
    ON messages (team_id, agent_id, user_id, session_id, client_id)
    WHERE client_id IS NOT NULL;
-- Every read of turns names the owner's session: UNIQUE (team_id, agent_id, user_id,
-- session_id, seq) serves them all, and an erasure reads a prefix of it.
DROP INDEX IF EXISTS messages_tenant_session_seq_idx;

-- No foreign key: a cursor may name a session that has no row (yet), which is harmless.
CREATE TABLE IF NOT EXISTS cursors (
    consumer    TEXT    NOT NULL,
    team_id     TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (consumer, team_id, agent_id, user_id, session_id)
) STRICT;
