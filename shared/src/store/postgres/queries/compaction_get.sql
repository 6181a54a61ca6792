SELECT session_id, team_id, agent_id, user_id, status, attempts, requested_at,
       claim_token IS NOT NULL AS claimed, lease_until, retry_at, error,
       summary, summary_text, token_count, source_tokens, message_count, first_seq, last_seq,
       summary_reset_at, summarizer, prompt_version, input_hash, started_at, duration_ms,
       compressed_at
FROM session_compactions
WHERE session_id = $1
  AND team_id = $2
  AND agent_id = $3
  AND user_id = $4
