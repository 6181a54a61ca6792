-- V012: a session belongs to its owner. Sessions, and every row that names one, are keyed by
-- (team_id, agent_id, user_id, session_id). Forward-only (see V001).
--
-- Session ids are the client's ("s1"), but V001 made `session_id` alone the key: once one
-- owner had used an id, another owner's append to it was refused with 404. Two users could not
-- both have a session "s1", and the answer told a tenant that someone else had used the id.
--
-- The tenant columns lead every key: erasing an owner and listing a tenant's sessions then
-- read a prefix of it.

ALTER TABLE messages DROP CONSTRAINT messages_session_id_fkey;
ALTER TABLE extract_schedule DROP CONSTRAINT extract_schedule_session_id_fkey;
ALTER TABLE session_compactions DROP CONSTRAINT session_compactions_session_id_fkey;

ALTER TABLE sessions DROP CONSTRAINT sessions_pkey;
ALTER TABLE sessions ADD CONSTRAINT sessions_pkey PRIMARY KEY (team_id, agent_id, user_id, session_id);

-- Turns: seqs and idempotency keys are unique within the owner's session.
ALTER TABLE messages DROP CONSTRAINT messages_session_seq_key;
ALTER TABLE messages ADD CONSTRAINT messages_session_seq_key
    UNIQUE (team_id, agent_id, user_id, session_id, seq);
DROP INDEX messages_session_client_id_key;
CREATE UNIQUE INDEX messages_session_client_id_key
    ON messages (team_id, agent_id, user_id, session_id, client_id)
    WHERE client_id IS NOT NULL;
ALTER TABLE messages ADD CONSTRAINT messages_session_fkey
    FOREIGN KEY (team_id, agent_id, user_id, session_id) REFERENCES sessions;

-- Cursors take their owner from the session. A cursor of a session that has no row (its owner
-- was erased) points at nothing and goes.
ALTER TABLE cursors
    ADD COLUMN team_id TEXT NULL,
    ADD COLUMN agent_id TEXT NULL,
    ADD COLUMN user_id TEXT NULL;
UPDATE cursors c
SET team_id = s.team_id, agent_id = s.agent_id, user_id = s.user_id
FROM sessions s
WHERE s.session_id = c.session_id;
DELETE FROM cursors WHERE team_id IS NULL;
ALTER TABLE cursors
    ALTER COLUMN team_id SET NOT NULL,
    ALTER COLUMN agent_id SET NOT NULL,
    ALTER COLUMN user_id SET NOT NULL;
ALTER TABLE cursors DROP CONSTRAINT cursors_pkey;
ALTER TABLE cursors ADD CONSTRAINT cursors_pkey
    PRIMARY KEY (consumer, team_id, agent_id, user_id, session_id);

-- The extraction schedule, likewise (its foreign key kept it from naming a missing session).
ALTER TABLE extract_schedule
    ADD COLUMN team_id TEXT NULL,
    ADD COLUMN agent_id TEXT NULL,
    ADD COLUMN user_id TEXT NULL;
UPDATE extract_schedule e
SET team_id = s.team_id, agent_id = s.agent_id, user_id = s.user_id
FROM sessions s
WHERE s.session_id = e.session_id;
DELETE FROM extract_schedule WHERE team_id IS NULL;
ALTER TABLE extract_schedule
    ALTER COLUMN team_id SET NOT NULL,
    ALTER COLUMN agent_id SET NOT NULL,
    ALTER COLUMN user_id SET NOT NULL;
ALTER TABLE extract_schedule DROP CONSTRAINT extract_schedule_pkey;
ALTER TABLE extract_schedule ADD CONSTRAINT extract_schedule_pkey
    PRIMARY KEY (team_id, agent_id, user_id, session_id);
ALTER TABLE extract_schedule ADD CONSTRAINT extract_schedule_session_fkey
    FOREIGN KEY (team_id, agent_id, user_id, session_id) REFERENCES sessions;

-- Compactions already carry the owner; the new key serves the reads
-- `session_compactions_tenant_idx` served.
ALTER TABLE session_compactions DROP CONSTRAINT session_compactions_pkey;
ALTER TABLE session_compactions ADD CONSTRAINT session_compactions_pkey
    PRIMARY KEY (team_id, agent_id, user_id, session_id);
DROP INDEX session_compactions_tenant_idx;
ALTER TABLE session_compactions ADD CONSTRAINT session_compactions_session_fkey
    FOREIGN KEY (team_id, agent_id, user_id, session_id) REFERENCES sessions;
