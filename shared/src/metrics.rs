//! Metric names (STYLE R14: one const per name) and their descriptions. Recording goes through
//! the `metrics` facade: with no recorder installed it is a no-op, and it never fails a request.

/// HTTP requests by `method`, `route` and `status`.
pub const HTTP_REQUESTS: &str = "sediment_http_requests_total";
/// HTTP request latency in seconds by `method` and `route`.
pub const HTTP_LATENCY: &str = "sediment_http_request_duration_seconds";
/// Authentication decisions of `/v1` calls by `outcome`: `key`, `token`, `admin` (accepted),
/// `missing`, `unknown`, `invalid_token` (401), `forbidden` (403), `unavailable` (the key store
/// did not answer: 503).
pub const AUTH_REQUESTS: &str = "sediment_auth_requests_total";
/// `/v1` calls refused by a team's rate limit (429).
pub const RATE_LIMITED: &str = "sediment_rate_limited_total";
/// MCP tool calls (and resource reads) by `tool` and `result`: `ok`, `refused` (the API
/// answered 4xx) or `failed`.
pub const MCP_TOOL_CALLS: &str = "sediment_mcp_tool_calls_total";
/// Owner exports by `outcome`: `ok`, `closed` (the reader went away) or `failed`.
pub const EXPORTS: &str = "sediment_exports_total";
/// Owner imports by `outcome`: `ok`, `conflict` or `failed`.
pub const IMPORTS: &str = "sediment_imports_total";
/// Appends refused because the team stores as many turns as its quota allows.
pub const QUOTA_EXCEEDED: &str = "sediment_quota_exceeded_total";
/// Key look-ups by `source`: `cache` (a replica's own recent read) or `store`.
pub const AUTH_KEY_LOOKUPS: &str = "sediment_auth_key_lookups_total";
/// Turns stored by the API (new ones, not idempotent replays).
pub const TURNS_INGESTED: &str = "sediment_turns_ingested_total";
/// Events published by `routing_key` and `result` (`ok` or `error`).
pub const EVENTS_PUBLISHED: &str = "sediment_events_published_total";
/// Events merged into one already waiting to be published (one wake-up covers both), by
/// `routing_key`.
pub const EVENTS_COALESCED: &str = "sediment_events_coalesced_total";
/// Events the embedded bus dropped because their queue was full, by `queue`; the sweeps find
/// their work.
pub const EVENTS_DROPPED: &str = "sediment_events_dropped_total";
/// Sessions one published `turns.appended` wake-up carried.
pub const WAKEUP_SESSIONS: &str = "sediment_wakeup_sessions";
/// Deliveries consumed by `worker` and `outcome` (`ack`, `retry`, `reject`).
pub const EVENTS_CONSUMED: &str = "sediment_events_consumed_total";
/// Ready messages in a worker kind's queue, by `queue` (the kind), as last sampled.
pub const QUEUE_DEPTH: &str = "sediment_queue_depth";
/// Parked messages (rejected or out of attempts) waiting for a human, by `queue`, as last sampled.
pub const PARKED_MESSAGES: &str = "sediment_parked_messages";
/// Subscriptions consuming a worker kind's queue, by `queue`, as last sampled.
pub const QUEUE_CONSUMERS: &str = "sediment_queue_consumers";
/// Turns written to the search index.
pub const TURNS_INDEXED: &str = "sediment_turns_indexed_total";
/// Turns stored but not yet indexed, as of the last sweep.
pub const INDEX_LAG_TURNS: &str = "sediment_index_lag_turns";
/// Sessions with unindexed turns, as of the last sweep.
pub const INDEX_LAG_SESSIONS: &str = "sediment_index_lag_sessions";
/// Sessions indexed together in one batch of an index round (one read, upsert and cursor write).
pub const INDEX_ROUND_SESSIONS: &str = "sediment_index_round_sessions";
/// Sessions whose index cursors one sync advanced, having made their turns durable (Qdrant
/// Edge, where one flush covers the rounds of a sync interval).
pub const INDEX_SYNC_SESSIONS: &str = "sediment_index_sync_sessions";
/// Appends committed together in one SQLite transaction, one fsync (embedded deployment).
pub const STORE_GROUP_COMMIT_APPENDS: &str = "sediment_store_group_commit_appends";
/// Seconds a WAL checkpoint of the SQLite store took, off the append path (embedded deployment).
pub const STORE_CHECKPOINT_SECONDS: &str = "sediment_store_checkpoint_seconds";
/// Seconds from a turn's commit to its indexing.
pub const INDEX_DELAY: &str = "sediment_index_delay_seconds";
/// Search-index optimizer runs (Qdrant Edge) by `result`: `changed`, `unchanged` or `failed`.
pub const INDEX_OPTIMIZER_RUNS: &str = "sediment_index_optimizer_runs_total";
/// Search-index optimizer run latency in seconds.
pub const INDEX_OPTIMIZER_SECONDS: &str = "sediment_index_optimizer_seconds";
/// Search-index (Qdrant Edge) flush latency in seconds: the write-ahead log and every segment,
/// fsynced, once per write or per group of combined writes.
pub const INDEX_FLUSH_SECONDS: &str = "sediment_index_flush_seconds";
/// Search-index (Qdrant Edge) update latency in seconds: applying one write to the segments,
/// before its flush.
pub const INDEX_UPDATE_SECONDS: &str = "sediment_index_update_seconds";
/// Points per search-index write after combining concurrent upserts.
pub const INDEX_WRITE_POINTS: &str = "sediment_index_write_points";
/// 1 while a search-index optimizer run is in progress, else 0.
pub const INDEX_OPTIMIZING: &str = "sediment_index_optimizing";
/// Bytes free on the search index's volume (Qdrant Edge), as read before each write.
pub const INDEX_VOLUME_FREE_BYTES: &str = "sediment_index_volume_free_bytes";
/// Search-index writes and optimizer runs refused because the index volume had less free than
/// `SEDIMENT_INDEX_MIN_FREE_MB`; they are retried.
pub const INDEX_WRITES_REFUSED: &str = "sediment_index_writes_refused_total";
/// Segments in the search index (Qdrant Edge), as read at each flush.
pub const INDEX_SEGMENTS: &str = "sediment_index_segments";
/// Turns found by backlog sweeps rather than by events (a lost or late event).
pub const SWEEP_RECOVERED: &str = "sediment_sweep_recovered_turns_total";
/// Handler runs that panicked.
pub const HANDLER_PANICS: &str = "sediment_handler_panics_total";
/// Conversation searches by `strategy` and `result`.
pub const SEARCHES: &str = "sediment_conversation_searches_total";
/// Turns indexed without a dense vector because the embedder refused them.
pub const EMBEDDING_SKIPPED: &str = "sediment_embedding_skipped_turns_total";
/// Recalls by `strategy` and `result` (`ok`, or the first error code).
pub const RECALLS: &str = "sediment_recalls_total";
/// Recall latency in seconds.
pub const RECALL_LATENCY: &str = "sediment_recall_duration_seconds";
/// Recall errors by `code` (`recall_timeout`, `index_unavailable`, `embedding_unavailable`, ...).
pub const RECALL_ERRORS: &str = "sediment_recall_errors_total";
/// Items returned by recalls.
pub const RECALL_ITEMS: &str = "sediment_recall_items";
/// Query vectors looked up in the in-process cache, by `outcome` (`hit`, `miss`).
pub const QUERY_VECTOR_CACHE: &str = "sediment_query_vector_cache_total";
/// Embedding provider requests by `provider` and `result` (`ok`, `retry`, `error`); one per
/// HTTP attempt, so retries show up.
pub const EMBEDDING_REQUESTS: &str = "sediment_embedding_requests_total";
/// Embedding provider request latency in seconds by `provider`, per attempt.
pub const EMBEDDING_LATENCY: &str = "sediment_embedding_duration_seconds";
/// LLM chat requests by `trace` and `result` (`ok`, `retry`, `unavailable` after the last
/// retry, `rejected` for a permanent failure); one per HTTP attempt, so retries show up.
pub const LLM_CALLS: &str = "sediment_llm_calls_total";
/// LLM chat request latency in seconds by `trace`, per attempt.
pub const LLM_LATENCY: &str = "sediment_llm_call_duration_seconds";
/// Tokens by `trace` and `kind` (`prompt`, `completion`), as the provider's `usage` reports them.
pub const LLM_TOKENS: &str = "sediment_llm_tokens_total";
/// Repair calls (a second call after an answer failed validation) by `trace` and `result`
/// (`ok`, `failed`); a failed repair is an LLM call that ends as malformed output.
pub const LLM_REPAIRS: &str = "sediment_llm_repairs_total";
/// LLM answers that failed validation, by `trace`: a first answer and a failed repair each count.
pub const LLM_MALFORMED: &str = "sediment_llm_malformed_outputs_total";
/// Turns read by L1 extraction batches (junk included).
pub const EXTRACT_INPUT_TURNS: &str = "sediment_extract_input_turns_total";
/// Turns dropped by the junk filter, by `reason`.
pub const EXTRACT_JUNK: &str = "sediment_extract_junk_turns_total";
/// Secrets masked in turns before extraction.
pub const EXTRACT_REDACTIONS: &str = "sediment_extract_redactions_total";
/// Secrets masked outside L1, by `stage` (`compaction`, `scene`, `persona`) and `side`
/// (`input`: before a summarizer or model sees the text; `output`: in what it wrote, before
/// storage).
pub const REDACTIONS: &str = "sediment_redactions_total";
/// Cards extracted, by engine `mode` (`rules`, `llm`).
pub const EXTRACT_CARDS: &str = "sediment_extract_cards_total";
/// Conflict decisions by `decision` (`add`, `update`, `merge`, `discard`).
pub const EXTRACT_DECISIONS: &str = "sediment_extract_decisions_total";
/// Extraction batches by `result` (`ok`, `empty` (all junk), `failed`, `raced`).
pub const EXTRACT_BATCHES: &str = "sediment_extract_batches_total";
/// Committed extraction batches by why they ran: `threshold` (enough pending turns), `idle`
/// (the session's idle flush), `shutdown` (the graceful-shutdown flush).
pub const EXTRACT_BATCH_REASONS: &str = "sediment_extract_batch_reasons_total";
/// Failed extractions by `kind` (`unavailable`, `malformed`, `rejected`); the batch is retried.
pub const EXTRACT_FAILURES: &str = "sediment_extract_failures_total";
/// Conflict-detection calls that failed (every card of the batch was added).
pub const EXTRACT_JUDGE_FAILURES: &str = "sediment_extract_judge_failures_total";
/// Duration of an extraction stage in seconds by `stage` (`extract`, `dedup`, `commit`).
pub const EXTRACT_STAGE_LATENCY: &str = "sediment_extract_stage_duration_seconds";
/// Memory index operations applied from the outbox, by `op` (`upsert`, `delete`).
pub const MEMORIES_INDEXED: &str = "sediment_memories_indexed_total";
/// Extraction runs skipped because another run held the session's lease.
pub const EXTRACT_CONTENDED: &str = "sediment_extract_contended_total";
/// Audit log entries that could not be written (the audited call itself succeeded).
pub const AUDIT_WRITE_FAILURES: &str = "sediment_audit_write_failures_total";
/// Runs that stopped because another run took their session's lease (renewals failed for
/// longer than the lease).
pub const EXTRACT_LEASES_LOST: &str = "sediment_extract_leases_lost_total";
/// Turns past the extraction cursor, as of the last sweep.
pub const EXTRACT_LAG_TURNS: &str = "sediment_extract_lag_turns";
/// Sessions with turns past the extraction cursor, as of the last sweep.
pub const EXTRACT_LAG_SESSIONS: &str = "sediment_extract_lag_sessions";
/// Turns cut by L1 (head + tail) in context answers.
pub const CONTEXT_TRUNCATIONS: &str = "sediment_context_truncations_total";
/// Context answers in which a stored summary stood in for older turns (L2).
pub const CONTEXT_SUMMARY_REUSE: &str = "sediment_context_summary_reuse_total";
/// Session compactions (L3) by `result`: `queued`, then `success`, `failed` or `lease_lost`.
pub const COMPACTIONS: &str = "sediment_compactions_total";
/// Erasure runs by `result`: `done`, `residue` (something was left; it runs again) or `failed`.
pub const ERASURES: &str = "sediment_erasures_total";
/// Time from an erasure run's claim to nothing left, in seconds.
pub const ERASURE_SECONDS: &str = "sediment_erasure_seconds";
/// File store call latency in seconds by `backend` (`s3`, `local`) and `op` (`put`, `get`,
/// `list`, `delete`, `delete_prefix`, `copy_prefix`, `check`).
pub const FILE_STORE_LATENCY: &str = "sediment_file_store_duration_seconds";
/// Failed file store calls by `backend`, `op` and `kind` (`invalid_key`, `unavailable`, `backend`).
pub const FILE_STORE_ERRORS: &str = "sediment_file_store_errors_total";
/// L2 scene runs by `result`: `edited`, `nothing`, `busy`, `rolled_back`, `failed`, `lease_lost`.
pub const SCENE_RUNS: &str = "sediment_scene_runs_total";
/// L2 scene run latency (claim to commit) by `result`: the scene generation latency.
pub const SCENE_RUN_SECONDS: &str = "sediment_scene_run_seconds";
/// Scene changes committed, by `op`: `create`, `update`, `merge`, `delete`.
pub const SCENE_EDITS: &str = "sediment_scene_edits_total";
/// Scene runs rolled back to their snapshot (failed, destroyed core content, or died mid-edit).
pub const SCENE_ROLLBACKS: &str = "sediment_scene_rollbacks_total";
/// Owners whose memories had no scene run scheduled (the timer update after their batch
/// failed), found and scheduled by the scene sweep.
pub const SCENE_TIMER_REPAIRS: &str = "sediment_scene_timer_repairs_total";
/// File-store writes per committed scene run.
pub const SCENE_RUN_WRITES: &str = "sediment_scene_run_writes";
/// L3 persona builds by `trigger` and `result`.
pub const PERSONA_BUILDS: &str = "sediment_persona_builds_total";
/// L3 persona build latency: the persona generation latency.
pub const PERSONA_BUILD_SECONDS: &str = "sediment_persona_build_seconds";

