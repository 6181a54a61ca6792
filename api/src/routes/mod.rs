//! Router assembly: routes, body limit, tracing spans, request ids and HTTP metrics.

mod health;
pub(crate) mod recall;
pub(crate) mod search;
pub(crate) mod sessions;

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use shared::metrics;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::error::ApiError;
use crate::state::AppState;

const REQUEST_ID_HEADER: &str = "x-request-id";

pub fn router(state: AppState) -> Router {
    let body_limit = state.limits.max_body_bytes;
    let request_id = axum::http::HeaderName::from_static(REQUEST_ID_HEADER);
    Router::new()
        .route(
            "/v1/sessions/{session_id}/messages",
            post(sessions::append).get(sessions::list),
        )
        .route("/v1/sessions/{session_id}/reset", post(sessions::reset))
        .route("/v1/conversations/search", post(search::search))
        .route("/v1/recall", post(recall::recall))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(record_metrics))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .map(MatchedPath::as_str)
                .unwrap_or("unmatched");
            let id = req
                .headers()
                .get(REQUEST_ID_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            tracing::info_span!("request", method = %req.method(), route, request_id = id)
        }))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

async fn not_found() -> Response {
    ApiError::NotFound("no such route".into()).into_response()
}

async fn record_metrics(req: Request, next: Next) -> Response {
    let start = Instant::now();
    // Label by the route template, never the raw path: session ids would explode cardinality.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    ::metrics::counter!(metrics::HTTP_REQUESTS, "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    ::metrics::histogram!(metrics::HTTP_LATENCY, "method" => method, "route" => route)
        .record(start.elapsed().as_secs_f64());
    response
}
