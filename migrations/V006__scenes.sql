-- V006: L2 scenes and the L3 persona (seed 001): the scene index rows, each owner's scene timer
-- and persona build state with their leases, and the provenance of every L2/L3 artefact. The
-- documents themselves live in the file store; see `shared/src/store/scene.rs` for the rules.
--
-- Applied inside the migration transaction (no CONCURRENTLY). Forward-only.

-- One row per scene; a deleted (or merged) scene keeps its row for provenance.
CREATE TABLE scenes (
    id          UUID        PRIMARY KEY,
    team_id     TEXT        NOT NULL,
    agent_id    TEXT        NOT NULL,
    user_id     TEXT        NOT NULL,
    name        TEXT        NOT NULL,
    -- One line, for the navigation list recall returns.
    overview    TEXT        NOT NULL,
    tags        JSONB       NOT NULL DEFAULT '[]'::jsonb,
    -- Where the Markdown document is in the file store.
    object_key  TEXT        NOT NULL,
    version     BIGINT      NOT NULL CHECK (version >= 1),
    status      TEXT        NOT NULL CHECK (status IN ('active', 'deleted')),
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);

-- The owner's scenes, most recently updated first (the navigation list, the editor's input).
CREATE INDEX scenes_tenant_updated_idx ON scenes (team_id, agent_id, user_id, updated_at DESC, id DESC);

-- Per owner: when the next scene run is due, what the last one saw, and the lease of the run in
-- progress. In the database so that a restart loses no timer and replicas share one lease.
CREATE TABLE scene_schedule (
    team_id           TEXT        NOT NULL,
    agent_id          TEXT        NOT NULL,
    user_id           TEXT        NOT NULL,
    due_at            TIMESTAMPTZ NULL,
    last_run_at       TIMESTAMPTZ NULL,
    last_l1_at        TIMESTAMPTZ NULL,
    memory_watermark  TIMESTAMPTZ NULL,
    -- The fence of the run in progress: every write of the run names it, so a run that lost
    -- its lease (it stalled, another claimed the owner) writes nothing.
    lease_token       UUID        NULL,
    -- The claim's time: an L1 batch committed after it was not seen by the run.
    lease_claimed_at  TIMESTAMPTZ NULL,
    lease_until       TIMESTAMPTZ NULL,
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, agent_id, user_id),
    CONSTRAINT scene_schedule_lease_whole
        CHECK ((lease_token IS NULL) = (lease_until IS NULL) AND (lease_token IS NULL) = (lease_claimed_at IS NULL))
);

-- The sweep: owners whose run is due, earliest first.
CREATE INDEX scene_schedule_due_idx ON scene_schedule (due_at) WHERE due_at IS NOT NULL;

-- Per owner: the persona's build state, a pending request from a scene edit, and the lease of
-- the build in progress. Created (version 0) by the first signal or claim.
CREATE TABLE personas (
    team_id            TEXT        NOT NULL,
    agent_id           TEXT        NOT NULL,
    user_id            TEXT        NOT NULL,
    version            BIGINT      NOT NULL DEFAULT 0 CHECK (version >= 0),
    object_key         TEXT        NULL,
    built_at           TIMESTAMPTZ NULL,
    memories_at_build  BIGINT      NOT NULL DEFAULT 0,
    scenes_at_build    BIGINT      NOT NULL DEFAULT 0,
    scene_watermark    TIMESTAMPTZ NULL,
    signal_at          TIMESTAMPTZ NULL,
    lease_token        UUID        NULL,
    lease_claimed_at   TIMESTAMPTZ NULL,
    lease_until        TIMESTAMPTZ NULL,
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, agent_id, user_id),
    CONSTRAINT personas_lease_whole
        CHECK ((lease_token IS NULL) = (lease_until IS NULL) AND (lease_token IS NULL) = (lease_claimed_at IS NULL))
);

-- Lineage of every scene edit and persona build (and of failed runs): which template, model
-- and inputs made which output. The twin of memory_provenance for L2/L3.
CREATE TABLE artifact_provenance (
    id           UUID        PRIMARY KEY,
    team_id      TEXT        NOT NULL,
    agent_id     TEXT        NOT NULL,
    user_id      TEXT        NOT NULL,
    layer        TEXT        NOT NULL CHECK (layer IN ('L2', 'L3')),
    -- NULL for the persona and for run-level records.
    scene_id     UUID        NULL,
    event        TEXT        NOT NULL,
    template     JSONB       NULL,
    model        TEXT        NULL,
    input_refs   JSONB       NOT NULL DEFAULT '[]'::jsonb,
    output_refs  JSONB       NOT NULL DEFAULT '[]'::jsonb,
    detail       JSONB       NOT NULL DEFAULT '{}'::jsonb,
    started_at   TIMESTAMPTZ NOT NULL,
    duration_ms  BIGINT      NOT NULL
);

-- The owner's records of a layer, newest first (optionally narrowed to one scene).
CREATE INDEX artifact_provenance_tenant_idx
    ON artifact_provenance (team_id, agent_id, user_id, layer, started_at DESC, id DESC);
