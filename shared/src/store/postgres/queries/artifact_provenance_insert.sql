-- Idempotent on the record's id, so a retried write adds nothing.
-- $1 id, $2-$4 tenant, $5 layer, $6 scene_id, $7 event, $8 template, $9 model, $10 input_refs,
-- $11 output_refs, $12 detail, $13 started_at, $14 duration_ms
INSERT INTO artifact_provenance (id, team_id, agent_id, user_id, layer, scene_id, event, template,
                                 model, input_refs, output_refs, detail, started_at, duration_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (id) DO NOTHING
