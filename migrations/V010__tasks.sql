-- V010: the optional fifth isolation dimension, `task` (seed 001: team, agent and user are
-- mandatory; session and task optional). A turn carries the task of the append that stored
-- it, a memory the task of its source turns; NULL means none. Forward-only.
--
-- Nullable without a default: adding each column rewrites nothing, and the rows stored before
-- have no task, which is what they were stored with.
ALTER TABLE messages ADD COLUMN task TEXT NULL;
ALTER TABLE memories ADD COLUMN task TEXT NULL;

-- The memory listing narrowed to a task (`GET /v1/memories?task=`), newest first with cursor
-- pagination, like `memories_tenant_created_idx`. Partial: memories without a task, which the
-- narrowed listing never reads, cost it nothing. The table is empty of tasks when this runs,
-- so the build only reads it. Turns need none: they are read by session, or found through the
-- search index, which filters on the task itself.
CREATE INDEX memories_tenant_task_created_idx
    ON memories (team_id, agent_id, user_id, task, created_at DESC, id DESC)
    WHERE task IS NOT NULL;
