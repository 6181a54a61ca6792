-- Writes a finished build and releases its lease, only while the token holds it.
-- $1-$3 tenant, $4 token, $5 object_key, $6 built_at, $7 memories_at_build,
-- $8 scenes_at_build, $9 scene_watermark
UPDATE personas
SET version = version + 1,
    object_key = $5,
    built_at = $6,
    memories_at_build = $7,
    scenes_at_build = $8,
    scene_watermark = $9,
    -- A signal later than the claim came while the build ran, which may not have read its
    -- scene: it stays pending for the next build.
    signal_at = CASE WHEN signal_at <= lease_claimed_at THEN NULL ELSE signal_at END,
    lease_token = NULL,
    lease_claimed_at = NULL,
    lease_until = NULL,
    updated_at = now()
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
  AND lease_token = $4
RETURNING team_id, agent_id, user_id, version, object_key, built_at, memories_at_build,
          scenes_at_build, scene_watermark, signal_at, updated_at
