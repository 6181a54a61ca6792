-- The embedded L2/L3 schema (SQLite), the twin of migrations/V006__scenes.sql. Idempotent; the
-- same conventions as schema.sql (unix microseconds, UUID text, JSON as text).

CREATE TABLE IF NOT EXISTS scenes (
    id          TEXT    NOT NULL PRIMARY KEY,
    team_id     TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    user_id     TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    overview    TEXT    NOT NULL,
    tags        TEXT    NOT NULL CHECK (json_valid(tags)),
    object_key  TEXT    NOT NULL,
    version     INTEGER NOT NULL CHECK (version >= 1),
    status      TEXT    NOT NULL CHECK (status IN ('active', 'deleted')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS scenes_tenant_updated_idx
    ON scenes (team_id, agent_id, user_id, updated_at DESC, id DESC);

CREATE TABLE IF NOT EXISTS scene_schedule (
    team_id           TEXT    NOT NULL,
    agent_id          TEXT    NOT NULL,
    user_id           TEXT    NOT NULL,
    due_at            INTEGER NULL,
    last_run_at       INTEGER NULL,
    last_l1_at        INTEGER NULL,
    memory_watermark  INTEGER NULL,
    lease_token       TEXT    NULL,
    lease_claimed_at  INTEGER NULL,
    lease_until       INTEGER NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (team_id, agent_id, user_id),
    CHECK ((lease_token IS NULL) = (lease_until IS NULL) AND (lease_token IS NULL) = (lease_claimed_at IS NULL))
) STRICT;

CREATE INDEX IF NOT EXISTS scene_schedule_due_idx ON scene_schedule (due_at) WHERE due_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS personas (
    team_id            TEXT    NOT NULL,
    agent_id           TEXT    NOT NULL,
    user_id            TEXT    NOT NULL,
    version            INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    object_key         TEXT    NULL,
    built_at           INTEGER NULL,
    memories_at_build  INTEGER NOT NULL DEFAULT 0,
    scenes_at_build    INTEGER NOT NULL DEFAULT 0,
    scene_watermark    INTEGER NULL,
    signal_at          INTEGER NULL,
    lease_token        TEXT    NULL,
    lease_claimed_at   INTEGER NULL,
    lease_until        INTEGER NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (team_id, agent_id, user_id),
    CHECK ((lease_token IS NULL) = (lease_until IS NULL) AND (lease_token IS NULL) = (lease_claimed_at IS NULL))
) STRICT;

CREATE TABLE IF NOT EXISTS artifact_provenance (
    id           TEXT    NOT NULL PRIMARY KEY,
    team_id      TEXT    NOT NULL,
    agent_id     TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    layer        TEXT    NOT NULL CHECK (layer IN ('L2', 'L3')),
    scene_id     TEXT    NULL,
    event        TEXT    NOT NULL,
    template     TEXT    NULL CHECK (template IS NULL OR json_valid(template)),
    model        TEXT    NULL,
    input_refs   TEXT    NOT NULL CHECK (json_valid(input_refs)),
    output_refs  TEXT    NOT NULL CHECK (json_valid(output_refs)),
    detail       TEXT    NOT NULL CHECK (json_valid(detail)),
    started_at   INTEGER NOT NULL,
    duration_ms  INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS artifact_provenance_tenant_idx
    ON artifact_provenance (team_id, agent_id, user_id, layer, started_at DESC, id DESC);
