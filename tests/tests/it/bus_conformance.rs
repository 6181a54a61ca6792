//! The `EventBus` contract suite on both backends (RabbitMQ and in-process), plus what only one
//! backend can show: wire format, undecodable messages, topology, reconnects and connection
//! errors on RabbitMQ; requeue-on-drop and non-blocking publish in process.

use std::time::{Duration, Instant};

use integration_tests::amqp::{error_chain, TestBroker};
use shared::bus::testsuite::{self, expect_delivery, expect_nothing, sample_event, Knobs, QUIET_PERIOD};
use shared::bus::{AmqpBus, AmqpSettings, BusError, Event, EventBus, LocalBus, Outcome, WorkerKind, TURN_APPENDED};

/// Runs each suite check as one test per backend: `bus_conformance::amqp::<check>` on a fresh
/// prefix of the test broker, and `bus_conformance::local::<check>` on a fresh `LocalBus`.
macro_rules! bus_suite {
    ($(fn $name:ident($bus:ident, $knobs:ident) $body:block)*) => {
        mod amqp {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let broker = TestBroker::start(stringify!($name)).await;
                    let $knobs = Knobs::default();
                    let $bus = broker.bus().await;
                    $body
                    broker.cleanup().await;
                }
            )*
        }
        mod local {
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    let $knobs = Knobs::default();
                    let $bus = LocalBus::new($knobs.max_attempts, $knobs.retry_delay);
                    $body
                }
            )*
        }
    };
}

bus_suite! {
    fn delivers_published_event(bus, _knobs) { testsuite::delivers_published_event(&bus).await; }
    fn message_ids_are_unique(bus, _knobs) { testsuite::message_ids_are_unique(&bus).await; }
    fn delayed_publish_waits_out_its_delay(bus, _knobs) {
        testsuite::delayed_publish_waits_out_its_delay(&bus).await;
    }
    fn routes_turn_appended_to_index(bus, _knobs) { testsuite::routes_turn_appended_to_index(&bus).await; }
    fn keeps_events_published_before_subscribe(bus, _knobs) {
        testsuite::keeps_events_published_before_subscribe(&bus).await;
    }
    fn ack_removes_message(bus, _knobs) { testsuite::ack_removes_message(&bus).await; }
    fn unsettled_delivery_is_redelivered(bus, _knobs) {
        testsuite::unsettled_delivery_is_redelivered(&bus).await;
    }
    fn retry_redelivers_after_backoff(bus, knobs) {
        testsuite::retry_redelivers_after_backoff(&bus, knobs).await;
    }
    fn parks_after_max_attempts(bus, knobs) { testsuite::parks_after_max_attempts(&bus, knobs).await; }
    fn reject_parks_at_once(bus, knobs) { testsuite::reject_parks_at_once(&bus, knobs).await; }
    fn prefetch_bounds_unsettled_deliveries(bus, _knobs) {
        testsuite::prefetch_bounds_unsettled_deliveries(&bus).await;
    }
    fn subscriptions_compete(bus, _knobs) { testsuite::subscriptions_compete(&bus).await; }
    fn cancel_ends_subscription_but_allows_settling(bus, _knobs) {
        testsuite::cancel_ends_subscription_but_allows_settling(&bus).await;
    }
    fn ping_and_empty_depth(bus, _knobs) { testsuite::ping_and_empty_depth(&bus).await; }
    fn stats_count_ready_parked_and_consumers(bus, _knobs) {
        testsuite::stats_count_ready_parked_and_consumers(&bus).await;
    }
    fn replay_returns_parked_messages_to_work(bus, knobs) {
        testsuite::replay_returns_parked_messages_to_work(&bus, knobs).await;
    }
    fn replay_takes_only_what_was_parked_when_it_began(bus, _knobs) {
        testsuite::replay_takes_only_what_was_parked_when_it_began(&bus).await;
    }
}

fn header<'a>(message: &'a lapin::message::Delivery, key: &str) -> Option<&'a lapin::types::AMQPValue> {
    message.properties.headers().as_ref()?.inner().get(key)
}

fn header_int(message: &lapin::message::Delivery, key: &str) -> Option<i64> {
    let value = header(message, key)?;
    value.as_long_int().map(i64::from).or_else(|| value.as_long_long_int())
}

