//! One scene run per owner: claim the owner, let the editor work on the memories that arrived
//! since the last run with every write snapshotted first (copy-on-write, `journal`), check
//! what it did, then commit — or put the folder back as it was.
//!
//! # Crash safety
//! ```text
//!  claim lease ─▶ edit files (each first write journaled) ─▶ commit rows + timer ─▶ drop journal
//!                 (crash: the lease expires; the next claim sees
//!                  the abandoned token and restores its journal)
//! ```
//! The lease is short (`SEDIMENT_SCENE_LEASE_MS`, 30 s) and renewed every third of it while the
//! run works (`lease::keep`), so a worker that dies holds its owner one lease at most. The
//! database commit is fenced by the lease token, and nothing is written, rollbacks included,
//! past half a lease after the last renewal the store took ([`WriteDeadline`]), so a stalled
//! run cannot overwrite a newer run's files. A commit releases the lease, so a journal left
//! behind by a crash after the commit is never restored, only garbage.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use super::doc::SceneDoc;
use super::editor::{memory_refs, EditError, SceneEditor};
use super::journal::{self, Journal};
use super::timer::{self, SceneTimer, SceneTimerSettings};
use super::workspace::{core_content_lost, Touch, Workspace, WriteDeadline};
use crate::bus::{Event, EventBus, WorkerKind};
use crate::domain::Tenant;
use crate::files::{FileError, FileStore};
use crate::lease;
use crate::memory::{Memory, MemoryStatus};
use crate::metrics;
use crate::runtime::{error_chain, Handler, HandlerError};
use crate::store::memory::{MemoryCursor, MemoryFilter, MemoryStore};
use crate::store::scene::{ArtifactProvenance, Lease, SceneRow, SceneRunCommit, SceneSchedule, SceneStore, LAYER_L2};
use crate::store::StoreError;
use tokio_util::sync::CancellationToken;

/// How scene runs behave; see the configuration table of `helm/README.md`.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneSettings {
    /// Most active scenes per owner (seed 001: 15).
    pub cap: usize,
    pub timer: SceneTimerSettings,
    /// How long a run holds its owner without renewing; it renews every third while it
    /// works, and stops writing half a lease after the last renewal.
    pub lease: Duration,
    /// The longest a run may write for, however often it renews (the half of the 10-minute
    /// lease runs had before they renewed).
    pub max_run: Duration,
    /// Most LLM steps per run.
    pub max_steps: usize,
    /// Most memories given to one run; the rest go to a run right after.
    pub max_memories: usize,
    /// When a failed run is tried again.
    pub retry_after: Duration,
}