/// Registers help texts with the installed recorder. Call once after installing it.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(HTTP_REQUESTS, "HTTP requests by method, route and status");
    describe_histogram!(HTTP_LATENCY, Unit::Seconds, "HTTP request latency by method and route");
    describe_counter!(AUTH_REQUESTS, "authentication decisions of /v1 calls by outcome");
    describe_counter!(RATE_LIMITED, "/v1 calls refused by a team's rate limit");
    describe_counter!(MCP_TOOL_CALLS, "MCP tool calls and resource reads by tool and result");
    describe_counter!(AUTH_KEY_LOOKUPS, "API key look-ups by source (cache or store)");
    describe_counter!(TURNS_INGESTED, "turns stored by the API");
    describe_counter!(
        EVENTS_PUBLISHED,
        "events published to the bus by routing key and result"
    );
    describe_counter!(
        EVENTS_COALESCED,
        "events merged into one already waiting to be published, by routing key"
    );
    describe_histogram!(WAKEUP_SESSIONS, "sessions one published turns.appended wake-up carried");
    describe_counter!(EVENTS_CONSUMED, "deliveries consumed by worker and outcome");
    describe_counter!(EVENTS_DROPPED, "events the embedded bus dropped: queue full");
    describe_gauge!(QUEUE_DEPTH, "ready messages in a worker queue, by queue");
    describe_gauge!(PARKED_MESSAGES, "parked messages waiting for a human, by queue");
    describe_gauge!(QUEUE_CONSUMERS, "subscriptions consuming a worker queue, by queue");
    describe_counter!(TURNS_INDEXED, "turns written to the search index");
    describe_gauge!(INDEX_LAG_TURNS, "turns stored but not yet indexed");
    describe_gauge!(INDEX_LAG_SESSIONS, "sessions with unindexed turns");
    describe_histogram!(INDEX_DELAY, Unit::Seconds, "time from a turn's commit to its indexing");
    describe_histogram!(
        INDEX_ROUND_SESSIONS,
        "sessions indexed together in one batch of an index round"
    );
    describe_histogram!(
        INDEX_SYNC_SESSIONS,
        "sessions whose index cursors one sync advanced after making their turns durable"
    );
    describe_histogram!(
        STORE_GROUP_COMMIT_APPENDS,
        "appends committed together in one SQLite transaction"
    );
    describe_histogram!(
        STORE_CHECKPOINT_SECONDS,
        Unit::Seconds,
        "SQLite WAL checkpoint latency, on a connection of its own"
    );
    describe_counter!(INDEX_OPTIMIZER_RUNS, "search index optimizer runs by result");
    describe_histogram!(
        INDEX_OPTIMIZER_SECONDS,
        Unit::Seconds,
        "search index optimizer run latency"
    );
    describe_histogram!(INDEX_FLUSH_SECONDS, Unit::Seconds, "search index flush latency");
    describe_histogram!(
        INDEX_UPDATE_SECONDS,
        Unit::Seconds,
        "search index update latency, before the flush"
    );
    describe_histogram!(INDEX_WRITE_POINTS, "points per search index write, after combining");
    describe_gauge!(INDEX_OPTIMIZING, "1 while a search index optimizer run is in progress");
    describe_gauge!(
        INDEX_VOLUME_FREE_BYTES,
        "Bytes free on the search index's volume, read before each write"
    );
    describe_counter!(
        INDEX_WRITES_REFUSED,
        "Search index writes refused for want of free space (SEDIMENT_INDEX_MIN_FREE_MB); retried"
    );
    describe_gauge!(INDEX_SEGMENTS, "segments in the search index");
    describe_counter!(SWEEP_RECOVERED, "turns indexed by a backlog sweep instead of an event");
    describe_counter!(HANDLER_PANICS, "handler runs that panicked");
    describe_counter!(SEARCHES, "conversation searches by strategy and result");
    describe_counter!(
        EMBEDDING_SKIPPED,
        "turns indexed without a dense vector (embedder refused them)"
    );
    describe_counter!(RECALLS, "recalls by strategy and result");
    describe_histogram!(RECALL_LATENCY, Unit::Seconds, "recall latency");
    describe_counter!(RECALL_ERRORS, "recall errors by code");
    describe_histogram!(RECALL_ITEMS, "items returned per recall");
    describe_counter!(EMBEDDING_REQUESTS, "embedding provider requests by provider and result");
    describe_counter!(QUERY_VECTOR_CACHE, "query vectors looked up in the cache, by outcome");
    describe_histogram!(
        EMBEDDING_LATENCY,
        Unit::Seconds,
        "embedding provider request latency by provider"
    );
    describe_counter!(LLM_CALLS, "LLM chat requests by trace and result");
    describe_histogram!(LLM_LATENCY, Unit::Seconds, "LLM chat request latency by trace");
    describe_counter!(LLM_TOKENS, "LLM tokens by trace and kind (prompt, completion)");
    describe_counter!(LLM_REPAIRS, "LLM repair calls by trace and result");
    describe_counter!(LLM_MALFORMED, "LLM answers that failed validation, by trace");
    describe_counter!(EXTRACT_INPUT_TURNS, "turns read by L1 extraction batches");
    describe_counter!(EXTRACT_JUNK, "turns dropped by the junk filter, by reason");
    describe_counter!(EXTRACT_REDACTIONS, "secrets masked before extraction");
    describe_counter!(
        REDACTIONS,
        "secrets masked by compaction, scenes and persona, by stage and side"
    );
    describe_counter!(EXTRACT_CARDS, "cards extracted, by engine mode");
    describe_counter!(EXTRACT_DECISIONS, "conflict decisions by kind");
    describe_counter!(EXTRACT_BATCHES, "extraction batches by result");
    describe_counter!(
        EXTRACT_BATCH_REASONS,
        "committed extraction batches by why they ran (threshold, idle, shutdown)"
    );
    describe_counter!(EXTRACT_FAILURES, "failed extractions by kind (the batch is retried)");
    describe_counter!(EXTRACT_JUDGE_FAILURES, "conflict-detection calls that failed");
    describe_histogram!(
        EXTRACT_STAGE_LATENCY,
        Unit::Seconds,
        "extraction stage duration by stage"
    );
    describe_counter!(MEMORIES_INDEXED, "memory index operations by op");
    describe_gauge!(EXTRACT_LAG_TURNS, "turns past the extraction cursor");
    describe_counter!(
        EXTRACT_CONTENDED,
        "extraction runs skipped: another run held the session"
    );
    describe_counter!(
        EXTRACT_LEASES_LOST,
        "extraction runs stopped: another run took the session's lease"
    );
    describe_counter!(AUDIT_WRITE_FAILURES, "audit log entries that could not be written");
    describe_gauge!(EXTRACT_LAG_SESSIONS, "sessions with turns past the extraction cursor");
    describe_counter!(CONTEXT_TRUNCATIONS, "turns cut by L1 truncation in context answers");
    describe_counter!(CONTEXT_SUMMARY_REUSE, "context answers that reused a session summary");
    describe_counter!(COMPACTIONS, "session compactions by result");
    describe_counter!(ERASURES, "erasure runs by result");
    describe_counter!(QUOTA_EXCEEDED, "appends refused by the team's stored-turn quota");
    describe_histogram!(
        ERASURE_SECONDS,
        Unit::Seconds,
        "erasure run time, claim to nothing left"
    );
    describe_histogram!(
        FILE_STORE_LATENCY,
        Unit::Seconds,
        "file store call latency by backend and op"
    );
    describe_counter!(FILE_STORE_ERRORS, "failed file store calls by backend, op and kind");
    describe_counter!(SCENE_RUNS, "L2 scene runs by result");
    describe_histogram!(SCENE_RUN_SECONDS, Unit::Seconds, "L2 scene run latency by result");
    describe_counter!(SCENE_EDITS, "L2 scene changes committed, by operation");
    describe_counter!(SCENE_ROLLBACKS, "L2 scene runs rolled back to their snapshot");
    describe_histogram!(SCENE_RUN_WRITES, "file-store writes per committed scene run");
    describe_counter!(
        SCENE_TIMER_REPAIRS,
        "owners whose memories had no scene run scheduled, scheduled by the sweep"
    );
    describe_counter!(PERSONA_BUILDS, "L3 persona builds by trigger and result");
    describe_histogram!(PERSONA_BUILD_SECONDS, Unit::Seconds, "L3 persona build latency");
}

