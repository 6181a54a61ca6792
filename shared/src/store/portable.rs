//! The portability port: what an owner's export reads beyond the other ports' listings, and the
//! one transaction an import writes. Implemented by both backends; `crate::portable` builds the
//! stream on top of it.
//!
//! # Import writes what the target lacks, and never overwrites
//! Every row keeps its id. A row the target already holds for the same owner (the same id, and
//! for a turn the same session and seq) is left as it is, so a second import of one stream
//! writes nothing. A row whose id the target holds for another owner, or a turn whose (session,
//! seq) the owner holds as another turn, is a conflict: the whole import is refused and nothing
//! is written. Session ids are the owner's own, so another owner's session of the same id is no
//! conflict.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::memory::ProvenanceRecord;
use super::scene::{ArtifactProvenance, SceneRow};
use super::StoreResult;
use crate::domain::{StoredTurn, Tenant};
use crate::memory::Memory;

/// One of the owner's sessions, as an export carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: String,
    pub created_at: DateTime<Utc>,
    pub last_seq: i64,
    pub reset_at: Option<DateTime<Utc>>,
    /// The extraction cursor: turns up to this seq were distilled into the memories the export
    /// carries, so an import does not extract them a second time.
    pub extracted_through: i64,
}

/// The owner's persona build state, without the instance-local fields (lease, signal, object
/// key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonaRecord {
    pub version: i64,
    pub built_at: Option<DateTime<Utc>>,
    pub memories_at_build: i64,
    pub scenes_at_build: i64,
    pub scene_watermark: Option<DateTime<Utc>>,
    /// Where the import put the document; `None` when it has none.
    pub object_key: Option<String>,
}

/// Everything one import writes for one owner. Every row's tenant must be the importing owner.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnerRows {
    pub sessions: Vec<SessionRecord>,
    pub turns: Vec<StoredTurn>,
    pub memories: Vec<Memory>,
    pub memory_provenance: Vec<ProvenanceRecord>,
    /// Rows as given: the object key must already name the target's copy of the document.
    pub scenes: Vec<SceneRow>,
    pub persona: Option<PersonaRecord>,
    pub artifact_provenance: Vec<ArtifactProvenance>,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    /// Committed: how many rows of each kind were new (the rest were already there).
    Imported(BTreeMap<String, u64>),
    /// Refused, nothing written: what clashed.
    Conflict(String),
}

/// Where a provenance page starts: after this (started_at, id), oldest first.
pub type ProvenanceCursor = (DateTime<Utc>, Uuid);

#[async_trait]
pub trait PortableStore: Send + Sync + 'static {
    /// The owner's sessions, in id order.
    async fn owner_sessions(&self, tenant: &Tenant) -> StoreResult<Vec<SessionRecord>>;

    /// The owner's L1 provenance records (those about a memory and those of batches that made
    /// none), oldest first, after `after`.
    async fn owner_memory_provenance(
        &self,
        tenant: &Tenant,
        after: Option<ProvenanceCursor>,
        limit: u32,
    ) -> StoreResult<Vec<ProvenanceRecord>>;

    /// The owner's L2 and L3 provenance records, oldest first, after `after`.
    async fn owner_artifact_provenance(
        &self,
        tenant: &Tenant,
        after: Option<ProvenanceCursor>,
        limit: u32,
    ) -> StoreResult<Vec<ArtifactProvenance>>;

    /// Writes `rows` for `tenant` in one transaction (see the module docs): sessions and their
    /// turns, memories (active ones queued for the index), provenance, scenes, and the persona
    /// unless the target has built one. Each session's extraction cursor moves up to its
    /// `extracted_through`; its index cursor is left alone, so the index worker indexes the new
    /// turns. A session's `last_seq` becomes the larger of the stored and the imported one.
    async fn import_owner(&self, tenant: &Tenant, rows: OwnerRows) -> StoreResult<ImportOutcome>;
}

/// Finds the first row of `expected` that the target does not hold as the owner's after the
/// inserts: `held` are the ids the owner holds (with, for turns, their session and seq).
pub(crate) fn first_missing<'a, K: Ord + Clone + 'a>(
    expected: impl IntoIterator<Item = &'a K>,
    held: &std::collections::BTreeSet<K>,
) -> Option<K> {
    expected.into_iter().find(|key| !held.contains(*key)).cloned()
}
