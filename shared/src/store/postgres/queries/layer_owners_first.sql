-- The first page of owners with a scene schedule or a persona row, in key order. Each side
-- reads at most a page off its primary key; the union removes owners that have both.
-- $1 limit
SELECT team_id, agent_id, user_id
FROM ((SELECT team_id, agent_id, user_id FROM scene_schedule
       ORDER BY team_id, agent_id, user_id LIMIT $1)
      UNION
      (SELECT team_id, agent_id, user_id FROM personas
       ORDER BY team_id, agent_id, user_id LIMIT $1)) AS owners
ORDER BY team_id, agent_id, user_id
LIMIT $1
