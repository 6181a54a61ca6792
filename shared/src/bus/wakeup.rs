//! `turn.appended` wake-ups, published off the request path, coalesced per session and
//! gathered into one event per round.
//!
//! Ingest commits the turns, hands the wake-up to [`Wakeups`] and answers; a background task
//! publishes it (with publisher confirms, as every publish). Rounds of publishes start at most
//! once per `interval`: every session appended to since the last round goes out in one
//! [`Event::TurnsAppended`] (up to [`MAX_SESSIONS_PER_EVENT`] sessions each), and further
//! appends to a session already waiting only raise its `last_seq`. Under load the broker and
//! the workers then see a few large units of work a second instead of one per request, and no
//! request waits for the broker. After a quiet spell the first append's round starts at once.
//!
//! A wake-up is a hint: the database holds the turns and every worker's cursor. One that fails,
//! times out, or is dropped because [`MAX_PENDING`] sessions are already waiting delays its
//! sessions until the next backlog sweep; each outcome is counted in
//! `sediment_events_published_total{result}`. [`Wakeups::close`] publishes what is still
//! waiting, so a graceful stop leaves nothing for the sweep.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::{Appended, Event, EventBus};
use crate::domain::Tenant;
use crate::metrics;
use crate::runtime::error_chain;

/// Sessions that may wait for a wake-up at once; past it, new ones are left to the sweep
/// (a broker that stays down must not grow the API's memory without bound).
pub const MAX_PENDING: usize = 100_000;
/// Publishes in flight at once. Confirms are pipelined on one channel, so this is the depth of
/// that pipeline.
const CONCURRENCY: usize = 64;
/// Most sessions in one event, which keeps a message near 100 KB.
pub const MAX_SESSIONS_PER_EVENT: usize = 500;

/// The API's wake-up publisher. Cheap to clone; all clones feed one background task.
#[derive(Clone)]
pub struct Wakeups {
    inner: Arc<Inner>,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

struct Inner {
    bus: Arc<dyn EventBus>,
    timeout: Duration,
    interval: Duration,
    pending: Mutex<HashMap<(Tenant, String), Waiting>>,
    notify: Notify,
    closed: AtomicBool,
    /// Whether the full-queue warning was logged since the last round started.
    warned_full: AtomicBool,
}

struct Waiting {
    last_seq: i64,
    /// The first request's span: the publish of an event whose first session this is, and the
    /// work it wakes, join that trace.
    span: tracing::Span,
}

impl Wakeups {
    /// Starts the background publisher: rounds start at most once per `interval`, and each
    /// publish waits at most `timeout` for its confirm.
    pub fn start(bus: Arc<dyn EventBus>, timeout: Duration, interval: Duration) -> Self {
        let inner = Arc::new(Inner {
            bus,
            timeout,
            interval,
            pending: Mutex::default(),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            warned_full: AtomicBool::new(false),
        });
        let task = tokio::spawn(Arc::clone(&inner).run());
        Self {
            inner,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    /// Schedules a `turn.appended` for the session; returns at once.
    pub fn turn_appended(&self, tenant: Tenant, session_id: String, last_seq: i64) {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            // Only after the HTTP server stopped; the next start's sweep covers it.
            tracing::debug!(session = %session_id, "wake-up after close; left to the sweep");
            return;
        }
        {
            let mut pending = inner.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let len = pending.len();
            match pending.entry((tenant, session_id)) {
                std::collections::hash_map::Entry::Occupied(mut waiting) => {
                    let waiting = waiting.get_mut();
                    waiting.last_seq = waiting.last_seq.max(last_seq);
                    ::metrics::counter!(metrics::EVENTS_COALESCED, "routing_key" => super::TURN_APPENDED).increment(1);
                    return;
                }
                std::collections::hash_map::Entry::Vacant(_) if len >= MAX_PENDING => {
                    drop(pending);
                    // Once per round, not once per request: a broker that stays down would
                    // otherwise flood the log.
                    if !inner.warned_full.swap(true, Ordering::AcqRel) {
                        tracing::warn!(
                            max = MAX_PENDING,
                            "too many sessions wait for a turn.appended publish; new ones are left to the sweep"
                        );
                    }
                    ::metrics::counter!(
                        metrics::EVENTS_PUBLISHED,
                        "routing_key" => super::TURN_APPENDED,
                        "result" => "dropped"
                    )
                    .increment(1);
                    return;
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(Waiting {
                        last_seq,
                        span: tracing::Span::current(),
                    });
                }
            }
        }
        inner.notify.notify_one();
    }

    /// Stops taking wake-ups, publishes those still waiting, and returns when done. Call once
    /// no request can append any more (after the HTTP server stopped).
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.notify.notify_one();
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "the wake-up publisher failed");
            }
        }
    }

    /// Sessions whose wake-up is waiting to be published.
    pub fn pending(&self) -> usize {
        self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Inner {
    async fn run(self: Arc<Self>) {
        loop {
            // A notification sent while a round ran is stored as a permit: none is lost.
            self.notify.notified().await;
            let started = tokio::time::Instant::now();
            let closing = self.closed.load(Ordering::Acquire);
            self.publish_pending().await;
            if closing {
                // Anything that slipped in between the flag and the round goes out too.
                self.publish_pending().await;
                return;
            }
            // What is appended meanwhile gathers for the next round. A close waits this out
            // too: at most one interval.
            tokio::time::sleep_until(started + self.interval).await;
        }
    }

    async fn publish_pending(&self) {
        let mut round: Vec<((Tenant, String), Waiting)> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
                .into_iter()
                .collect();
        self.warned_full.store(false, Ordering::Release);
        let mut events = Vec::with_capacity(round.len().div_ceil(MAX_SESSIONS_PER_EVENT));
        while !round.is_empty() {
            events.push(round.split_off(round.len().saturating_sub(MAX_SESSIONS_PER_EVENT)));
        }
        futures::stream::iter(events)
            .for_each_concurrent(CONCURRENCY, |sessions| async move {
                let span = sessions[0].1.span.clone();
                let sessions = sessions
                    .into_iter()
                    .map(|((tenant, session_id), waiting)| Appended {
                        tenant,
                        session_id,
                        last_seq: waiting.last_seq,
                    })
                    .collect();
                self.publish(sessions).instrument(span).await;
            })
            .await;
    }

    async fn publish(&self, sessions: Vec<Appended>) {
        let count = sessions.len();
        let event = Event::TurnsAppended { sessions };
        let result = match tokio::time::timeout(self.timeout, self.bus.publish(&event)).await {
            Ok(Ok(())) => "ok",
            Ok(Err(e)) => {
                tracing::warn!(sessions = count, error = %error_chain(&e), "failed to publish turns.appended; the sweep will index its sessions");
                "error"
            }
            Err(_) => {
                tracing::warn!(
                    sessions = count,
                    "publishing turns.appended timed out; the sweep will index its sessions"
                );
                "timeout"
            }
        };
        ::metrics::counter!(metrics::EVENTS_PUBLISHED, "routing_key" => event.routing_key(), "result" => result)
            .increment(1);
        ::metrics::histogram!(metrics::WAKEUP_SESSIONS).record(count as f64);
    }
}
