use shared::backends::Backends;
use shared::config::Limits;
use shared::search::ConversationSearch;

/// What every handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub backends: Backends,
    pub search: ConversationSearch,
    pub limits: Limits,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
}

impl AppState {
    pub fn new(backends: Backends, limits: Limits) -> Self {
        let search = ConversationSearch::new(backends.store.clone(), backends.index.clone());
        Self {
            backends,
            search,
            limits,
            metrics: shared::metrics::prometheus(),
        }
    }
}
