//! The memory store port: L1 memories, their provenance, the extraction schedule and the
//! memory index outbox. Implemented by both transcript store backends, in the same database as
//! the turns, so that one transaction can write memories and advance the extraction cursor.
//!
//! # Exactly-once batches
//! [`MemoryStore::commit_batch`] writes a batch's memories, archives what they supersede,
//! writes the provenance records, queues the index work and moves the extraction cursor, in one
//! transaction, and only if the cursor still stands where the batch was read. A worker that
//! crashed before the commit redoes the batch; one that lost a race to another worker finds
//! the cursor moved and writes nothing. Either way no memory is written twice.
//!
//! # Index outbox
//! Every change that the search index must follow (a new, archived, corrected or deleted
//! memory) queues the memory's id in the outbox in the same transaction. The memory indexer
//! drains it: upserts active memories, deletes the points of the others, then clears the
//! entries. A crash in between re-applies the same entries, which is harmless.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::{SessionKey, Tenant};
use crate::memory::{Category, Memory, MemoryStatus, TemplateRef};

/// The cursor name of the L1 extraction worker.
pub const EXTRACT_CONSUMER: &str = "extract";

/// The layer recorded on L1 provenance.
pub const LAYER_L1: &str = "L1";

/// One entry of an artefact's lineage (DESIGN: every L1/L2/L3 artefact has one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProvenanceRecord {
    pub id: Uuid,
    /// The memory this record is about; `None` for a batch that produced nothing or failed.
    pub memory_id: Option<Uuid>,
    pub tenant: Tenant,
    pub session_id: String,
    /// `L1`, `L2`, `L3`.
    pub layer: String,
    /// What happened: `add`, `update`, `merge`, `discard`, `failed`, `correction`, `empty`.
    pub event: String,
    pub template: Option<TemplateRef>,
    /// The LLM model, or `rules`.
    pub model: Option<String>,
    /// The turns the output was made from.
    pub input_message_ids: Vec<Uuid>,
    /// The other memories written by the same batch.
    pub sibling_ids: Vec<Uuid>,
    /// Anything else worth keeping: archived targets, the judge's run, warnings, the error.
    pub detail: serde_json::Value,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
}

/// Everything one extraction batch writes, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchCommit {
    pub tenant: Tenant,
    pub session_id: String,
    /// The extraction cursor the batch was read at; the commit fails with
    /// [`CommitOutcome::CursorMoved`] if it stands elsewhere now.
    pub expected_cursor: i64,
    /// Where the cursor moves: the seq of the last turn of the batch.
    pub new_cursor: i64,
    /// New memories, all `Active`.
    pub memories: Vec<Memory>,
    /// Memories to archive, each with its successor: `(old, new)`.
    pub archive: Vec<(Uuid, Uuid)>,
    pub provenance: Vec<ProvenanceRecord>,
    /// When the batch committed; `updated_at` of archived memories.
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    Committed,
    /// Another run moved the cursor first; nothing was written.
    CursorMoved,
    /// The session or a source turn is gone (the owner was erased); nothing was written.
    SourcesGone,
}

impl BatchCommit {
    /// The distinct turns the batch's new memories cite.
    pub fn source_turns(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .memories
            .iter()
            .flat_map(|m| m.source_message_ids.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// A session's extraction schedule (see `memory::schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScheduleState {
    /// Batches extracted so far in this session, for the warm-up thresholds.
    pub runs: i64,
    /// When the idle flush is due, if one is pending.
    pub idle_due_at: Option<DateTime<Utc>>,
}

/// Filters of a memory listing; `None` means any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryFilter {
    pub category: Option<Category>,
    pub scene: Option<String>,
    pub status: Option<MemoryStatus>,
    pub session_id: Option<String>,
    /// Only the memories of this task; `None`: every memory, with a task or without.
    pub task: Option<String>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
}

/// Where a listing page starts: after this (created_at, id), newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryCursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

/// A user's correction of a memory; `None` fields stay as they are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryPatch {
    pub content: Option<String>,
    pub category: Option<Category>,
    pub priority: Option<u8>,
    /// `Some(None)` clears the scene.
    pub scene: Option<Option<String>>,
    pub occurred_at: Option<Option<String>>,
}

