//! The scene and persona store port: the database side of L2 scenes and the L3 persona (seed
//! 001, 第三层 / 第四层). The documents themselves live in the file store (S3 or a local
//! directory); the database keeps what must be queried or kept consistent: the scene index rows,
//! each owner's scene timer, the persona's build state, the two per-owner leases, and the
//! provenance of every L2/L3 artefact.
//!
//! Backends: `PostgresStore` (cluster) and `SqliteStore` (embedded), both tested by
//! `scene_testsuite`.
//!
//! # One editor per owner
//! A scene run and a persona build each hold a lease row (token + expiry) per owner, so at most
//! one of each runs per owner across every worker replica. Every write of a run names its token;
//! a worker whose lease expired (it stalled and another claimed the owner) writes nothing.
//!
//! # Time
//! Every call that compares with the clock takes `now` from the caller, so tests can move time.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::compaction::lease_end;
use super::{truncate_to_micros, StoreResult};
use crate::domain::Tenant;
use crate::memory::TemplateRef;

/// The provenance layer of scene edits.
pub const LAYER_L2: &str = "L2";
/// The provenance layer of persona builds.
pub const LAYER_L3: &str = "L3";

/// Whether a scene is live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SceneStatus {
    Active,
    /// Soft-deleted (by the editor, or merged into another scene): not listed, not recalled,
    /// its row kept for provenance.
    Deleted,
}

impl SceneStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Deleted => "deleted",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "active" => Some(Self::Active),
            "deleted" => Some(Self::Deleted),
            _ => None,
        }
    }
}

/// A scene's index row. The document is the object at `object_key`.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneRow {
    pub id: Uuid,
    pub tenant: Tenant,
    pub name: String,
    /// One line, for the navigation list that recall returns.
    pub overview: String,
    pub tags: Vec<String>,
    pub object_key: String,
    /// 1 when created, +1 per edit.
    pub version: i64,
    pub status: SceneStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An owner's scene timer (see `scene::timer` for the rules that move it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SceneSchedule {
    /// When the next scene run is due; `None`: nothing pending.
    pub due_at: Option<DateTime<Utc>>,
    pub last_run_at: Option<DateTime<Utc>>,
    /// When the last L1 batch of this owner committed.
    pub last_l1_at: Option<DateTime<Utc>>,
    /// Memories created after this were not yet given to a scene run.
    pub memory_watermark: Option<DateTime<Utc>>,
}

/// A worker's hold on an owner's scene run or persona build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub token: Uuid,
    /// The `now` of the claim.
    pub claimed_at: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// The token of an earlier holder whose lease expired without a commit or release (it
    /// crashed or stalled mid-run): its run may have left half-edited files to roll back.
    pub abandoned: Option<Uuid>,
}

/// The lineage of one L2 or L3 artefact change (or of a failed run).
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactProvenance {
    pub id: Uuid,
    pub tenant: Tenant,
    /// [`LAYER_L2`] or [`LAYER_L3`].
    pub layer: String,
    /// The scene the record is about; `None` for the persona and for run-level records.
    pub scene_id: Option<Uuid>,
    /// `create`, `update`, `merge`, `delete`, `build`, `rollback`, `failed`.
    pub event: String,
    pub template: Option<TemplateRef>,
    /// The LLM model, or `rules`.
    pub model: Option<String>,
    /// What the output was made from: `memory:<uuid>` and `scene:<uuid>@<version>` refs.
    pub input_refs: Vec<String>,
    /// What the run wrote: object keys with their version, e.g. `scene:<uuid>@3`.
    pub output_refs: Vec<String>,
    /// Anything else worth keeping: the trigger, a rollback's reason, the error.
    pub detail: serde_json::Value,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
}

