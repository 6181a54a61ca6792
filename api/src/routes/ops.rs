//! The ops page: `GET /ops` (one self-contained HTML page: inline CSS and JS, no external
//! assets) and `GET /ops/state` (the JSON it polls: `shared::ops::Snapshot`).
//!
//! # Access
//! The page shows operational data across every tenant: queue counts, consumer lag, worker
//! liveness, failure kinds and their errors, the extraction funnel. It never shows turn or
//! memory content, nor tenant, session or turn ids. Still, that is nobody's business but the
//! operator's, and the API has no operator identity, so (see `shared::config::OpsSettings`):
//! - `SEDIMENT_OPS_ENABLED=false`: both routes answer 404, as if they did not exist.
//! - No `SEDIMENT_OPS_TOKEN` (the default): only peers on a loopback address are served: a
//!   browser on the embedded deployment's machine, or `kubectl port-forward` to an API pod.
//!   Anyone else gets 403, also behind a proxy (its address is the peer; forwarded headers
//!   are not trusted).
//! - With a token: `/ops/state` needs `Authorization: Bearer <token>` from everyone (401
//!   otherwise); `/ops` itself holds no data and is served to anyone, its script asks for the
//!   token (or takes it from the URL fragment, `/ops#token=…`).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use shared::config::OpsSettings;
use shared::ops::{Sources, WorkerProbe};

use crate::error::ApiError;
use crate::state::AppState;

const PAGE: &str = include_str!("ops.html");

/// Nothing but this origin: the page's own inline style and script, and its state fetch. The
/// page interpolates nothing on the server and its script writes data as text only, so inline
/// script is safe here and spares a second response.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// What the ops routes need besides the backends: who may read them, and what runs here.
#[derive(Debug, Clone)]
pub struct Ops {
    settings: OpsSettings,
    /// The consumer loops of this process.
    workers: Vec<WorkerProbe>,
    /// Whether L1 extraction runs in this process, i.e. whether its counters are ours.
    extract_in_process: bool,
}

impl Ops {
    pub fn new(settings: OpsSettings, workers: Vec<WorkerProbe>, extract_in_process: bool) -> Self {
        Self {
            settings,
            workers,
            extract_in_process,
        }
    }
}

impl Default for Ops {
    /// Enabled for loopback peers only, with no workers: the configuration default.
    fn default() -> Self {
        Self::new(
            OpsSettings {
                enabled: true,
                token: None,
            },
            Vec::new(),
            false,
        )
    }
}

pub fn routes() -> Router<AppState> {
    Router::new().route("/ops", get(page)).route("/ops/state", get(state))
}

/// The ops page (HTML). Without `SEDIMENT_OPS_TOKEN` only loopback peers get it (403
/// otherwise); with one, anyone gets the data-less page, whose script asks for the token.
#[utoipa::path(
    get,
    path = "/ops",
    operation_id = "ops_page",
    tag = "ops",
    responses(
        (status = 200, description = "The page", body = String, content_type = "text/html; charset=utf-8"),
        (status = 403, description = "forbidden: not a loopback peer, and no ops token is set", body = crate::openapi::ErrorBody),
        (status = 404, description = "not_found: `SEDIMENT_OPS_ENABLED=false`", body = crate::openapi::ErrorBody),
    ),
)]
pub(crate) async fn page(State(app): State<AppState>, request: Request) -> Response {
    let peer = peer_of(&request);
    // With a token the page is a data-less shell whose script asks for the token.
    let result = if app.ops.settings.token.is_some() && app.ops.settings.enabled {
        Ok(())
    } else {
        check_access(&app.ops.settings, peer, request.headers())
    };
    if let Err(e) = result {
        return refusal(e);
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        ],
        PAGE,
    )
        .into_response()
}

/// The JSON the ops page polls. Without `SEDIMENT_OPS_TOKEN`: loopback peers only; with it:
/// everyone must send it.
#[utoipa::path(
    get,
    path = "/ops/state",
    operation_id = "ops_state",
    tag = "ops",
    security((), ("ops_token" = [])),
    responses(
        (status = 200, description = "Queues, lag, workers, recent failures and the L1 funnel", body = crate::openapi::OpsStateDoc),
        (status = 401, description = "unauthorized: an ops token is set and was not sent", body = crate::openapi::ErrorBody),
        (status = 403, description = "forbidden: not a loopback peer, and no ops token is set", body = crate::openapi::ErrorBody),
        (status = 404, description = "not_found: `SEDIMENT_OPS_ENABLED=false`", body = crate::openapi::ErrorBody),
    ),
)]
pub(crate) async fn state(State(app): State<AppState>, request: Request) -> Response {
    if let Err(e) = check_access(&app.ops.settings, peer_of(&request), request.headers()) {
        return refusal(e);
    }
    let metrics_text = app.ops.extract_in_process.then(|| app.metrics.render());
    let snapshot = shared::ops::snapshot(Sources {
        backends: &app.backends,
        in_process: &app.ops.workers,
        metrics_text,
    })
    .await;
    (
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(snapshot),
    )
        .into_response()
}

