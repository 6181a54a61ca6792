-- V005: the audit log: one row per recall and per administrative action. Forward-only.

CREATE TABLE audit_log (
    id           UUID        PRIMARY KEY,
    at           TIMESTAMPTZ NOT NULL,
    team_id      TEXT        NOT NULL,
    agent_id     TEXT        NOT NULL,
    user_id      TEXT        NOT NULL,
    -- Who acted: the X-Sediment-Actor header, or the tenant's user when none was sent.
    actor        TEXT        NOT NULL,
    action       TEXT        NOT NULL,
    -- What was acted on: a memory id, a session id, a template id; NULL for a recall.
    target       TEXT        NULL,
    -- `ok`, or the error code.
    outcome      TEXT        NOT NULL,
    duration_ms  BIGINT      NOT NULL,
    detail       JSONB       NOT NULL DEFAULT '{}'::jsonb
);

-- Tenant-scoped listings, newest first, with cursor pagination on (at, id).
CREATE INDEX audit_log_tenant_at_idx ON audit_log (team_id, agent_id, user_id, at DESC, id DESC);
