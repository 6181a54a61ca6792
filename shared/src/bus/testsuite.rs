//! The contract suite of the [`EventBus`] port, run against every backend by the integration
//! tests (feature `testing`). Each function checks one point of the contract documented on
//! [`EventBus`] and [`Subscription`], and panics with a message naming what broke.
//!
//! Every function expects a bus of its own whose queues are empty (a fresh `LocalBus`, or an
//! `AmqpBus` on a prefix unique to the test), built with the [`Knobs`] it is given. Waits are
//! bounded: "arrives" means within [`ARRIVAL_TIMEOUT`], "nothing arrives" means not within
//! [`QUIET_PERIOD`] (or a few backoffs, for retries).

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use super::{Delivery, Event, EventBus, Outcome, QueueStats, Subscription, WorkerKind};
use crate::domain::Tenant;

/// Longest wait for a delivery that should come.
pub const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the suite watches for a delivery that should not come.
pub const QUIET_PERIOD: Duration = Duration::from_millis(500);

/// The retry settings the bus under test was built with.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    pub max_attempts: u32,
    pub retry_delay: Duration,
}

impl Default for Knobs {
    /// Short enough to keep the suite fast, long enough to tell a backoff from none.
    fn default() -> Self {
        Self {
            max_attempts: 3,
            retry_delay: Duration::from_millis(150),
        }
    }
}

/// A `turn.appended` event distinct from every other one made by this process.
pub fn sample_event(last_seq: i64) -> Event {
    Event::TurnAppended {
        tenant: Tenant {
            team: "team-a".into(),
            agent: "agent-a".into(),
            user: "user-a".into(),
        },
        session_id: format!("session-{}", uuid::Uuid::new_v4().simple()),
        last_seq,
    }
}

/// A `turns.appended` event of `n` sessions distinct from every other one made by this
/// process.
pub fn sample_sessions(n: usize) -> Event {
    Event::TurnsAppended {
        sessions: (0..n)
            .map(|i| super::Appended {
                tenant: Tenant {
                    team: "team-a".into(),
                    agent: "agent-a".into(),
                    user: format!("user-{i}"),
                },
                session_id: format!("session-{}", uuid::Uuid::new_v4().simple()),
                last_seq: i as i64 + 1,
            })
            .collect(),
    }
}

/// A delayed event is routed like any other, but not before its delay; delays of different
/// lengths do not hold each other up, and only the kinds bound to its key receive it.
pub async fn delayed_publish_waits_out_its_delay(bus: &dyn EventBus) {
    let mut extract = subscribe_kind(bus, WorkerKind::Extract, 10).await;
    let mut index = subscribe_kind(bus, WorkerKind::Index, 10).await;
    let due = |session: &str| Event::ExtractDue {
        tenant: Tenant {
            team: "team-a".into(),
            agent: "agent-a".into(),
            user: "user-a".into(),
        },
        session_id: session.to_owned(),
    };
    let started = Instant::now();
    let (long, short) = (due("long"), due("short"));
    bus.publish_delayed(&long, Duration::from_millis(1_500))
        .await
        .expect("publish the long delay");
    bus.publish_delayed(&short, Duration::from_millis(400))
        .await
        .expect("publish the short delay");
    let first = expect_delivery(extract.as_mut(), "the short-delayed event").await;
    assert_eq!(first.event.as_ref().ok(), Some(&short), "the shorter delay comes first");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "a delayed event arrived after {waited:?}, before its 400 ms delay"
    );
    assert!(
        waited < Duration::from_millis(1_400),
        "the short delay waited behind the long one: {waited:?}"
    );
    extract.settle(first, Outcome::Ack).await.expect("ack");
    let second = expect_delivery(extract.as_mut(), "the long-delayed event").await;
    assert_eq!(second.event.as_ref().ok(), Some(&long));
    assert!(started.elapsed() >= Duration::from_millis(1_500));
    extract.settle(second, Outcome::Ack).await.expect("ack");
    expect_nothing(index.as_mut(), QUIET_PERIOD, "extract.due reached the index queue").await;
}

async fn subscribe_kind(bus: &dyn EventBus, kind: WorkerKind, prefetch: u16) -> Box<dyn Subscription> {
    bus.subscribe(kind, prefetch).await.expect("subscribe")
}

