use shared::backends::Backends;
use shared::bus::wakeup::Wakeups;
use shared::config::{Limits, RecallSettings};
use shared::context::{ContextService, ContextSettings};
use shared::memory::pipeline::MemoryIndexer;
use shared::recall::stable::StableSource;
use shared::recall::Recall;
use shared::search::ConversationSearch;

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub backends: Backends,
    pub search: ConversationSearch,
    pub recall: Recall,
    pub recall_defaults: RecallSettings,
    pub limits: Limits,
    /// Applies memory corrections and deletions to the index right away.
    pub memory_indexer: MemoryIndexer,
    /// Session context windows and compaction requests.
    pub context: ContextService,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// Publishes `turn.appended` after ingest, off the request path.
    pub wakeups: Wakeups,
    /// The ops page's access rule and this process's workers; set once the workers started.
    pub ops: std::sync::Arc<crate::routes::ops::Ops>,
    /// Who may call `/v1`; decided at start (`Auth::decide`).
    pub auth: crate::auth::Auth,
    /// Runs erasure jobs (`DELETE /v1/users/{user_id}`).
    pub eraser: shared::erase::Eraser,
    /// The per-team stored-turn quota, if any.
    pub quotas: Option<std::sync::Arc<crate::limit::TurnQuotas>>,
    /// The per-team rate limit of this replica, if any.
    pub limiter: Option<std::sync::Arc<crate::limit::RateLimiter>>,
}

/// How long a wake-up publish waits for the broker's confirm. The turns are already committed;
/// a late or failed publish only delays their processing until the next sweep.
const PUBLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// How often at most a round of wake-ups goes out: about 50 events a second however many
/// requests come (more only past 500 sessions a round), each at most this much later than it
/// could be (the index lag target is 1 s).
const WAKEUP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

impl AppState {
    /// Starts the wake-up publisher, so it must run inside the Tokio runtime.
    pub fn new(
        backends: Backends,
        limits: Limits,
        recall_defaults: RecallSettings,
        context: ContextSettings,
        auth: crate::auth::Auth,
    ) -> Self {
        let search = ConversationSearch::new(
            backends.store.clone(),
            backends.index.clone(),
            backends.embedder.clone(),
            recall_defaults.fusion,
        )
        .with_query_cache(recall_defaults.query_vector_cache);
        let memory_indexer = MemoryIndexer::new(
            backends.memories.clone(),
            backends.index.clone(),
            backends.embedder.clone(),
        );
        let limiter = limits
            .rate_limit
            .map(|limit| std::sync::Arc::new(crate::limit::RateLimiter::new(limit)));
        let recall = Recall::new(search.clone(), backends.memories.clone())
            .with_ranking(recall_defaults.fusion.rrf_k, recall_defaults.memory_weight)
            .with_stable(StableSource::new(backends.scenes.clone(), backends.files.clone()));
        let backends_eraser = backends.eraser();
        let quotas = limits
            .turn_quota
            .map(|quota| std::sync::Arc::new(crate::limit::TurnQuotas::new(quota)));
        Self {
            wakeups: Wakeups::start(backends.bus.clone(), PUBLISH_TIMEOUT, WAKEUP_INTERVAL),
            memory_indexer,
            context: ContextService::from_backends(&backends, context),
            backends,
            recall,
            search,
            recall_defaults,
            limits,
            metrics: shared::metrics::prometheus(),
            ops: Default::default(),
            quotas,
            limiter,
            auth,
            eraser: backends_eraser,
        }
    }
}
