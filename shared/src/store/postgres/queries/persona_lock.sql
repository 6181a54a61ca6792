-- Locks the owner's persona row until the transaction ends, so claims serialize. $1-$3 tenant
SELECT lease_token, lease_until
FROM personas
WHERE team_id = $1
  AND agent_id = $2
  AND user_id = $3
FOR UPDATE