/// Everything a finished scene run writes, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneRunCommit {
    /// New and changed rows (a soft delete is a row with `Deleted`). Each row's `version` is
    /// the new version; rows are written as given.
    pub scenes: Vec<SceneRow>,
    /// The schedule after the run (computed by `scene::timer::on_run_finished`); written only
    /// if no L1 batch arrived since `lease.claimed_at`, otherwise `due_at` becomes
    /// `max(last_l1_at + after_l1, finished_at + min_gap)` — see `after_l1`/`min_gap` — where
    /// `last_l1_at` is the stored one and `finished_at` is `schedule.last_run_at`; the other
    /// fields are then written as given, but `last_l1_at` keeps the stored (later) time.
    pub schedule: SceneSchedule,
    pub after_l1: Duration,
    pub min_gap: Duration,
    /// A scene edit flagged content worth lifting into the persona.
    pub persona_signal: bool,
    pub provenance: Vec<ArtifactProvenance>,
}

/// An owner's persona build state. The document is the object at `object_key`.
#[derive(Debug, Clone, PartialEq)]
pub struct PersonaRow {
    pub tenant: Tenant,
    /// 0 until the first build; +1 per build.
    pub version: i64,
    pub object_key: Option<String>,
    pub built_at: Option<DateTime<Utc>>,
    /// The owner's active memory count when the last build ran.
    pub memories_at_build: i64,
    /// The owner's active scene count when the last build ran.
    pub scenes_at_build: i64,
    /// The latest scene `updated_at` the last build saw: scenes updated after it are the
    /// input of an incremental build.
    pub scene_watermark: Option<DateTime<Utc>>,
    /// When a scene edit last asked for a persona update that no build has served yet.
    pub signal_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// What a finished persona build writes, atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct PersonaCommit {
    pub object_key: String,
    pub built_at: DateTime<Utc>,
    pub memories_at_build: i64,
    pub scenes_at_build: i64,
    pub scene_watermark: Option<DateTime<Utc>>,
    pub provenance: ArtifactProvenance,
}

