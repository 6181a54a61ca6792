-- The parts of the embedded schema that need the `task` columns, the twin of
-- migrations/V010__tasks.sql. Applied after `apply_schema` has added the columns to a file
-- from before them; idempotent.

-- The memory listing narrowed to a task, newest first with cursor pagination, like
-- `memories_tenant_created_idx`. Partial: memories without a task cost it nothing.
CREATE INDEX IF NOT EXISTS memories_tenant_task_created_idx
    ON memories (team_id, agent_id, user_id, task, created_at DESC, id DESC)
    WHERE task IS NOT NULL;
