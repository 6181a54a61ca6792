//! The consumer runtime shared by every worker, in its own binary (cluster) or inside the API
//! process (embedded).
//!
//! # Contract (STYLE R17)
//! - At most `prefetch` deliveries are in flight; each runs on its own task, so a panic becomes
//!   a failed delivery (retried, then parked), never a dead worker.
//! - A delivery is settled only after the handler returned, i.e. after its side effects are
//!   durable: `Ok` acks, a retryable error retries with backoff, a permanent error or an
//!   undecodable message parks it.
//! - A sweep runs at start and every `sweep_interval`, finding work whose event was lost.
//! - On shutdown: cancel the consumer, let in-flight handlers finish within the deadline, settle
//!   them, return.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::bus::{Appended, Delivery, Event, EventBus, Outcome, WorkerKind};
use crate::domain::SessionKey;
use crate::indexer::{Indexer, IndexerError};
use crate::memory::pipeline::PipelineError;
use crate::memory::schedule::{Scheduler, Trigger};
use crate::metrics;

/// A handler failed; `retryable` decides between retry and park, and `swept` what happens
/// once the retries are used up.
#[derive(Debug, thiserror::Error)]
#[error("handler failed")]
pub struct HandlerError {
    pub retryable: bool,
    /// The work is still in the store, recorded as failed, and the worker's sweep does it
    /// again: a retryable failure is retried as usual but never parked (`Outcome::Defer`),
    /// since a parked copy would only be work for a human.
    pub swept: bool,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Processes one kind of event. Implementations must be idempotent: an event may arrive more
/// than once, late, or never (the sweep covers that).
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    fn kind(&self) -> WorkerKind;
    /// Resolves once every side effect is durable.
    async fn handle(&self, event: &Event) -> Result<(), HandlerError>;
    /// Processes whatever work is pending without an event, item by item, until there is none
    /// or `stop` is cancelled (a shutdown: the item in hand is finished, no other is taken);
    /// returns how many items it did.
    async fn sweep(&self, stop: &CancellationToken) -> Result<usize, HandlerError>;
}

/// The L0 index worker's handler.
pub struct IndexHandler(pub Indexer);

impl From<IndexerError> for HandlerError {
    fn from(e: IndexerError) -> Self {
        Self {
            retryable: e.is_retryable(),
            // A turn is indexed once the cursor passes it, and the sweep indexes whatever lies
            // past the cursor: a parked wake-up would only be work for a human (an index volume
            // full for longer than the retries, about 15 s, would park every wake-up meanwhile).
            swept: true,
            source: Box::new(e),
        }
    }
}

#[async_trait]
impl Handler for IndexHandler {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Index
    }

    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        match event {
            Event::TurnAppended { tenant, session_id, .. } => {
                let session = SessionKey::new(tenant.clone(), session_id.clone());
                self.0.index_session(&session).await?;
                Ok(())
            }
            Event::TurnsAppended { sessions } => {
                let keys: Vec<SessionKey> = sessions.iter().map(Appended::key).collect();
                self.0.index_sessions(&keys).await?;
                Ok(())
            }
            // Not routed to the index queue; nothing to index.
            Event::ExtractDue { .. }
            | Event::CompactionRequested { .. }
            | Event::SceneDue { .. }
            | Event::PersonaDue { .. } => Ok(()),
        }
    }

    async fn sweep(&self, stop: &CancellationToken) -> Result<usize, HandlerError> {
        Ok(self.0.sweep(stop).await?)
    }
}

/// The L1 extraction worker's handler.
pub struct ExtractHandler(pub Scheduler);

/// Sessions of one `turns.appended` event that the extract worker polls at once.
const EXTRACT_SESSIONS_AT_ONCE: usize = 8;

impl From<PipelineError> for HandlerError {
    fn from(e: PipelineError) -> Self {
        Self {
            retryable: e.is_retryable(),
            // The model failed the batch: its turns stay pending past the cursor and the
            // failure is recorded, so the sweep extracts them once the model answers; parked,
            // every wake-up of an outage longer than the attempts waited for a human.
            swept: matches!(e, PipelineError::Extract { .. }),
            source: Box::new(e),
        }
    }
}

