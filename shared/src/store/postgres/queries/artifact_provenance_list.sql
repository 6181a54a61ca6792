-- The owner's records of one layer, newest first. $1-$3 tenant, $4 layer, $5 scene id or NULL,
-- $6 limit
SELECT id, team_id, agent_id, user_id, layer, scene_id, event, template, model, input_refs,
       output_refs, detail, started_at, duration_ms
FROM artifact_provenance
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
  AND layer = $4
  AND ($5::uuid IS NULL OR scene_id = $5)
ORDER BY started_at DESC, id DESC
LIMIT $6
