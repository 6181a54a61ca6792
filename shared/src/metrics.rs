//! Metric names (STYLE R14: one const per name) and their descriptions. Recording goes through
//! the `metrics` facade: with no recorder installed it is a no-op, and it never fails a request.

/// HTTP requests by `method`, `route` and `status`.
pub const HTTP_REQUESTS: &str = "sediment_http_requests_total";
/// HTTP request latency in seconds by `method` and `route`.
pub const HTTP_LATENCY: &str = "sediment_http_request_duration_seconds";
/// Turns stored by the API (new ones, not idempotent replays).
pub const TURNS_INGESTED: &str = "sediment_turns_ingested_total";
/// Events published by `routing_key` and `result` (`ok` or `error`).
pub const EVENTS_PUBLISHED: &str = "sediment_events_published_total";
/// Deliveries consumed by `worker` and `outcome` (`ack`, `retry`, `reject`).
pub const EVENTS_CONSUMED: &str = "sediment_events_consumed_total";
/// Turns written to the search index.
pub const TURNS_INDEXED: &str = "sediment_turns_indexed_total";
/// Turns stored but not yet indexed, as of the last sweep.
pub const INDEX_LAG_TURNS: &str = "sediment_index_lag_turns";
/// Sessions with unindexed turns, as of the last sweep.
pub const INDEX_LAG_SESSIONS: &str = "sediment_index_lag_sessions";
/// Seconds from a turn's commit to its indexing.
pub const INDEX_DELAY: &str = "sediment_index_delay_seconds";
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
/// Embedding provider requests by `provider` and `result` (`ok`, `retry`, `error`); one per
/// HTTP attempt, so retries show up.
pub const EMBEDDING_REQUESTS: &str = "sediment_embedding_requests_total";
/// Embedding provider request latency in seconds by `provider`, per attempt.
pub const EMBEDDING_LATENCY: &str = "sediment_embedding_duration_seconds";

/// Registers help texts with the installed recorder. Call once after installing it.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(HTTP_REQUESTS, "HTTP requests by method, route and status");
    describe_histogram!(HTTP_LATENCY, Unit::Seconds, "HTTP request latency by method and route");
    describe_counter!(TURNS_INGESTED, "turns stored by the API");
    describe_counter!(
        EVENTS_PUBLISHED,
        "events published to the bus by routing key and result"
    );
    describe_counter!(EVENTS_CONSUMED, "deliveries consumed by worker and outcome");
    describe_counter!(TURNS_INDEXED, "turns written to the search index");
    describe_gauge!(INDEX_LAG_TURNS, "turns stored but not yet indexed");
    describe_gauge!(INDEX_LAG_SESSIONS, "sessions with unindexed turns");
    describe_histogram!(INDEX_DELAY, Unit::Seconds, "time from a turn's commit to its indexing");
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
    describe_histogram!(
        EMBEDDING_LATENCY,
        Unit::Seconds,
        "embedding provider request latency by provider"
    );
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
