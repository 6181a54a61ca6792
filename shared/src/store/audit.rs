//! The audit log port: one entry per recall and per administrative action (who, for which
//! tenant, what, on what, how it ended, how long it took), kept in the store's database and
//! listed per tenant, newest first.
//!
//! Recording never fails the call it describes: callers log and count a failed write
//! (`sediment_audit_write_failures_total`). Entries hold no memory or turn content: a recall
//! records the ids it returned, not the query text.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::StoreResult;
use crate::domain::Tenant;

/// One audited call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub id: Uuid,
    pub at: DateTime<Utc>,
    #[serde(skip)]
    pub tenant: Tenant,
    /// Who acted: the `X-Sediment-Actor` header, or the tenant's user.
    pub actor: String,
    /// What was done, e.g. `recall`, `memory.update`, `memory.delete`.
    pub action: String,
    /// What it was done to: a memory id, a session id; `None` for a recall.
    pub target: Option<String>,
    /// `ok`, or the error code of the call.
    pub outcome: String,
    pub duration_ms: i64,
    /// Action-specific facts (a recall: strategy, item ids, error codes).
    pub detail: serde_json::Value,
}

/// Filters of an audit listing; `None` means any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditFilter {
    pub action: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

/// Where a listing page starts: after this (at, id), newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCursor {
    pub at: DateTime<Utc>,
    pub id: Uuid,
}

#[async_trait]
pub trait AuditLog: Send + Sync + 'static {
    async fn record(&self, entry: &AuditEntry) -> StoreResult<()>;

    /// The tenant's entries, newest first, after `after`; `until` is exclusive.
    async fn audit_entries(
        &self,
        tenant: &Tenant,
        filter: &AuditFilter,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> StoreResult<Vec<AuditEntry>>;
}
