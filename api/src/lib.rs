//! The sediment HTTP API: ingest of L0 turns, session reads and context, conversation search,
//! recall, L1 memories, L2 scenes and the L3 persona, prompt overrides, the audit log, the
//! ops page and the OpenAPI document of it all (`/openapi.json`).
//!
//! This crate adapts HTTP to calls into `shared` and holds no domain logic (STYLE R4). Whenever
//! the search index lives in this process (Qdrant Edge), it also runs the workers that use the
//! index (index and extract); in the embedded deployment it runs the compact, scene and persona
//! workers too.

mod auth;
pub mod cli;
pub mod client;
mod error;
mod extract;
mod jwt;
mod limit;
pub mod mcp;
mod openapi;
mod routes;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use shared::backends::Backends;
use shared::config::Settings;
use shared::context::{CompactHandler, Compactor};
use shared::indexer::Indexer;
use shared::memory::schedule::Scheduler;
use shared::ops::WorkerProbe;
use shared::runtime::{run_consumer, ConsumerSettings, ExtractHandler, Handler, Heartbeat, IndexHandler};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use extract::{AGENT_HEADER, TASK_HEADER, TEAM_HEADER, USER_HEADER};
pub use openapi::ApiDoc;
pub use routes::router;
pub use state::AppState;

/// How often this process looks for erasure jobs that no run holds (a crashed replica's, a
/// failed pass's); each job's own retry time and lease bound when it is taken over.
const ERASURE_RESUME_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// A running API: the HTTP server and, when it owns them, the in-process workers.
pub struct Server {
    pub addr: SocketAddr,
    /// Where `/healthz`, `/readyz` and `/metrics` are served when `SEDIMENT_HEALTH_LISTEN` moves
    /// them off `addr`.
    pub probes_addr: Option<SocketAddr>,
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
    // Before any store is opened: a start that auth refuses leaves no data directory behind.
    if let Some(refusal) = auth::refusal(&settings, settings.listen) {
        anyhow::bail!(refusal);
    }
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
    Ok(launch(Some(listener), backends, settings, shutdown).await?.1)
}