#[async_trait]
pub trait SceneStore: Send + Sync + 'static {
    /// The owner's scenes, most recently updated first; deleted ones only when asked.
    async fn scenes(&self, tenant: &Tenant, include_deleted: bool) -> StoreResult<Vec<SceneRow>>;

    /// One scene of the owner (any status); `None` if absent or another owner's.
    async fn scene(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Option<SceneRow>>;

    /// The owner's scene timer; all `None` if the owner never had one.
    async fn scene_schedule(&self, tenant: &Tenant) -> StoreResult<SceneSchedule>;

    /// Atomically reads the owner's schedule (default if none), applies `update`, stores and
    /// returns the result. Concurrent calls for one owner serialize, so no update is lost.
    /// Leaves the lease alone. `update` may be called more than once (a backend may retry on
    /// contention), so it must depend on its argument only.
    async fn update_scene_schedule(
        &self,
        tenant: &Tenant,
        update: &(dyn Fn(SceneSchedule) -> SceneSchedule + Send + Sync),
    ) -> StoreResult<SceneSchedule>;

    /// Owners whose scene run is due at `now` and whose scene lease is free, earliest first.
    async fn due_scene_owners(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Tenant>>;

    /// Owners with an L1 batch newer than their last scene run but no run scheduled, whose
    /// lease is free: the timer update after that batch failed (every memory commit records
    /// `last_l1_at` itself, in its transaction). The scene sweep schedules them.
    async fn unscheduled_scene_owners(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Tenant>>;

    /// Takes the owner's scene lease until `now + lease` unless a live one is held; `None`
    /// when it is. Of concurrent claims at most one succeeds. The lease's `abandoned` is the
    /// token this claim displaced: an expired lease that was neither committed nor released
    /// (each clears the token), reported to this one claim only.
    async fn claim_scene_run(&self, tenant: &Tenant, now: DateTime<Utc>, lease: Duration)
        -> StoreResult<Option<Lease>>;

    /// Gives the lease back (only with its token; a no-op otherwise).
    async fn release_scene_run(&self, tenant: &Tenant, token: Uuid) -> StoreResult<()>;

    /// Extends the scene lease held with `token` to `until`, keeping its claim time: `false`,
    /// and nothing changed, when the token is no longer the owner's (released, committed, or
    /// expired and claimed by another run). A lease that expired but that nobody claimed since
    /// is renewed: no other run can have started in between.
    async fn renew_scene_run(&self, tenant: &Tenant, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool>;

    /// Writes a finished run in one transaction — rows, provenance, schedule (see
    /// [`SceneRunCommit::schedule`]), the persona signal — and releases the lease. Returns
    /// `false` and writes nothing when `lease` is no longer held (expired and claimed by
    /// another run, or released). A lease that expired but that nobody claimed since still
    /// holds: its token is the owner's last, so no other run can have written in between.
    ///
    /// The persona signal's time is `schedule.last_run_at` (the run's end; the store's clock
    /// when it is `None`); of two pending signals the later is kept. Every row and provenance
    /// record must be `tenant`'s, and a row's id must not be another owner's scene: otherwise
    /// the call fails (`Backend`) and writes nothing.
    async fn commit_scene_run(&self, tenant: &Tenant, lease: &Lease, commit: &SceneRunCommit) -> StoreResult<bool>;

    /// Writes provenance records on their own (a failed or rolled-back run), all or none.
    /// Idempotent on each record's id.
    async fn record_artifact_provenance(&self, records: &[ArtifactProvenance]) -> StoreResult<()>;

    /// The owner's L2/L3 provenance, newest first; only for one scene when `scene_id` is set.
    async fn artifact_provenance(
        &self,
        tenant: &Tenant,
        layer: &str,
        scene_id: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<ArtifactProvenance>>;

    /// The owner's persona row; `None` if never built nor signalled (a claim alone makes no
    /// persona).
    async fn persona(&self, tenant: &Tenant) -> StoreResult<Option<PersonaRow>>;

    /// Takes the owner's persona lease (same rules as [`SceneStore::claim_scene_run`]).
    async fn claim_persona(&self, tenant: &Tenant, now: DateTime<Utc>, lease: Duration) -> StoreResult<Option<Lease>>;

    /// Gives the persona lease back (only with its token).
    async fn release_persona(&self, tenant: &Tenant, token: Uuid) -> StoreResult<()>;

    /// Extends the persona lease held with `token` to `until`: `false`, and nothing changed,
    /// when the token is no longer the owner's (released, committed, or expired and claimed by
    /// another build). A lease that expired but that nobody claimed since is renewed: no other
    /// build can have started in between.
    async fn renew_persona(&self, tenant: &Tenant, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool>;

    /// Writes a finished build in one transaction: version + 1, the build state, the
    /// provenance; clears `signal_at` if it is not later than `lease.claimed_at` (a signal that
    /// arrived during the build stays pending); releases the lease. `None` and nothing written
    /// when the lease is no longer held (same rule as [`SceneStore::commit_scene_run`]). The
    /// provenance record must be `tenant`'s (`Backend` error otherwise).
    async fn commit_persona(
        &self,
        tenant: &Tenant,
        lease: &Lease,
        commit: &PersonaCommit,
    ) -> StoreResult<Option<PersonaRow>>;

    /// Owners with a scene schedule or a persona row (any: claimed, signalled or built), in
    /// (team, agent, user) order — the backend's text order — strictly after `after`: the
    /// persona sweep's work list.
    async fn layer_owners(&self, after: Option<&Tenant>, limit: u32) -> StoreResult<Vec<Tenant>>;
}

/// The schedule [`SceneStore::commit_scene_run`] writes: the given one, unless an L1 batch
/// committed after the claim (`stored_last_l1` is later than `claimed_at`); then the run did not
/// see that batch, so another run is due after it, no sooner than `min_gap` after this one.
pub(crate) fn schedule_after_run(
    commit: &SceneRunCommit,
    stored_last_l1: Option<DateTime<Utc>>,
    claimed_at: DateTime<Utc>,
) -> SceneSchedule {
    let given = truncate_schedule(&commit.schedule);
    let Some(l1) = stored_last_l1.filter(|l1| *l1 > claimed_at) else {
        return given;
    };
    let after_l1 = lease_end(l1, commit.after_l1);
    let due_at = match given.last_run_at {
        Some(finished) => after_l1.max(lease_end(finished, commit.min_gap)),
        None => after_l1,
    };
    SceneSchedule {
        due_at: Some(truncate_to_micros(due_at)),
        last_l1_at: given.last_l1_at.max(Some(l1)),
        ..given
    }
}

/// When a scene run's persona signal is stamped: the run's end, or the store's clock.
pub(crate) fn signal_time(commit: &SceneRunCommit) -> DateTime<Utc> {
    truncate_to_micros(commit.schedule.last_run_at.unwrap_or_else(Utc::now))
}

/// The schedule as both backends store it (whole microseconds).
pub(crate) fn truncate_schedule(schedule: &SceneSchedule) -> SceneSchedule {
    SceneSchedule {
        due_at: schedule.due_at.map(truncate_to_micros),
        last_run_at: schedule.last_run_at.map(truncate_to_micros),
        last_l1_at: schedule.last_l1_at.map(truncate_to_micros),
        memory_watermark: schedule.memory_watermark.map(truncate_to_micros),
    }
}

/// Refuses a commit that carries another owner's rows or records (a caller bug that would
/// otherwise write across tenants under one owner's lease).
pub(crate) fn check_owner<'a>(
    tenant: &Tenant,
    scenes: &[SceneRow],
    provenance: impl IntoIterator<Item = &'a ArtifactProvenance>,
) -> Result<(), String> {
    if let Some(row) = scenes.iter().find(|row| row.tenant != *tenant) {
        return Err(format!("scene {} is not the committing owner's", row.id));
    }
    if let Some(record) = provenance.into_iter().find(|record| record.tenant != *tenant) {
        return Err(format!("provenance {} is not the committing owner's", record.id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + seconds, 0)
            .single()
            .expect("a valid time")
    }

    fn commit(last_run_at: Option<DateTime<Utc>>, min_gap: u64) -> SceneRunCommit {
        SceneRunCommit {
            scenes: Vec::new(),
            schedule: SceneSchedule {
                due_at: None,
                last_run_at,
                last_l1_at: Some(at(0)),
                memory_watermark: Some(at(5)),
            },
            after_l1: Duration::from_secs(90),
            min_gap: Duration::from_secs(min_gap),
            persona_signal: false,
            provenance: Vec::new(),
        }
    }

    #[test]
    fn without_a_later_l1_the_given_schedule_is_written() {
        let c = commit(Some(at(200)), 900);
        assert_eq!(schedule_after_run(&c, Some(at(0)), at(100)), c.schedule);
        assert_eq!(
            schedule_after_run(&c, Some(at(100)), at(100)),
            c.schedule,
            "at the claim is not after it"
        );
        assert_eq!(schedule_after_run(&c, None, at(100)), c.schedule);
    }

    #[test]
    fn a_later_l1_makes_the_next_run_due() {
        let gap_wins = schedule_after_run(&commit(Some(at(200)), 900), Some(at(150)), at(100));
        assert_eq!(gap_wins.due_at, Some(at(1100)));
        assert_eq!(gap_wins.last_l1_at, Some(at(150)), "the stored, later L1 time is kept");
        assert_eq!(gap_wins.last_run_at, Some(at(200)));
        assert_eq!(gap_wins.memory_watermark, Some(at(5)));
        let l1_wins = schedule_after_run(&commit(Some(at(200)), 10), Some(at(150)), at(100));
        assert_eq!(l1_wins.due_at, Some(at(240)));
        let no_finish = schedule_after_run(&commit(None, 900), Some(at(150)), at(100));
        assert_eq!(no_finish.due_at, Some(at(240)));
    }
}
