-- The embedded L1 schema (SQLite), the twin of migrations/V002__memories.sql. Idempotent; the
-- same conventions as schema.sql (unix microseconds, UUID text, JSON as text).

-- `task` comes last, as in `messages` (see schema.sql); its index is in tasks.sql.
CREATE TABLE IF NOT EXISTS memories (
    id                  TEXT    NOT NULL PRIMARY KEY,
    team_id             TEXT    NOT NULL,
    agent_id            TEXT    NOT NULL,
    user_id             TEXT    NOT NULL,
    session_id          TEXT    NOT NULL,
    content             TEXT    NOT NULL CHECK (instr(content, char(0)) = 0),
    category            TEXT    NOT NULL CHECK (category IN ('persona', 'episodic', 'instruction',
                            'work_fact', 'work_task', 'work_method', 'work_artifact')),
    priority            INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 100),
    scene               TEXT    NULL,
    occurred_at         TEXT    NULL,
    source_message_ids  TEXT    NOT NULL CHECK (json_valid(source_message_ids)),
    status              TEXT    NOT NULL CHECK (status IN ('active', 'archived')),
    superseded_by       TEXT    NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    task                TEXT    NULL
) STRICT;

CREATE INDEX IF NOT EXISTS memories_tenant_created_idx
    ON memories (team_id, agent_id, user_id, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS memories_superseded_by_idx ON memories (superseded_by) WHERE superseded_by IS NOT NULL;

CREATE TABLE IF NOT EXISTS memory_provenance (
    id                  TEXT    NOT NULL PRIMARY KEY,
    memory_id           TEXT    NULL,
    team_id             TEXT    NOT NULL,
    agent_id            TEXT    NOT NULL,
    user_id             TEXT    NOT NULL,
    session_id          TEXT    NOT NULL,
    layer               TEXT    NOT NULL,
    event               TEXT    NOT NULL,
    template            TEXT    NULL CHECK (template IS NULL OR json_valid(template)),
    model               TEXT    NULL,
    input_message_ids   TEXT    NOT NULL CHECK (json_valid(input_message_ids)),
    sibling_ids         TEXT    NOT NULL CHECK (json_valid(sibling_ids)),
    detail              TEXT    NOT NULL CHECK (json_valid(detail)),
    started_at          INTEGER NOT NULL,
    duration_ms         INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS memory_provenance_memory_idx ON memory_provenance (memory_id, started_at)
    WHERE memory_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_provenance_session_idx ON memory_provenance (session_id, started_at);

CREATE TABLE IF NOT EXISTS extract_schedule (
    team_id      TEXT    NOT NULL,
    agent_id     TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    runs         INTEGER NOT NULL DEFAULT 0,
    idle_due_at  INTEGER NULL,
    lease_owner  TEXT    NULL,
    lease_until  INTEGER NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (team_id, agent_id, user_id, session_id),
    FOREIGN KEY (team_id, agent_id, user_id, session_id)
        REFERENCES sessions (team_id, agent_id, user_id, session_id)
) STRICT;

CREATE INDEX IF NOT EXISTS extract_schedule_due_idx ON extract_schedule (idle_due_at) WHERE idle_due_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS memory_index_outbox (
    seq          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    memory_id    TEXT    NOT NULL,
    team_id      TEXT    NOT NULL,
    agent_id     TEXT    NOT NULL,
    user_id      TEXT    NOT NULL,
    enqueued_at  INTEGER NOT NULL
) STRICT;
