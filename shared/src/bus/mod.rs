//! The event bus port. Events are wake-up hints, never the record: a consumer reads what to do
//! from the store past its cursor, so a lost, duplicated or reordered event changes only when
//! work happens, never what is done.
//!
//! Backends: `amqp` (RabbitMQ, cluster) and `local` (in-process channels, embedded). Both pass
//! the contract suite in `testsuite` (feature `testing`).
//!
//! Failure handling is the same on both: a consumer settles each delivery with an [`Outcome`];
//! `Retry` comes back after an exponential backoff with `attempt + 1`, and a message that used
//! its last attempt or was rejected is parked (kept aside, never redelivered, counted by
//! [`EventBus::stats`]) for a human to inspect, and to move back to work with
//! [`EventBus::replay_parked`] once the worker can read it (after an upgrade, a fix).

mod amqp;
mod local;
#[cfg(feature = "testing")]
pub mod testsuite;
pub mod wakeup;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::domain::Tenant;

pub use amqp::{AmqpBus, AmqpSettings};
pub use local::{LocalBus, LOCAL_QUEUE_LIMIT};

pub type BusResult<T> = Result<T, BusError>;

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The broker could not be reached, or refused (nacked) a publish; may succeed later.
    #[error("event bus unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A message could not be encoded or the topology is inconsistent; a retry will not help.
    #[error("event bus failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl BusError {
    /// Whether the same call may succeed later; drives retry and readiness decisions.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::Backend(_) => false,
        }
    }
}

/// Default number of deliveries of one message before it is parked.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default backoff after the first failed attempt; it doubles with each further attempt.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Longest backoff between two attempts, whatever the base delay and attempt.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);

/// Backoff before redelivering a message whose `attempt`-th delivery asked for a retry:
/// `base * 2^(attempt - 1)`, capped at [`MAX_RETRY_DELAY`] (or at `base`, if that is longer).
pub(crate) fn retry_backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(MAX_RETRY_DELAY.max(base))
}

/// Routing key of [`Event::TurnsAppended`] (and [`Event::TurnAppended`]).
pub const TURN_APPENDED: &str = "turn.appended";
/// Routing key of [`Event::ExtractDue`].
pub const EXTRACT_DUE: &str = "extract.due";
/// Routing key of [`Event::CompactionRequested`].
pub const COMPACTION_REQUESTED: &str = "compaction.requested";
/// Routing key of [`Event::SceneDue`].
pub const SCENE_DUE: &str = "scene.due";
/// Routing key of [`Event::PersonaDue`].
pub const PERSONA_DUE: &str = "persona.due";

/// A worker kind; each has one durable queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkerKind {
    /// Indexes L0 turns for conversation search.
    Index,
    /// Extracts L1 memories from L0 turns (with dedup).
    Extract,
    /// Compacts long session context into a summary.
    Compact,
    /// Edits an owner's L2 scenes when their timer is due.
    Scene,
    /// Builds an owner's L3 persona when a trigger fires.
    Persona,
}

impl WorkerKind {
    /// Every kind; a backend creates one queue for each.
    pub const ALL: &'static [WorkerKind] = &[Self::Index, Self::Extract, Self::Compact, Self::Scene, Self::Persona];

    /// The kind named `name` (its [`as_str`](Self::as_str)), if any.
    pub fn parse(name: &str) -> Option<WorkerKind> {
        Self::ALL.iter().copied().find(|kind| kind.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Index => "index",
            Self::Extract => "extract",
            Self::Compact => "compact",
            Self::Scene => "scene",
            Self::Persona => "persona",
        }
    }

    /// Routing keys the worker's queue is bound to.
    pub fn routing_keys(self) -> &'static [&'static str] {
        match self {
            Self::Index => &[TURN_APPENDED],
            Self::Extract => &[TURN_APPENDED, EXTRACT_DUE],
            Self::Compact => &[COMPACTION_REQUESTED],
            Self::Scene => &[SCENE_DUE],
            Self::Persona => &[PERSONA_DUE],
        }
    }
}