fn header_text(message: &lapin::message::Delivery, key: &str) -> Option<String> {
    header(message, key)?.as_long_string().map(|s| s.to_string())
}

#[tokio::test]
async fn amqp_published_message_is_persistent_tagged_json() {
    let broker = TestBroker::start("wire_format").await;
    let bus = broker.bus().await;
    let event = sample_event(11);
    bus.publish(&event).await.expect("publish");

    let settings = bus.settings().clone();
    let message = broker
        .take(&settings.work_queue(WorkerKind::Index))
        .await
        .expect("message in the index queue");
    let properties = &message.properties;
    assert_eq!(
        properties.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(*properties.delivery_mode(), Some(2), "messages must be persistent");
    let message_id = properties.message_id().as_ref().expect("message id").to_string();
    assert!(
        uuid::Uuid::parse_str(&message_id).is_ok(),
        "message id {message_id} is not a uuid"
    );
    assert_eq!(header_int(&message, "x-sediment-attempt"), Some(1));
    assert_eq!(message.routing_key.as_str(), TURN_APPENDED);
    let body: serde_json::Value = serde_json::from_slice(&message.data).expect("json body");
    assert_eq!(
        body["type"], "turn.appended.v1",
        "body must carry its versioned type tag"
    );
    assert_eq!(serde_json::from_value::<Event>(body).expect("event body"), event);
    broker.cleanup().await;
}

#[tokio::test]
async fn amqp_undecodable_message_arrives_as_error_and_parks_on_reject() {
    let broker = TestBroker::start("undecodable").await;
    let bus = broker.bus().await;
    broker.publish_raw(TURN_APPENDED, b"not json at all").await;
    broker
        .publish_raw(TURN_APPENDED, br#"{"type":"turn.appended.v99"}"#)
        .await;
    let mut sub = bus.subscribe(WorkerKind::Index, 10).await.expect("subscribe");
    for _ in 0..2 {
        let delivery = expect_delivery(sub.as_mut(), "the undecodable message").await;
        assert!(delivery.event.is_err(), "garbage decoded as {:?}", delivery.event);
        assert_eq!(delivery.attempt, 1, "a message without the attempt header is attempt 1");
        assert!(!delivery.message_id.is_empty(), "a message without an id gets one");
        sub.settle(delivery, Outcome::Reject).await.expect("reject");
    }
    testsuite::eventually("two parked messages", || async {
        bus.parked_count(WorkerKind::Index).await.unwrap() == 2
    })
    .await;
    let parked = broker
        .take(&bus.settings().parked_queue(WorkerKind::Index))
        .await
        .expect("a parked message");
    assert_eq!(
        parked.data, b"not json at all",
        "parked copy must keep the body byte for byte"
    );
    assert_eq!(
        header_text(&parked, "x-sediment-parked-reason").as_deref(),
        Some("rejected")
    );
    broker.cleanup().await;
}

#[tokio::test]
async fn amqp_parked_copy_keeps_id_and_counts_attempts_in_a_header() {
    let knobs = Knobs {
        max_attempts: 2,
        retry_delay: Duration::from_millis(50),
    };
    let broker = TestBroker::with_knobs("parked_copy", knobs).await;
    let bus = broker.bus().await;
    bus.publish(&sample_event(12)).await.expect("publish");
    let mut sub = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    let first = expect_delivery(sub.as_mut(), "attempt 1").await;
    let message_id = first.message_id.clone();
    sub.settle(first, Outcome::Retry).await.expect("retry");
    let second = expect_delivery(sub.as_mut(), "attempt 2").await;
    assert_eq!(second.attempt, 2);
    sub.settle(second, Outcome::Retry).await.expect("retry, which parks");
    testsuite::eventually("one parked message", || async {
        bus.parked_count(WorkerKind::Index).await.unwrap() == 1
    })
    .await;

    let parked = broker
        .take(&bus.settings().parked_queue(WorkerKind::Index))
        .await
        .expect("the parked message");
    assert_eq!(
        parked.properties.message_id().as_ref().map(|s| s.to_string()),
        Some(message_id)
    );
    assert_eq!(header_int(&parked, "x-sediment-attempt"), Some(2));
    assert_eq!(
        header_text(&parked, "x-sediment-parked-reason").as_deref(),
        Some("max attempts reached")
    );
    assert_eq!(*parked.properties.delivery_mode(), Some(2));
    assert_eq!(
        *parked.properties.expiration(),
        None,
        "a parked message must not expire"
    );
    assert!(
        header(&parked, "x-death").is_none(),
        "broker dead-letter headers must not be copied"
    );
    broker.cleanup().await;
}

/// A replayed copy is the parked message as it was published: the same body byte for byte,
/// message id, trace context and other headers and properties; attempt 1, no park reason, none
/// of the broker's dead-letter headers; persistent. The reason comes from our header, or from
/// the broker's for a message another client nacked into the parked queue.
#[tokio::test]
async fn amqp_replayed_copy_is_the_message_as_published() {
    use lapin::types::{AMQPValue, FieldTable, LongString};
    let broker = TestBroker::start("replayed_copy").await;
    let bus = broker.bus().await;
    let parked_queue = bus.settings().parked_queue(WorkerKind::Scene);
    let work_queue = bus.settings().work_queue(WorkerKind::Scene);
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    let mut ours = FieldTable::default();
    ours.insert("x-sediment-attempt".into(), AMQPValue::LongInt(5));
    ours.insert("x-sediment-parked-reason".into(), text("max attempts reached"));
    ours.insert("traceparent".into(), text(traceparent));
    ours.insert("x-custom".into(), text("kept"));
    let body: &[u8] = b"\xff\x00 {\"type\": not json";
    broker
        .publish_to_queue(
            &parked_queue,
            body,
            lapin::BasicProperties::default()
                .with_message_id("parked-1".into())
                .with_content_type("application/json".into())
                .with_app_id("sediment".into())
                .with_timestamp(1_700_000_000)
                .with_headers(ours),
        )
        .await;
    let mut nacked = FieldTable::default();
    nacked.insert("x-first-death-reason".into(), text("rejected"));
    nacked.insert("x-first-death-queue".into(), text(&work_queue));
    nacked.insert("x-death".into(), AMQPValue::FieldArray(Default::default()));
    broker
        .publish_to_queue(
            &parked_queue,
            br#"{"type":"scene.due.v99"}"#,
            lapin::BasicProperties::default().with_headers(nacked),
        )
        .await;

    let replayed = bus.replay_parked(WorkerKind::Scene, 10).await.expect("replay");
    assert_eq!(replayed.len(), 2, "{replayed:?}");
    assert_eq!(
        (
            replayed[0].message_id.as_str(),
            replayed[0].reason.as_str(),
            replayed[0].attempts,
            replayed[0].event_type.as_deref()
        ),
        ("parked-1", "max attempts reached", 5, None)
    );
    assert_eq!(
        (
            replayed[1].reason.as_str(),
            replayed[1].attempts,
            replayed[1].event_type.as_deref()
        ),
        ("rejected", 1, Some("scene.due.v99")),
        "a message without an id or our headers: {:?}",
        replayed[1]
    );
    assert!(
        uuid::Uuid::parse_str(&replayed[1].message_id).is_ok(),
        "{:?}",
        replayed[1]
    );
    assert_eq!(bus.parked_count(WorkerKind::Scene).await.unwrap(), 0);

    let copy = broker
        .take(&work_queue)
        .await
        .expect("the first copy in the work queue");
    assert_eq!(copy.data, body, "the body byte for byte");
    let properties = &copy.properties;
    assert_eq!(properties.message_id().as_ref().map(|s| s.as_str()), Some("parked-1"));
    assert_eq!(
        properties.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(properties.app_id().as_ref().map(|s| s.as_str()), Some("sediment"));
    assert_eq!(*properties.timestamp(), Some(1_700_000_000));
    assert_eq!(*properties.delivery_mode(), Some(2), "the copy must be persistent");
    assert_eq!(header_int(&copy, "x-sediment-attempt"), Some(1));
    assert_eq!(header(&copy, "x-sediment-parked-reason"), None);
    assert_eq!(header_text(&copy, "traceparent").as_deref(), Some(traceparent));
    assert_eq!(header_text(&copy, "x-custom").as_deref(), Some("kept"));
    let copy = broker.take(&work_queue).await.expect("the second copy");
    assert_eq!(
        copy.properties.message_id().as_ref().map(|s| s.to_string()),
        Some(replayed[1].message_id.clone()),
        "the id given in the replay's answer is the copy's"
    );
    for broker_header in ["x-death", "x-first-death-reason", "x-first-death-queue"] {
        assert_eq!(header(&copy, broker_header), None, "{broker_header} was copied");
    }
    assert!(broker.take(&work_queue).await.is_none());
    broker.cleanup().await;
}

/// A replay whose copies cannot be delivered fails and leaves the parked message where it was:
/// here the work queue is gone, so the mandatory publish comes back.
#[tokio::test]
async fn amqp_replay_that_cannot_deliver_keeps_the_parked_message() {
    let broker = TestBroker::start("replay_undeliverable").await;
    let bus = broker.bus().await;
    bus.publish(&sample_event(41)).await.expect("publish");
    let mut sub = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    let delivery = expect_delivery(sub.as_mut(), "the event").await;
    sub.settle(delivery, Outcome::Reject).await.expect("reject");
    drop(sub);
    testsuite::eventually("one parked", || async {
        bus.parked_count(WorkerKind::Index).await.unwrap() == 1
    })
    .await;
    broker.delete_queue(&bus.settings().work_queue(WorkerKind::Index)).await;
    let error = bus
        .replay_parked(WorkerKind::Index, 10)
        .await
        .expect_err("no work queue to replay to");
    assert!(!error.is_retryable(), "{}", error_chain(&error));
    testsuite::eventually("the message still parked", || async {
        bus.parked_count(WorkerKind::Index).await.unwrap() == 1
    })
    .await;
    broker.cleanup().await;
}

#[tokio::test]
async fn amqp_topology_declaration_is_idempotent() {
    let broker = TestBroker::start("idempotent_topology").await;
    let first = broker.bus().await;
    first.publish(&sample_event(13)).await.expect("publish");
    // Declaring the same topology again, twice, succeeds and keeps what the queues hold.
    let second = broker.bus().await;
    let third = broker.bus().await;
    testsuite::eventually("depth 1 seen through the other connections", || async {
        second.depth(WorkerKind::Index).await.unwrap() == Some(1)
            && third.depth(WorkerKind::Index).await.unwrap() == Some(1)
    })
    .await;
    let mut sub = second.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    let delivery = expect_delivery(sub.as_mut(), "the event published on the first connection").await;
    sub.settle(delivery, Outcome::Ack).await.expect("ack");
    broker.cleanup().await;
}

/// A muted kind (extract, with extraction off) gets no events: nobody would consume them, and
/// they would pile up in RabbitMQ. A start that unmutes it routes them again, and one that
/// mutes it again removes the binding the previous start left.
#[tokio::test]
async fn amqp_muted_kind_gets_no_events() {
    let broker = TestBroker::start("muted_kind").await;
    let connect = |muted: &[WorkerKind]| {
        let settings = AmqpSettings {
            muted: muted.to_vec(),
            ..broker.settings()
        };
        async move { AmqpBus::connect(settings).await.expect("connect") }
    };
    let depths = |bus: AmqpBus, index: u64, extract: u64| async move {
        testsuite::eventually(&format!("index {index}, extract {extract}"), || async {
            bus.depth(WorkerKind::Index).await.unwrap() == Some(index)
                && bus.depth(WorkerKind::Extract).await.unwrap() == Some(extract)
        })
        .await;
    };

    let off = connect(&[WorkerKind::Extract]).await;
    off.publish(&sample_event(1)).await.expect("publish");
    depths(off, 1, 0).await;

    let on = connect(&[]).await;
    on.publish(&sample_event(2)).await.expect("publish");
    depths(on, 2, 1).await;

    let off_again = connect(&[WorkerKind::Extract]).await;
    off_again.publish(&sample_event(3)).await.expect("publish");
    depths(off_again, 3, 1).await;
    broker.cleanup().await;
}

#[tokio::test]
async fn amqp_conflicting_topology_is_a_permanent_error() {
    let broker = TestBroker::start("conflicting_topology").await;
    let _bus = broker.bus().await;
    // Same names, different queue arguments: the broker refuses with PRECONDITION_FAILED.
    let settings = AmqpSettings {
        queue_expires: Some(Duration::from_secs(1234)),
        ..broker.settings()
    };
    let error = AmqpBus::connect(settings)
        .await
        .expect_err("conflicting declaration must fail");
    assert!(
        matches!(error, BusError::Backend(_)),
        "expected Backend, got {}",
        error_chain(&error)
    );
    assert!(!error.is_retryable());
    broker.cleanup().await;
}

#[tokio::test]
async fn amqp_unreachable_broker_fails_fast_and_is_retryable() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let settings = AmqpSettings {
        url: format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
        prefix: "sediment-test.unreachable".into(),
        ..AmqpSettings::default()
    };
    let started = Instant::now();
    let error = AmqpBus::connect(settings).await.expect_err("nothing listens there");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?} to fail",
        started.elapsed()
    );
    assert!(
        error.is_retryable(),
        "a refused connection must be retryable: {}",
        error_chain(&error)
    );
    let chain = error_chain(&error);
    assert!(!chain.contains("guest:guest"), "error leaks the password: {chain}");
}

