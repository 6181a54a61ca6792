//! Router assembly: routes, body limit, tracing spans, request ids and HTTP metrics.

pub(crate) mod audit;
pub(crate) mod context;
mod cursor;
pub(crate) mod erase;
pub(crate) mod health;
pub(crate) mod keys;
pub(crate) mod memories;
pub(crate) mod ops;
pub(crate) mod portable;
pub(crate) mod prompts;
pub(crate) mod queues;
pub(crate) mod recall;
pub(crate) mod scenes;
pub(crate) mod search;
pub(crate) mod sessions;

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use shared::metrics;
use shared::telemetry::propagate::{TraceContext, TRACEPARENT, TRACESTATE};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::error::ApiError;
use crate::state::AppState;

const REQUEST_ID_HEADER: &str = "x-request-id";

/// Every route, the probes included.
pub fn router(state: AppState) -> Router {
    app(state, true)
}

/// `/healthz`, `/readyz` and `/metrics` alone, for their own address (`SEDIMENT_HEALTH_LISTEN`).
pub(crate) fn probes(state: AppState) -> Router {
    probe_routes().fallback(not_found).with_state(state)
}

fn probe_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
}

/// The API's routes; the probes only with `with_probes` (else they live on their own address).
pub(crate) fn app(state: AppState, with_probes: bool) -> Router {
    let body_limit = state.limits.max_body_bytes;
    let request_id = axum::http::HeaderName::from_static(REQUEST_ID_HEADER);
    let gate = crate::auth::Gate {
        auth: state.auth.clone(),
        limiter: state.limiter.clone(),
    };
    // Every /v1 route, each behind the authentication middleware (`auth`); the routes outside
    // it (health, metrics, the ops page with its own rule) are open.
    let v1 = Router::new()
        .route(
            "/v1/sessions/{session_id}/messages",
            post(sessions::append).get(sessions::list),
        )
        .route("/v1/sessions/{session_id}/reset", post(sessions::reset))
        .route("/v1/sessions/{session_id}/context", get(context::context))
        .route("/v1/sessions/{session_id}/compact", post(context::compact))
        .route("/v1/sessions/{session_id}/compaction", get(context::compaction))
        .route("/v1/conversations/search", post(search::search))
        .route("/v1/recall", post(recall::recall))
        .route("/v1/audit", get(audit::list))
        .route("/v1/memories", get(memories::list))
        .route("/v1/memories/search", post(memories::search))
        .route(
            "/v1/memories/{memory_id}",
            get(memories::get).patch(memories::patch).delete(memories::delete),
        )
        .route("/v1/scenes", get(scenes::list))
        .route("/v1/scenes/{id}", get(scenes::get))
        .route("/v1/persona", get(scenes::persona))
        .route("/v1/prompts", get(prompts::list))
        .route(
            "/v1/prompts/{template_id}",
            get(prompts::get).put(prompts::put).delete(prompts::delete),
        )
        .route("/v1/export", get(portable::export))
        // The import reads its body as a stream and bounds it itself (`max_import_bytes`).
        .route("/v1/import", post(portable::import).layer(DefaultBodyLimit::disable()))
        .route("/v1/users/{user_id}", delete(erase::erase_user))
        .route("/v1/users/{user_id}/erasures/{erasure_id}", get(erase::get_erasure))
        .route("/v1/admin/keys", post(keys::create).get(keys::list))
        .route("/v1/admin/keys/{key_id}", delete(keys::revoke))
        .route("/v1/admin/teams/{team_id}", delete(erase::erase_team))
        .route("/v1/admin/erasures/{erasure_id}", get(erase::get_erasure_as_operator))
        .route("/v1/admin/audit", get(audit::list_operator))
        .route("/v1/admin/queues/{kind}/parked/replay", post(queues::replay_parked))
        .route_layer(middleware::from_fn_with_state(gate.clone(), crate::auth::authenticate));
    // MCP over Streamable HTTP: each tool is a call into the `/v1` routes above, in this
    // process, carrying the caller's credential; `/mcp` itself sits behind the same gate.
    let loopback_only = matches!(state.auth, crate::auth::Auth::Off);
    let mcp = crate::mcp::service(v1.clone().with_state(state.clone()), loopback_only, body_limit);
    let mcp = Router::new()
        .route_service("/mcp", mcp)
        .route_layer(middleware::from_fn_with_state(gate, crate::auth::authenticate));
    let routes = Router::new().merge(v1).merge(mcp);
    let routes = if with_probes {
        routes.merge(probe_routes())
    } else {
        routes
    };
    routes
        .merge(ops::routes())
        // Open, like the probes: it describes the API, and holds no data.
        .route("/openapi.json", get(crate::openapi::openapi_json))
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
            let span = tracing::info_span!(
                "request",
                method = %req.method(),
                route,
                request_id = id,
                otel.name = %format_args!("{} {route}", req.method()),
                otel.kind = "server",
            );
            // An agent that traces its own work continues its trace into ours.
            let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
            TraceContext::from_headers(header(TRACEPARENT), header(TRACESTATE)).set_parent_of(&span);
            span
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