/// A message on the bus. The tag names the type and its schema version, so a consumer can
/// refuse what it does not understand instead of misreading it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    /// Turns up to `last_seq` were committed to a session. The API now sends
    /// [`Event::TurnsAppended`]; workers still read this one, which older APIs sent and may have
    /// left queued.
    #[serde(rename = "turn.appended.v1")]
    TurnAppended {
        tenant: Tenant,
        session_id: String,
        last_seq: i64,
    },
    /// Turns were committed to each of these sessions: the API's wake-up for everything
    /// appended during one publish round (see [`wakeup`]), one message for many sessions.
    #[serde(rename = "turns.appended.v1")]
    TurnsAppended { sessions: Vec<Appended> },
    /// A session's extraction timer (idle flush) may be due; the database holds the due-time.
    #[serde(rename = "extract.due.v1")]
    ExtractDue { tenant: Tenant, session_id: String },
    /// A session's context crossed the compaction threshold, or a user forced a compaction;
    /// the database holds the job.
    #[serde(rename = "compaction.requested.v1")]
    CompactionRequested { tenant: Tenant, session_id: String },
    /// An owner's scene timer may be due; the database holds the due-time.
    #[serde(rename = "scene.due.v1")]
    SceneDue { tenant: Tenant },
    /// An owner's persona may need a build (a scene run finished, memories were added); the
    /// persona worker evaluates the triggers against the database.
    #[serde(rename = "persona.due.v1")]
    PersonaDue { tenant: Tenant },
}

/// One session of an [`Event::TurnsAppended`]: its turns up to `last_seq` were committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    pub tenant: Tenant,
    pub session_id: String,
    pub last_seq: i64,
}

impl Appended {
    pub fn key(&self) -> crate::domain::SessionKey {
        crate::domain::SessionKey::new(self.tenant.clone(), self.session_id.clone())
    }
}

impl Event {
    pub fn routing_key(&self) -> &'static str {
        match self {
            Self::TurnAppended { .. } | Self::TurnsAppended { .. } => TURN_APPENDED,
            Self::ExtractDue { .. } => EXTRACT_DUE,
            Self::CompactionRequested { .. } => COMPACTION_REQUESTED,
            Self::SceneDue { .. } => SCENE_DUE,
            Self::PersonaDue { .. } => PERSONA_DUE,
        }
    }
}

/// What the queue of one worker kind holds, and who reads it, at one moment: for metrics and
/// the ops page, stale as soon as it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct QueueStats {
    /// Messages waiting to be delivered, as [`EventBus::depth`] counts them.
    pub ready: u64,
    /// Messages parked (rejected, or out of attempts) and not yet removed by a human.
    pub parked: u64,
    /// Open subscriptions to the queue, from every process that shares the broker.
    pub consumers: u64,
}

/// A parked message that [`EventBus::replay_parked`] moved back to its work queue, as it was
/// when parked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replayed {
    pub message_id: String,
    /// Why it was parked: `rejected` (undecodable, or a permanent failure), `max attempts
    /// reached`, or the broker's reason for a message another client nacked.
    pub reason: String,
    /// The deliveries it had used.
    pub attempts: u32,
    /// The body's `type` tag (e.g. `turns.appended.v1`), when the body is a JSON object with
    /// one: what tells a message from a newer API apart from garbage.
    pub event_type: Option<String>,
}

/// The `type` tag of a body that is a JSON object with a string `type`.
pub(crate) fn type_tag(body: &[u8]) -> Option<String> {
    // A `Value`, not a derived struct: serde would also read a struct from an array.
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("type")?.as_str().map(str::to_owned)
}

/// How a consumer finished with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; remove the message.
    Ack,
    /// Failed but may succeed later; redeliver after a backoff, up to the attempt cap, then
    /// park it.
    Retry,
    /// Failed but may succeed later, and the worker's sweep redoes the work from the store:
    /// redeliver like `Retry`, but once the attempts are used up, drop it instead of parking.
    Defer,
    /// Will never succeed (bad message); park it at once.
    Reject,
}

/// One received message. `attempt` starts at 1.
#[derive(Debug)]
pub struct Delivery {
    /// The decoded event, or the reason it could not be decoded.
    pub event: Result<Event, String>,
    pub message_id: String,
    pub attempt: u32,
    /// The publisher's trace context, kept across retries; empty when it had none.
    pub trace: crate::telemetry::propagate::TraceContext,
    pub(crate) token: DeliveryToken,
}

#[derive(Debug)]
pub(crate) enum DeliveryToken {
    Amqp(amqp::AmqpToken),
    Local(local::LocalToken),
}

/// A stream of deliveries for one worker kind.
///
/// Delivery is at least once: a message can arrive again after a crash, a lost connection or
/// a dropped [`Delivery`], so handlers must be idempotent (they are: events are hints).
/// Ordering is not guaranteed; a retried message comes back behind newer ones.
#[async_trait]
pub trait Subscription: Send {
    /// Waits for the next delivery; `None` once the subscription is closed for good (after
    /// [`cancel`](Self::cancel), or when the broker connection is lost: subscribe again).
    ///
    /// Waits while `prefetch` deliveries are unsettled. Cancel-safe: dropping the future (e.g.
    /// in `tokio::select!`, to settle a finished delivery) loses no message.
    async fn next(&mut self) -> Option<Delivery>;
    /// Settles a delivery. Must be called once per delivery, after its side effects are
    /// durable. `Retry` and `Reject` return only once the copy on the retry or parked path is
    /// durable, and only then remove the original, so a crash in between can duplicate a
    /// message but never lose it. A delivery dropped without being settled is redelivered
    /// later with the same attempt number.
    async fn settle(&mut self, delivery: Delivery, outcome: Outcome) -> BusResult<()>;
    /// Stops taking new deliveries; ones in hand may still be settled. Idempotent.
    async fn cancel(&mut self) -> BusResult<()>;
}

