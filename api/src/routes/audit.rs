//! The audit log: recording (for the other routes) and `GET /v1/audit`.

use std::time::Instant;

use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::domain::Tenant;
use shared::metrics;
use shared::runtime::error_chain;
use shared::store::audit::{AuditCursor, AuditEntry, AuditFilter};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{tenant_from, TenantHeaders};
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
