//! In-process event bus for the embedded deployment.
//!
//! One queue per [`WorkerKind`] is created with the bus, so an event published before any worker
//! subscribes waits for it, and publishing never blocks ingest; a full queue (see
//! [`LocalBus::limiting`]) drops new events instead. Nothing survives the
//! process: that is fine because events are hints and every worker sweeps its backlog from the
//! store at start. Retries wait out their backoff in a spawned task (lost if the runtime shuts
//! down first, like every other in-memory message); parked messages are kept in memory until
//! replayed ([`EventBus::replay_parked`]) or the process ends.
//!
//! Several subscriptions to one kind share its queue and compete for messages, as consumers of
//! one RabbitMQ queue do. Routing uses the same topic rules as the AMQP topic exchange.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::telemetry::propagate::{publish_span, TraceContext};

use super::{
    retry_backoff, type_tag, BusError, BusResult, Delivery, DeliveryToken, Event, EventBus, Outcome, QueueStats,
    Replayed, Subscription, WorkerKind, DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_DELAY,
};

const PARKED_REJECTED: &str = "rejected";
const PARKED_EXHAUSTED: &str = "max attempts reached";
/// `messaging.system` of this bus's spans.
const SYSTEM: &str = "sediment.local";

/// The embedded [`EventBus`]: in-process queues with the same retry and parking rules as
/// RabbitMQ. Cheap to clone; clones share the queues.
#[derive(Clone)]
pub struct LocalBus {
    queues: Arc<HashMap<WorkerKind, Arc<KindQueue>>>,
    /// Kinds no worker will ever consume in this process (e.g. extraction switched off): their
    /// queues take no events, which would otherwise pile up in memory for good.
    muted: Arc<std::collections::HashSet<WorkerKind>>,
    max_attempts: u32,
    retry_delay: Duration,
    /// Messages one queue holds before new events for it are dropped (see [`LocalBus::limiting`]).
    limit: u64,
}

/// [`LocalBus::limiting`]'s default: about 2 MB of events per queue.
pub const LOCAL_QUEUE_LIMIT: u64 = 10_000;

impl LocalBus {
    /// Creates the queue of every worker kind. A message is delivered at most `max_attempts`
    /// times (0 is taken as 1) before it is parked; the backoff after the n-th failed attempt
    /// is `retry_delay * 2^(n-1)`, capped.
    pub fn new(max_attempts: u32, retry_delay: Duration) -> LocalBus {
        let queues = WorkerKind::ALL
            .iter()
            .map(|&kind| (kind, Arc::new(KindQueue::new(kind))));
        LocalBus {
            queues: Arc::new(queues.collect()),
            muted: Arc::default(),
            max_attempts: max_attempts.max(1),
            retry_delay,
            limit: LOCAL_QUEUE_LIMIT,
        }
    }

    /// The same bus, whose queues each hold at most `limit` messages (0 is taken as 1): an event
    /// for a full queue is dropped and counted (`sediment_events_dropped_total`). Every event is
    /// a hint whose work the store holds, and the workers' sweeps find what a dropped one
    /// pointed at; without a limit, an overload that lasts grows the queues, and the memory they
    /// hold, for as long as it lasts (a 40 s burst at ten times the drain queued 629 events).
    pub fn limiting(mut self, limit: u64) -> LocalBus {
        self.limit = limit.max(1);
        self
    }

    /// The same bus, whose queues of `kinds` take no events (see `muted`).
    pub fn muting(mut self, kinds: &[WorkerKind]) -> LocalBus {
        self.muted = Arc::new(kinds.iter().copied().collect());
        self
    }

    /// Number of messages of `kind` that were parked (rejected or out of attempts) since the
    /// bus was created.
    pub async fn parked_count(&self, kind: WorkerKind) -> BusResult<u64> {
        let parked = self.queue(kind)?.parked.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(parked.len() as u64)
    }

