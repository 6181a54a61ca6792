//! L0 transcript endpoints: append turns, read them back, reset a session's context.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::domain::{AppendedTurn, NewTurn, SessionId, StoredTurn};
use shared::metrics;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{task_from, tenant_from, AppJson, Path, TenantHeaders};
use crate::state::AppState;

/// Turns to append, in order; the tenant ids may stand in for the headers.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendRequest {
    /// 1 to `SEDIMENT_MAX_TURNS_PER_REQUEST` (1000) turns.
    #[schema(min_items = 1)]
    #[serde(deserialize_with = "crate::extract::objects")]
    messages: Vec<IncomingTurn>,
    /// The task the turns belong to, stored on each: 1 to 128 characters, none a control
    /// character. The `X-Sediment-Task` header may carry it instead; given in both, it must be
    /// the same.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    task: Option<String>,
    team_id: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct IncomingTurn {
    #[schema(value_type = crate::openapi::RoleDoc)]
    role: String,
    /// Not empty once injected `<sediment-memory>` blocks are stripped.
    #[schema(min_length = 1)]
    content: String,
    /// A JSON object, kept with the turn. Two string keys are also indexed: `caption` (what a
    /// shared photo shows) is searched with the content, and `speaker` (who said it) lets a
    /// question that names that person rank their turns higher.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
    /// An idempotency key: a turn whose `client_id` was stored before returns its original id
    /// and seq and writes nothing.
    #[serde(default)]
    client_id: Option<String>,
    /// When the turn happened; default: now.
    #[serde(default)]
    created_at: Option<DateTime<Utc>>,
}

#[derive(Serialize, ToSchema)]
pub struct AppendResponse {
    /// In request order.
    #[schema(value_type = Vec<crate::openapi::AppendedTurnDoc>)]
    messages: Vec<AppendedTurn>,
}

#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/messages",
    operation_id = "append_messages",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session; created by its first append")),
    request_body(content = AppendRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The turns, stored (or found by `client_id`), in request order", body = AppendResponse),
        (status = 400, description = "malformed_json", body = crate::openapi::ErrorBody),
        (status = 413, description = "payload_too_large, or too_many_items", body = crate::openapi::ErrorBody),
        (status = 415, description = "unsupported_media_type", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a body of the wrong shape, no messages, a bad role, empty content, an invalid task, or a task header that names another task than the body", body = crate::openapi::ErrorBody),
    ),
)]

pub async fn append(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
    AppJson(body): AppJson<AppendRequest>,
) -> Result<(StatusCode, Json<AppendResponse>), ApiError> {
    let tenant = tenant_from(
        &headers,
        body.team_id.as_deref(),
        body.agent_id.as_deref(),
        body.user_id.as_deref(),
    )?;
    let session = SessionId::parse(&session_id)?;
    let task = task_from(&headers, body.task.as_deref())?;
    let max = state.limits.max_turns_per_request;
    if body.messages.len() > max {
        return Err(ApiError::TooManyItems(format!(
            "{} messages in one request; the limit is {max}",
            body.messages.len()
        )));
    }
    if body.messages.is_empty() {
        return Err(ApiError::Invalid("messages must not be empty".into()));
    }
    let turns = body
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            NewTurn::new(&t.role, &t.content, t.metadata, t.client_id, t.created_at)
                .map(|turn| turn.with_task(task.clone()))
                .map_err(|e| ApiError::Invalid(format!("messages[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;

    if let Some(quotas) = &state.quotas {
        if let Err((stored, wait)) = quotas
            .admit(state.backends.store.as_ref(), &tenant.team, turns.len() as u64)
            .await?
        {
            ::metrics::counter!(metrics::QUOTA_EXCEEDED).increment(1);
            return Err(ApiError::QuotaExceeded(
                format!("the team stores {stored} turns; its quota is {}", quotas.max_turns()),
                wait,
            ));
        }
    }
    let appended = state.backends.store.append(&tenant, &session, &turns).await?;
    let last_seq = appended.iter().map(|t| t.seq).max().unwrap_or(0);
    ::metrics::counter!(metrics::TURNS_INGESTED).increment(appended.len() as u64);

    // The turns are committed: the wake-up goes out in the background (see `bus::wakeup`).
    state
        .wakeups
        .turn_appended(tenant, session.as_str().to_owned(), last_seq);

    Ok((StatusCode::CREATED, Json(AppendResponse { messages: appended })))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Turns after this seq (default 0: from the start).
    #[param(minimum = 0)]
    after_seq: Option<i64>,
    /// 1 to `SEDIMENT_MAX_LIST_LIMIT` (1000); default 100.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// A stored turn.
#[derive(Serialize, ToSchema)]
#[schema(as = Turn)]
pub struct TurnView {
    pub id: Uuid,
    pub session_id: String,
    pub seq: i64,
    #[schema(value_type = crate::openapi::RoleDoc)]
    pub role: &'static str,
    pub content: String,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The task it was appended under; `null` for none.
    #[schema(required = true)]
    pub task: Option<String>,
}

impl From<StoredTurn> for TurnView {
    fn from(t: StoredTurn) -> Self {
        Self {
            id: t.id,
            session_id: t.session_id,
            seq: t.seq,
            role: t.role.as_str(),
            content: t.content,
            metadata: t.metadata,
            client_id: t.client_id,
            created_at: t.created_at,
            task: t.task,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[schema(as = TurnList)]
pub struct ListResponse {
    messages: Vec<TurnView>,
}

#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/messages",
    operation_id = "list_messages",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session"), ListParams),
    responses(
        (status = 200, description = "The turns in seq order", body = ListResponse),
        (status = 404, description = "not_found: no such session for this tenant", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: a bad query (negative after_seq, limit out of range, an unknown parameter)", body = crate::openapi::ErrorBody),
    ),
)]

pub async fn list(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListResponse>, ApiError> {
    let tenant = headers.tenant()?;
    let session = SessionId::parse(&session_id)?;
    let Query(params) = params.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let after_seq = params.after_seq.unwrap_or(0);
    if after_seq < 0 {
        return Err(ApiError::Invalid("after_seq must not be negative".into()));
    }
    let max = state.limits.max_list_limit;
    let limit = params.limit.unwrap_or(100);
    if limit == 0 || limit > max {
        return Err(ApiError::Invalid(format!("limit must be between 1 and {max}")));
    }
    let turns = state.backends.store.list(&tenant, &session, after_seq, limit).await?;
    Ok(Json(ListResponse {
        messages: turns.into_iter().map(TurnView::from).collect(),
    }))
}

#[derive(Serialize, ToSchema)]
pub struct ResetResponse {
    session_id: String,
    reset_at: DateTime<Utc>,
}

/// Sets the session's `reset_at`: context starts after it. Deletes nothing.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/reset",
    operation_id = "reset_session",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The session's new `reset_at`", body = ResetResponse),
        (status = 404, description = "not_found: no such session for this tenant", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn reset(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    TenantHeaders(headers): TenantHeaders,
) -> Result<Json<ResetResponse>, ApiError> {
    let tenant = headers.tenant()?;
    let session = SessionId::parse(&session_id)?;
    let reset_at = state.backends.store.reset(&tenant, &session).await?;
    Ok(Json(ResetResponse {
        session_id: session.as_str().to_owned(),
        reset_at,
    }))
}
