//! sediment's worker processes (cluster deployment): one process per worker kind, each a thin
//! wiring of `shared::runtime` with a side port for probes and metrics (STYLE R22).
//!
//! Each kind has its own binary (`sediment-index`, …) for development; the container image
//! ships one `sediment` binary instead, which runs a worker when called as `sediment worker
//! <kind>` or through a link named `sediment-<kind>` (one copy of the code, not six).
//!
//! The consumer contract (ack after durable, retry with backoff, park after N attempts, panic
//! isolation, drain on shutdown) lives in `shared::runtime`, because the embedded deployment
//! runs the very same loop inside the API process.

mod compact;
mod health;
mod layers;

use std::sync::Arc;

use anyhow::Context as _;
use shared::backends::Backends;
use shared::config::{IndexBackend, Settings};
use shared::indexer::Indexer;
use shared::runtime::{run_consumer, ConsumerSettings, ExtractHandler, Handler, Heartbeat, IndexHandler};
use tokio_util::sync::CancellationToken;

pub use compact::run_compact_worker;
pub use health::{health_router, HealthState};
pub use layers::{run_persona_worker, run_scene_worker};

/// The worker kinds, as `sediment worker <kind>` and the `sediment-<kind>` commands name them.
pub const WORKERS: [&str; 5] = ["index", "extract", "compact", "scene", "persona"];

/// Loads the settings from the environment and runs the worker `kind` (one of [`WORKERS`])
/// until SIGTERM or SIGINT: what each worker binary's `main` does.
pub async fn main(kind: &str) -> anyhow::Result<()> {
    if !WORKERS.contains(&kind) {
        anyhow::bail!("unknown worker {kind:?} (one of: {})", WORKERS.join(", "));
    }
    let settings = Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        &format!("sediment-worker-{kind}"),
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let shutdown = shared::shutdown::signal();
    let result = match kind {
        "index" => run_index_worker(settings, shutdown).await,
        "extract" => run_extract_worker(settings, shutdown).await,
        "compact" => run_compact_worker(settings, shutdown).await,
        "scene" => run_scene_worker(settings, shutdown).await,
        _ => run_persona_worker(settings, shutdown).await,
    };
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}

/// Runs the L0 index worker until `shutdown`: consumes `turn.appended` and indexes turns.
pub async fn run_index_worker(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    if let IndexBackend::Edge { .. } = settings.index {
        anyhow::bail!(
            "the index worker needs a shared index: set SEDIMENT_QDRANT_URL (with the embedded Qdrant Edge index, the API process runs the index worker itself)"
        );
    }
    let backends = Backends::connect(&settings).await?;
    let indexer = Indexer::new(
        backends.store.clone(),
        backends.index.clone(),
        backends.embedder.clone(),
        settings.worker.batch_size,
    )
    .with_sync_interval(settings.worker.index_sync_interval);
    serve_worker(&settings, backends, Arc::new(IndexHandler(indexer)), shutdown, async {}).await
}

/// Runs the L1 extraction worker until `shutdown`: consumes `turn.appended` and `extract.due`,
/// extracts memories on the session's schedule, and flushes what is pending on the way out.
pub async fn run_extract_worker(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    if let IndexBackend::Edge { .. } = settings.index {
        anyhow::bail!(
            "the extract worker needs a shared index for deduplication: set SEDIMENT_QDRANT_URL (with the embedded Qdrant Edge index, the API process runs the extract worker itself)"
        );
    }
    if !settings.extract.enabled {
        anyhow::bail!("L1 extraction is off (SEDIMENT_EXTRACT=false): this worker has nothing to do");
    }
    let backends = Backends::connect(&settings).await?;
    let scheduler = backends.extract_scheduler(&settings)?;
    let handler = Arc::new(ExtractHandler(scheduler.clone()));
    let deadline = settings.shutdown_deadline;
    // Graceful shutdown: what is pending now would otherwise wait for the next start.
    let flush = async move {
        scheduler.flush_all(deadline).await;
    };
    serve_worker(&settings, backends, handler, shutdown, flush).await
}

/// Serves the worker's side port (health, readiness, metrics) and runs `handler`'s consumer
/// until `shutdown`; `after_drain` runs once the consumer drained cleanly.
async fn serve_worker(
    settings: &Settings,
    backends: Backends,
    handler: Arc<dyn Handler>,
    shutdown: CancellationToken,
    after_drain: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let heartbeat = Arc::new(Heartbeat::default());
    let health = health::serve(
        settings.worker.health_listen,
        HealthState {
            backends: backends.clone(),
            heartbeat: heartbeat.clone(),
            metrics: shared::metrics::prometheus(),
        },
        shutdown.clone(),
    )
    .await
    .context("start the health server")?;
    let consumer = run_consumer(
        backends.bus.clone(),
        handler,
        ConsumerSettings {
            prefetch: settings.worker.prefetch,
            sweep_interval: settings.worker.sweep_interval,
            shutdown_deadline: settings.shutdown_deadline,
        },
        heartbeat,
        shutdown.clone(),
    )
    .await;
    if consumer.is_ok() {
        after_drain.await;
    }
    // The consumer returns early only if it could not subscribe; take the process down then.
    shutdown.cancel();
    health.await.context("join the health server")??;
    consumer
}
