//! The audit log port: one entry per recall and per administrative action (who, for which
//! tenant, what, on what, how it ended, how long it took), kept in the store's database and
//! listed per tenant, newest first.
//!
//! The operator's actions through the admin key (API keys made and revoked, teams erased)
//! belong to no owner: they go to an operator log of their own ([`OperatorEntry`]), listed by
//! team or across teams.
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

/// One call the operator made with the admin key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperatorEntry {
    pub id: Uuid,
    pub at: DateTime<Utc>,
    /// The team acted on; `None` when the call named none the service knows (revoking an
    /// unknown key).
    pub team_id: Option<String>,
    /// Who acted: the `X-Sediment-Actor` header, or `operator`.
    pub actor: String,
    /// `key.create`, `key.revoke` or `team.erase`.
    pub action: String,
    /// A key id; `None` for a team erase.
    pub target: Option<String>,
    /// `ok`, or the error code of the call.
    pub outcome: String,
    pub duration_ms: i64,
    /// Action-specific facts (a key: its permission, agents and prefix; an erase: the agent
    /// and the job ids). Never a secret.
    pub detail: serde_json::Value,
}

/// Filters of an operator log listing; `None` means any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OperatorFilter {
    pub team_id: Option<String>,
    pub action: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
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

    async fn record_operator(&self, entry: &OperatorEntry) -> StoreResult<()>;

    /// The operator log, newest first, after `after`; `until` is exclusive.
    async fn operator_entries(
        &self,
        filter: &OperatorFilter,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> StoreResult<Vec<OperatorEntry>>;
}
