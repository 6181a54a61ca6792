//! When a session's turns are extracted (issue 4, "The scheduler"). State lives in the
//! database (`extract_schedule` and the `extract` cursor), so a restart loses no schedule.
//!
//! - **Warm-up**: the first batch runs after 1 pending turn, the second after 2 more, the
//!   third after 4 more, then every `steady_every` (default 5) turns. Early memories make
//!   the second turn of a conversation already benefit from the first.
//! - **Backlog acceleration**: while a full batch (or more) is pending, batches run back to
//!   back.
//! - **Idle flush**: a session with pending turns below the threshold is flushed once it has
//!   been idle for `idle_flush` (60 s). Each new turn pushes the due-time back. The due-time is
//!   a database row; the wake-up is a delayed `extract.due` event (RabbitMQ delay queue, or a
//!   tokio timer in the embedded bus), and the sweep is the safety net for a lost one.
//! - **Shutdown**: [`Scheduler::flush_all`] flushes every pending session within a deadline,
//!   waiting for a session another run holds; what it does not reach is found by the next
//!   start's sweep.

use std::time::{Duration, Instant};

use chrono::Utc;
use uuid::Uuid;

use super::pipeline::{MemoryIndexer, Pipeline, PipelineError};
use crate::bus::{Event, EventBus};
use crate::domain::{SessionKey, Tenant};
use crate::lease;
use crate::metrics;
use crate::store::memory::EXTRACT_CONSUMER;
use crate::store::TranscriptStore;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSettings {
    /// Turns between two batches after the warm-up.
    pub steady_every: u32,
    /// How long a session must be idle before its pending turns are flushed.
    pub idle_flush: Duration,
    /// How long a run's hold on a session outlives its last renewal. A live run renews it every
    /// third of this, however long its LLM call takes, so this is how long a killed worker's
    /// sessions wait before another run takes them.
    pub lease: Duration,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        Self {
            steady_every: 5,
            idle_flush: Duration::from_secs(60),
            lease: Duration::from_secs(30),
        }
    }
}

/// Pending turns needed to run the batch after `runs` batches (see the module docs).
pub fn threshold(runs: i64, steady_every: u32) -> usize {
    let steady = steady_every.max(1) as usize;
    let warm_up = match runs {
        i64::MIN..=0 => 1,
        1 => 2,
        2 => 4,
        _ => steady,
    };
    warm_up.min(steady)
}

/// Why the scheduler looks at a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// New turns arrived: (re)arm the idle timer if a batch does not run.
    NewTurns,
    /// A timer fired or the sweep found the session: arm the timer only if none is set.
    Check,
    /// Extract everything pending now (shutdown).
    Flush,
}

/// Sessions read per sweep query.
const SWEEP_PAGE: u32 = 100;
/// When to look again at a session another run holds.
const CONTENDED_RETRY: Duration = Duration::from_secs(2);

/// How long a shutdown flush waits before it looks again at sessions other runs hold.
const FLUSH_RETRY: Duration = Duration::from_millis(100);

/// How early a wake-up may come and still be re-armed rather than dropped.
const EARLY_WAKE_UP: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Scheduler {
    turns: Arc<dyn TranscriptStore>,
    pipeline: Pipeline,
    indexer: MemoryIndexer,
    bus: Arc<dyn EventBus>,
    settings: ScheduleSettings,
    /// Moves the owner's scene timer after a batch that stored memories (L2/L3 on).
    scenes: Option<crate::scene::run::SceneClock>,
}

impl Scheduler {
    pub fn new(
        turns: Arc<dyn TranscriptStore>,
        pipeline: Pipeline,
        indexer: MemoryIndexer,
        bus: Arc<dyn EventBus>,
        settings: ScheduleSettings,
    ) -> Self {
        Self {
            turns,
            pipeline,
            indexer,
            bus,
            settings,
            scenes: None,
        }
    }

    /// Starts the owner's scene timer after every batch that stores memories.
    pub fn with_scene_clock(mut self, clock: crate::scene::run::SceneClock) -> Self {
        self.scenes = Some(clock);
        self
    }

    pub fn indexer(&self) -> &MemoryIndexer {
        &self.indexer
    }

