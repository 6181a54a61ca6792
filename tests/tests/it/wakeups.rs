//! The ingest wake-up publisher (`bus::wakeup`): coalescing per session, one event per round,
//! the interval between rounds, the drain on close, the bound on waiting sessions, and a broker
//! that is down, on RabbitMQ and in process.
//!
//! The tests run on Tokio's current-thread runtime: `turn_appended` never yields, so every
//! call made before the first `.await` lands before the publisher task has run once, which
//! makes the coalescing exact.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::amqp::TestBroker;
use shared::bus::testsuite::{expect_delivery, expect_nothing, QUIET_PERIOD};
use shared::bus::wakeup::{Wakeups, MAX_PENDING, MAX_SESSIONS_PER_EVENT};
use shared::bus::{AmqpBus, AmqpSettings, Delivery, Event, EventBus, LocalBus, Outcome, Subscription, WorkerKind};
use shared::domain::Tenant;

/// Short enough to keep the tests fast; the interval test sets its own.
const INTERVAL: Duration = Duration::from_millis(10);

/// The in-process bus the `local_*` cases run on.
fn local_bus() -> Arc<dyn EventBus> {
    Arc::new(LocalBus::new(3, Duration::from_millis(150)))
}

fn tenant(user: &str) -> Tenant {
    Tenant {
        team: "team-w".into(),
        agent: "agent-w".into(),
        user: user.into(),
    }
}

/// The next delivery's sessions as (user, session, last_seq), sorted, after acking it.
async fn next_sessions(sub: &mut dyn Subscription, what: &str) -> Vec<(String, String, i64)> {
    let delivery: Delivery = expect_delivery(sub, what).await;
    let Ok(Event::TurnsAppended { sessions }) = &delivery.event else {
        panic!("unexpected delivery {:?}", delivery.event);
    };
    let mut seen: Vec<(String, String, i64)> = sessions
        .iter()
        .map(|s| (s.tenant.user.clone(), s.session_id.clone(), s.last_seq))
        .collect();
    seen.sort();
    sub.settle(delivery, Outcome::Ack).await.expect("ack");
    seen
}

/// 100 appends to one session, one to another and one to a third under another tenant become
/// one event of three sessions, the first with the highest `last_seq`; closing publishes it,
/// and nothing else follows.
async fn coalesces_into_one_event_and_drains_on_close(bus: Arc<dyn EventBus>) {
    let mut sub = bus.subscribe(WorkerKind::Index, 10).await.expect("subscribe");
    let wakeups = Wakeups::start(Arc::clone(&bus), Duration::from_secs(2), INTERVAL);
    for seq in [3, 1, 100, 50] {
        wakeups.turn_appended(tenant("u1"), "busy".into(), seq);
    }
    for seq in 4..=99 {
        wakeups.turn_appended(tenant("u1"), "busy".into(), seq);
    }
    wakeups.turn_appended(tenant("u1"), "quiet".into(), 1);
    // Same session id, other tenant: its own entry.
    wakeups.turn_appended(tenant("u2"), "busy".into(), 7);
    assert_eq!(wakeups.pending(), 3);
    wakeups.close().await;
    assert_eq!(wakeups.pending(), 0, "close publishes everything waiting");

    assert_eq!(
        next_sessions(sub.as_mut(), "the round's wake-up").await,
        vec![
            ("u1".into(), "busy".into(), 100),
            ("u1".into(), "quiet".into(), 1),
            ("u2".into(), "busy".into(), 7),
        ]
    );
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "a second wake-up").await;

    // After close, a wake-up is refused (left to the sweep), never queued for a dead task.
    wakeups.turn_appended(tenant("u1"), "late".into(), 1);
    assert_eq!(wakeups.pending(), 0);
}

/// Wake-ups keep flowing after the first round: a later append gets its own event.
async fn keeps_publishing_after_a_round(bus: Arc<dyn EventBus>) {
    let mut sub = bus.subscribe(WorkerKind::Index, 10).await.expect("subscribe");
    let wakeups = Wakeups::start(Arc::clone(&bus), Duration::from_secs(2), INTERVAL);
    for round in 1..=3 {
        wakeups.turn_appended(tenant("u1"), "s".into(), round);
        assert_eq!(
            next_sessions(sub.as_mut(), "this round's wake-up").await,
            vec![("u1".into(), "s".into(), round)]
        );
    }
    wakeups.close().await;
}

/// A round with more sessions than one event takes goes out as several events, each session
/// in exactly one of them.
async fn splits_a_large_round(bus: Arc<dyn EventBus>) {
    let mut sub = bus.subscribe(WorkerKind::Index, 10).await.expect("subscribe");
    let wakeups = Wakeups::start(Arc::clone(&bus), Duration::from_secs(2), INTERVAL);
    let sessions = 2 * MAX_SESSIONS_PER_EVENT + 1;
    for i in 0..sessions {
        wakeups.turn_appended(tenant("u1"), format!("s{i:04}"), i as i64);
    }
    wakeups.close().await;
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = next_sessions(sub.as_mut(), "a part of the round").await;
        sizes.push(event.len());
        seen.extend(event);
    }
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "a fourth part").await;
    sizes.sort_unstable();
    assert_eq!(sizes, vec![1, MAX_SESSIONS_PER_EVENT, MAX_SESSIONS_PER_EVENT]);
    seen.sort();
    let expected: Vec<(String, String, i64)> = (0..sessions)
        .map(|i| ("u1".into(), format!("s{i:04}"), i as i64))
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn amqp_coalesces_into_one_event_and_drains_on_close() {
    let broker = TestBroker::start("wakeup_coalesce").await;
    coalesces_into_one_event_and_drains_on_close(Arc::new(broker.bus().await)).await;
    broker.cleanup().await;
}

