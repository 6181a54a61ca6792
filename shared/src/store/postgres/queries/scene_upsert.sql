-- Writes a scene row as given. $1 id, $2-$4 tenant, $5 name, $6 overview, $7 tags,
-- $8 object_key, $9 version, $10 status, $11 created_at, $12 updated_at
INSERT INTO scenes AS s (id, team_id, agent_id, user_id, name, overview, tags, object_key, version,
                         status, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (id) DO UPDATE
SET name = excluded.name,
    overview = excluded.overview,
    tags = excluded.tags,
    object_key = excluded.object_key,
    version = excluded.version,
    status = excluded.status,
    created_at = excluded.created_at,
    updated_at = excluded.updated_at
-- Another owner's scene is never overwritten: the statement then writes no row, and the
-- caller fails the commit.
WHERE s.team_id = excluded.team_id
  AND s.agent_id = excluded.agent_id
  AND s.user_id = excluded.user_id
