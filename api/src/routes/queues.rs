//! The operator's parked messages, `POST /v1/admin/queues/{kind}/parked/replay`: moves messages
//! a worker parked (it could not read them, or they failed for good) back to its queue, e.g.
//! once an upgrade taught the worker a newer event. Only the admin key reaches it, or anyone
//! on a server with auth off (`auth::allow`). The moving is `EventBus::replay_parked`.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use shared::bus::{Replayed, WorkerKind};
use utoipa::ToSchema;

use super::audit::{record_operator, OperatorActor, OperatorAudited};
use crate::error::ApiError;
use crate::extract::{AppJson, Path};
use crate::state::AppState;

const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

/// The body, which may be left out.
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ReplayParked {
    /// Replays at most this many, oldest first: 1 to 1000, default 100.
    #[schema(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// One replayed message, as it was when parked.
#[derive(Serialize, ToSchema)]
#[schema(as = ReplayedMessage)]
pub struct ReplayedView {
    message_id: String,
    /// Why it was parked: `rejected` (the worker could not read it, or it failed for good),
    /// `max attempts reached`, or the broker's reason for a message another client refused.
    reason: String,
    /// The deliveries it had used; it starts again at 1.
    attempts: u32,
    /// The event's `type` tag (e.g. `turns.appended.v1`); `null` when the body is not a JSON
    /// object with one.
    #[serde(rename = "type")]
    #[schema(required = true)]
    event_type: Option<String>,
}

impl From<Replayed> for ReplayedView {
    fn from(replayed: Replayed) -> Self {
        Self {
            message_id: replayed.message_id,
            reason: replayed.reason,
            attempts: replayed.attempts,
            event_type: replayed.event_type,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[schema(as = ParkedReplay)]
pub struct Replay {
    /// The worker kind whose queue took them.
    kind: String,
    /// What was moved, oldest first; empty when nothing was parked.
    items: Vec<ReplayedView>,
}

/// Moves up to `limit` parked messages of a worker kind back to its queue, each with its body,
/// message id and trace context, its attempts starting again at 1. A message the worker still
/// cannot read is parked again. Logged in the operator's log (`parked.replay`).
#[utoipa::path(
    post,
    path = "/v1/admin/queues/{kind}/parked/replay",
    operation_id = "replay_parked",
    tag = "admin",
    params(("kind" = String, Path, description = "The worker kind: `index`, `extract`, `compact`, `scene` or `persona` (anything else is 404)")),
    request_body(content = Option<ReplayParked>, content_type = "application/json", description = "Optional: `{\"limit\": n}`"),
    responses(
        (status = 200, description = "The messages moved back, oldest first", body = Replay),
        (status = 400, description = "malformed_json", body = crate::openapi::ErrorBody),
        (status = 404, description = "not_found: no worker kind has this name", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type: a body that is not `application/json`", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: limit out of range, a body of the wrong shape", body = crate::openapi::ErrorBody),
        (status = 503, description = "backend_unavailable: the broker cannot be reached", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn replay_parked(
    State(state): State<AppState>,
    OperatorActor(actor): OperatorActor,
    Path(kind): Path<String>,
    request: Request,
) -> Result<Json<Replay>, ApiError> {
    let started = std::time::Instant::now();
    let mut detail = serde_json::json!({});
    let result = replay(&state, &kind, request, &mut detail).await;
    let audited = OperatorAudited {
        actor,
        action: "parked.replay",
        team_id: None,
        // The path as sent, bounded: a replay of an unknown kind is worth seeing too.
        target: Some(kind.chars().take(64).collect()),
        started,
        detail,
    };
    record_operator(&state, audited, &result).await;
    result
}

async fn replay(
    state: &AppState,
    kind: &str,
    request: Request,
    detail: &mut serde_json::Value,
) -> Result<Json<Replay>, ApiError> {
    let worker = WorkerKind::parse(kind).ok_or_else(|| {
        let names: Vec<&str> = WorkerKind::ALL.iter().map(|k| k.as_str()).collect();
        ApiError::NotFound(format!("no worker kind {kind:?}; one of {}", names.join(", ")))
    })?;
    let body = optional_body(state, request).await?;
    let limit = body.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::Invalid(format!("limit: must be between 1 and {MAX_LIMIT}")));
    }
    detail["limit"] = limit.into();
    let replayed = state.backends.bus.replay_parked(worker, limit as usize).await?;
    detail["replayed"] = replayed.len().into();
    tracing::info!(kind, replayed = replayed.len(), "replayed parked messages");
    Ok(Json(Replay {
        kind: worker.as_str().to_owned(),
        items: replayed.into_iter().map(ReplayedView::from).collect(),
    }))
}

/// The body, or the defaults when there is none (or it is JSON `null`, which the document's
/// optional body allows): a bare `POST` (curl without `-d`) is the common call. A body that is
/// there must be a JSON object, as everywhere else.
async fn optional_body(state: &AppState, request: Request) -> Result<ReplayParked, ApiError> {
    let (parts, body) = request.into_parts();
    let limit = state.limits.max_body_bytes;
    let bytes = Bytes::from_request(Request::from_parts(parts.clone(), body), state)
        .await
        .map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(limit)
            } else {
                ApiError::MalformedJson(format!("failed to read request body: {}", rejection.body_text()))
            }
        })?;
    let trimmed = bytes.trim_ascii();
    if trimmed.is_empty() || trimmed == b"null" {
        return Ok(ReplayParked::default());
    }
    let AppJson(body) = AppJson::from_request(Request::from_parts(parts, Body::from(bytes)), state).await?;
    Ok(body)
}