#[tokio::test]
async fn local_coalesces_into_one_event_and_drains_on_close() {
    coalesces_into_one_event_and_drains_on_close(local_bus()).await;
}

#[tokio::test]
async fn amqp_splits_a_large_round() {
    let broker = TestBroker::start("wakeup_split").await;
    splits_a_large_round(Arc::new(broker.bus().await)).await;
    broker.cleanup().await;
}

#[tokio::test]
async fn local_splits_a_large_round() {
    splits_a_large_round(local_bus()).await;
}

/// After a round, the next waits out the interval: appends made meanwhile, to any session,
/// share its one event. The first append after a quiet spell goes out at once.
#[tokio::test]
async fn appends_during_the_interval_share_the_next_event() {
    let bus = local_bus();
    let mut sub = bus.subscribe(WorkerKind::Index, 10).await.expect("subscribe");
    let interval = Duration::from_secs(1);
    let wakeups = Wakeups::start(Arc::clone(&bus), Duration::from_secs(2), interval);
    let started = Instant::now();
    wakeups.turn_appended(tenant("u1"), "a".into(), 1);
    assert_eq!(
        next_sessions(sub.as_mut(), "the first wake-up").await,
        vec![("u1".into(), "a".into(), 1)]
    );
    // Well inside the interval, so the appends below all fall into it.
    assert!(
        started.elapsed() < interval / 2,
        "the first round went out after {:?}",
        started.elapsed()
    );
    wakeups.turn_appended(tenant("u1"), "b".into(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    wakeups.turn_appended(tenant("u2"), "c".into(), 4);
    wakeups.turn_appended(tenant("u1"), "a".into(), 2);
    assert_eq!(
        next_sessions(sub.as_mut(), "the second round's wake-up").await,
        vec![
            ("u1".into(), "a".into(), 2),
            ("u1".into(), "b".into(), 1),
            ("u2".into(), "c".into(), 4),
        ]
    );
    assert!(
        started.elapsed() >= interval,
        "the second round went out after {:?}, before the interval",
        started.elapsed()
    );
    wakeups.close().await;
}

#[tokio::test]
async fn amqp_keeps_publishing_after_a_round() {
    let broker = TestBroker::start("wakeup_rounds").await;
    keeps_publishing_after_a_round(Arc::new(broker.bus().await)).await;
    broker.cleanup().await;
}

#[tokio::test]
async fn local_keeps_publishing_after_a_round() {
    keeps_publishing_after_a_round(local_bus()).await;
}

/// Past `MAX_PENDING` waiting sessions a new one is dropped (the sweep finds its turns), while
/// a session already waiting still coalesces.
#[tokio::test]
async fn waiting_sessions_are_bounded() {
    let bus = local_bus();
    let wakeups = Wakeups::start(bus, Duration::from_secs(2), INTERVAL);
    for i in 0..MAX_PENDING + 10 {
        wakeups.turn_appended(tenant("u1"), format!("s{i}"), 1);
    }
    assert_eq!(wakeups.pending(), MAX_PENDING);
    wakeups.turn_appended(tenant("u1"), "s0".into(), 2);
    assert_eq!(wakeups.pending(), MAX_PENDING);
    wakeups.close().await;
    assert_eq!(wakeups.pending(), 0);
}

/// A TCP relay to the test broker that can stop passing bytes, which is what a broker that
/// blocks publishers (a resource alarm) or a stalled network looks like to the client: the
/// connection stays open and nothing is confirmed.
struct FreezableRelay {
    port: u16,
    frozen: Arc<AtomicBool>,
}

impl FreezableRelay {
    async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let relay_frozen = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, Arc::clone(&relay_frozen)));
                tokio::spawn(pump(server_read, client_write, Arc::clone(&relay_frozen)));
            }
        });
        Self { port, frozen }
    }

    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else { return };
        if n == 0 {
            return;
        }
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// With the broker no longer answering, appends still return at once, and close gives up
/// after the publish timeout instead of hanging a graceful stop.
#[tokio::test]
async fn a_stalled_broker_never_blocks_appends_or_close() {
    let broker = TestBroker::start("wakeup_stalled").await;
    let mut settings: AmqpSettings = broker.settings();
    // `amqp://user:pass@host:port/vhost`: relay host:port.
    let (scheme_auth, rest) = settings.url.split_once('@').expect("a URL with credentials");
    let (target, vhost) = rest.split_once('/').expect("a URL with a vhost");
    let relay = FreezableRelay::start(target.to_owned()).await;
    settings.url = format!("{scheme_auth}@127.0.0.1:{}/{vhost}", relay.port);
    let bus: Arc<dyn EventBus> = Arc::new(AmqpBus::connect(settings).await.expect("connect through the relay"));
    relay.freeze();

    let wakeups = Wakeups::start(bus, Duration::from_millis(300), INTERVAL);
    let started = Instant::now();
    for i in 0..1_000 {
        wakeups.turn_appended(tenant("u1"), format!("s{}", i % 50), i);
    }
    let appending = started.elapsed();
    assert!(
        appending < Duration::from_millis(500),
        "1,000 appends took {appending:?}"
    );
    // Let the first round start and hang on its confirms.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let closing = Instant::now();
    wakeups.close().await;
    assert!(
        closing.elapsed() < Duration::from_secs(3),
        "close took {:?} with a stalled broker",
        closing.elapsed()
    );
    assert_eq!(wakeups.pending(), 0);
    broker.cleanup().await;
}
