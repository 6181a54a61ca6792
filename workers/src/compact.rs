//! The compact worker (session context, L3): consumes `compaction.requested` and sweeps for
//! jobs whose event was lost, whose lease expired or whose retry is due. Also the shared
//! wiring of every worker that needs the database and the broker but no search index.
//!
//! Such a worker needs the database and the broker only. It deliberately does not go through
//! `Backends::connect`, which also opens the search index: a compact worker given no Qdrant URL
//! would create an empty Qdrant Edge index of its own, and an index that looks new resets the
//! index worker's cursors in the shared database (a needless re-index of every turn).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use shared::bus::{AmqpBus, AmqpSettings, EventBus};
use shared::config::{Deployment, Settings};
use shared::context::{summarizer, CompactHandler, Compactor};
use shared::files::FileStore;
use shared::runtime::{run_consumer, ConsumerSettings, Handler, Heartbeat};
use shared::store::{PostgresStore, TranscriptStore};
use tokio_util::sync::CancellationToken;

/// A consumer loop that has not turned for this long is wedged.
const WEDGED_AFTER: Duration = Duration::from_secs(30);

/// Runs the compact worker until `shutdown`.
pub async fn run_compact_worker(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let summarizer = summarizer(&settings).context("build the compaction summarizer")?;
    let context = settings.context.clone();
    run_database_worker(&settings, "compact", None, shutdown, move |store, _bus| {
        let compactor = Compactor::new(store.clone(), store, summarizer, context);
        Ok(Arc::new(CompactHandler(compactor)))
    })
    .await
}

/// Runs a worker that needs the database and the broker but no search index (compact, scene,
/// persona) until `shutdown`: connects, migrates, serves the side port, runs the consumer of
/// the handler that `handler` builds. With `files`, readiness also checks the file store.
pub(crate) async fn run_database_worker(
    settings: &Settings,
    name: &str,
    files: Option<Arc<dyn FileStore>>,
    shutdown: CancellationToken,
    handler: impl FnOnce(Arc<PostgresStore>, Arc<dyn EventBus>) -> anyhow::Result<Arc<dyn Handler>>,
) -> anyhow::Result<()> {
    let Deployment::Cluster { database_url, amqp_url } = &settings.deployment else {
        anyhow::bail!(
            "the {name} worker runs in the cluster deployment (set SEDIMENT_DATABASE_URL and SEDIMENT_AMQP_URL); in the embedded deployment the API process runs it itself"
        );
    };
    let store = PostgresStore::connect(database_url, settings.db_pool_size)
        .await
        .context("connect to Postgres")?;
    store.migrate().await.context("apply Postgres migrations")?;
    let bus: Arc<dyn EventBus> = Arc::new(
        AmqpBus::connect(AmqpSettings {
            url: amqp_url.clone(),
            prefix: settings.amqp_prefix.clone(),
            max_attempts: settings.worker.max_attempts,
            retry_delay: settings.worker.retry_delay,
            ..AmqpSettings::default()
        })
        .await
        .context("connect to RabbitMQ")?,
    );
    let store = Arc::new(store);
    let heartbeat = Arc::new(Heartbeat::default());
    let probes = Probes {
        store: store.clone(),
        bus: bus.clone(),
        files,
        heartbeat: heartbeat.clone(),
        metrics: shared::metrics::prometheus(),
    };
    let health = serve_probes(settings.worker.health_listen, probes, shutdown.clone()).await?;

    let handler = handler(store, bus.clone())?;
    let consumer = run_consumer(
        bus,
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
    // The consumer returns early only if it could not subscribe; take the process down then.
    shutdown.cancel();
    health.await.context("join the health server")??;
    consumer
}

/// What the side port checks: the loop turns, the store and the broker answer.
#[derive(Clone)]
struct Probes {
    store: Arc<PostgresStore>,
    bus: Arc<dyn EventBus>,
    files: Option<Arc<dyn FileStore>>,
    heartbeat: Arc<Heartbeat>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
}

async fn serve_probes(
    addr: SocketAddr,
    probes: Probes,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind {addr}"))?;
    tracing::info!(addr = %listener.local_addr().context("read the listener address")?, "health server listening");
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(probes);
    Ok(tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .context("serve health endpoints")
    }))
}

async fn healthz(State(p): State<Probes>) -> impl IntoResponse {
    match p.heartbeat.age() {
        Some(age) if age < WEDGED_AFTER => (StatusCode::OK, Json(json!({ "status": "ok" }))),
        Some(age) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "wedged", "seconds_since_heartbeat": age.as_secs() })),
        ),
        None => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "starting" }))),
    }
}

async fn readyz(State(p): State<Probes>) -> impl IntoResponse {
    let files = async {
        match &p.files {
            Some(files) => Some(files.check().await.is_ok()),
            None => None,
        }
    };
    let (store, bus, files) = tokio::join!(p.store.ping(), p.bus.ping(), files);
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    let status = if store.is_ok() && bus.is_ok() && files != Some(false) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = json!({ "store": word(store.is_ok()), "bus": word(bus.is_ok()) });
    if let Some(files) = files {
        body["files"] = json!(word(files));
    }
    (status, Json(body))
}

async fn metrics(State(p): State<Probes>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        p.metrics.render(),
    )
}