/// A published event reaches a subscriber unchanged, with attempt 1 and a message id.
pub async fn delivers_published_event(bus: &dyn EventBus) {
    let mut sub = subscribe(bus, 10).await;
    let event = sample_event(1);
    bus.publish(&event).await.expect("publish");
    let delivery = expect_delivery(sub.as_mut(), "the published event").await;
    assert_eq!(
        delivery.event.as_ref().ok(),
        Some(&event),
        "delivered event differs from the published one"
    );
    assert_eq!(delivery.attempt, 1, "first delivery must be attempt 1");
    assert!(!delivery.message_id.is_empty(), "delivery has no message id");
    sub.settle(delivery, Outcome::Ack).await.expect("ack");
}

/// Every published event gets its own message id.
pub async fn message_ids_are_unique(bus: &dyn EventBus) {
    let mut sub = subscribe(bus, 10).await;
    for seq in 0..3 {
        bus.publish(&sample_event(seq)).await.expect("publish");
    }
    let mut ids = HashSet::new();
    for _ in 0..3 {
        let delivery = expect_delivery(sub.as_mut(), "one of three events").await;
        ids.insert(delivery.message_id.clone());
        sub.settle(delivery, Outcome::Ack).await.expect("ack");
    }
    assert_eq!(ids.len(), 3, "message ids repeat: {ids:?}");
}

/// `turn.appended` is routed to the index queue: it waits there and is delivered to an index
/// subscription unchanged, in both shapes (the API's many-session event and the one-session
/// event of older APIs).
pub async fn routes_turn_appended_to_index(bus: &dyn EventBus) {
    let events = [sample_event(7), sample_sessions(3)];
    for event in &events {
        assert_eq!(event.routing_key(), super::TURN_APPENDED);
        bus.publish(event).await.expect("publish");
    }
    eventually("index queue depth to reach 2", || async {
        bus.depth(WorkerKind::Index).await.expect("depth") == Some(2)
    })
    .await;
    let mut sub = subscribe(bus, 10).await;
    for event in &events {
        let delivery = expect_delivery(sub.as_mut(), "a routed event").await;
        assert_eq!(delivery.event.as_ref().ok(), Some(event));
        sub.settle(delivery, Outcome::Ack).await.expect("ack");
    }
}

/// An event published while nobody subscribes is kept and delivered to a later subscriber.
pub async fn keeps_events_published_before_subscribe(bus: &dyn EventBus) {
    let event = sample_event(2);
    bus.publish(&event).await.expect("publish");
    tokio::time::sleep(QUIET_PERIOD).await;
    let mut sub = subscribe(bus, 10).await;
    let delivery = expect_delivery(sub.as_mut(), "the event published before subscribing").await;
    assert_eq!(delivery.event.as_ref().ok(), Some(&event));
    assert_eq!(delivery.attempt, 1);
    sub.settle(delivery, Outcome::Ack).await.expect("ack");
}

/// An acked message is gone: not redelivered, even to a new subscription, and not counted.
pub async fn ack_removes_message(bus: &dyn EventBus) {
    bus.publish(&sample_event(3)).await.expect("publish");
    let mut sub = subscribe(bus, 10).await;
    let delivery = expect_delivery(sub.as_mut(), "the event").await;
    sub.settle(delivery, Outcome::Ack).await.expect("ack");
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "an acked message came back").await;
    // A closed subscription gives back what it did not settle; an acked message stays gone.
    drop(sub);
    let mut sub = subscribe(bus, 10).await;
    expect_nothing(
        sub.as_mut(),
        QUIET_PERIOD,
        "an acked message came back to a new subscription",
    )
    .await;
    assert_eq!(
        bus.depth(WorkerKind::Index).await.expect("depth"),
        Some(0),
        "depth after ack"
    );
}

