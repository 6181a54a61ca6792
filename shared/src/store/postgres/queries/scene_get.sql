-- $1 scene id, $2-$4 tenant
SELECT id, team_id, agent_id, user_id, name, overview, tags, object_key, version, status,
       created_at, updated_at
FROM scenes
WHERE id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
