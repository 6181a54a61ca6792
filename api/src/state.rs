use shared::backends::Backends;
use shared::config::{Limits, RecallSettings};
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
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
}

impl AppState {
    pub fn new(backends: Backends, limits: Limits, recall_defaults: RecallSettings) -> Self {
        let search = ConversationSearch::new(
            backends.store.clone(),
            backends.index.clone(),
            backends.embedder.clone(),
            recall_defaults.fusion,
        );
        Self {
            backends,
            recall: Recall::new(search.clone()),
            search,
            recall_defaults,
            limits,
            metrics: shared::metrics::prometheus(),
        }
    }
}