/// A delivery that is dropped unsettled, with its subscription, is redelivered with the same
/// attempt (at-least-once).
pub async fn unsettled_delivery_is_redelivered(bus: &dyn EventBus) {
    let event = sample_event(4);
    bus.publish(&event).await.expect("publish");
    let mut sub = subscribe(bus, 10).await;
    let first = expect_delivery(sub.as_mut(), "the event").await;
    let message_id = first.message_id.clone();
    drop(first);
    drop(sub);
    let mut sub = subscribe(bus, 10).await;
    let again = expect_delivery(sub.as_mut(), "the unsettled event again").await;
    assert_eq!(again.message_id, message_id, "a different message came back");
    assert_eq!(again.event.as_ref().ok(), Some(&event));
    assert_eq!(again.attempt, 1, "an unsettled delivery is not a failed attempt");
    sub.settle(again, Outcome::Ack).await.expect("ack");
}

/// `Retry` redelivers the same message with attempt 2, after the backoff and not before.
pub async fn retry_redelivers_after_backoff(bus: &dyn EventBus, knobs: Knobs) {
    assert!(knobs.max_attempts >= 2, "this check needs at least two attempts");
    let event = sample_event(5);
    bus.publish(&event).await.expect("publish");
    let mut sub = subscribe(bus, 10).await;
    let first = expect_delivery(sub.as_mut(), "the event").await;
    let message_id = first.message_id.clone();
    let settled_at = Instant::now();
    sub.settle(first, Outcome::Retry).await.expect("retry");
    let again = expect_delivery(sub.as_mut(), "the retried event").await;
    let waited = settled_at.elapsed();
    assert_eq!(again.message_id, message_id, "a different message came back");
    assert_eq!(again.event.as_ref().ok(), Some(&event));
    assert_eq!(again.attempt, 2, "a retried message must come back as attempt 2");
    assert!(
        waited >= knobs.retry_delay.mul_f64(0.8),
        "retry came back after {waited:?}, before the {:?} backoff",
        knobs.retry_delay
    );
    sub.settle(again, Outcome::Ack).await.expect("ack");
}

/// After `max_attempts` deliveries, `Retry` parks the message: it is counted as parked and
/// never delivered again.
pub async fn parks_after_max_attempts(bus: &dyn EventBus, knobs: Knobs) {
    bus.publish(&sample_event(6)).await.expect("publish");
    let mut sub = subscribe(bus, 10).await;
    let mut message_id = None;
    for attempt in 1..=knobs.max_attempts {
        let delivery = expect_delivery(sub.as_mut(), "the event, again").await;
        assert_eq!(delivery.attempt, attempt, "attempts must count up by one");
        let id = message_id.get_or_insert_with(|| delivery.message_id.clone());
        assert_eq!(&delivery.message_id, id, "a different message came back");
        sub.settle(delivery, Outcome::Retry).await.expect("retry");
    }
    let longest_backoff = super::retry_backoff(knobs.retry_delay, knobs.max_attempts);
    expect_nothing(
        sub.as_mut(),
        QUIET_PERIOD + longest_backoff * 2,
        "a message came back after its last attempt",
    )
    .await;
    eventually("one parked message", || async {
        parked_count(bus, WorkerKind::Index).await == 1
    })
    .await;
    assert_eq!(bus.depth(WorkerKind::Index).await.expect("depth"), Some(0));
}

/// `Reject` parks the message at once, whatever attempts remain.
pub async fn reject_parks_at_once(bus: &dyn EventBus, knobs: Knobs) {
    bus.publish(&sample_event(8)).await.expect("publish");
    let mut sub = subscribe(bus, 10).await;
    let delivery = expect_delivery(sub.as_mut(), "the event").await;
    sub.settle(delivery, Outcome::Reject).await.expect("reject");
    eventually("one parked message", || async {
        parked_count(bus, WorkerKind::Index).await == 1
    })
    .await;
    expect_nothing(
        sub.as_mut(),
        QUIET_PERIOD + knobs.retry_delay * 2,
        "a rejected message came back",
    )
    .await;
    assert_eq!(bus.depth(WorkerKind::Index).await.expect("depth"), Some(0));
}

