//! The compaction store port: per session, one L3 compaction job and the last good summary
//! (seed 000 `ai_session_memory`; Postgres `session_compactions`).
//!
//! Backends: `PostgresStore` (cluster) and `SqliteStore` (embedded), both tested by
//! `compaction_testsuite`.
//!
//! # The job's state machine
//! ```text
//!            request                 claim                  complete
//!   none ───────────────▶ pending ───────────▶ pending ─────────────────▶ success
//!   success ────────────▶ (queued)             (claimed,                     │ request
//!   failed (due/forced) ▶                       lease)  ──── fail ──▶ failed │ (grown again)
//!                           ▲  lease expired: claim or request again  │      ▼
//!                           └─────────────────────────────────────────┴── pending ...
//! ```
//! - At most one job per session: the row is keyed by session, and `request` turns it into
//!   `pending` only when no live job holds it (`pending` with its lease in the future).
//! - A worker `claim`s a job before working on it: the claim stamps a fresh token and a lease;
//!   `complete` and `fail` apply only with that token (a fence), so a worker that lost its lease
//!   — it stalled, another claimed the job — can no longer overwrite anything.
//! - A crash anywhere leaves either a `pending` job (caught by the sweep once its lease expires,
//!   or at once if nobody claimed it) or a finished one; nothing is lost or done twice.
//! - The summary of the last success is kept while a new job runs, so summary reuse goes on.
//!
//! # Time
//! Every call that compares with the clock takes `now` from the caller, so tests can move time;
//! leases are long (120 s) next to clock skew between replicas.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::{SessionId, StoredTurn, Tenant};

/// Where a session's compaction job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompactionStatus {
    /// Queued or running; see `claimed` and `lease_until`.
    Pending,
    /// The last job finished; its summary is stored.
    Success,
    /// The last job failed; see `error` and `retry_at`.
    Failed,
}

impl CompactionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Success => "success",
            Self::Failed => "failed",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "pending" => Some(Self::Pending),
            "success" => Some(Self::Success),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// A stored summary and its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSummary {
    /// The structured summary (the ten dimensions), as JSON.
    pub summary: serde_json::Value,
    /// The summary as the system message the agent receives.
    pub content: String,
    /// Estimated tokens of `content` as a message.
    pub token_count: i64,
    /// Estimated tokens of the turns it replaces (after L1): what L2 weighs it against.
    pub source_tokens: i64,
    /// Turns it replaces, across every compaction folded into it.
    pub message_count: i64,
    /// The first and last seq it covers.
    pub first_seq: i64,
    pub last_seq: i64,
    /// The session's `reset_at` when it was made; a summary is valid only while that is still
    /// the session's `reset_at`.
    pub reset_at: Option<DateTime<Utc>>,
    /// `rules` or `llm:<model>`.
    pub summarizer: String,
    /// The prompt / format version.
    pub prompt_version: String,
    /// SHA-256 (hex) of the summarized turns' contents, in seq order.
    pub input_hash: String,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub compressed_at: DateTime<Utc>,
}

/// A session's compaction row.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionRecord {
    pub tenant: Tenant,
    pub session_id: String,
    pub status: CompactionStatus,
    /// Claims since the last success (or the last forced request).
    pub attempts: i32,
    pub requested_at: DateTime<Utc>,
    /// Whether a worker holds the pending job.
    pub claimed: bool,
    /// While pending: after this the job counts as abandoned and may be claimed or requested
    /// again.
    pub lease_until: Option<DateTime<Utc>>,
    /// While failed: when the sweep may retry it.
    pub retry_at: Option<DateTime<Utc>>,
    /// The last failure's message; cleared by a success.
    pub error: Option<String>,
    /// The last good summary, if any.
    pub summary: Option<StoredSummary>,
}

/// What [`CompactionStore::request_compaction`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// A new job is pending: publish the event.
    Queued,
    /// A live job already holds the session; nothing changed.
    AlreadyPending,
    /// The last job failed and its retry is not due yet (only without `force`).
    NotDue,
}

