-- The embedded twin of migrations/V003__session_compactions.sql (session context compaction).
-- Idempotent: applied after schema.sql on every open. Timestamps are INTEGER unix
-- microseconds; the summary is JSON text.

CREATE TABLE IF NOT EXISTS session_compactions (
    session_id       TEXT    NOT NULL,
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

    PRIMARY KEY (team_id, agent_id, user_id, session_id),
    FOREIGN KEY (team_id, agent_id, user_id, session_id)
        REFERENCES sessions (team_id, agent_id, user_id, session_id),
    CHECK (status = 'pending' OR claim_token IS NULL),
    CHECK ((summary IS NULL) = (summary_text IS NULL) AND (summary IS NULL) = (last_seq IS NULL))
) STRICT;

CREATE INDEX IF NOT EXISTS session_compactions_open_idx
    ON session_compactions (requested_at)
    WHERE status <> 'success';
-- The primary key serves the reads `session_compactions_tenant_idx` served (files from before
-- schema version 8 lose it when the table is rebuilt).
