-- V004: team and agent overrides of the prompt templates (issue 4: "overridable per instance,
-- team and agent, stored with id, version, source level and content hash"). See
-- `shared/src/store/prompts.rs` for the rules. Forward-only (see V001).

-- One row per version ever put at a scope; at most one active per scope and template. Rows are
-- never deleted, so the text behind any (template, version, level) in a provenance record
-- stays readable.
CREATE TABLE prompt_templates (
    id            UUID        PRIMARY KEY,
    -- A template id of `shared/prompts/` (`l1-extract`).
    template_id   TEXT        NOT NULL,
    level         TEXT        NOT NULL CHECK (level IN ('team', 'agent')),
    team_id       TEXT        NOT NULL,
    -- '' for a team override, so that the unique indexes below cover both levels.
    agent_id      TEXT        NOT NULL,
    version       TEXT        NOT NULL,
    -- The text the model receives (front matter removed) and its SHA-256 in hex.
    content       TEXT        NOT NULL CHECK (content <> ''),
    content_hash  TEXT        NOT NULL CHECK (length(content_hash) = 64),
    active        BOOLEAN     NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    -- When it was last activated or deactivated.
    updated_at    TIMESTAMPTZ NOT NULL,

    CONSTRAINT prompt_templates_agent_matches_level CHECK ((level = 'team') = (agent_id = '')),
    -- A version names one text for good at its scope.
    CONSTRAINT prompt_templates_version_key UNIQUE (team_id, agent_id, template_id, version)
);

-- The per-call lookup (a team's and an agent's active rows), and the one-active rule.
CREATE UNIQUE INDEX prompt_templates_active_idx
    ON prompt_templates (team_id, agent_id, template_id)
    WHERE active;