/// Starts the API and its workers without a listener: the routes answer calls made through
/// the returned router, in this process only (`sediment mcp` on stdio over the embedded
/// deployment opens no port). Authentication is decided as for a loopback address.
pub async fn start_in_process(
    backends: Backends,
    settings: &Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<(axum::Router, Server)> {
    launch(None, backends, settings, shutdown).await
}

async fn launch(
    listener: Option<TcpListener>,
    backends: Backends,
    settings: &Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<(axum::Router, Server)> {
    let addr = match &listener {
        Some(listener) => listener.local_addr().context("read the listener address")?,
        None => SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let auth = auth::Auth::decide(settings, addr, backends.keys.clone())?;
    // Bound before any worker starts, so a bad address fails the start with nothing running.
    let probes_listener = match settings.health_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("bind SEDIMENT_HEALTH_LISTEN {addr}"))?,
        ),
        None => None,
    };
    let mut state = AppState::new(
        backends.clone(),
        settings.limits.clone(),
        settings.recall.clone(),
        settings.context.clone(),
        auth,
    );
    let mut probes = Vec::new();

    let consumer_settings = ConsumerSettings {
        prefetch: settings.worker.prefetch,
        sweep_interval: settings.worker.sweep_interval,
        shutdown_deadline: settings.shutdown_deadline,
    };
    let mut workers = Vec::new();
    // Workers that write or read the search index run here when the index lives in this
    // process (Qdrant Edge): no other process can open it.
    if backends.api_runs_index_worker {
        let indexer = Indexer::new(
            backends.store.clone(),
            backends.index.clone(),
            backends.embedder.clone(),
            settings.worker.batch_size,
        )
        .with_sync_interval(settings.worker.index_sync_interval);
        workers.push(spawn_worker(
            &backends,
            Arc::new(IndexHandler(indexer)),
            consumer_settings.clone(),
            None,
            &shutdown,
            &mut probes,
        ));
        if settings.extract.enabled {
            let scheduler = backends.extract_scheduler(settings)?;
            workers.push(spawn_worker(
                &backends,
                Arc::new(ExtractHandler(scheduler.clone())),
                consumer_settings.clone(),
                Some(scheduler),
                &shutdown,
                &mut probes,
            ));
        }
    }
    // Compaction touches no index; in the cluster its own workers (`sediment-compact`) run it.
    if backends.embedded {
        let compactor = Compactor::from_backends(&backends, settings).context("build the compaction summarizer")?;
        workers.push(spawn_worker(
            &backends,
            Arc::new(CompactHandler(compactor)),
            consumer_settings.clone(),
            None,
            &shutdown,
            &mut probes,
        ));
    }

    // Scenes and persona touch no index either; in the cluster `sediment-scene` and
    // `sediment-persona` run them.
    if backends.embedded && settings.layers.enabled {
        let (scenes, personas) = backends
            .layer_handlers(settings)
            .context("build the scene and persona workers")?;
        for handler in [scenes, personas] {
            workers.push(spawn_worker(
                &backends,
                handler,
                consumer_settings.clone(),
                None,
                &shutdown,
                &mut probes,
            ));
        }
    }

    // Erasures that a crash or a failed pass left unfinished; requests run their own at once.
    let resumer = state
        .eraser
        .clone()
        .spawn_resumer(ERASURE_RESUME_INTERVAL, shutdown.clone());

    let extract_in_process = backends.api_runs_index_worker && settings.extract.enabled;
    state.ops = Arc::new(routes::ops::Ops::new(settings.ops.clone(), probes, extract_in_process));
    let wakeups = state.wakeups.clone();
    let probe_server = match probes_listener {
        Some(listener) => {
            let probes_addr = listener.local_addr().context("read the probe listener address")?;
            let router = routes::probes(state.clone());
            let shutdown = shutdown.clone();
            tracing::info!(addr = %probes_addr, "probes and metrics listening");
            let task = tokio::spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(shutdown.cancelled_owned())
                    .await
                    .context("serve the probes")
            });
            Some((probes_addr, task))
        }
        None => None,
    };
    let probes_addr = probe_server.as_ref().map(|(addr, _)| *addr);
    let app = routes::app(state, probe_server.is_none());

    let http_shutdown = shutdown.clone();
    let served_app = app.clone();
    let task = tokio::spawn(async move {
        let served = match listener {
            // The peer address is what the ops page's loopback rule reads.
            Some(listener) => axum::serve(listener, served_app.into_make_service_with_connect_info::<SocketAddr>())
                .with_graceful_shutdown(http_shutdown.cancelled_owned())
                .await
                .context("serve HTTP"),
            None => {
                http_shutdown.cancelled().await;
                Ok(())
            }
        };
        // No request can append any more: send the wake-ups still waiting.
        wakeups.close().await;
        for worker in workers {
            worker.await.context("join an in-process worker")??;
        }
        resumer.await.context("join the erasure resumer")?;
        if let Some((_, task)) = probe_server {
            task.await.context("join the probe server")??;
        }
        tracing::info!("api stopped");
        served
    });
    Ok((
        app,
        Server {
            addr,
            probes_addr,
            task,
        },
    ))
}

/// Runs one worker's consumer in this process. If the consumer fails, the whole process shuts
/// down: an API whose in-process worker is gone would accept turns that nothing processes, so
/// the supervisor must restart it. With a `flush` scheduler, pending extraction is flushed
/// after the consumer drained (graceful shutdown). Its heartbeat goes to `probes`, for the ops
/// page.
fn spawn_worker(
    backends: &Backends,
    handler: Arc<dyn Handler>,
    settings: ConsumerSettings,
    flush: Option<Scheduler>,
    shutdown: &CancellationToken,
    probes: &mut Vec<WorkerProbe>,
) -> JoinHandle<anyhow::Result<()>> {
    let worker = handler.kind().as_str();
    let deadline = settings.shutdown_deadline;
    let heartbeat = Arc::new(Heartbeat::default());
    probes.push(WorkerProbe {
        kind: handler.kind(),
        heartbeat: heartbeat.clone(),
    });
    let consumer = run_consumer(backends.bus.clone(), handler, settings, heartbeat, shutdown.clone());
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let result = consumer.await;
        if let Err(e) = &result {
            tracing::error!(
                worker,
                error = format!("{e:#}"),
                "in-process worker failed; shutting down"
            );
            shutdown.cancel();
        } else if let Some(scheduler) = flush {
            scheduler.flush_all(deadline).await;
        }
        result
    })
}
