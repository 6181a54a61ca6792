-- V009: erasure jobs (`DELETE /v1/users/{user_id}`). A row holds ids and counts, never
-- content, and is kept after the job ends. Forward-only.

CREATE TABLE erasures (
    id            UUID        PRIMARY KEY,
    team_id       TEXT        NOT NULL,
    agent_id      TEXT        NOT NULL,
    user_id       TEXT        NOT NULL,
    requested_by  TEXT        NOT NULL,
    requested_at  TIMESTAMPTZ NOT NULL,
    step          TEXT        NOT NULL CHECK (step IN ('rows', 'index', 'files', 'verify', 'done')),
    attempts      INTEGER     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- Rows, points and files deleted, per store; then what the last check found left.
    deleted       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    residue       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    error         TEXT        NULL,
    -- The run working on the job, until when; a crashed run's job is taken over after it.
    lease_token   UUID        NULL,
    lease_until   TIMESTAMPTZ NULL,
    finished_at   TIMESTAMPTZ NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);

-- One unfinished erasure per owner: a repeated request finds the running job.
CREATE UNIQUE INDEX erasures_unfinished_owner_key ON erasures (team_id, agent_id, user_id) WHERE step <> 'done';
CREATE INDEX erasures_unfinished_idx ON erasures (requested_at) WHERE step <> 'done';

-- An erasure deletes an owner's provenance by owner; without this it would scan every row.
CREATE INDEX memory_provenance_owner_idx ON memory_provenance (team_id, agent_id, user_id);