/// A subscription holds at most `prefetch` unsettled deliveries; settling one lets the next in.
pub async fn prefetch_bounds_unsettled_deliveries(bus: &dyn EventBus) {
    for seq in 0..5 {
        bus.publish(&sample_event(seq)).await.expect("publish");
    }
    let mut sub = subscribe(bus, 2).await;
    let first = expect_delivery(sub.as_mut(), "delivery 1 of the prefetch window").await;
    let second = expect_delivery(sub.as_mut(), "delivery 2 of the prefetch window").await;
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "a third delivery exceeded prefetch 2").await;
    let mut seen: HashSet<String> = [first.message_id.clone(), second.message_id.clone()].into();
    sub.settle(first, Outcome::Ack).await.expect("ack");
    let third = expect_delivery(sub.as_mut(), "the delivery let in by an ack").await;
    expect_nothing(
        sub.as_mut(),
        QUIET_PERIOD,
        "a delivery exceeded prefetch 2 after one ack",
    )
    .await;
    seen.insert(third.message_id.clone());
    sub.settle(second, Outcome::Ack).await.expect("ack");
    sub.settle(third, Outcome::Ack).await.expect("ack");
    for _ in 0..2 {
        let delivery = expect_delivery(sub.as_mut(), "the rest of the queue").await;
        seen.insert(delivery.message_id.clone());
        sub.settle(delivery, Outcome::Ack).await.expect("ack");
    }
    assert_eq!(seen.len(), 5, "every message must be delivered once");
}

/// Two subscriptions to one kind share its messages: each message goes to one of them.
pub async fn subscriptions_compete(bus: &dyn EventBus) {
    let mut one = subscribe(bus, 1).await;
    let mut two = subscribe(bus, 1).await;
    bus.publish(&sample_event(1)).await.expect("publish");
    bus.publish(&sample_event(2)).await.expect("publish");
    let a = expect_delivery(one.as_mut(), "a message on the first subscription").await;
    let b = expect_delivery(two.as_mut(), "a message on the second subscription").await;
    assert_ne!(a.message_id, b.message_id, "both subscriptions got the same message");
    expect_nothing(one.as_mut(), QUIET_PERIOD, "a message was delivered twice").await;
    one.settle(a, Outcome::Ack).await.expect("ack");
    two.settle(b, Outcome::Ack).await.expect("ack");
}

/// After `cancel`, `next` ends, and a delivery already in hand can still be settled.
pub async fn cancel_ends_subscription_but_allows_settling(bus: &dyn EventBus) {
    bus.publish(&sample_event(9)).await.expect("publish");
    let mut sub = subscribe(bus, 10).await;
    let delivery = expect_delivery(sub.as_mut(), "the event").await;
    sub.cancel().await.expect("cancel");
    sub.cancel().await.expect("a second cancel");
    let after = tokio::time::timeout(ARRIVAL_TIMEOUT, sub.next()).await;
    assert!(matches!(after, Ok(None)), "next() after cancel must return None");
    sub.settle(delivery, Outcome::Ack).await.expect("ack after cancel");
    drop(sub);
    let mut sub = subscribe(bus, 10).await;
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "a message acked after cancel came back").await;
}

/// `ping` succeeds and an empty queue has depth 0.
pub async fn ping_and_empty_depth(bus: &dyn EventBus) {
    bus.ping().await.expect("ping");
    assert_eq!(bus.depth(WorkerKind::Index).await.expect("depth"), Some(0));
}

/// Ready, parked and consumers are counted per kind: a published event is ready in each kind it
/// is routed to, a delivery in hand is in no count, a rejected one is parked, and a cancelled
/// or dropped subscription no longer counts as a consumer.
pub async fn stats_count_ready_parked_and_consumers(bus: &dyn EventBus) {
    let stats = |kind| async move { bus.stats(kind).await.expect("stats") };
    for &kind in WorkerKind::ALL {
        assert_eq!(
            stats(kind).await,
            QueueStats::default(),
            "stats of a fresh {kind:?} queue"
        );
    }
    bus.publish(&sample_event(21)).await.expect("publish");
    bus.publish(&sample_event(22)).await.expect("publish");
    eventually("2 ready in the index queue", || async {
        stats(WorkerKind::Index).await.ready == 2
    })
    .await;
    assert_eq!(
        stats(WorkerKind::Compact).await,
        QueueStats::default(),
        "turn.appended is not routed to the compact queue"
    );

    let mut sub = subscribe(bus, 1).await;
    eventually("one consumer of the index queue", || async {
        stats(WorkerKind::Index).await.consumers == 1
    })
    .await;
    assert_eq!(stats(WorkerKind::Extract).await.consumers, 0, "consumers are per queue");
    let delivery = expect_delivery(sub.as_mut(), "the first event").await;
    sub.settle(delivery, Outcome::Reject).await.expect("reject");
    eventually("one parked message", || async {
        stats(WorkerKind::Index).await.parked == 1
    })
    .await;
    // Subscriptions compete: a second one counts too, and cancelling it leaves one.
    let mut other = subscribe(bus, 1).await;
    eventually("two consumers", || async {
        stats(WorkerKind::Index).await.consumers == 2
    })
    .await;
    other.cancel().await.expect("cancel");
    eventually("one consumer after a cancel", || async {
        stats(WorkerKind::Index).await.consumers == 1
    })
    .await;
    // Dropping a subscription ends it, and whatever it held unsettled is ready again.
    drop(other);
    drop(sub);
    eventually("no consumer and the second event ready again", || async {
        let index = stats(WorkerKind::Index).await;
        index.consumers == 0 && index.ready == 1 && index.parked == 1
    })
    .await;
}