/// The TCP peer; absent when the router is served without connect info (then only a token
/// opens the page).
fn peer_of(request: &Request) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
}

/// Applies the access rule of the module docs.
fn check_access(settings: &OpsSettings, peer: Option<SocketAddr>, headers: &HeaderMap) -> Result<(), ApiError> {
    if !settings.enabled {
        return Err(ApiError::NotFound("no such route".into()));
    }
    match &settings.token {
        Some(token) => {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            match presented {
                Some(presented) if constant_time_eq(presented.as_bytes(), token.expose().as_bytes()) => Ok(()),
                Some(_) | None => Err(ApiError::Unauthorized(
                    "send the ops token (SEDIMENT_OPS_TOKEN) as Authorization: Bearer <token>".into(),
                )),
            }
        }
        None if peer.is_some_and(|p| p.ip().to_canonical().is_loopback()) => Ok(()),
        None => Err(ApiError::Forbidden(
            "the ops page answers on loopback only; set SEDIMENT_OPS_TOKEN to open it to the network".into(),
        )),
    }
}

fn refusal(error: ApiError) -> Response {
    let challenge = matches!(error, ApiError::Unauthorized(_));
    let mut response = error.into_response();
    if challenge {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// Compares without stopping at the first difference, so response timing does not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use shared::config::Secret;

    use super::*;

    fn settings(enabled: bool, token: Option<&str>) -> OpsSettings {
        OpsSettings {
            enabled,
            token: token.map(Secret::new),
        }
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        headers
    }

    fn code(result: Result<(), ApiError>) -> &'static str {
        match result {
            Ok(()) => "ok",
            Err(e) => e.status_and_code().1,
        }
    }

    #[test]
    fn without_a_token_only_loopback_peers_are_served() {
        let open = settings(true, None);
        let none = HeaderMap::new();
        for peer in ["127.0.0.1:1234", "[::1]:1234", "[::ffff:127.0.0.1]:1234"] {
            assert_eq!(
                code(check_access(&open, Some(peer.parse().unwrap()), &none)),
                "ok",
                "{peer}"
            );
        }
        for peer in ["10.0.0.7:1234", "[2001:db8::1]:1234", "0.0.0.0:1"] {
            assert_eq!(
                code(check_access(&open, Some(peer.parse().unwrap()), &none)),
                "forbidden",
                "{peer}"
            );
        }
        assert_eq!(code(check_access(&open, None, &none)), "forbidden");
    }

    #[test]
    fn with_a_token_everyone_needs_it() {
        let token = "0123456789abcdef";
        let closed = settings(true, Some(token));
        let remote = Some("10.0.0.7:1234".parse().unwrap());
        let local = Some("127.0.0.1:1234".parse().unwrap());
        assert_eq!(code(check_access(&closed, remote, &bearer(token))), "ok");
        assert_eq!(code(check_access(&closed, local, &HeaderMap::new())), "unauthorized");
        assert_eq!(
            code(check_access(&closed, remote, &bearer("0123456789abcdeX"))),
            "unauthorized"
        );
        assert_eq!(
            code(check_access(&closed, remote, &bearer("0123456789abcde"))),
            "unauthorized"
        );
    }

    #[test]
    fn disabled_is_not_found_for_everyone() {
        let local = Some("127.0.0.1:1234".parse().unwrap());
        assert_eq!(
            code(check_access(&settings(false, None), local, &HeaderMap::new())),
            "not_found"
        );
        let token = "0123456789abcdef";
        assert_eq!(
            code(check_access(&settings(false, Some(token)), local, &bearer(token))),
            "not_found"
        );
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for needle in ["http://", "https://", "src=", "@import", "url("] {
            assert!(!PAGE.contains(needle), "ops.html contains {needle:?}");
        }
    }
}
