-- The turns a team stores: seqs are gapless from 1, so a session's last_seq is its turn count.
SELECT coalesce(sum(last_seq), 0)::bigint AS n FROM sessions WHERE team_id = $1