#[async_trait]
pub trait EventBus: Send + Sync + 'static {
    /// Publishes an event and returns once the broker has confirmed it (publisher confirms
    /// on RabbitMQ). A broker nack is `Unavailable`. Every copy routed to a worker queue is
    /// durable when this returns; an event published before anyone subscribes is kept.
    async fn publish(&self, event: &Event) -> BusResult<()>;

    /// Publishes `event` so that it is routed only after `delay` (a timer's wake-up). Returns
    /// once the delayed copy is durable (RabbitMQ: in a delay queue whose messages all share
    /// one TTL, so none waits behind a longer one); the in-process bus keeps it in memory.
    /// Timers are hints like every event: the due-time lives in the database and the sweep
    /// finds a wake-up that was lost.
    async fn publish_delayed(&self, event: &Event, delay: Duration) -> BusResult<()>;

    /// Starts consuming the queue of `kind` with at most `prefetch` unsettled deliveries
    /// (`prefetch` 0 is taken as 1). Several subscriptions to one kind compete for its
    /// messages: each message goes to one of them.
    async fn subscribe(&self, kind: WorkerKind, prefetch: u16) -> BusResult<Box<dyn Subscription>>;

    /// Number of messages waiting in the queue of `kind` (ready, not in flight), if known.
    /// Messages waiting out a retry backoff and parked messages are not counted.
    async fn depth(&self, kind: WorkerKind) -> BusResult<Option<u64>>;

    /// Counts the ready and parked messages and the consumers of the queue of `kind`. Ready is
    /// what [`depth`](Self::depth) returns; a delivery in flight or waiting out its retry
    /// backoff is in none of the counts. A cancelled or dropped subscription stops counting as
    /// a consumer (on RabbitMQ once the broker has processed the cancel or the closed channel).
    async fn stats(&self, kind: WorkerKind) -> BusResult<QueueStats>;

    /// Checks that the broker answers.
    async fn ping(&self) -> BusResult<()>;

    /// Moves up to `limit` parked messages of `kind`, oldest first, back to the kind's work
    /// queue and returns them; fewer (none) once the parked queue is empty. Each goes back as
    /// it was published, body byte for byte, with its message id and trace context, but with
    /// its attempt count reset to 1 and without its park reason: its consumer gets every
    /// attempt again, and a message it still cannot handle is parked again. A replay takes
    /// only what was parked when it began, so one parked again meanwhile waits for the next.
    ///
    /// RabbitMQ: each copy is confirmed in the work queue before its parked original is
    /// removed, so a crash in between duplicates a message, never loses it. On an error, the
    /// messages moved before it stay moved (the parked count tells).
    async fn replay_parked(&self, kind: WorkerKind, limit: usize) -> BusResult<Vec<Replayed>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_and_is_capped() {
        let base = Duration::from_millis(100);
        assert_eq!(retry_backoff(base, 1), base);
        assert_eq!(retry_backoff(base, 2), base * 2);
        assert_eq!(retry_backoff(base, 4), base * 8);
        assert_eq!(retry_backoff(base, 60), MAX_RETRY_DELAY);
        assert_eq!(retry_backoff(Duration::from_secs(600), 3), Duration::from_secs(600));
    }

    #[test]
    fn type_tags_are_read_from_json_objects_only() {
        assert_eq!(
            type_tag(br#"{"type":"scene.due.v99","tenant":{}}"#).as_deref(),
            Some("scene.due.v99")
        );
        assert_eq!(type_tag(b"not json"), None);
        assert_eq!(type_tag(br#"{"type":7}"#), None);
        assert_eq!(type_tag(br#"["type"]"#), None);
    }

    #[test]
    fn kinds_parse_from_their_names() {
        for &kind in WorkerKind::ALL {
            assert_eq!(WorkerKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(WorkerKind::parse("Index"), None);
        assert_eq!(WorkerKind::parse("parked"), None);
    }

    #[test]
    fn every_kind_has_a_distinct_name_and_a_route() {
        let names: std::collections::HashSet<_> = WorkerKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), WorkerKind::ALL.len());
        assert!(WorkerKind::ALL.iter().all(|k| !k.routing_keys().is_empty()));
    }
}
