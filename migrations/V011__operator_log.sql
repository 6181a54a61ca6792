-- V011: the operator's log: one row per call made with the admin key that changes something
-- (an API key made or revoked, a team erased). It belongs to no owner, so it is not part of
-- `audit_log`, and erasing a team keeps it: it holds ids, never content. Forward-only.

CREATE TABLE operator_log (
    id           UUID        PRIMARY KEY,
    at           TIMESTAMPTZ NOT NULL,
    -- The team acted on; NULL when the call named none (revoking an unknown key id).
    team_id      TEXT        NULL,
    -- Who acted: the X-Sediment-Actor header, or 'operator'.
    actor        TEXT        NOT NULL,
    action       TEXT        NOT NULL,
    -- A key id; NULL for a team erase.
    target       TEXT        NULL,
    -- `ok`, or the error code.
    outcome      TEXT        NOT NULL,
    duration_ms  BIGINT      NOT NULL,
    detail       JSONB       NOT NULL DEFAULT '{}'::jsonb
);

-- Listings newest first, across teams or for one, with cursor pagination on (at, id).
CREATE INDEX operator_log_at_idx ON operator_log (at DESC, id DESC);
CREATE INDEX operator_log_team_at_idx ON operator_log (team_id, at DESC, id DESC);