/// `replay_parked` moves parked messages back to their queue, oldest first and at most `limit`
/// at a time, telling for each the reason and the attempts it was parked with: they come back
/// to a subscriber unchanged, with their message id and attempt 1, and the parked count drops.
/// Another kind's replay moves nothing, nor does the replay of an empty parked queue.
pub async fn replay_returns_parked_messages_to_work(bus: &dyn EventBus, knobs: Knobs) {
    for &kind in WorkerKind::ALL {
        let replayed = bus.replay_parked(kind, 10).await.expect("replay");
        assert!(
            replayed.is_empty(),
            "replay of an empty {kind:?} parked queue: {replayed:?}"
        );
    }
    let events = [sample_event(31), sample_event(32), sample_event(33)];
    for event in &events {
        bus.publish(event).await.expect("publish");
    }
    let mut sub = subscribe(bus, 10).await;
    // message id → (event, why and after how many attempts it was parked)
    let mut parked: std::collections::HashMap<String, (Event, &str, u32)> = Default::default();
    let mut deliveries = Vec::new();
    for _ in 0..events.len() {
        deliveries.push(expect_delivery(sub.as_mut(), "one of three events").await);
    }
    // Two are rejected at once, the last uses up its attempts.
    let last = deliveries.pop().expect("three deliveries");
    for delivery in deliveries {
        let event = delivery.event.clone().expect("a decoded event");
        parked.insert(delivery.message_id.clone(), (event, "rejected", 1));
        sub.settle(delivery, Outcome::Reject).await.expect("reject");
    }
    let exhausted_id = last.message_id.clone();
    let exhausted_event = last.event.clone().expect("a decoded event");
    sub.settle(last, Outcome::Retry).await.expect("retry");
    for attempt in 2..=knobs.max_attempts {
        let delivery = expect_delivery(sub.as_mut(), "the retried event").await;
        assert_eq!(
            (delivery.message_id.as_str(), delivery.attempt),
            (exhausted_id.as_str(), attempt)
        );
        sub.settle(delivery, Outcome::Retry).await.expect("retry");
    }
    parked.insert(
        exhausted_id.clone(),
        (exhausted_event, "max attempts reached", knobs.max_attempts),
    );
    eventually("three parked messages", || async {
        parked_count(bus, WorkerKind::Index).await == 3
    })
    .await;

    let elsewhere = bus.replay_parked(WorkerKind::Extract, 10).await.expect("replay");
    assert!(
        elsewhere.is_empty(),
        "the extract replay moved index messages: {elsewhere:?}"
    );
    let first = bus.replay_parked(WorkerKind::Index, 2).await.expect("replay");
    assert_eq!(first.len(), 2, "limit 2 replays 2 of 3: {first:?}");
    assert!(
        first.iter().all(|r| r.message_id != exhausted_id),
        "oldest first: the two rejected before the exhausted one parked: {first:?}"
    );
    eventually("one parked message left", || async {
        parked_count(bus, WorkerKind::Index).await == 1
    })
    .await;
    let second = bus.replay_parked(WorkerKind::Index, 10).await.expect("replay");
    assert_eq!(second.len(), 1, "the one left: {second:?}");
    for replayed in first.iter().chain(&second) {
        let (_, reason, attempts) = parked
            .get(&replayed.message_id)
            .unwrap_or_else(|| panic!("replayed a message never parked: {replayed:?}"));
        assert_eq!(
            (replayed.reason.as_str(), replayed.attempts),
            (*reason, *attempts),
            "{replayed:?}"
        );
        assert_eq!(replayed.event_type.as_deref(), Some("turn.appended.v1"), "{replayed:?}");
    }
    for _ in 0..parked.len() {
        let delivery = expect_delivery(sub.as_mut(), "a replayed message").await;
        let (event, _, _) = parked
            .remove(&delivery.message_id)
            .unwrap_or_else(|| panic!("an unknown or repeated message came back: {delivery:?}"));
        assert_eq!(delivery.event.as_ref().ok(), Some(&event), "a replayed message changed");
        assert_eq!(delivery.attempt, 1, "a replayed message starts its attempts again");
        sub.settle(delivery, Outcome::Ack).await.expect("ack");
    }
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "a replayed message came twice").await;
    assert_eq!(parked_count(bus, WorkerKind::Index).await, 0);
    let again = bus.replay_parked(WorkerKind::Index, 10).await.expect("replay");
    assert!(again.is_empty(), "a second replay moved {again:?}");
}