    /// Enqueues a copy of `event` for every kind bound to its routing key.
    fn route(&self, event: &Event, message_id: &str, trace: &TraceContext) {
        let routing_key = event.routing_key();
        for queue in self.queues.values() {
            if self.muted.contains(&queue.kind) {
                continue;
            }
            if queue
                .kind
                .routing_keys()
                .iter()
                .any(|pattern| topic_matches(pattern, routing_key))
            {
                if queue.ready.load(Ordering::SeqCst) >= self.limit {
                    ::metrics::counter!(crate::metrics::EVENTS_DROPPED, "queue" => queue.kind.as_str()).increment(1);
                    tracing::debug!(
                        queue = queue.kind.as_str(),
                        routing_key,
                        "queue full; event dropped, the sweep covers it"
                    );
                    continue;
                }
                queue.enqueue(Message {
                    event: event.clone(),
                    message_id: message_id.to_owned(),
                    attempt: 1,
                    trace: trace.clone(),
                });
            }
        }
    }

    fn queue(&self, kind: WorkerKind) -> BusResult<&Arc<KindQueue>> {
        self.queues
            .get(&kind)
            .ok_or_else(|| BusError::Backend(format!("no local queue for worker kind {}", kind.as_str()).into()))
    }
}

impl Default for LocalBus {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_DELAY)
    }
}

impl fmt::Debug for LocalBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalBus")
            .field("max_attempts", &self.max_attempts)
            .field("retry_delay", &self.retry_delay)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl EventBus for LocalBus {
    /// Enqueues a copy for every kind bound to the event's routing key; never blocks. An event
    /// no kind listens to is dropped, as the topic exchange would drop it.
    async fn publish(&self, event: &Event) -> BusResult<()> {
        let message_id = uuid::Uuid::new_v4().to_string();
        let span = publish_span(event.routing_key(), SYSTEM);
        span.record("messaging.message.id", message_id.as_str());
        self.route(event, &message_id, &TraceContext::of(&span));
        Ok(())
    }

    async fn publish_delayed(&self, event: &Event, delay: Duration) -> BusResult<()> {
        let bus = self.clone();
        let event = event.clone();
        let message_id = uuid::Uuid::new_v4().to_string();
        // The send happens now, as on RabbitMQ; the wait is the message's.
        let span = publish_span(event.routing_key(), SYSTEM);
        span.record("messaging.message.id", message_id.as_str());
        let trace = TraceContext::of(&span);
        drop(span);
        // Lost if the process stops first, like every in-memory message: the sweep covers it.
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            bus.route(&event, &message_id, &trace);
        });
        Ok(())
    }

    async fn subscribe(&self, kind: WorkerKind, prefetch: u16) -> BusResult<Box<dyn Subscription>> {
        let queue = Arc::clone(self.queue(kind)?);
        queue.consumers.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(LocalSubscription {
            queue,
            window: Arc::new(Semaphore::new(usize::from(prefetch.max(1)))),
            cancelled: false,
            max_attempts: self.max_attempts,
            retry_delay: self.retry_delay,
        }))
    }

    async fn depth(&self, kind: WorkerKind) -> BusResult<Option<u64>> {
        Ok(Some(self.queue(kind)?.ready.load(Ordering::SeqCst)))
    }

    async fn stats(&self, kind: WorkerKind) -> BusResult<QueueStats> {
        let queue = self.queue(kind)?;
        Ok(QueueStats {
            ready: queue.ready.load(Ordering::SeqCst),
            parked: self.parked_count(kind).await?,
            consumers: queue.consumers.load(Ordering::SeqCst),
        })
    }

    async fn ping(&self) -> BusResult<()> {
        Ok(())
    }

    /// The oldest parked messages join the back of the queue like new events, even past the
    /// queue's limit: a human asked for them, and one dropped would be gone for good.
    async fn replay_parked(&self, kind: WorkerKind, limit: usize) -> BusResult<Vec<Replayed>> {
        let queue = self.queue(kind)?;
        let taken: Vec<Parked> = {
            let mut parked = queue.parked.lock().unwrap_or_else(PoisonError::into_inner);
            let n = limit.min(parked.len());
            parked.drain(..n).collect()
        };
        let mut replayed = Vec::with_capacity(taken.len());
        for Parked { message, reason } in taken {
            let body = serde_json::to_vec(&message.event).map_err(|e| BusError::Backend(Box::new(e)))?;
            tracing::info!(
                queue = kind.as_str(),
                message_id = %message.message_id,
                reason,
                attempts = message.attempt,
                "replayed parked message"
            );
            replayed.push(Replayed {
                message_id: message.message_id.clone(),
                reason: reason.to_owned(),
                attempts: message.attempt,
                event_type: type_tag(&body),
            });
            queue.enqueue(Message { attempt: 1, ..message });
        }
        Ok(replayed)
    }
}

