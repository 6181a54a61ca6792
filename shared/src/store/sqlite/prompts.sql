-- The embedded twin of migrations/V004__prompt_templates.sql (team and agent overrides of the
-- prompt templates). Idempotent: applied after the other parts on every open. Timestamps are
-- INTEGER unix microseconds; `active` is 0 or 1.

CREATE TABLE IF NOT EXISTS prompt_templates (
    id            TEXT    NOT NULL PRIMARY KEY,
    template_id   TEXT    NOT NULL,
    level         TEXT    NOT NULL CHECK (level IN ('team', 'agent')),
    team_id       TEXT    NOT NULL,
    agent_id      TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    content       TEXT    NOT NULL CHECK (content <> '' AND instr(content, char(0)) = 0),
    content_hash  TEXT    NOT NULL CHECK (length(content_hash) = 64),
    active        INTEGER NOT NULL CHECK (active IN (0, 1)),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,

    CHECK ((level = 'team') = (agent_id = '')),
    UNIQUE (team_id, agent_id, template_id, version)
) STRICT;

CREATE UNIQUE INDEX IF NOT EXISTS prompt_templates_active_idx
    ON prompt_templates (team_id, agent_id, template_id)
    WHERE active = 1;