/// The parameters of [`CompactionStore::request_compaction`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionRequest {
    pub force: bool,
    /// The `last_seq` of the stored summary the caller saw (`None`: no summary).
    pub seen_last_seq: Option<i64>,
    pub now: DateTime<Utc>,
    pub lease: Duration,
}

/// A worker's hold on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub token: Uuid,
    /// 1 for the first claim since the last success.
    pub attempt: i32,
    pub lease_until: DateTime<Utc>,
}

/// A job the sweep should run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCompaction {
    pub tenant: Tenant,
    pub session_id: String,
}

/// Which turns of a session [`CompactionStore::window_turns`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowQuery {
    /// Only turns with a greater seq.
    pub after_seq: i64,
    /// Only turns with a smaller seq; `None` for no bound.
    pub before_seq: Option<i64>,
    /// Only turns created after this (the session's `reset_at`).
    pub since: Option<DateTime<Utc>>,
    pub limit: u32,
}

#[async_trait]
pub trait CompactionStore: Send + Sync + 'static {
    /// Reads a session's compaction row; `None` if no compaction was ever requested, or the
    /// session is another tenant's.
    async fn compaction(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<Option<CompactionRecord>>;

    /// Queues a job unless a live one exists: creates or turns the row `pending` (unclaimed,
    /// lease until `now + lease`) when there is none, or it is `success`, or `pending` with an
    /// expired lease, or `failed` with its retry due (any `failed` when `force`; `force` also
    /// resets the attempt count). Atomic: of concurrent requests at most one gets `Queued`.
    ///
    /// Without `force`, the request is also conditional on the stored summary: `seen_last_seq`
    /// is the `last_seq` of the summary the caller based its decision on (`None` if it saw
    /// none), and if a job finished since and stored another, the request is answered
    /// `AlreadyPending` (that job did the work) instead of queuing a redundant one.
    ///
    /// `SessionNotFound` when the tenant has no such session; then nothing is written.
    async fn request_compaction(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        request: CompactionRequest,
    ) -> StoreResult<RequestOutcome>;

    /// Takes a job for a worker: a `pending` job that nobody holds or whose lease expired, or
    /// a `failed` one whose retry is due and that has had fewer than `max_attempts` attempts.
    /// Stamps a fresh token and `lease_until = now + lease`, counts an attempt, and returns
    /// the claim; `None` when there is no such job (done, held by a live worker, not due).
    async fn claim_compaction(
        &self,
        tenant: &Tenant,
        session_id: &str,
        now: DateTime<Utc>,
        lease: Duration,
        max_attempts: i32,
    ) -> StoreResult<Option<Claim>>;

    /// Finishes a claimed job: `success`, with `summary` replacing the stored one (`None`
    /// keeps it: there was nothing new to fold in), the error cleared and attempts reset.
    /// Returns `false` and changes nothing when `token` no longer holds the job.
    async fn complete_compaction(
        &self,
        tenant: &Tenant,
        session_id: &str,
        token: Uuid,
        summary: Option<&StoredSummary>,
    ) -> StoreResult<bool>;

    /// Fails a claimed job: `failed` with `error`, retryable by the sweep from `retry_at`.
    /// Keeps the stored summary. Returns `false` and changes nothing when `token` no longer
    /// holds the job.
    async fn fail_compaction(
        &self,
        tenant: &Tenant,
        session_id: &str,
        token: Uuid,
        error: &str,
        retry_at: DateTime<Utc>,
    ) -> StoreResult<bool>;

    /// Lists up to `limit` jobs a worker could claim now (see `claim_compaction`), oldest
    /// request first. Not tenant-scoped: for the sweep only.
    async fn due_compactions(
        &self,
        now: DateTime<Utc>,
        max_attempts: i32,
        limit: u32,
    ) -> StoreResult<Vec<DueCompaction>>;

    /// Reads up to `limit` turns of a session in the range of `query`, **newest first**. Does
    /// not check that the session exists: another tenant's session has no turns here.
    async fn window_turns(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        query: WindowQuery,
    ) -> StoreResult<Vec<StoredTurn>>;
}

/// `now + lease`, saturating instead of overflowing on absurd leases.
pub(crate) fn lease_end(now: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(lease)
        .ok()
        .and_then(|lease| now.checked_add_signed(lease))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
