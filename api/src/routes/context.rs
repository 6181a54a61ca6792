//! Session context endpoints: the window to send (L1 truncation, L2 summary reuse), forcing an
//! L3 compaction, and the compaction's state. The logic is `shared::context`.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::context::window::ContextMessage;
use shared::context::ContextError;
use shared::domain::SessionId;
use shared::store::compaction::{CompactionRecord, RequestOutcome};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::extract::{Path, TenantHeaders};
use crate::state::AppState;

fn api_error(e: ContextError) -> ApiError {
    match e {
        ContextError::Invalid(message) => ApiError::Invalid(message),
        ContextError::Store(e) => e.into(),
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ContextParams {
    /// The model's context window, in tokens (required).
    #[param(required = true, minimum = 128, maximum = 2_000_000)]
    window_tokens: Option<u64>,
}

/// A message of the window to send.
#[derive(Serialize, ToSchema)]
#[schema(as = ContextMessage)]
pub struct MessageView {
    /// `system` for the summary.
    #[schema(value_type = crate::openapi::RoleDoc)]
    role: &'static str,
    content: String,
    /// `None` for the summary, which stands for many turns.
    #[schema(required = true)]
    seq: Option<i64>,
}

impl From<ContextMessage> for MessageView {
    fn from(m: ContextMessage) -> Self {
        Self {
            role: m.role.as_str(),
            content: m.content,
            seq: m.seq,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct CompactionHint {
    /// The window was over 75 % with turns a compaction could fold in.
    due: bool,
    /// This call queued the job (false when one was already pending, or a failed one is not
    /// due for retry yet).
    queued: bool,
}

#[derive(Serialize, ToSchema)]
#[schema(as = SessionContext)]
pub struct ContextResponse {
    session_id: String,
    window_tokens: u64,
    messages: Vec<MessageView>,
    token_estimate: u64,
    summary_used: bool,
    truncated_turns: usize,
    turns_omitted: bool,
    compaction: CompactionHint,
}

/// The window to send: L1 truncation and L2 summary reuse; queues an L3 compaction when due.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/context",
    operation_id = "session_context",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session"), ContextParams),
    responses(
        (status = 200, description = "The messages to send, within the window", body = ContextResponse),
        (status = 404, description = "not_found: no such session for this tenant", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: window_tokens missing or not valid, an unknown parameter", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn context(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
    params: Result<Query<ContextParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ContextResponse>, ApiError> {
    let tenant = headers.tenant()?;
    let session = SessionId::parse(&session_id)?;
    let Query(params) = params.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let Some(window_tokens) = params.window_tokens else {
        return Err(ApiError::Invalid(
            "window_tokens is required: the model's context window, in tokens".into(),
        ));
    };
    let view = state
        .context
        .context(&tenant, &session, window_tokens)
        .await
        .map_err(api_error)?;
    let a = view.assembled;
    Ok(Json(ContextResponse {
        session_id: session.as_str().to_owned(),
        window_tokens: view.window_tokens,
        messages: a.messages.into_iter().map(MessageView::from).collect(),
        token_estimate: a.token_estimate,
        summary_used: a.summary_used,
        truncated_turns: a.truncated_turns,
        turns_omitted: a.turns_omitted,
        compaction: CompactionHint {
            due: a.compaction_due,
            queued: view.compaction == Some(RequestOutcome::Queued),
        },
    }))
}

/// `GET /compaction`, and the body of `POST /compact` (with `queued`).
#[derive(Serialize, ToSchema)]
#[schema(as = Compaction)]
pub struct CompactionView {
    session_id: String,
    /// `none`, `pending`, `success` or `failed`.
    #[schema(value_type = CompactionStatus)]
    status: &'static str,
    /// Of the stored summary (kept while a newer job runs or after one fails).
    #[schema(required = true)]
    token_count: Option<i64>,
    #[schema(required = true)]
    message_count: Option<i64>,
    #[schema(required = true)]
    last_seq: Option<i64>,
    #[schema(required = true)]
    compressed_at: Option<DateTime<Utc>>,
    /// The last failure; cleared by a success.
    #[schema(required = true)]
    error: Option<String>,
    attempts: i32,
    #[schema(required = true)]
    requested_at: Option<DateTime<Utc>>,
    /// When a failed job will be retried by the worker.
    #[schema(required = true)]
    retry_at: Option<DateTime<Utc>>,
    #[schema(required = true)]
    summarizer: Option<String>,
    /// The ten dimensions of the stored summary.
    #[schema(required = true, value_type = Option<Object>)]
    summary: Option<serde_json::Value>,
    /// Whether this call queued the job (`POST /compact` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    queued: Option<bool>,
}

/// A compaction's state.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)] // Names the values of `CompactionView::status`.
enum CompactionStatus {
    None,
    Pending,
    Success,
    Failed,
}

impl CompactionView {
    fn new(session: &SessionId, record: Option<CompactionRecord>) -> Self {
        let Some(r) = record else {
            return Self {
                session_id: session.as_str().to_owned(),
                status: "none",
                token_count: None,
                message_count: None,
                last_seq: None,
                compressed_at: None,
                error: None,
                attempts: 0,
                requested_at: None,
                retry_at: None,
                summarizer: None,
                summary: None,
                queued: None,
            };
        };
        let s = r.summary;
        Self {
            session_id: r.session_id,
            status: r.status.as_str(),
            token_count: s.as_ref().map(|s| s.token_count),
            message_count: s.as_ref().map(|s| s.message_count),
            last_seq: s.as_ref().map(|s| s.last_seq),
            compressed_at: s.as_ref().map(|s| s.compressed_at),
            error: r.error,
            attempts: r.attempts,
            requested_at: Some(r.requested_at),
            retry_at: r.retry_at,
            summarizer: s.as_ref().map(|s| s.summarizer.clone()),
            summary: s.map(|s| s.summary),
            queued: None,
        }
    }
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/compaction",
    operation_id = "session_compaction",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The session's L3 compaction: its job and stored summary", body = CompactionView),
        (status = 404, description = "not_found: no such session for this tenant", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn compaction(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<CompactionView>, ApiError> {
    let tenant = headers.tenant()?;
    let session = SessionId::parse(&session_id)?;
    let record = state.context.compaction(&tenant, &session).await.map_err(api_error)?;
    Ok(Json(CompactionView::new(&session, record)))
}

/// Forces a compaction: 202 with the job's state and whether this call queued it (a live job
/// is left alone and reported).
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/compact",
    operation_id = "compact_session",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 202, description = "The job's state, with `queued`", body = CompactionView),
        (status = 404, description = "not_found: no such session for this tenant", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn compact(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<(StatusCode, Json<CompactionView>), ApiError> {
    let tenant = headers.tenant()?;
    let session = SessionId::parse(&session_id)?;
    let outcome = state
        .context
        .force_compaction(&tenant, &session)
        .await
        .map_err(api_error)?;
    let record = state.context.compaction(&tenant, &session).await.map_err(api_error)?;
    let mut view = CompactionView::new(&session, record);
    view.queued = Some(outcome == RequestOutcome::Queued);
    Ok((StatusCode::ACCEPTED, Json(view)))
}
