-- The tables keyed by a session as schema version 7 made them (sessions keyed by their id
-- alone), for the test that a file of that version is upgraded; no build applies it. Copied
-- from schema.sql, memory.sql and compaction.sql as they were at version 7.

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

CREATE TABLE IF NOT EXISTS cursors (
    consumer    TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (consumer, session_id)
) STRICT;

CREATE TABLE IF NOT EXISTS extract_schedule (
    session_id   TEXT    NOT NULL PRIMARY KEY REFERENCES sessions (session_id),
    runs         INTEGER NOT NULL DEFAULT 0,
    idle_due_at  INTEGER NULL,
    lease_owner  TEXT    NULL,
    lease_until  INTEGER NULL,
    updated_at   INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS extract_schedule_due_idx ON extract_schedule (idle_due_at) WHERE idle_due_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS session_compactions (
    session_id       TEXT    NOT NULL PRIMARY KEY REFERENCES sessions (session_id),
    team_id          TEXT    NOT NULL,
    agent_id         TEXT    NOT NULL,
    user_id          TEXT    NOT NULL,

    status           TEXT    NOT NULL CHECK (status IN ('pending', 'success', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    requested_at     INTEGER NOT NULL,
    claim_token      TEXT    NULL,
    claimed_at       INTEGER NULL,
    lease_until      INTEGER NULL,
    retry_at         INTEGER NULL,
    error            TEXT    NULL,

    summary          TEXT    NULL CHECK (summary IS NULL OR json_valid(summary)),
    summary_text     TEXT    NULL,
    token_count      INTEGER NULL,
    source_tokens    INTEGER NULL,
    message_count    INTEGER NULL,
    first_seq        INTEGER NULL,
    last_seq         INTEGER NULL,
    summary_reset_at INTEGER NULL,
    summarizer       TEXT    NULL,
    prompt_version   TEXT    NULL,
    input_hash       TEXT    NULL,
    started_at       INTEGER NULL,
    duration_ms      INTEGER NULL,
    compressed_at    INTEGER NULL,

    updated_at       INTEGER NOT NULL,

    CHECK (status = 'pending' OR claim_token IS NULL),
    CHECK ((summary IS NULL) = (summary_text IS NULL) AND (summary IS NULL) = (last_seq IS NULL))
) STRICT;

CREATE INDEX IF NOT EXISTS session_compactions_open_idx
    ON session_compactions (requested_at)
    WHERE status <> 'success';
CREATE INDEX IF NOT EXISTS session_compactions_tenant_idx
    ON session_compactions (team_id, agent_id, user_id, session_id);
