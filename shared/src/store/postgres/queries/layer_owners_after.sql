-- The next page of owners after ($1, $2, $3) (see layer_owners_first.sql); the row comparison
-- starts each primary-key scan at the cursor. $4 limit
SELECT team_id, agent_id, user_id
FROM ((SELECT team_id, agent_id, user_id FROM scene_schedule
       WHERE (team_id, agent_id, user_id) > ($1, $2, $3)
       ORDER BY team_id, agent_id, user_id LIMIT $4)
      UNION
      (SELECT team_id, agent_id, user_id FROM personas
       WHERE (team_id, agent_id, user_id) > ($1, $2, $3)
       ORDER BY team_id, agent_id, user_id LIMIT $4)) AS owners
ORDER BY team_id, agent_id, user_id
LIMIT $4