impl Default for SceneSettings {
    fn default() -> Self {
        Self {
            cap: 15,
            timer: SceneTimerSettings::default(),
            lease: Duration::from_secs(30),
            max_run: Duration::from_secs(300),
            max_steps: 8,
            max_memories: 200,
            retry_after: Duration::from_secs(120),
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum SceneError {
    #[error("store failed")]
    Store(#[from] StoreError),
    #[error("file store failed")]
    Files(#[from] FileError),
    #[error("scene editing failed")]
    Edit(#[from] EditError),
    #[error("the run was rolled back: {0}")]
    RolledBack(String),
    #[error("the run passed its write deadline before it could roll back; the next run restores the folder")]
    PastDeadline,
}

impl SceneError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::Files(e) => e.is_retryable(),
            // The timer retries a failed run itself (`retry_after`); a redelivery would only
            // find the owner not due.
            Self::Edit(_) | Self::RolledBack(_) | Self::PastDeadline => false,
        }
    }
}

/// What a call to [`SceneRunner::run_if_due`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Not due yet (a wake-up was re-armed for the due-time, if any).
    NotDue,
    /// Another run holds the owner.
    Busy,
    /// Due, but no new memory: only the timer moved.
    Nothing,
    /// Scenes were edited and committed.
    Edited { scenes: usize, memories: usize },
    /// The run's lease was lost before its commit; the newer run redoes the work.
    LeaseLost,
}

/// Moves an owner's scene timer and sends its wake-ups: what the extract side needs after an
/// L1 batch, and what the scene runner uses after a run.
#[derive(Clone)]
pub struct SceneClock {
    scenes: Arc<dyn SceneStore>,
    bus: Arc<dyn EventBus>,
    timer: SceneTimerSettings,
}

impl SceneClock {
    pub fn new(scenes: Arc<dyn SceneStore>, bus: Arc<dyn EventBus>, timer: SceneTimerSettings) -> Self {
        Self { scenes, bus, timer }
    }

    /// An L1 batch of `tenant` committed memories: the scene timer may only move earlier
    /// (`timer::on_l1_batch`); the persona worker looks at its memory threshold.
    pub async fn on_l1_batch(&self, tenant: &Tenant) -> Result<(), StoreError> {
        let now = Utc::now();
        let settings = self.timer.clone();
        let schedule = self
            .scenes
            .update_scene_schedule(tenant, &move |s| {
                with_timer(&s, timer::on_l1_batch(as_timer(&s), now, &settings))
            })
            .await?;
        if let Some(due) = schedule.due_at {
            self.wake(tenant, due, now).await;
        }
        publish(&*self.bus, &Event::PersonaDue { tenant: tenant.clone() }).await;
        Ok(())
    }

    /// Sends a wake-up for `due` (rounded up to a delay bucket, see [`wake_delay`]).
    pub async fn wake(&self, tenant: &Tenant, due: DateTime<Utc>, now: DateTime<Utc>) {
        let delay = wake_delay((due - now).to_std().unwrap_or_default());
        let event = Event::SceneDue { tenant: tenant.clone() };
        if let Err(e) = self.bus.publish_delayed(&event, delay).await {
            // The due-time is stored; the sweep finds the owner.
            tracing::warn!(error = %error_chain(&e), "failed to publish the scene timer");
        }
    }
}

/// The delays wake-ups are rounded up to. RabbitMQ keeps one delay queue per delay (so none
/// waits behind a longer one); a handful of buckets keeps that a handful of queues. A wake-up
/// that comes early re-arms itself for the rest.
const WAKE_BUCKETS_MS: &[u64] = &[
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 90_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
    3_600_000,
];

/// The smallest bucket not shorter than `delay` (the largest for anything longer).
pub fn wake_delay(delay: Duration) -> Duration {
    let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    let bucket = WAKE_BUCKETS_MS
        .iter()
        .copied()
        .find(|&b| b >= ms)
        .unwrap_or(WAKE_BUCKETS_MS[WAKE_BUCKETS_MS.len() - 1]);
    Duration::from_millis(bucket)
}

fn as_timer(s: &SceneSchedule) -> SceneTimer {
    SceneTimer {
        due_at: s.due_at,
        last_run_at: s.last_run_at,
        last_l1_at: s.last_l1_at,
    }
}

fn with_timer(s: &SceneSchedule, t: SceneTimer) -> SceneSchedule {
    SceneSchedule {
        due_at: t.due_at,
        last_run_at: t.last_run_at,
        last_l1_at: t.last_l1_at,
        memory_watermark: s.memory_watermark,
    }
}

async fn publish(bus: &dyn EventBus, event: &Event) {
    if let Err(e) = bus.publish(event).await {
        // A hint only: the persona sweep evaluates every owner.
        tracing::warn!(routing_key = event.routing_key(), error = %error_chain(&e), "failed to publish");
    }
}

/// Runs scene editing for owners whose timer is due.
#[derive(Clone)]
pub struct SceneRunner {
    memories: Arc<dyn MemoryStore>,
    scenes: Arc<dyn SceneStore>,
    files: Arc<dyn FileStore>,
    bus: Arc<dyn EventBus>,
    editor: Arc<dyn SceneEditor>,
    settings: SceneSettings,
}

/// Owners looked at per sweep page.
const SWEEP_PAGE: u32 = 100;
/// Memories read per listing page.
const MEMORY_PAGE: u32 = 500;
/// The first wait before trying a failed rollback again; it doubles up to
/// [`ROLLBACK_RETRY_MAX`].
const ROLLBACK_RETRY_FIRST: Duration = Duration::from_millis(500);
const ROLLBACK_RETRY_MAX: Duration = Duration::from_secs(30);

impl SceneRunner {
    pub fn new(
        memories: Arc<dyn MemoryStore>,
        scenes: Arc<dyn SceneStore>,
        files: Arc<dyn FileStore>,
        bus: Arc<dyn EventBus>,
        editor: Arc<dyn SceneEditor>,
        settings: SceneSettings,
    ) -> Self {
        Self {
            memories,
            scenes,
            files,
            bus,
            editor,
            settings,
        }
    }

    pub fn clock(&self) -> SceneClock {
        SceneClock::new(self.scenes.clone(), self.bus.clone(), self.settings.timer.clone())
    }

    pub fn settings(&self) -> &SceneSettings {
        &self.settings
    }

    /// Runs the owner's scene editing if its timer is due; re-arms the wake-up otherwise.
    #[tracing::instrument(skip(self), fields(team = %tenant.team, agent = %tenant.agent, user = %tenant.user))]
    pub async fn run_if_due(&self, tenant: &Tenant) -> Result<RunOutcome, SceneError> {
        let schedule = self.scenes.scene_schedule(tenant).await?;
        let now = Utc::now();
        if !timer::is_due(&as_timer(&schedule), now) {
            if let Some(due) = schedule.due_at {
                self.clock().wake(tenant, due, now).await;
            }
            return Ok(RunOutcome::NotDue);
        }
        self.run(tenant).await
    }

    /// Runs the owner's scene editing now, whatever the timer says (the timer still moves as
    /// after any run).
    pub async fn run(&self, tenant: &Tenant) -> Result<RunOutcome, SceneError> {
        // Read before the claim: the lease runs from no later than this.
        let started = Instant::now();
        let now = Utc::now();
        let Some(lease) = self.scenes.claim_scene_run(tenant, now, self.settings.lease).await? else {
            ::metrics::counter!(metrics::SCENE_RUNS, "result" => "busy").increment(1);
            return Ok(RunOutcome::Busy);
        };
        let deadline = WriteDeadline::new(started, self.settings.lease, self.settings.max_run);
        // Set while the folder may hold uncommitted edits that no rollback has undone.
        let mut dirty = false;
        let result = {
            let work = self.run_claimed(tenant, &lease, &deadline, started, &mut dirty);
            tokio::pin!(work);
            tokio::select! {
                result = &mut work => result,
                // Another run holds the owner now: this one writes nothing more, and its commit
                // fails; let it get there, rolling back what it can.
                () = self.keep_lease(tenant, lease.token, &deadline) => work.await,
            }
        };
        let label = match &result {
            Ok(RunOutcome::Edited { .. }) => "edited",
            Ok(RunOutcome::Nothing) => "nothing",
            Ok(RunOutcome::LeaseLost) => "lease_lost",
            Ok(RunOutcome::NotDue | RunOutcome::Busy) => "busy",
            Err(SceneError::RolledBack(_)) => "rolled_back",
            Err(_) => "failed",
        };
        ::metrics::counter!(metrics::SCENE_RUNS, "result" => label).increment(1);
        ::metrics::histogram!(metrics::SCENE_RUN_SECONDS, "result" => label).record(started.elapsed().as_secs_f64());
        if result.is_err() {
            self.after_failure(tenant, &lease, &deadline, dirty).await;
        }
        result
    }

    /// Renews the run's lease while it lasts (`lease::keep`), moving its write deadline with
    /// each renewal the store took, until the run's longest time: a run stuck past it lets its
    /// lease run out. Returns only once another run holds the owner, with every write stopped.
    async fn keep_lease(&self, tenant: &Tenant, token: Uuid, deadline: &WriteDeadline) {
        let scenes = &self.scenes;
        let renew = lease::keep(self.settings.lease, "scene", |until| {
            let sent = Instant::now();
            async move {
                let held = scenes.renew_scene_run(tenant, token, until).await?;
                if held {
                    deadline.renewed(sent);
                }
                Ok::<_, StoreError>(held)
            }
        });
        tokio::select! {
            () = renew => {}
            () = tokio::time::sleep_until(deadline.last_edit().into()) => {
                tracing::warn!("scene run still going at its longest time; its lease runs out");
                std::future::pending::<()>().await;
            }
        }
        // Whatever the clocks say: another run may be writing.
        deadline.end_now();
        tracing::warn!("lost the scene lease to another run; this one stops writing and its commit will fail");
    }

    async fn run_claimed(
        &self,
        tenant: &Tenant,
        lease: &Lease,
        deadline: &WriteDeadline,
        started: Instant,
        dirty: &mut bool,
    ) -> Result<RunOutcome, SceneError> {
        if let Some(abandoned) = lease.abandoned {
            self.recover(tenant, abandoned).await?;
        }
        let schedule = self.scenes.scene_schedule(tenant).await?;
        let (memories, backlog) = self.new_memories(tenant, schedule.memory_watermark).await?;
        if memories.is_empty() {
            let commit = self.commit_for(&schedule, lease, None, false, Vec::new(), Vec::new(), false);
            return Ok(if self.scenes.commit_scene_run(tenant, lease, &commit).await? {
                RunOutcome::Nothing
            } else {
                RunOutcome::LeaseLost
            });
        }

        let rows = self.scenes.scenes(tenant, false).await?;
        let mut journal = Journal::new(self.files.clone(), tenant, lease.token);
        let docs = self.documents(rows, &mut journal).await?;
        let mut workspace = Workspace::new(
            tenant.clone(),
            self.files.clone(),
            docs,
            self.settings.cap,
            lease.claimed_at,
            deadline.clone(),
            journal,
        );
        // From here the folder may hold edits that only the journal can undo.
        *dirty = true;
        let edit_started = Utc::now();
        let outcome = match self.editor.edit(&mut workspace, &memories).await {
            Ok(outcome) => outcome,
            Err(e) => {
                let reason = format!("{} editor failed: {}", self.editor.mode(), error_chain(&e));
                self.roll_back(tenant, lease, deadline, &reason, &memories, edit_started)
                    .await?;
                *dirty = false;
                return Err(SceneError::Edit(e));
            }
        };
        if let Some(reason) = workspace.entries().iter().find_map(|e| match (e.touch, &e.before) {
            (Some(Touch::Updated), Some(before)) => core_content_lost(before, &e.doc),
            _ => None,
        }) {
            self.roll_back(tenant, lease, deadline, &reason, &memories, edit_started)
                .await?;
            *dirty = false;
            return Err(SceneError::RolledBack(reason));
        }

        let watermark = memories.iter().map(|m| m.created_at).max();
        let inputs = memory_refs(&memories);
        let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let mut rows = Vec::new();
        let mut provenance = Vec::new();
        for entry in workspace.entries() {
            let Some(touch) = entry.touch else { continue };
            let mut input_refs = inputs.clone();
            input_refs.extend(entry.merged_from.iter().map(|id| format!("scene:{id}")));
            provenance.push(ArtifactProvenance {
                id: Uuid::new_v4(),
                tenant: tenant.clone(),
                layer: LAYER_L2.to_owned(),
                scene_id: Some(entry.row.id),
                event: touch.as_str().to_owned(),
                template: Some(outcome.run.template.clone()),
                model: Some(outcome.run.model.clone()),
                input_refs,
                output_refs: vec![format!("scene:{}@{}", entry.row.id, entry.row.version)],
                detail: json!({
                    "object_key": entry.row.object_key,
                    "steps": outcome.steps,
                    "refusals": outcome.refusals,
                    "persona_worthy": outcome.persona_worthy,
                }),
                started_at: edit_started,
                duration_ms,
            });
            ::metrics::counter!(metrics::SCENE_EDITS, "op" => touch.as_str()).increment(1);
            rows.push(entry.row.clone());
        }
        let edited = rows.len();
        let commit = self.commit_for(
            &schedule,
            lease,
            watermark,
            backlog,
            rows,
            provenance,
            outcome.persona_worthy,
        );
        if !self.scenes.commit_scene_run(tenant, lease, &commit).await? {
            tracing::warn!("scene run lost its lease before the commit; the newer run redoes it");
            return Ok(RunOutcome::LeaseLost);
        }
        *dirty = false;
        ::metrics::histogram!(metrics::SCENE_RUN_WRITES).record(workspace.writes() as f64);
        self.drop_journal(tenant, lease.token).await;
        tracing::info!(
            memories = memories.len(),
            scenes = edited,
            writes = workspace.writes(),
            steps = outcome.steps,
            refusals = outcome.refusals,
            mode = self.editor.mode(),
            "scene run committed"
        );
        if let Some(due) = commit.schedule.due_at {
            self.clock().wake(tenant, due, Utc::now()).await;
        }
        if edited > 0 {
            publish(&*self.bus, &Event::PersonaDue { tenant: tenant.clone() }).await;
        }
        Ok(RunOutcome::Edited {
            scenes: edited,
            memories: memories.len(),
        })
    }

    /// The commit of a run that ends now; a backlog of memories makes the next run due at once.
    #[allow(clippy::too_many_arguments)]
    fn commit_for(
        &self,
        schedule: &SceneSchedule,
        lease: &Lease,
        watermark: Option<DateTime<Utc>>,
        backlog: bool,
        scenes: Vec<SceneRow>,
        provenance: Vec<ArtifactProvenance>,
        persona_signal: bool,
    ) -> SceneRunCommit {
        let finished = Utc::now();
        let mut next = with_timer(
            schedule,
            timer::on_run_finished(as_timer(schedule), lease.claimed_at, finished, &self.settings.timer),
        );
        if watermark.is_some() {
            next.memory_watermark = watermark;
        }
        if backlog {
            next.due_at = Some(finished);
        }
        SceneRunCommit {
            scenes,
            schedule: next,
            after_l1: self.settings.timer.after_l1,
            min_gap: self.settings.timer.min_gap,
            persona_signal,
            provenance,
        }
    }

    /// Active memories created after `watermark`, oldest first, at most `max_memories`; and
    /// whether more are waiting.
    async fn new_memories(
        &self,
        tenant: &Tenant,
        watermark: Option<DateTime<Utc>>,
    ) -> Result<(Vec<Memory>, bool), SceneError> {
        let filter = MemoryFilter {
            status: Some(MemoryStatus::Active),
            created_after: watermark,
            ..MemoryFilter::default()
        };
        let mut all = Vec::new();
        let mut after: Option<MemoryCursor> = None;
        loop {
            let page = self.memories.list_memories(tenant, &filter, after, MEMORY_PAGE).await?;
            let full = page.len() == MEMORY_PAGE as usize;
            after = page.last().map(|m| MemoryCursor {
                created_at: m.created_at,
                id: m.id,
            });
            all.extend(page);
            if !full {
                break;
            }
        }
        all.sort_by_key(|m| (m.created_at, m.id));
        // Never split memories of one instant across runs: the watermark is a time.
        let mut take = all.len().min(self.settings.max_memories);
        while take > 0 && take < all.len() && all[take].created_at == all[take - 1].created_at {
            take += 1;
        }
        let backlog = take < all.len();
        all.truncate(take);
        Ok((all, backlog))
    }

    /// The active scenes with their documents. A document that is missing or unreadable is
    /// rebuilt from its row, so the editor can rewrite it instead of the owner losing it.
    async fn documents(
        &self,
        rows: Vec<SceneRow>,
        journal: &mut Journal,
    ) -> Result<Vec<(SceneRow, SceneDoc)>, SceneError> {
        let mut docs = Vec::with_capacity(rows.len());
        for row in rows {
            let bytes = self.files.get(&row.object_key).await?;
            journal.know(&row.object_key, bytes.clone());
            let doc = match bytes {
                Some(bytes) => match SceneDoc::parse(&String::from_utf8_lossy(&bytes)) {
                    Ok(doc) => Some(doc),
                    Err(e) => {
                        tracing::error!(scene = %row.id, key = %row.object_key, error = %e, "scene document unreadable; rebuilt from its index row");
                        None
                    }
                },
                None => {
                    tracing::error!(scene = %row.id, key = %row.object_key, "scene document missing; rebuilt from its index row");
                    None
                }
            };
            let doc = doc.unwrap_or_else(|| SceneDoc {
                name: row.name.clone(),
                created: row.created_at,
                updated: row.updated_at,
                tags: row.tags.clone(),
                key_times: Vec::new(),
                overview: row.overview.clone(),
                events: Vec::new(),
                conclusions: Vec::new(),
                open_questions: Vec::new(),
                persona_impact: Vec::new(),
            });
            docs.push((row, doc));
        }
        Ok(docs)
    }

    /// Puts the folder back as it was before this run and records why.
    async fn roll_back(
        &self,
        tenant: &Tenant,
        lease: &Lease,
        deadline: &WriteDeadline,
        reason: &str,
        memories: &[Memory],
        started_at: DateTime<Utc>,
    ) -> Result<(), SceneError> {
        if deadline.lease_passed() {
            // A newer run may hold the owner; the rollback is its claim's to do.
            tracing::warn!(
                reason,
                "scene run failed past its write deadline; the next run restores the folder"
            );
            return Err(SceneError::PastDeadline);
        }
        tracing::warn!(reason, "scene run rolled back");
        ::metrics::counter!(metrics::SCENE_ROLLBACKS).increment(1);
        journal::restore(&*self.files, tenant, lease.token).await?;
        let record = ArtifactProvenance {
            id: Uuid::new_v4(),
            tenant: tenant.clone(),
            layer: LAYER_L2.to_owned(),
            scene_id: None,
            event: "rollback".to_owned(),
            template: None,
            model: Some(self.editor.mode().to_owned()),
            input_refs: memory_refs(memories),
            output_refs: Vec::new(),
            detail: json!({ "reason": reason }),
            started_at,
            duration_ms: (Utc::now() - started_at).num_milliseconds(),
        };
        if let Err(e) = self.scenes.record_artifact_provenance(&[record]).await {
            tracing::warn!(error = %error_chain(&e), "failed to record the rollback");
        }
        Ok(())
    }

    /// A run that died mid-edit: put back what it wrote.
    async fn recover(&self, tenant: &Tenant, abandoned: Uuid) -> Result<(), SceneError> {
        let restored = journal::restore(&*self.files, tenant, abandoned).await?;
        if restored > 0 {
            tracing::warn!(%abandoned, restored, "restored the scene folder of a run that died mid-edit");
            ::metrics::counter!(metrics::SCENE_ROLLBACKS).increment(1);
        }
        Ok(())
    }

    async fn drop_journal(&self, tenant: &Tenant, token: Uuid) {
        if let Err(e) = journal::discard(&*self.files, tenant, token).await {
            // Garbage only: a committed run's journal is never restored.
            tracing::warn!(error = %error_chain(&e), "failed to remove a scene run's journal");
        }
    }

    /// After a failed run: retry later (the timer's failure rule) and give the owner back —
    /// unless the folder may still hold the run's edits (its rollback failed too): then the
    /// owner is given back once a rollback tried again succeeds, or, if none does by half the
    /// write deadline, the lease is left to expire and the next claim restores the folder.
    async fn after_failure(&self, tenant: &Tenant, lease: &Lease, deadline: &WriteDeadline, dirty: bool) {
        let now = Utc::now();
        let retry = self.settings.retry_after;
        let moved = self
            .scenes
            .update_scene_schedule(tenant, &move |s| {
                with_timer(&s, timer::on_run_failed(as_timer(&s), now, retry))
            })
            .await;
        match moved {
            Ok(schedule) => {
                if let Some(due) = schedule.due_at {
                    self.clock().wake(tenant, due, now).await;
                }
            }
            Err(e) => tracing::warn!(error = %error_chain(&e), "failed to move the scene timer after a failure"),
        }
        if dirty {
            tracing::error!("scene run failed and could not roll back; trying again while the lease holds");
            self.spawn_rollback(tenant.clone(), *lease, deadline.clone());
            return;
        }
        if let Err(e) = self.scenes.release_scene_run(tenant, lease.token).await {
            tracing::warn!(error = %error_chain(&e), "failed to release the scene lease; it expires on its own");
        }
    }

    /// Tries the rollback of a failed run again (its file store was down) until it succeeds,
    /// then gives the owner back; once the lease is no longer safe (no renewal moves it any
    /// more) it stops, and the claim after the lease restores the folder.
    fn spawn_rollback(&self, tenant: Tenant, lease: Lease, deadline: WriteDeadline) {
        let files = self.files.clone();
        let scenes = self.scenes.clone();
        tokio::spawn(async move {
            let mut wait = ROLLBACK_RETRY_FIRST;
            loop {
                tokio::time::sleep(wait).await;
                if deadline.lease_passed() {
                    tracing::warn!(
                        "scene rollback still failing at the run's write deadline; the next claim restores the folder"
                    );
                    return;
                }
                match journal::restore(&*files, &tenant, lease.token).await {
                    Ok(restored) => {
                        tracing::info!(restored, "rolled back a failed scene run");
                        ::metrics::counter!(metrics::SCENE_ROLLBACKS).increment(1);
                        if let Err(e) = scenes.release_scene_run(&tenant, lease.token).await {
                            tracing::warn!(error = %error_chain(&e), "failed to release the scene lease; it expires on its own");
                        }
                        return;
                    }
                    Err(_) => wait = (wait * 2).min(ROLLBACK_RETRY_MAX),
                }
            }
        });
    }

    /// The safety net: schedules owners whose memories have no run scheduled (the timer update
    /// after their batch failed), then runs every owner whose timer is due (a wake-up may
    /// have been lost).
    ///
    /// Takes no further owner once `stop` is cancelled.
    pub async fn sweep(&self, stop: &CancellationToken) -> Result<usize, SceneError> {
        let clock = self.clock();
        for tenant in self.scenes.unscheduled_scene_owners(Utc::now(), SWEEP_PAGE).await? {
            tracing::warn!(team = %tenant.team, agent = %tenant.agent, user = %tenant.user, "memories without a scheduled scene run; scheduling one");
            ::metrics::counter!(metrics::SCENE_TIMER_REPAIRS).increment(1);
            clock.on_l1_batch(&tenant).await?;
        }
        let mut runs = 0;
        for tenant in self.scenes.due_scene_owners(Utc::now(), SWEEP_PAGE).await? {
            if stop.is_cancelled() {
                break;
            }
            match self.run(&tenant).await {
                Ok(RunOutcome::Edited { .. }) => runs += 1,
                Ok(_) => {}
                // One owner's failure is recorded and retried by its timer; go on with the rest.
                Err(e) => tracing::warn!(error = %error_chain(&e), "scene run failed in the sweep"),
            }
        }
        Ok(runs)
    }
}

/// The scene worker's handler: `scene.due` events and the sweep.
pub struct SceneHandler(pub SceneRunner);

impl From<SceneError> for HandlerError {
    fn from(e: SceneError) -> Self {
        Self {
            retryable: e.is_retryable(),
            // A failed run moved the owner's timer (`retry_after`), and the sweep runs every
            // owner that is due: a wake-up that used up its attempts is not work for a human.
            swept: true,
            source: Box::new(e),
        }
    }
}

#[async_trait]
impl Handler for SceneHandler {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Scene
    }

    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        match event {
            Event::SceneDue { tenant } => match self.0.run_if_due(tenant).await {
                Ok(_) => Ok(()),
                // Rolled back (or left for the next claim to restore) and rescheduled by the
                // timer: the event is done.
                Err(SceneError::RolledBack(_) | SceneError::Edit(_) | SceneError::PastDeadline) => Ok(()),
                Err(e) => Err(e.into()),
            },
            // Not routed to the scene queue.
            Event::TurnAppended { .. }
            | Event::TurnsAppended { .. }
            | Event::ExtractDue { .. }
            | Event::CompactionRequested { .. }
            | Event::PersonaDue { .. } => Ok(()),
        }
    }

    async fn sweep(&self, stop: &CancellationToken) -> Result<usize, HandlerError> {
        Ok(self.0.sweep(stop).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_delays_round_up_to_a_few_buckets() {
        assert_eq!(wake_delay(Duration::ZERO), Duration::from_millis(100));
        assert_eq!(wake_delay(Duration::from_millis(101)), Duration::from_millis(250));
        assert_eq!(wake_delay(Duration::from_secs(90)), Duration::from_secs(90));
        assert_eq!(wake_delay(Duration::from_secs(91)), Duration::from_secs(120));
        assert_eq!(wake_delay(Duration::from_secs(7200)), Duration::from_secs(3600));
    }
}