#[tokio::test]
async fn amqp_invalid_settings_are_permanent_errors() {
    let bad_url = AmqpSettings {
        url: "not a url".into(),
        ..AmqpSettings::default()
    };
    let error = AmqpBus::connect(bad_url).await.expect_err("invalid url");
    assert!(!error.is_retryable(), "{}", error_chain(&error));
    let no_prefix = AmqpSettings {
        prefix: " ".into(),
        ..AmqpSettings::default()
    };
    let error = AmqpBus::connect(no_prefix).await.expect_err("empty prefix");
    assert!(!error.is_retryable(), "{}", error_chain(&error));
}

#[tokio::test]
async fn amqp_publish_reconnects_after_connection_loss() {
    let broker = TestBroker::start("reconnect").await;
    let bus = broker.bus().await;
    let mut before = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    bus.force_disconnect().await;
    // The subscription on the lost connection ends; publishing reconnects by itself.
    assert!(
        matches!(
            tokio::time::timeout(Duration::from_secs(5), before.next()).await,
            Ok(None)
        ),
        "a subscription on a closed connection must end"
    );
    let event = sample_event(14);
    bus.publish(&event)
        .await
        .expect("publish after the connection was lost");
    bus.ping().await.expect("ping after reconnecting");
    let mut sub = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe again");
    let delivery = expect_delivery(sub.as_mut(), "the event published after reconnecting").await;
    assert_eq!(delivery.event.as_ref().ok(), Some(&event));
    sub.settle(delivery, Outcome::Ack).await.expect("ack");

    // A subscribe on a lost connection reconnects too.
    bus.force_disconnect().await;
    let mut sub = bus
        .subscribe(WorkerKind::Index, 1)
        .await
        .expect("subscribe after the connection was lost");
    bus.publish(&event).await.expect("publish");
    let delivery = expect_delivery(sub.as_mut(), "the event on the new connection").await;
    sub.settle(delivery, Outcome::Ack).await.expect("ack");
    broker.cleanup().await;
}