#[async_trait]
impl Handler for ExtractHandler {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Extract
    }

    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        match event {
            Event::TurnAppended { tenant, session_id, .. } => {
                let session = SessionKey::new(tenant.clone(), session_id.clone());
                self.0.poll(&session, Trigger::NewTurns).await?;
                Ok(())
            }
            Event::TurnsAppended { sessions } => {
                use futures::StreamExt as _;
                // A poll may wait for the LLM, so sessions run side by side, as separate
                // deliveries would.
                let scheduler = &self.0;
                let keys = sessions.iter().map(Appended::key);
                let failures: Vec<PipelineError> = futures::stream::iter(keys)
                    .map(|key| async move { scheduler.poll(&key, Trigger::NewTurns).await })
                    .buffer_unordered(EXTRACT_SESSIONS_AT_ONCE)
                    .filter_map(|result| async move { result.err() })
                    .collect()
                    .await;
                match deciding_failure(failures) {
                    Some(e) => Err(e.into()),
                    None => Ok(()),
                }
            }
            Event::ExtractDue { tenant, session_id } => {
                let session = SessionKey::new(tenant.clone(), session_id.clone());
                self.0.poll(&session, Trigger::Check).await?;
                Ok(())
            }
            // Not routed to the extract queue.
            Event::CompactionRequested { .. } | Event::SceneDue { .. } | Event::PersonaDue { .. } => Ok(()),
        }
    }

    async fn sweep(&self, stop: &CancellationToken) -> Result<usize, HandlerError> {
        Ok(self.0.sweep(stop).await?)
    }
}

/// The failure that settles a delivery whose sessions were all polled, `None` when none failed.
/// A retry polls them all again, and those that succeeded find nothing left to do; so a failure
/// that may pass later decides over one that never will, which would park the message and
/// leave the session that may pass to the sweep.
fn deciding_failure(mut failures: Vec<PipelineError>) -> Option<PipelineError> {
    let at = failures.iter().position(PipelineError::is_retryable).unwrap_or(0);
    (!failures.is_empty()).then(|| failures.swap_remove(at))
}

#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub prefetch: u16,
    pub sweep_interval: Duration,
    pub shutdown_deadline: Duration,
}

/// Liveness of a consumer loop, for `/healthz`: the unix time (ms) of its last turn.
#[derive(Debug, Default)]
pub struct Heartbeat(AtomicI64);

impl Heartbeat {
    pub fn beat(&self) {
        self.0.store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
    }

    /// How long since the loop last turned; `None` before it started.
    pub fn age(&self) -> Option<Duration> {
        let last = self.0.load(Ordering::Relaxed);
        (last > 0).then(|| Duration::from_millis((chrono::Utc::now().timestamp_millis() - last).max(0) as u64))
    }
}

