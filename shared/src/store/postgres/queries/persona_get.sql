-- A row made only by a claim (never built nor signalled) reads as absent. $1-$3 tenant
SELECT team_id, agent_id, user_id, version, object_key, built_at, memories_at_build,
       scenes_at_build, scene_watermark, signal_at, updated_at
FROM personas
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
  AND (version > 0 OR signal_at IS NOT NULL)