    /// Runs the batches that are due for the session and returns how many ran; arms the idle
    /// timer for what remains.
    #[tracing::instrument(skip(self, session), fields(session_id = %session.session_id))]
    pub async fn poll(&self, session: &SessionKey, trigger: Trigger) -> Result<usize, PipelineError> {
        let memories = Arc::clone(self.pipeline.memories());
        let (_, pending) = self.turns.pending_turns(EXTRACT_CONSUMER, session, 1).await?;
        if pending.is_empty() {
            return Ok(0);
        }
        // One run per session at a time, across replicas: a second run would make the same LLM
        // call only to lose the commit to the first.
        let owner = Uuid::new_v4();
        if !memories.claim_session(session, owner, self.lease_until()).await? {
            ::metrics::counter!(metrics::EXTRACT_CONTENDED).increment(1);
            // New turns may have come after the holder's last look at the session: look again
            // shortly. Only for new turns, so that a lease left by a dead worker does not make
            // its own wake-ups loop until it expires (the sweep covers that case).
            if trigger == Trigger::NewTurns {
                self.wake_later(session, CONTENDED_RETRY).await;
            }
            return Ok(0);
        }
        let result = tokio::select! {
            result = self.poll_claimed(session, trigger, owner) => result,
            // Another run holds the session now and goes on from the cursor; whatever this one
            // had not committed it would only lose to that run's commit.
            () = self.keep_lease(session, owner) => Ok(0),
        };
        if let Err(e) = memories.release_session(session, owner).await {
            // The lease expires on its own.
            tracing::warn!(session_id = %session.session_id, error = %crate::runtime::error_chain(&e), "failed to release the extraction lease");
        }
        result
    }

    async fn poll_claimed(&self, session: &SessionKey, trigger: Trigger, owner: Uuid) -> Result<usize, PipelineError> {
        let memories = Arc::clone(self.pipeline.memories());
        let batch_turns = self.pipeline.settings().batch_turns;
        let mut batches = 0;
        let mut flushing = trigger == Trigger::Flush;
        loop {
            let (_, pending) = self.turns.pending_turns(EXTRACT_CONSUMER, session, batch_turns).await?;
            if pending.is_empty() {
                break;
            }
            let state = memories.schedule(session).await?;
            let now = Utc::now();
            let idle_due = state.idle_due_at.is_some_and(|due| due <= now);
            let reason = if trigger == Trigger::Flush {
                "shutdown"
            } else if pending.len() >= threshold(state.runs, self.settings.steady_every) {
                "threshold"
            } else {
                "idle"
            };
            // An idle flush empties the session, batch after batch.
            flushing |= idle_due;
            if flushing || reason == "threshold" {
                // Checked again before paying for a batch: a lost lease (it expired and another
                // run took it) means that run goes on from here.
                if !memories.claim_session(session, owner, self.lease_until()).await? {
                    break;
                }
                match self.pipeline.run_batch(session).await? {
                    Some(report) if report.raced => break,
                    Some(report) => {
                        batches += 1;
                        ::metrics::counter!(metrics::EXTRACT_BATCH_REASONS, "reason" => reason).increment(1);
                        if report.added + report.updated + report.merged > 0 {
                            // Into the index before the next batch: dedup finds its candidates
                            // there, and a backlog runs batch after batch, while the owner's
                            // other sessions run beside it. Drained only after the whole run,
                            // a burst of 960 turns kept 112 memories where 67 were distinct.
                            self.drain_memories().await;
                            self.memories_stored(&session.tenant).await;
                        }
                    }
                    None => break,
                }
                continue;
            }
            let arm = match trigger {
                Trigger::NewTurns => true,
                Trigger::Check | Trigger::Flush => state.idle_due_at.is_none(),
            };
            if arm {
                self.arm(session, self.settings.idle_flush).await?;
            } else if let Some(due) = state.idle_due_at {
                // A wake-up a little early (clocks, broker TTL granularity): wake again when
                // due. One that is far off was sent before a newer turn pushed the due-time
                // back; that turn sent its own wake-up, so this one is dropped.
                let remaining = (due - now).to_std().unwrap_or_default();
                if trigger == Trigger::Check && remaining <= EARLY_WAKE_UP {
                    self.wake_later(session, remaining + Duration::from_millis(50)).await;
                }
            }
            break;
        }
        Ok(batches)
    }

    fn lease_until(&self) -> chrono::DateTime<Utc> {
        lease::end_of(self.settings.lease)
    }

    /// Renews the run's lease while it lasts (`lease::keep`); returns only when another run
    /// holds the session. A lease that only outlasted one batch had to be long enough for an
    /// LLM call with its retries (it was 10 minutes), and a killed worker's sessions waited
    /// that long.
    async fn keep_lease(&self, session: &SessionKey, owner: Uuid) {
        let memories = self.pipeline.memories();
        lease::keep(self.settings.lease, "extraction", |until| {
            memories.claim_session(session, owner, until)
        })
        .await;
        tracing::warn!(
            session_id = %session.session_id,
            "lost the extraction lease to another run; stopping this one"
        );
        ::metrics::counter!(metrics::EXTRACT_LEASES_LOST).increment(1);
    }