/// A replay takes what was parked when it began, once each: a worker that still cannot read a
/// replayed message parks it again at once, and the same replay does not take it again.
pub async fn replay_takes_only_what_was_parked_when_it_began(bus: &dyn EventBus) {
    for seq in 0..3 {
        bus.publish(&sample_event(40 + seq)).await.expect("publish");
    }
    let mut sub = subscribe(bus, 10).await;
    for _ in 0..3 {
        let delivery = expect_delivery(sub.as_mut(), "one of three events").await;
        sub.settle(delivery, Outcome::Reject).await.expect("reject");
    }
    eventually("three parked messages", || async {
        parked_count(bus, WorkerKind::Index).await == 3
    })
    .await;
    // The worker that still cannot read them, rejecting each as soon as it comes back.
    let rejecting = tokio::spawn(async move {
        while let Some(delivery) = sub.next().await {
            if sub.settle(delivery, Outcome::Reject).await.is_err() {
                break;
            }
        }
    });
    let replayed = bus.replay_parked(WorkerKind::Index, 100).await.expect("replay");
    let ids: HashSet<&str> = replayed.iter().map(|r| r.message_id.as_str()).collect();
    assert_eq!(
        (replayed.len(), ids.len()),
        (3, 3),
        "each parked message once: {replayed:?}"
    );
    eventually("all three parked again", || async {
        parked_count(bus, WorkerKind::Index).await == 3
    })
    .await;
    rejecting.abort();
}

async fn parked_count(bus: &dyn EventBus, kind: WorkerKind) -> u64 {
    bus.stats(kind).await.expect("stats").parked
}

async fn subscribe(bus: &dyn EventBus, prefetch: u16) -> Box<dyn Subscription> {
    bus.subscribe(WorkerKind::Index, prefetch).await.expect("subscribe")
}

/// The next delivery; panics if none comes within [`ARRIVAL_TIMEOUT`].
pub async fn expect_delivery(sub: &mut dyn Subscription, what: &str) -> Delivery {
    match tokio::time::timeout(ARRIVAL_TIMEOUT, sub.next()).await {
        Ok(Some(delivery)) => delivery,
        Ok(None) => panic!("subscription ended while waiting for {what}"),
        Err(_) => panic!("no delivery within {ARRIVAL_TIMEOUT:?} while waiting for {what}"),
    }
}

/// Panics with `failure` if a delivery comes within `period`.
pub async fn expect_nothing(sub: &mut dyn Subscription, period: Duration, failure: &str) {
    if let Ok(Some(delivery)) = tokio::time::timeout(period, sub.next()).await {
        panic!("{failure}: {delivery:?}");
    }
}

/// Polls `check` until it holds; panics naming `what` after [`ARRIVAL_TIMEOUT`]. For counts
/// the broker updates a little after the call that changes them.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + ARRIVAL_TIMEOUT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
