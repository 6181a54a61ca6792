//! The sediment HTTP API: ingest of L0 turns, session reads and conversation search.
//!
//! This crate adapts HTTP to calls into `shared` and holds no domain logic (STYLE R4). In the
//! embedded deployment, and whenever the search index lives in this process (Qdrant Edge), it
//! also runs the index worker in-process.

mod error;
mod extract;
mod routes;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use shared::backends::Backends;
use shared::config::Settings;
use shared::indexer::Indexer;
use shared::runtime::{run_consumer, ConsumerSettings, Heartbeat, IndexHandler};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use extract::{AGENT_HEADER, TEAM_HEADER, USER_HEADER};
pub use routes::router;
pub use state::AppState;

/// A running API: the HTTP server and, when it owns them, the in-process workers.
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Waits until the server and its workers have stopped (after `shutdown` is cancelled).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("join the server task")?
    }
}

/// Connects the backends from settings, binds the listener and serves until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let backends = Backends::connect(&settings).await?;
    let listener = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("bind {}", settings.listen))?;
    let server = start(listener, backends, &settings, shutdown).await?;
    tracing::info!(addr = %server.addr, "listening");
    server.wait().await
}

/// Starts serving on `listener`; returns once the server accepts requests.
pub async fn start(
    listener: TcpListener,
    backends: Backends,
    settings: &Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<Server> {
    let addr = listener.local_addr().context("read the listener address")?;
    let state = AppState::new(backends.clone(), settings.limits.clone(), settings.recall.clone());
    let app = routes::router(state);

    let consumer = backends.api_runs_index_worker.then(|| {
        let indexer = Indexer::new(
            backends.store.clone(),
            backends.index.clone(),
            backends.embedder.clone(),
            settings.worker.batch_size,
        );
        let consumer_settings = ConsumerSettings {
            prefetch: settings.worker.prefetch,
            sweep_interval: settings.worker.sweep_interval,
            shutdown_deadline: settings.shutdown_deadline,
        };
        let consumer = run_consumer(
            backends.bus.clone(),
            Arc::new(IndexHandler(indexer)),
            consumer_settings,
            Arc::new(Heartbeat::default()),
            shutdown.clone(),
        );
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let result = consumer.await;
            // An API whose in-process worker is gone would accept turns that nothing indexes:
            // take the whole process down, so the supervisor restarts it.
            if let Err(e) = &result {
                tracing::error!(
                    error = format!("{e:#}"),
                    "in-process index worker failed; shutting down"
                );
                shutdown.cancel();
            }
            result
        })
    });

    let http_shutdown = shutdown.clone();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(http_shutdown.cancelled_owned())
            .await
            .context("serve HTTP");
        if let Some(consumer) = consumer {
            consumer.await.context("join the in-process index worker")??;
        }
        tracing::info!("api stopped");
        served
    });
    Ok(Server { addr, task })
}
