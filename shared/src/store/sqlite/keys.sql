-- The embedded twin of migrations/V008__api_keys.sql (API keys of teams). Idempotent.
-- Timestamps are INTEGER unix microseconds; `agents` is a JSON array, or NULL for every agent.

CREATE TABLE IF NOT EXISTS api_keys (
    id            TEXT    NOT NULL PRIMARY KEY,
    key_hash      TEXT    NOT NULL UNIQUE CHECK (length(key_hash) = 64),
    team_id       TEXT    NOT NULL,
    agents        TEXT    NULL CHECK (agents IS NULL OR (json_valid(agents) AND json_array_length(agents) > 0)),
    permission    TEXT    NOT NULL CHECK (permission IN ('read', 'write', 'admin')),
    name          TEXT    NULL,
    prefix        TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER NULL,
    revoked_at    INTEGER NULL
) STRICT;

CREATE INDEX IF NOT EXISTS api_keys_team_idx ON api_keys (team_id, created_at DESC);