/// Runs the consumer until `shutdown` is cancelled. Fails only if it cannot subscribe at all.
pub async fn run_consumer(
    bus: Arc<dyn EventBus>,
    handler: Arc<dyn Handler>,
    settings: ConsumerSettings,
    heartbeat: Arc<Heartbeat>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    use anyhow::Context as _;

    let kind = handler.kind();
    let worker = kind.as_str();
    let mut subscription = bus
        .subscribe(kind, settings.prefetch)
        .await
        .with_context(|| format!("subscribe to the {worker} queue"))?;
    tracing::info!(worker, prefetch = settings.prefetch, "consumer started");

    let mut in_flight: JoinSet<(Delivery, Outcome)> = JoinSet::new();
    let mut sweep_timer = tokio::time::interval(settings.sweep_interval);
    sweep_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweeping: Option<tokio::task::JoinHandle<()>> = None;
    let mut heartbeat_timer = tokio::time::interval(Duration::from_secs(1));
    heartbeat.beat();
    // While the broker is gone, the loop goes on with its sweeps and heartbeats and subscribes
    // again when `resubscribe_at` comes: the sweep keeps the work moving meanwhile (the store and
    // the index are up), and a liveness probe does not take a worker that waits for the broker
    // for a wedged one.
    let mut connected = true;
    let mut backoff = RESUBSCRIBE_FIRST;
    let resubscribe_at = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(resubscribe_at);

    loop {
        let capacity = in_flight.len() < settings.prefetch as usize;
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            Some(done) = in_flight.join_next() => settle(&mut *subscription, worker, done).await,
            () = &mut resubscribe_at, if !connected => {
                match tokio::time::timeout(RESUBSCRIBE_TIMEOUT, bus.subscribe(kind, settings.prefetch)).await {
                    Ok(Ok(fresh)) => {
                        tracing::info!(worker, "consumer resubscribed");
                        subscription = fresh;
                        connected = true;
                        backoff = RESUBSCRIBE_FIRST;
                    }
                    failed => {
                        let error = match failed {
                            Ok(Err(e)) => error_chain(&e),
                            _ => format!("no answer within {RESUBSCRIBE_TIMEOUT:?}"),
                        };
                        tracing::warn!(worker, error, retry_in_ms = backoff.as_millis() as u64, "failed to resubscribe");
                        resubscribe_at.as_mut().reset(tokio::time::Instant::now() + backoff);
                        backoff = (backoff * 2).min(RESUBSCRIBE_MAX);
                    }
                }
            }
            delivery = subscription.next(), if capacity && connected => {
                let Some(delivery) = delivery else {
                    // The connection dropped. Finish what is in hand (settling on a dead
                    // channel fails, and the broker redelivers), then subscribe again.
                    tracing::warn!(worker, in_flight = in_flight.len(), "subscription closed; resubscribing");
                    while let Some(done) = in_flight.join_next().await {
                        settle(&mut *subscription, worker, done).await;
                    }
                    connected = false;
                    resubscribe_at.as_mut().reset(tokio::time::Instant::now());
                    continue;
                };
                let handler = Arc::clone(&handler);
                in_flight.spawn(async move {
                    use futures::FutureExt as _;
                    let outcome = std::panic::AssertUnwindSafe(process(&*handler, &delivery))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|_| {
                            ::metrics::counter!(metrics::HANDLER_PANICS, "worker" => handler.kind().as_str()).increment(1);
                            tracing::error!(worker = handler.kind().as_str(), message_id = %delivery.message_id, "handler panicked; will retry");
                            Outcome::Retry
                        });
                    (delivery, outcome)
                });
            }
            _ = sweep_timer.tick() => {
                // One sweep at a time; a slow sweep must not stack up behind itself.
                if sweeping.as_ref().is_none_or(|h| h.is_finished()) {
                    let handler = Arc::clone(&handler);
                    let bus = Arc::clone(&bus);
                    let stop = shutdown.clone();
                    sweeping = Some(tokio::spawn(async move {
                        // Every process that consumes a queue keeps its gauges fresh, whether or
                        // not an API process is scraped.
                        crate::ops::sample_queues(&*bus, &[handler.kind()]).await;
                        match handler.sweep(&stop).await {
                            Ok(0) => {}
                            Ok(n) => tracing::info!(worker = handler.kind().as_str(), items = n, "sweep processed backlog"),
                            Err(e) => tracing::warn!(worker = handler.kind().as_str(), error = %error_chain(&e), "sweep failed"),
                        }
                    }));
                }
            }
            _ = heartbeat_timer.tick() => heartbeat.beat(),
        }
    }

    tracing::info!(worker, in_flight = in_flight.len(), "consumer draining");
    if let Err(e) = subscription.cancel().await {
        tracing::warn!(worker, error = %error_chain(&e), "failed to cancel consumer");
    }
    let deadline = tokio::time::sleep(settings.shutdown_deadline);
    tokio::pin!(deadline);
    while !in_flight.is_empty() {
        tokio::select! {
            Some(done) = in_flight.join_next() => settle(&mut *subscription, worker, done).await,
            () = &mut deadline => {
                // Unsettled deliveries go back to the broker when the channel closes.
                tracing::warn!(worker, abandoned = in_flight.len(), "drain deadline passed");
                in_flight.abort_all();
                break;
            }
        }
    }
    if let Some(mut sweep) = sweeping.filter(|h| !h.is_finished()) {
        // A sweep runs work as a delivery does (a compaction job, a scene run, an extraction
        // batch), under a lease: aborted, what it holds stays claimed until the lease runs out
        // and is done again by the next process. Found by the chaos scenario rolling-restart.
        // It takes no new item once the shutdown began, so this waits for one item at most.
        tracing::info!(worker, "waiting for the sweep in progress");
        tokio::select! {
            _ = &mut sweep => {}
            () = &mut deadline => {
                tracing::warn!(worker, "drain deadline passed with the sweep still running; its leases run out");
                sweep.abort();
            }
        }
    }
    tracing::info!(worker, "consumer stopped");
    Ok(())
}

