-- V008: API keys of teams. Only the SHA-256 of a secret is stored. Forward-only.

CREATE TABLE api_keys (
    id            UUID        PRIMARY KEY,
    -- Hex SHA-256 of the secret: what a request's bearer token is looked up by.
    key_hash      TEXT        NOT NULL UNIQUE CHECK (length(key_hash) = 64),
    team_id       TEXT        NOT NULL,
    -- The agents the key is narrowed to; NULL: every agent of the team.
    agents        TEXT[]      NULL CHECK (agents IS NULL OR cardinality(agents) > 0),
    permission    TEXT        NOT NULL CHECK (permission IN ('read', 'write', 'admin')),
    name          TEXT        NULL,
    prefix        TEXT        NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    last_used_at  TIMESTAMPTZ NULL,
    revoked_at    TIMESTAMPTZ NULL
);

CREATE INDEX api_keys_team_idx ON api_keys (team_id, created_at DESC);
