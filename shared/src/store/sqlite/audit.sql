-- The embedded audit log (SQLite), the twin of migrations/V005__audit_log.sql. Idempotent.

CREATE TABLE IF NOT EXISTS audit_log (
    id           TEXT    NOT NULL PRIMARY KEY,
    at           INTEGER NOT NULL,
    team_id      TEXT    NOT NULL,
    agent_id     TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    actor        TEXT    NOT NULL,
    action       TEXT    NOT NULL,
    target       TEXT    NULL,
    outcome      TEXT    NOT NULL,
    duration_ms  INTEGER NOT NULL,
    detail       TEXT    NOT NULL CHECK (json_valid(detail))
) STRICT;

CREATE INDEX IF NOT EXISTS audit_log_tenant_at_idx ON audit_log (team_id, agent_id, user_id, at DESC, id DESC);

-- The operator's log, the twin of migrations/V011__operator_log.sql.
CREATE TABLE IF NOT EXISTS operator_log (
    id           TEXT    NOT NULL PRIMARY KEY,
    at           INTEGER NOT NULL,
    team_id      TEXT    NULL,
    actor        TEXT    NOT NULL,
    action       TEXT    NOT NULL,
    target       TEXT    NULL,
    outcome      TEXT    NOT NULL,
    duration_ms  INTEGER NOT NULL,
    detail       TEXT    NOT NULL CHECK (json_valid(detail))
) STRICT;

CREATE INDEX IF NOT EXISTS operator_log_at_idx ON operator_log (at DESC, id DESC);
CREATE INDEX IF NOT EXISTS operator_log_team_at_idx ON operator_log (team_id, at DESC, id DESC);
