//! The worker side port: `/healthz` (the consumer loop is turning), `/readyz` (every backend
//! answers) and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use shared::backends::Backends;
use shared::ops::WEDGED_AFTER;
use shared::runtime::Heartbeat;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
pub struct HealthState {
    pub backends: Backends,
    pub heartbeat: Arc<Heartbeat>,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
}

pub fn health_router(state: HealthState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

pub(crate) async fn serve(
    addr: SocketAddr,
    state: HealthState,
    shutdown: CancellationToken,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind {addr}"))?;
    tracing::info!(addr = %listener.local_addr().context("read the listener address")?, "health server listening");
    Ok(tokio::spawn(async move {
        axum::serve(listener, health_router(state))
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .context("serve health endpoints")
    }))
}

async fn healthz(State(state): State<HealthState>) -> impl IntoResponse {
    match state.heartbeat.age() {
        Some(age) if age < WEDGED_AFTER => (StatusCode::OK, Json(json!({ "status": "ok" }))),
        Some(age) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "wedged", "seconds_since_heartbeat": age.as_secs() })),
        ),
        None => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "starting" }))),
    }
}

async fn readyz(State(state): State<HealthState>) -> impl IntoResponse {
    let b = &state.backends;
    let (store, bus, index, files) = tokio::join!(b.store.ping(), b.bus.ping(), b.index.ping(), b.files.check());
    let ready = store.is_ok() && bus.is_ok() && index.is_ok() && files.is_ok();
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    let body = json!({
        "store": word(store.is_ok()),
        "bus": word(bus.is_ok()),
        "index": word(index.is_ok()),
        "files": word(files.is_ok()),
    });
    (
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        Json(body),
    )
}

async fn metrics(State(state): State<HealthState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