#[tokio::test]
async fn amqp_delivery_settled_on_another_subscription_is_refused() {
    let broker = TestBroker::start("wrong_subscription").await;
    let bus = broker.bus().await;
    bus.publish(&sample_event(15)).await.expect("publish");
    let mut one = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    let mut two = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    let delivery = expect_delivery(one.as_mut(), "the event").await;
    let error = two
        .settle(delivery, Outcome::Ack)
        .await
        .expect_err("foreign delivery must be refused");
    assert!(!error.is_retryable());
    broker.cleanup().await;
}

#[tokio::test]
async fn local_dropped_delivery_is_requeued_at_once() {
    let bus = LocalBus::default();
    bus.publish(&sample_event(16)).await.expect("publish");
    let mut sub = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    let first = expect_delivery(sub.as_mut(), "the event").await;
    let message_id = first.message_id.clone();
    drop(first);
    let again = expect_delivery(sub.as_mut(), "the dropped event again").await;
    assert_eq!(again.message_id, message_id);
    assert_eq!(again.attempt, 1);
    sub.settle(again, Outcome::Ack).await.expect("ack");
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "an acked message came back").await;
}

#[tokio::test]
async fn local_publish_never_waits_for_consumers() {
    let bus = LocalBus::default();
    let started = Instant::now();
    for seq in 0..10_000 {
        bus.publish(&sample_event(seq)).await.expect("publish");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "publishing 10k events took {:?}",
        started.elapsed()
    );
    assert_eq!(bus.depth(WorkerKind::Index).await.unwrap(), Some(10_000));
    assert_eq!(bus.parked_count(WorkerKind::Index).await.unwrap(), 0);
}
