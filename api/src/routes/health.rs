//! Probes and metrics: `/healthz` (the process serves), `/readyz` (every backend answers),
//! `/metrics` (Prometheus text, with the queue gauges sampled on each scrape).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;
use shared::bus::WorkerKind;
use shared::runtime::error_chain;
use utoipa::ToSchema;

use crate::state::AppState;

/// The body of `/healthz`.
#[derive(ToSchema)]
#[allow(dead_code)] // Describes the `json!` body.
pub struct Health {
    #[schema(value_type = String, example = "ok")]
    status: (),
}

/// The body of `/readyz`: each backend, `ok` or `unavailable`.
#[derive(ToSchema)]
#[allow(dead_code)] // Describes the `json!` body.
pub struct Readiness {
    #[schema(value_type = BackendCheck)]
    store: (),
    #[schema(value_type = BackendCheck)]
    bus: (),
    #[schema(value_type = BackendCheck)]
    index: (),
    #[schema(value_type = BackendCheck)]
    files: (),
}

#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum BackendCheck {
    Ok,
    Unavailable,
}

/// The process serves.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "probes",
    responses((status = 200, description = "Alive", body = Health, example = json!({"status": "ok"}))),
)]
pub async fn healthz() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

/// Every backend answers.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "probes",
    responses(
        (status = 200, description = "Ready: every backend is `ok`", body = Readiness),
        (status = 503, description = "Not ready: a backend is `unavailable`", body = Readiness),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let b = &state.backends;
    let (store, bus, index, files) = tokio::join!(b.store.ping(), b.bus.ping(), b.index.ping(), b.files.check());
    let mut ready = true;
    let mut check = |name: &str, result: Result<(), String>| match result {
        Ok(()) => "ok".to_owned(),
        Err(e) => {
            ready = false;
            tracing::warn!(backend = name, error = %e, "readiness check failed");
            "unavailable".to_owned()
        }
    };
    let body = json!({
        "store": check("store", store.map_err(|e| error_chain(&e))),
        "bus": check("bus", bus.map_err(|e| error_chain(&e))),
        "index": check("index", index.map_err(|e| error_chain(&e))),
        "files": check("files", files.map_err(|e| error_chain(&e))),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// Prometheus text, with the queue gauges sampled on each scrape.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "probes",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain; version=0.0.4")),
)]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // Queue gauges are read at scrape time, so every scrape of any API replica sees every
    // queue as it is now (bounded by the sampler's timeout).
    shared::ops::sample_queues(&*state.backends.bus, WorkerKind::ALL).await;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
