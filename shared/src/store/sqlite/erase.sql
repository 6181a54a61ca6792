-- The embedded twin of migrations/V009__erasures.sql (erasure jobs). Idempotent.
-- Timestamps are INTEGER unix microseconds; `deleted` and `residue` are JSON objects.

CREATE TABLE IF NOT EXISTS erasures (
    id            TEXT    NOT NULL PRIMARY KEY,
    team_id       TEXT    NOT NULL,
    agent_id      TEXT    NOT NULL,
    user_id       TEXT    NOT NULL,
    requested_by  TEXT    NOT NULL,
    requested_at  INTEGER NOT NULL,
    step          TEXT    NOT NULL CHECK (step IN ('rows', 'index', 'files', 'verify', 'done')),
    attempts      INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    deleted       TEXT    NOT NULL CHECK (json_valid(deleted)),
    residue       TEXT    NOT NULL CHECK (json_valid(residue)),
    error         TEXT    NULL,
    lease_token   TEXT    NULL,
    lease_until   INTEGER NULL,
    finished_at   INTEGER NULL,
    updated_at    INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX IF NOT EXISTS erasures_unfinished_owner_key
    ON erasures (team_id, agent_id, user_id) WHERE step <> 'done';
CREATE INDEX IF NOT EXISTS erasures_unfinished_idx ON erasures (requested_at) WHERE step <> 'done';
CREATE INDEX IF NOT EXISTS memory_provenance_owner_idx ON memory_provenance (team_id, agent_id, user_id);