static PROMETHEUS: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> = std::sync::OnceLock::new();

/// Installs the process-wide Prometheus recorder on first call and returns its handle, whose
/// `render()` is the `/metrics` body. Later calls (several servers in one test process) get
/// the same handle.
pub fn prometheus() -> metrics_exporter_prometheus::PrometheusHandle {
    PROMETHEUS
        .get_or_init(|| {
            let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets(&[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ])
                .expect("static bucket list is not empty")
                // LLM calls take seconds to minutes: the default buckets would put them all in
                // the last one.
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(LLM_LATENCY.to_owned()),
                    &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0],
                )
                .expect("static bucket list is not empty")
                // Scene runs and persona builds are LLM-bound too.
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(SCENE_RUN_SECONDS.to_owned()),
                    &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0],
                )
                .expect("static bucket list is not empty")
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(PERSONA_BUILD_SECONDS.to_owned()),
                    &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0],
                )
                .expect("static bucket list is not empty")
                // An optimizer run rebuilds a segment's HNSW graph: seconds, not milliseconds.
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(INDEX_OPTIMIZER_SECONDS.to_owned()),
                    &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0],
                )
                .expect("static bucket list is not empty")
                // Finer around 1 s, the lag an operator is most likely to alert on, and on to
                // minutes for a backlog after a worker was down.
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(INDEX_DELAY.to_owned()),
                    &[
                        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0,
                    ],
                )
                .expect("static bucket list is not empty")
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(INDEX_WRITE_POINTS.to_owned()),
                    &[1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0],
                )
                .expect("static bucket list is not empty")
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(INDEX_ROUND_SESSIONS.to_owned()),
                    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
                )
                .expect("static bucket list is not empty")
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(INDEX_SYNC_SESSIONS.to_owned()),
                    &[1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0],
                )
                .expect("static bucket list is not empty")
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(WAKEUP_SESSIONS.to_owned()),
                    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 500.0],
                )
                .expect("static bucket list is not empty")
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(STORE_GROUP_COMMIT_APPENDS.to_owned()),
                    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
                )
                .expect("static bucket list is not empty")
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(SCENE_RUN_WRITES.to_owned()),
                    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0],
                )
                .expect("static bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by an embedding program); then
            // ours only renders what it sees, which is nothing, and says so in the log.
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            } else {
                describe();
            }
            handle
        })
        .clone()
}