/// The first wait before subscribing again after a failed attempt; it doubles up to
/// [`RESUBSCRIBE_MAX`].
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(500);
/// A worker is back at most this long after its broker is; an attempt costs the broker one
/// refused connection. At 30 s a broker gone 16 s left its workers idle up to 16 s more.
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(5);
/// How long one attempt to subscribe may take: a broker that accepts the connection and never
/// answers must not hold the loop.
const RESUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

async fn process(handler: &dyn Handler, delivery: &Delivery) -> Outcome {
    let worker = handler.kind().as_str();
    let event = match &delivery.event {
        Ok(event) => event,
        Err(reason) => {
            tracing::warn!(worker, message_id = %delivery.message_id, reason, "undecodable message; parking it");
            return Outcome::Reject;
        }
    };
    let span =
        crate::telemetry::propagate::consume_span(worker, &delivery.message_id, delivery.attempt, &delivery.trace);
    let result = handler.handle(event).instrument(span.clone()).await;
    if result.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    match result {
        Ok(()) => Outcome::Ack,
        Err(e) if e.retryable && e.swept => {
            tracing::warn!(worker, message_id = %delivery.message_id, attempt = delivery.attempt, error = %error_chain(&e), "handler failed; will retry, and the sweep will if the retries run out");
            Outcome::Defer
        }
        Err(e) if e.retryable => {
            tracing::warn!(worker, message_id = %delivery.message_id, attempt = delivery.attempt, error = %error_chain(&e), "handler failed; will retry");
            Outcome::Retry
        }
        Err(e) => {
            tracing::error!(worker, message_id = %delivery.message_id, error = %error_chain(&e), "handler failed permanently; parking message");
            Outcome::Reject
        }
    }
}

async fn settle(
    subscription: &mut dyn crate::bus::Subscription,
    worker: &'static str,
    done: Result<(Delivery, Outcome), tokio::task::JoinError>,
) {
    let (delivery, outcome) = match done {
        Ok(done) => done,
        Err(e) => {
            // Only an abort gets here (panics are caught inside the task); the broker
            // redelivers an unsettled message when the channel closes.
            tracing::warn!(worker, error = %e, "handler task ended without settling");
            return;
        }
    };
    let label = match outcome {
        Outcome::Ack => "ack",
        Outcome::Retry => "retry",
        Outcome::Defer => "defer",
        Outcome::Reject => "reject",
    };
    ::metrics::counter!(metrics::EVENTS_CONSUMED, "worker" => worker, "outcome" => label).increment(1);
    if let Err(e) = subscription.settle(delivery, outcome).await {
        tracing::warn!(worker, error = %error_chain(&e), "failed to settle delivery; the broker will redeliver it");
    }
}

/// Formats an error with its whole source chain, once (STYLE R9, R12).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::EngineError;

    fn failed(retryable: bool) -> PipelineError {
        let source = if retryable {
            EngineError::Unavailable("timed out".into())
        } else {
            EngineError::Rejected("401".into())
        };
        PipelineError::Extract { mode: "llm", source }
    }

    #[test]
    fn a_failure_that_may_pass_later_settles_a_many_session_delivery() {
        assert!(deciding_failure(Vec::new()).is_none());
        let decided = deciding_failure(vec![failed(false), failed(true), failed(false)]).expect("a failure");
        assert!(decided.is_retryable(), "{decided:?}");
        let decided = deciding_failure(vec![failed(false), failed(false)]).expect("a failure");
        assert!(!decided.is_retryable(), "{decided:?}");
        let decided = deciding_failure(vec![failed(true)]).expect("a failure");
        assert!(decided.is_retryable(), "{decided:?}");
    }
}