#[derive(Debug, Clone)]
struct Message {
    event: Event,
    message_id: String,
    attempt: u32,
    trace: TraceContext,
}

/// A parked message and why it was parked.
struct Parked {
    message: Message,
    reason: &'static str,
}

/// The queue of one worker kind. The receiver sits behind an async mutex so that several
/// subscriptions can compete for it; `ready` counts messages sent and not yet received, and
/// `consumers` the subscriptions neither cancelled nor dropped.
struct KindQueue {
    kind: WorkerKind,
    tx: mpsc::UnboundedSender<Message>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Message>>,
    ready: AtomicU64,
    consumers: AtomicU64,
    /// Oldest first.
    parked: Mutex<Vec<Parked>>,
}

impl KindQueue {
    fn new(kind: WorkerKind) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            kind,
            tx,
            rx: tokio::sync::Mutex::new(rx),
            ready: AtomicU64::new(0),
            consumers: AtomicU64::new(0),
            parked: Mutex::default(),
        }
    }

    fn enqueue(&self, message: Message) {
        // Count first, so the receiving side never decrements below zero.
        self.ready.fetch_add(1, Ordering::SeqCst);
        // Cannot fail: the receiver lives in `self`.
        if self.tx.send(message).is_err() {
            self.ready.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn park(&self, message: Message, reason: &'static str) {
        tracing::warn!(
            queue = self.kind.as_str(),
            message_id = %message.message_id,
            attempt = message.attempt,
            reason,
            "parked message"
        );
        self.parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Parked { message, reason });
    }
}

/// What a local [`Delivery`] carries: the message itself and its slot in the prefetch window.
/// A delivery dropped without being settled puts its message back on the queue, as RabbitMQ
/// requeues the unacked messages of a closed channel.
pub(crate) struct LocalToken {
    queue: Arc<KindQueue>,
    message: Option<Message>,
    _slot: OwnedSemaphorePermit,
}

impl fmt::Debug for LocalToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalToken")
            .field("queue", &self.queue.kind)
            .finish_non_exhaustive()
    }
}

impl Drop for LocalToken {
    fn drop(&mut self) {
        if let Some(message) = self.message.take() {
            self.queue.enqueue(message);
        }
    }
}

struct LocalSubscription {
    queue: Arc<KindQueue>,
    /// One permit per unsettled delivery; a delivery holds its permit until settled.
    window: Arc<Semaphore>,
    cancelled: bool,
    max_attempts: u32,
    retry_delay: Duration,
}

#[async_trait]
impl Subscription for LocalSubscription {
    async fn next(&mut self) -> Option<Delivery> {
        if self.cancelled {
            return None;
        }
        // Cancel-safe: each await below gives up nothing when dropped, and nothing is taken
        // off the queue until `recv` returns.
        let slot = Arc::clone(&self.window).acquire_owned().await.ok()?;
        let message = self.queue.rx.lock().await.recv().await?;
        self.queue.ready.fetch_sub(1, Ordering::SeqCst);
        Some(Delivery {
            event: Ok(message.event.clone()),
            message_id: message.message_id.clone(),
            attempt: message.attempt,
            trace: message.trace.clone(),
            token: DeliveryToken::Local(LocalToken {
                queue: Arc::clone(&self.queue),
                message: Some(message),
                _slot: slot,
            }),
        })
    }