/// One memory id waiting for the index to follow its change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub seq: i64,
    pub memory_id: Uuid,
    pub tenant: Tenant,
}

#[async_trait]
pub trait MemoryStore: Send + Sync + 'static {
    /// Commits one extraction batch (see the module docs). Archiving only touches active
    /// memories of `commit.tenant`. Increments the session's extraction run count and clears
    /// its idle due-time.
    async fn commit_batch(&self, commit: &BatchCommit) -> StoreResult<CommitOutcome>;

    /// Writes provenance records on their own, e.g. for a batch that failed.
    async fn record_provenance(&self, records: &[ProvenanceRecord]) -> StoreResult<()>;

    /// Reads the tenant's memories with these ids (any status), in no particular order.
    async fn memories_by_id(&self, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<Vec<Memory>>;

    /// Lists the tenant's memories, newest first, starting after `after`.
    async fn list_memories(
        &self,
        tenant: &Tenant,
        filter: &MemoryFilter,
        after: Option<MemoryCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Memory>>;

    /// The memories that `id` superseded, directly or through a chain, newest first.
    async fn memory_history(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<Memory>>;

    /// The provenance records about memory `id`, oldest first.
    async fn memory_provenance(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<ProvenanceRecord>>;

    /// Applies a user's correction with its provenance record and queues the index update;
    /// `None` when the tenant has no such memory.
    async fn patch_memory(
        &self,
        tenant: &Tenant,
        id: Uuid,
        patch: &MemoryPatch,
        record: &ProvenanceRecord,
    ) -> StoreResult<Option<Memory>>;

    /// Deletes a memory (its history links and provenance stay) and queues the removal of its
    /// point; `false` when the tenant has no such memory.
    async fn delete_memory(&self, tenant: &Tenant, id: Uuid) -> StoreResult<bool>;

    /// The oldest `limit` outbox entries.
    async fn outbox(&self, limit: u32) -> StoreResult<Vec<OutboxEntry>>;

    /// Queues every active memory of every tenant for the index; returns how many. For when
    /// the index lost its points (a new, empty index).
    async fn requeue_all(&self) -> StoreResult<u64>;

    /// Removes outbox entries once the index follows them.
    async fn clear_outbox(&self, seqs: &[i64]) -> StoreResult<()>;

    /// The session's schedule state (default for a session never scheduled).
    async fn schedule(&self, session: &SessionKey) -> StoreResult<ScheduleState>;

    /// Sets the session's idle due-time, replacing any earlier one: a new turn pushes the idle
    /// flush back. The session must exist.
    async fn set_idle_due(&self, session: &SessionKey, due: DateTime<Utc>) -> StoreResult<()>;

    /// Claims the session's extraction for `owner` until `until`, if no other owner holds an
    /// unexpired lease; claiming again as the same owner extends the lease. Returns whether
    /// `owner` holds it now. The session must exist.
    async fn claim_session(&self, session: &SessionKey, owner: Uuid, until: DateTime<Utc>) -> StoreResult<bool>;

    /// Gives the lease up, if `owner` holds it.
    async fn release_session(&self, session: &SessionKey, owner: Uuid) -> StoreResult<()>;

    /// Sessions whose idle due-time is at or before `now`, oldest due first.
    async fn due_sessions(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<SessionKey>>;

    /// The latest `limit` provenance records of failed batches, newest first, across tenants:
    /// for operators (what is failing, and why). Not tenant-scoped.
    async fn recent_failures(&self, limit: u32) -> StoreResult<Vec<ProvenanceRecord>>;

    /// Counts the tenant's memories by status, for metrics and tests.
    async fn count_memories(&self, tenant: &Tenant, status: MemoryStatus) -> StoreResult<i64>;
}
