-- V002: L1 memories, their provenance, the per-session extraction schedule and the memory
-- index outbox. Forward-only (see V001).

-- L1 atomic memories. Archived memories stay, linked to the memory that replaced them, so a
-- memory's history is queryable. The tenant columns are on every row (defense in depth).
CREATE TABLE memories (
    id                  UUID        PRIMARY KEY,
    team_id             TEXT        NOT NULL,
    agent_id            TEXT        NOT NULL,
    user_id             TEXT        NOT NULL,
    session_id          TEXT        NOT NULL,
    content             TEXT        NOT NULL,
    category            TEXT        NOT NULL CHECK (category IN ('persona', 'episodic', 'instruction',
                            'work_fact', 'work_task', 'work_method', 'work_artifact')),
    priority            SMALLINT    NOT NULL CHECK (priority BETWEEN 0 AND 100),
    scene               TEXT        NULL,
    occurred_at         TEXT        NULL,
    source_message_ids  JSONB       NOT NULL DEFAULT '[]'::jsonb,
    status              TEXT        NOT NULL CHECK (status IN ('active', 'archived')),
    superseded_by       UUID        NULL,
    created_at          TIMESTAMPTZ NOT NULL,
    updated_at          TIMESTAMPTZ NOT NULL
);

-- Tenant-scoped listings, newest first, with cursor pagination on (created_at, id).
CREATE INDEX memories_tenant_created_idx ON memories (team_id, agent_id, user_id, created_at DESC, id DESC);
-- History: the memories a memory superseded.
CREATE INDEX memories_superseded_by_idx ON memories (superseded_by) WHERE superseded_by IS NOT NULL;

-- Lineage of every memory (and of failed batches): which template, model and turns made it.
CREATE TABLE memory_provenance (
    id                  UUID        PRIMARY KEY,
    memory_id           UUID        NULL,
    team_id             TEXT        NOT NULL,
    agent_id            TEXT        NOT NULL,
    user_id             TEXT        NOT NULL,
    session_id          TEXT        NOT NULL,
    layer               TEXT        NOT NULL,
    event               TEXT        NOT NULL,
    template            JSONB       NULL,
    model               TEXT        NULL,
    input_message_ids   JSONB       NOT NULL DEFAULT '[]'::jsonb,
    sibling_ids         JSONB       NOT NULL DEFAULT '[]'::jsonb,
    detail              JSONB       NOT NULL DEFAULT '{}'::jsonb,
    started_at          TIMESTAMPTZ NOT NULL,
    duration_ms         BIGINT      NOT NULL
);

CREATE INDEX memory_provenance_memory_idx ON memory_provenance (memory_id, started_at) WHERE memory_id IS NOT NULL;
CREATE INDEX memory_provenance_session_idx ON memory_provenance (session_id, started_at);

-- Per-session extraction schedule: how many batches ran (warm-up), when the idle flush is due,
-- and the lease of the run in progress. Lives in the database so a restart loses no timer.
CREATE TABLE extract_schedule (
    session_id   TEXT        PRIMARY KEY REFERENCES sessions (session_id),
    runs         BIGINT      NOT NULL DEFAULT 0,
    idle_due_at  TIMESTAMPTZ NULL,
    -- Who is extracting the session now, until when: one run per session at a time across
    -- every worker replica, so no LLM call is made for a batch another run will commit.
    lease_owner  UUID        NULL,
    lease_until  TIMESTAMPTZ NULL,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX extract_schedule_due_idx ON extract_schedule (idle_due_at) WHERE idle_due_at IS NOT NULL;

-- Memory ids whose index point must follow a change, written in the transaction of the change.
CREATE TABLE memory_index_outbox (
    seq          BIGSERIAL   PRIMARY KEY,
    memory_id    UUID        NOT NULL,
    team_id      TEXT        NOT NULL,
    agent_id     TEXT        NOT NULL,
    user_id      TEXT        NOT NULL,
    enqueued_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
