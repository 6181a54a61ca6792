//! The audit log: recording (for the other routes), `GET /v1/audit`, and the operator's log
//! at `GET /v1/admin/audit`.

use std::time::Instant;

use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::domain::tenant_id;
use shared::domain::Tenant;
use shared::metrics;
use shared::runtime::error_chain;
use shared::store::audit::{AuditCursor, AuditEntry, AuditFilter, OperatorEntry, OperatorFilter};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{tenant_from, TenantHeaders, ACTOR_HEADER, MAX_ACTOR_CHARS};
use crate::state::AppState;

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

/// What one audited call did; completed into an [`AuditEntry`] by [`record`].
pub(crate) struct Audited {
    pub tenant: Tenant,
    pub actor: String,
    pub action: &'static str,
    pub target: Option<String>,
    pub outcome: String,
    pub started: Instant,
    pub detail: serde_json::Value,
}

impl Audited {
    fn into_entry(self) -> AuditEntry {
        AuditEntry {
            id: Uuid::new_v4(),
            at: Utc::now(),
            tenant: self.tenant,
            actor: self.actor,
            action: self.action.to_owned(),
            target: self.target,
            outcome: self.outcome,
            duration_ms: i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX),
            detail: self.detail,
        }
    }
}

/// Writes an entry and waits for it (administrative actions, which are rare). A failed write
/// is logged and counted, never returned: the action itself succeeded.
pub(crate) async fn record(state: &AppState, audited: Audited) {
    let entry = audited.into_entry();
    if let Err(e) = state.backends.audit.record(&entry).await {
        ::metrics::counter!(metrics::AUDIT_WRITE_FAILURES).increment(1);
        tracing::error!(action = %entry.action, error = %error_chain(&e), "failed to write the audit log");
    }
}

/// Writes an entry without making the caller wait (recalls, which are on the agent's hot
/// path); failures are logged and counted.
pub(crate) fn record_later(state: &AppState, audited: Audited) {
    let state = state.clone();
    tokio::spawn(async move { record(&state, audited).await });
}

/// Who calls an admin route, for the operator's log: the `X-Sediment-Actor` header, else
/// `operator`. Never refuses a request: a header that is not text counts as absent.
pub struct OperatorActor(pub String);

impl<S: Send + Sync> FromRequestParts<S> for OperatorActor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let actor = parts
            .headers
            .get(ACTOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| a.chars().take(MAX_ACTOR_CHARS).collect())
            .unwrap_or_else(|| "operator".to_owned());
        Ok(Self(actor))
    }
}

/// What one admin call did, whatever its outcome; see [`record_operator`].
pub(crate) struct OperatorAudited {
    pub actor: String,
    pub action: &'static str,
    pub team_id: Option<String>,
    pub target: Option<String>,
    pub started: Instant,
    pub detail: serde_json::Value,
}

/// Writes the operator's log entry of an admin call that changes something, with `ok` or its
/// error's code, and waits for it (such calls are rare). A failed write is logged and counted,
/// never returned: the call itself is decided.
pub(crate) async fn record_operator<T>(state: &AppState, audited: OperatorAudited, result: &Result<T, ApiError>) {
    let entry = OperatorEntry {
        id: Uuid::new_v4(),
        at: Utc::now(),
        team_id: audited.team_id,
        actor: audited.actor,
        action: audited.action.to_owned(),
        target: audited.target,
        outcome: match result {
            Ok(_) => "ok".to_owned(),
            Err(e) => e.status_and_code().1.to_owned(),
        },
        duration_ms: i64::try_from(audited.started.elapsed().as_millis()).unwrap_or(i64::MAX),
        detail: audited.detail,
    };
    if let Err(e) = state.backends.audit.record_operator(&entry).await {
        ::metrics::counter!(metrics::AUDIT_WRITE_FAILURES).increment(1);
        tracing::error!(action = %entry.action, error = %error_chain(&e), "failed to write the operator's log");
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only this action (`recall`, `memory.update`, ...).
    action: Option<String>,
    /// RFC 3339; inclusive.
    since: Option<DateTime<Utc>>,
    /// RFC 3339; exclusive.
    until: Option<DateTime<Utc>>,
    /// 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `next` of the previous page.
    cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = AuditList)]
