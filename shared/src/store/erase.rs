//! The erase port: the job record of an owner's erasure (`crate::erase` runs it), and the two
//! calls that remove and count the owner's rows in the store's database. Implemented by both
//! backends.
//!
//! An erasure row holds ids and counts, never content, and is kept after the job ends: it is
//! the answer to "was this owner forgotten, and when".

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::Tenant;

/// Where an erasure stands. Every step is idempotent, so a run that resumes after a crash
/// repeats the step it was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErasureStep {
    /// Delete the owner's rows in the database, in one transaction.
    Rows,
    /// Delete the owner's points from the search index.
    Index,
    /// Delete the owner's files (scene and persona documents, snapshots).
    Files,
    /// Count what remains in every store; anything left sends the job back to `Rows`.
    Verify,
    /// Finished: nothing remained, and the audit record is written.
    Done,
}

impl ErasureStep {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rows => "rows",
            Self::Index => "index",
            Self::Files => "files",
            Self::Verify => "verify",
            Self::Done => "done",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        [Self::Rows, Self::Index, Self::Files, Self::Verify, Self::Done]
            .into_iter()
            .find(|s| s.as_str() == value)
    }
}

/// One owner's erasure job.
#[derive(Debug, Clone, PartialEq)]
pub struct Erasure {
    pub id: Uuid,
    pub tenant: Tenant,
    /// Who asked (the audit actor).
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
    pub step: ErasureStep,
    /// Runs that claimed the job; more than one means it resumed.
    pub attempts: i32,
    /// What was deleted, per store (`turns`, `memories`, …, `index_points`, `files`), summed
    /// over every pass.
    pub deleted: BTreeMap<String, u64>,
    /// What the last verification counted, per store; all zero when done.
    pub residue: BTreeMap<String, u64>,
    /// The last failure of a pass, for the operator; cleared when a pass succeeds.
    pub error: Option<String>,
    pub finished_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

impl Erasure {
    /// A new job for `tenant`, at its first step.
    pub fn new(tenant: Tenant, requested_by: String, now: DateTime<Utc>) -> Self {
        Self {
            id: Uuid::new_v4(),
            tenant,
            requested_by,
            requested_at: now,
            step: ErasureStep::Rows,
            attempts: 0,
            deleted: BTreeMap::new(),
            residue: BTreeMap::new(),
            error: None,
            finished_at: None,
            updated_at: now,
        }
    }

    pub fn is_done(&self) -> bool {
        self.step == ErasureStep::Done
    }
}

#[async_trait]
pub trait EraseStore: Send + Sync + 'static {
    /// Records `new`, unless an unfinished erasure of the same owner exists: then returns that
    /// one, so repeating the request never starts a second job.
    async fn start_erasure(&self, new: &Erasure) -> StoreResult<Erasure>;

    /// One erasure by id, of any owner.
    async fn erasure(&self, id: Uuid) -> StoreResult<Option<Erasure>>;

    /// Takes the job's lease until `until` if it is unfinished and its lease is free or expired
    /// at `now`, and counts the attempt; `None` when another run holds it or it is done.
    async fn claim_erasure(
        &self,
        id: Uuid,
        token: Uuid,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<Option<Erasure>>;

    /// Unfinished erasures whose lease is free or expired at `now`, oldest first: the jobs a
    /// crash or a failed pass left behind.
    async fn stalled_erasures(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Uuid>>;

    /// Saves the job's progress (step, counts, error, finish time) if `token` still holds its
    /// lease, and sets the lease's end to `lease_until` (`None` releases it). `false` when the
    /// lease was lost: another run owns the job now.
    async fn save_erasure(
        &self,
        erasure: &Erasure,
        token: Uuid,
        lease_until: Option<DateTime<Utc>>,
    ) -> StoreResult<bool>;

    /// Deletes every row the owner has in this database (turns, sessions with their cursors
    /// and schedules, memories with their history, provenance and outbox entries, compactions,
    /// scenes, persona and their schedules and provenance) in one transaction, and counts the
    /// rows per store. The audit log is kept: it holds ids, never content. An L1 batch that
    /// read the owner's turns before this cannot commit after it (`MemoryStore::commit_batch`
    /// checks its source turns under lock); scene, persona and compaction runs lose their
    /// lease row.
    async fn erase_owner_rows(&self, tenant: &Tenant) -> StoreResult<BTreeMap<String, u64>>;

    /// Counts the owner's rows per store, as `erase_owner_rows` names them.
    async fn owner_rows(&self, tenant: &Tenant) -> StoreResult<BTreeMap<String, u64>>;

    /// Every owner of the team (of one agent of it, when given) with turns, memories, scenes
    /// or a persona, in (agent, user) order: whom erasing a team or an agent erases.
    async fn owners_of(&self, team: &str, agent: Option<&str>) -> StoreResult<Vec<Tenant>>;
}
