-- V001: the L0 transcript (sessions, turns) and per-consumer cursors.
--
-- Applied by `PostgresStore::migrate` inside one transaction that holds an advisory lock, so
-- this file must not contain statements that refuse to run in a transaction
-- (e.g. CREATE INDEX CONCURRENTLY). Forward-only: never edit this file once released; add
-- V002__*.sql instead.

-- A session id is global and owned by exactly one tenant. `last_seq` is the seq of the last
-- stored turn (0 before the first); locking this row serializes appends to the session.
CREATE TABLE sessions (
    session_id  TEXT        PRIMARY KEY,
    team_id     TEXT        NOT NULL,
    agent_id    TEXT        NOT NULL,
    user_id     TEXT        NOT NULL,
    last_seq    BIGINT      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    reset_at    TIMESTAMPTZ NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Tenant-scoped session listings.
CREATE INDEX sessions_tenant_idx ON sessions (team_id, agent_id, user_id, updated_at);
-- The backlog sweep reads sessions oldest first.
CREATE INDEX sessions_updated_at_idx ON sessions (updated_at, session_id);

-- L0 turns, never rewritten. The tenant columns duplicate the session's owner so every read
-- can filter on them directly (defense in depth).
CREATE TABLE messages (
    id          UUID        PRIMARY KEY,
    session_id  TEXT        NOT NULL REFERENCES sessions (session_id),
    team_id     TEXT        NOT NULL,
    agent_id    TEXT        NOT NULL,
    user_id     TEXT        NOT NULL,
    seq         BIGINT      NOT NULL CHECK (seq > 0),
    role        TEXT        NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    content     TEXT        NOT NULL,
    metadata    JSONB       NOT NULL DEFAULT '{}'::jsonb,
    client_id   TEXT        NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    CONSTRAINT messages_session_seq_key UNIQUE (session_id, seq)
);

-- Idempotency key of an append, unique within its session.
CREATE UNIQUE INDEX messages_session_client_id_key
    ON messages (session_id, client_id)
    WHERE client_id IS NOT NULL;
-- Tenant-scoped reads of a session's turns in seq order.
CREATE INDEX messages_tenant_session_seq_idx
    ON messages (team_id, agent_id, user_id, session_id, seq);

-- How far each consumer (worker kind) has processed each session. A cursor only moves
-- forward; it may name a session that has no row (yet), which is harmless.
CREATE TABLE cursors (
    consumer    TEXT        NOT NULL,
    session_id  TEXT        NOT NULL,
    seq         BIGINT      NOT NULL CHECK (seq >= 0),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, session_id)
);
