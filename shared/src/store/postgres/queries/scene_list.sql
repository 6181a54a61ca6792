-- The owner's scenes, most recently updated first. $1-$3 tenant, $4 include deleted ones
SELECT id, team_id, agent_id, user_id, name, overview, tags, object_key, version, status,
       created_at, updated_at
FROM scenes
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
  AND ($4 OR status = 'active')
ORDER BY updated_at DESC, id DESC