    async fn drain_memories(&self) {
        if let Err(e) = self.indexer.drain().await {
            // The outbox keeps the work; the sweep applies it.
            tracing::warn!(error = %crate::runtime::error_chain(&e), "memory index update failed; will retry");
        }
    }

    async fn memories_stored(&self, tenant: &Tenant) {
        let Some(clock) = &self.scenes else { return };
        if let Err(e) = clock.on_l1_batch(tenant).await {
            // The memories are stored; only their scene run waits, until the owner's next
            // batch moves the timer.
            tracing::warn!(error = %crate::runtime::error_chain(&e), "failed to move the scene timer");
        }
    }

    async fn arm(&self, session: &SessionKey, after: Duration) -> Result<(), PipelineError> {
        let due = Utc::now() + chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
        self.pipeline.memories().set_idle_due(session, due).await?;
        self.wake_later(session, after).await;
        Ok(())
    }

    async fn wake_later(&self, session: &SessionKey, after: Duration) {
        let event = Event::ExtractDue {
            tenant: session.tenant.clone(),
            session_id: session.session_id.clone(),
        };
        if let Err(e) = self.bus.publish_delayed(&event, after).await {
            // The due-time is stored; the sweep flushes the session when the event is missing.
            tracing::warn!(session_id = %session.session_id, error = %crate::runtime::error_chain(&e), "failed to publish the idle timer");
        }
    }

    /// The safety net: applies the memory outbox, flushes sessions whose idle time is due and
    /// looks at every session with pending turns (an event may have been lost). Returns how
    /// many batches ran.
    ///
    /// Polls no further session once `stop` is cancelled.
    pub async fn sweep(&self, stop: &CancellationToken) -> Result<usize, PipelineError> {
        self.indexer.drain().await?;
        let memories = Arc::clone(self.pipeline.memories());
        let mut batches = 0;
        for due in memories.due_sessions(Utc::now(), SWEEP_PAGE).await? {
            if stop.is_cancelled() {
                return Ok(batches);
            }
            batches += self.poll(&due, Trigger::Check).await?;
        }
        let backlog = self.turns.backlog(EXTRACT_CONSUMER, SWEEP_PAGE).await?;
        for session in &backlog {
            if stop.is_cancelled() {
                return Ok(batches);
            }
            batches += self.poll(&session.key(), Trigger::Check).await?;
        }
        match self.turns.lag(EXTRACT_CONSUMER).await {
            Ok(lag) => {
                ::metrics::gauge!(metrics::EXTRACT_LAG_TURNS).set(lag.turns as f64);
                ::metrics::gauge!(metrics::EXTRACT_LAG_SESSIONS).set(lag.sessions as f64);
            }
            Err(e) => tracing::warn!(error = %crate::runtime::error_chain(&e), "failed to read the extraction lag"),
        }
        Ok(batches)
    }

    /// Extracts everything pending, session by session, until done or `deadline` has passed
    /// (graceful shutdown). Returns how many batches ran.
    pub async fn flush_all(&self, deadline: Duration) -> usize {
        let started = Instant::now();
        let mut batches = 0;
        let work = async {
            loop {
                let backlog = self.turns.backlog(EXTRACT_CONSUMER, SWEEP_PAGE).await?;
                if backlog.is_empty() {
                    return Ok::<(), PipelineError>(());
                }
                let mut progressed = false;
                for session in &backlog {
                    let ran = self.poll(&session.key(), Trigger::Flush).await?;
                    progressed |= ran > 0;
                    batches += ran;
                }
                if !progressed {
                    // Every pending session is held by another run (one still busy with the
                    // last turns, say): look again once it may have let go, until the deadline.
                    tokio::time::sleep(FLUSH_RETRY).await;
                }
            }
        };
        match tokio::time::timeout(deadline, work).await {
            Ok(Ok(())) => tracing::info!(
                batches,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "flushed pending extraction"
            ),
            Ok(Err(e)) => {
                tracing::warn!(batches, error = %crate::runtime::error_chain(&e), "shutdown flush failed; the next start catches up")
            }
            Err(_) => tracing::warn!(batches, "shutdown flush ran out of time; the next start catches up"),
        }
        batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_runs_after_one_two_four_then_steady() {
        let thresholds: Vec<usize> = (0..6).map(|runs| threshold(runs, 5)).collect();
        assert_eq!(thresholds, [1, 2, 4, 5, 5, 5]);
        assert_eq!(threshold(7, 8), 8);
        // A steady value below the warm-up wins.
        assert_eq!(threshold(2, 3), 3);
        assert_eq!(threshold(5, 0), 1);
    }
}
