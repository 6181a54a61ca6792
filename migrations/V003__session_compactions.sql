-- V003: session context compaction (seed 000, L3): one job and the last good summary per
-- session. See `shared/src/store/compaction.rs` for the state machine.
--
-- Applied inside the migration transaction (no CONCURRENTLY). Forward-only.

CREATE TABLE session_compactions (
    session_id       TEXT        PRIMARY KEY REFERENCES sessions (session_id),
    -- The session's owner, repeated so that every read filters on it directly.
    team_id          TEXT        NOT NULL,
    agent_id         TEXT        NOT NULL,
    user_id          TEXT        NOT NULL,

    -- The job.
    status           TEXT        NOT NULL CHECK (status IN ('pending', 'success', 'failed')),
    attempts         INTEGER     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    requested_at     TIMESTAMPTZ NOT NULL,
    -- The fence of the worker holding a pending job; NULL while nobody does.
    claim_token      UUID        NULL,
    claimed_at       TIMESTAMPTZ NULL,
    -- Pending: the job counts as abandoned after this.
    lease_until      TIMESTAMPTZ NULL,
    -- Failed: the sweep may retry it from this time.
    retry_at         TIMESTAMPTZ NULL,
    error            TEXT        NULL,

    -- The last good summary and its provenance (NULL until the first success).
    summary          JSONB       NULL,
    summary_text     TEXT        NULL,
    token_count      BIGINT      NULL,
    source_tokens    BIGINT      NULL,
    message_count    BIGINT      NULL,
    first_seq        BIGINT      NULL,
    last_seq         BIGINT      NULL,
    summary_reset_at TIMESTAMPTZ NULL,
    summarizer       TEXT        NULL,
    prompt_version   TEXT        NULL,
    input_hash       TEXT        NULL,
    started_at       TIMESTAMPTZ NULL,
    duration_ms      BIGINT      NULL,
    compressed_at    TIMESTAMPTZ NULL,

    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),

    CONSTRAINT session_compactions_token_only_when_pending
        CHECK (status = 'pending' OR claim_token IS NULL),
    CONSTRAINT session_compactions_summary_whole
        CHECK ((summary IS NULL) = (summary_text IS NULL) AND (summary IS NULL) = (last_seq IS NULL))
);

-- The sweep: jobs not finished, oldest request first.
CREATE INDEX session_compactions_open_idx
    ON session_compactions (requested_at)
    WHERE status <> 'success';
-- Tenant-scoped reads.
CREATE INDEX session_compactions_tenant_idx
    ON session_compactions (team_id, agent_id, user_id, session_id);