pub struct ListResponse {
    #[schema(value_type = Vec<crate::openapi::AuditEntryDoc>)]
    items: Vec<AuditEntry>,
    /// The `cursor` of the next page, or `null` on the last one.
    #[schema(required = true)]
    next: Option<String>,
}

/// The caller's tenant's entries, newest first.
#[utoipa::path(
    get,
    path = "/v1/audit",
    operation_id = "list_audit",
    tag = "audit",
    params(ListParams),
    responses(
        (status = 200, description = "A page of the tenant's audit log (ids, never content)", body = ListResponse),
        (status = 422, description = "invalid_request: limit out of range, a bad cursor or time, an unknown parameter", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    TenantHeaders(headers): TenantHeaders,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListResponse>, ApiError> {
    let tenant = tenant_from(&headers, None, None, None)?;
    let Query(params) = params.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::Invalid(format!("limit: must be between 1 and {MAX_LIMIT}")));
    }
    let filter = AuditFilter {
        action: params.action,
        since: params.since,
        until: params.until,
    };
    let after = params
        .cursor
        .as_deref()
        .map(super::cursor::decode)
        .transpose()?
        .map(|(at, id)| AuditCursor { at, id });
    let mut page = state
        .backends
        .audit
        .audit_entries(&tenant, &filter, after, limit + 1)
        .await?;
    let next = if page.len() > limit as usize {
        page.truncate(limit as usize);
        page.last().map(|e| super::cursor::encode(e.at, e.id))
    } else {
        None
    };
    Ok(Json(ListResponse { items: page, next }))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OperatorListParams {
    /// Only the calls on this team.
    team_id: Option<String>,
    /// Only this action (`key.create`, `key.revoke`, `team.erase`).
    action: Option<String>,
    /// RFC 3339; inclusive.
    since: Option<DateTime<Utc>>,
    /// RFC 3339; exclusive.
    until: Option<DateTime<Utc>>,
    /// 1 to 500; default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `next` of the previous page.
    cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = OperatorLog)]
pub struct OperatorListResponse {
    #[schema(value_type = Vec<crate::openapi::OperatorEntryDoc>)]
    items: Vec<OperatorEntry>,
    /// The `cursor` of the next page, or `null` on the last one.
    #[schema(required = true)]
    next: Option<String>,
}

/// Admin key only: the operator's log, newest first. One entry per call that made or revoked
/// an API key or erased a team, whatever its outcome; listing keys and reading jobs are not
/// logged.
#[utoipa::path(
    get,
    path = "/v1/admin/audit",
    operation_id = "list_operator_audit",
    tag = "admin",
    params(OperatorListParams),
    responses(
        (status = 200, description = "A page of the operator's log (ids, never a secret)", body = OperatorListResponse),
        (status = 400, description = "missing_tenant: a blank team_id", body = crate::openapi::ErrorBody),
        (status = 422, description = "invalid_request: limit out of range, a bad team_id, cursor or time, an unknown parameter", body = crate::openapi::ErrorBody),
    ),
)]
pub async fn list_operator(
    State(state): State<AppState>,
    params: Result<Query<OperatorListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<OperatorListResponse>, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::Invalid(e.body_text()))?;
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::Invalid(format!("limit: must be between 1 and {MAX_LIMIT}")));
    }
    let filter = OperatorFilter {
        team_id: params
            .team_id
            .as_deref()
            .map(|team| tenant_id("team_id", Some(team)))
            .transpose()?,
        action: params.action,
        since: params.since,
        until: params.until,
    };
    let after = params
        .cursor
        .as_deref()
        .map(super::cursor::decode)
        .transpose()?
        .map(|(at, id)| AuditCursor { at, id });
    let mut page = state.backends.audit.operator_entries(&filter, after, limit + 1).await?;
    let next = if page.len() > limit as usize {
        page.truncate(limit as usize);
        page.last().map(|e| super::cursor::encode(e.at, e.id))
    } else {
        None
    };
    Ok(Json(OperatorListResponse { items: page, next }))
}
