//! L0 transcript endpoints: append turns, read them back, reset a session's context.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::domain::{AppendedTurn, NewTurn, SessionId, StoredTurn};
use shared::metrics;
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{tenant_from, AppJson, TenantHeaders};
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppendRequest {
    messages: Vec<IncomingTurn>,
    team_id: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IncomingTurn {
    role: String,
    content: String,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    created_at: Option<DateTime<Utc>>,
}

#[derive(Serialize)]
pub struct AppendResponse {
    messages: Vec<AppendedTurn>,
}

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
                .map_err(|e| ApiError::Invalid(format!("messages[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;

    let appended = state.backends.store.append(&tenant, &session, &turns).await?;
    let last_seq = appended.iter().map(|t| t.seq).max().unwrap_or(0);
    ::metrics::counter!(metrics::TURNS_INGESTED).increment(appended.len() as u64);

    // The turns are committed: the wake-up goes out in the background (see `bus::wakeup`).
    state
        .wakeups
        .turn_appended(tenant, session.as_str().to_owned(), last_seq);

    Ok((StatusCode::CREATED, Json(AppendResponse { messages: appended })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    after_seq: Option<i64>,
    limit: Option<u32>,
}

#[derive(Serialize)]
pub struct TurnView {
    pub id: Uuid,
    pub session_id: String,
    pub seq: i64,
    pub role: &'static str,
    pub content: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    pub created_at: DateTime<Utc>,
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
        }
    }
}

#[derive(Serialize)]
pub struct ListResponse {
    messages: Vec<TurnView>,
}

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

#[derive(Serialize)]
pub struct ResetResponse {
    session_id: String,
    reset_at: DateTime<Utc>,
}

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