    async fn settle(&mut self, delivery: Delivery, outcome: Outcome) -> BusResult<()> {
        let DeliveryToken::Local(mut token) = delivery.token else {
            return Err(BusError::Backend("settled a delivery from another backend".into()));
        };
        let Some(message) = token.message.take() else {
            return Err(BusError::Backend("delivery was already settled".into()));
        };
        let queue = Arc::clone(&token.queue);
        match outcome {
            Outcome::Ack => {}
            Outcome::Reject => queue.park(message, PARKED_REJECTED),
            Outcome::Retry if message.attempt >= self.max_attempts => {
                queue.park(message, PARKED_EXHAUSTED);
            }
            Outcome::Defer if message.attempt >= self.max_attempts => {
                tracing::info!(
                    kind = queue.kind.as_str(),
                    attempt = message.attempt,
                    "attempts used up; the sweep redoes the work"
                );
            }
            Outcome::Retry | Outcome::Defer => {
                let delay = retry_backoff(self.retry_delay, message.attempt);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    queue.enqueue(Message {
                        attempt: message.attempt + 1,
                        ..message
                    });
                });
            }
        }
        // Dropping the token frees the delivery's prefetch slot.
        drop(token);
        Ok(())
    }

    async fn cancel(&mut self) -> BusResult<()> {
        if !std::mem::replace(&mut self.cancelled, true) {
            self.queue.consumers.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

impl Drop for LocalSubscription {
    fn drop(&mut self) {
        if !self.cancelled {
            self.queue.consumers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Whether an AMQP topic binding `pattern` matches `routing_key`: words are separated by `.`,
/// `*` matches exactly one word and `#` zero or more.
fn topic_matches(pattern: &str, routing_key: &str) -> bool {
    fn matches(pattern: &[&str], key: &[&str]) -> bool {
        match (pattern.split_first(), key.split_first()) {
            (None, None) => true,
            (Some((&"#", rest)), _) => matches(rest, key) || (!key.is_empty() && matches(pattern, &key[1..])),
            (Some((&word, rest)), Some((&first, key_rest))) => {
                (word == "*" || word == first) && matches(rest, key_rest)
            }
            (Some(_), None) | (None, Some(_)) => false,
        }
    }
    let pattern: Vec<&str> = pattern.split('.').collect();
    let key: Vec<&str> = routing_key.split('.').collect();
    matches(&pattern, &key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Tenant;

    fn due(session: &str) -> Event {
        Event::ExtractDue {
            tenant: Tenant::new(Some("t"), Some("a"), Some("u")).unwrap(),
            session_id: session.to_owned(),
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_new_events_and_takes_them_again_once_drained() {
        let bus = LocalBus::new(3, Duration::from_millis(10)).limiting(2);
        let mut subscription = bus.subscribe(WorkerKind::Extract, 8).await.unwrap();
        for session in ["s1", "s2", "s3", "s4"] {
            bus.publish(&due(session)).await.unwrap();
        }
        assert_eq!(
            bus.depth(WorkerKind::Extract).await.unwrap(),
            Some(2),
            "two kept, two dropped"
        );
        let first = subscription.next().await.unwrap();
        assert_eq!(first.event.as_ref().unwrap(), &due("s1"));
        subscription.settle(first, Outcome::Ack).await.unwrap();
        bus.publish(&due("s5")).await.unwrap();
        let mut rest = Vec::new();
        for _ in 0..2 {
            let delivery = subscription.next().await.unwrap();
            rest.push(delivery.event.clone().unwrap());
            subscription.settle(delivery, Outcome::Ack).await.unwrap();
        }
        assert_eq!(rest, [due("s2"), due("s5")]);
        assert_eq!(bus.depth(WorkerKind::Extract).await.unwrap(), Some(0));
    }

    #[test]
    fn topic_patterns_match_like_rabbitmq() {
        assert!(topic_matches("turn.appended", "turn.appended"));
        assert!(!topic_matches("turn.appended", "turn.deleted"));
        assert!(topic_matches("turn.*", "turn.appended"));
        assert!(!topic_matches("turn.*", "turn.appended.v2"));
        assert!(topic_matches("turn.#", "turn"));
        assert!(topic_matches("turn.#", "turn.appended.v2"));
        assert!(topic_matches("#", "anything.at.all"));
        assert!(topic_matches("#.appended", "turn.appended"));
        assert!(!topic_matches("*.appended", "appended"));
    }
}
