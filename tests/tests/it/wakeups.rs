//! The ingest wake-up publisher (`bus::wakeup`): coalescing per session, the drain on close,
//! the bound on waiting sessions, and a broker that is down, on RabbitMQ and in process.
//!
//! The tests run on Tokio's current-thread runtime: `turn_appended` never yields, so every
//! call made before the first `.await` lands before the publisher task has run once, which
//! makes the coalescing exact.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::amqp::TestBroker;
use shared::bus::testsuite::{expect_delivery, expect_nothing, QUIET_PERIOD};
use shared::bus::wakeup::{Wakeups, MAX_PENDING};
use shared::bus::{AmqpBus, AmqpSettings, Event, EventBus, LocalBus, Outcome, WorkerKind};
use shared::domain::Tenant;

fn tenant(user: &str) -> Tenant {
    Tenant {
        team: "team-w".into(),
        agent: "agent-w".into(),
        user: user.into(),
    }
}

/// 100 appends to one session and one to another become exactly two events, the first with
/// the highest `last_seq`; closing publishes them, and nothing else follows.
async fn coalesces_per_session_and_drains_on_close(bus: Arc<dyn EventBus>) {
    let mut sub = bus.subscribe(WorkerKind::Index, 10).await.expect("subscribe");
    let wakeups = Wakeups::start(Arc::clone(&bus), Duration::from_secs(2));
    for seq in [3, 1, 100, 50] {
        wakeups.turn_appended(tenant("u1"), "busy".into(), seq);
    }
    for seq in 4..=99 {
        wakeups.turn_appended(tenant("u1"), "busy".into(), seq);
    }
    wakeups.turn_appended(tenant("u1"), "quiet".into(), 1);
    // Same session id, other tenant: its own wake-up.
    wakeups.turn_appended(tenant("u2"), "busy".into(), 7);
    assert_eq!(wakeups.pending(), 3);
    wakeups.close().await;
    assert_eq!(wakeups.pending(), 0, "close publishes everything waiting");

    let mut seen = Vec::new();
    for _ in 0..3 {
        let delivery = expect_delivery(sub.as_mut(), "a coalesced wake-up").await;
        let Ok(Event::TurnAppended {
            tenant,
            session_id,
            last_seq,
        }) = &delivery.event
        else {
            panic!("unexpected delivery {:?}", delivery.event);
        };
        seen.push((tenant.user.clone(), session_id.clone(), *last_seq));
        sub.settle(delivery, Outcome::Ack).await.expect("ack");
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("u1".into(), "busy".into(), 100),
            ("u1".into(), "quiet".into(), 1),
            ("u2".into(), "busy".into(), 7),
        ]
    );
    expect_nothing(sub.as_mut(), QUIET_PERIOD, "a fourth wake-up").await;

    // After close, a wake-up is refused (left to the sweep), never queued for a dead task.
    wakeups.turn_appended(tenant("u1"), "late".into(), 1);
    assert_eq!(wakeups.pending(), 0);
}

/// Wake-ups keep flowing after the first round: a later append gets its own event.
async fn keeps_publishing_after_a_round(bus: Arc<dyn EventBus>) {
    let mut sub = bus.subscribe(WorkerKind::Index, 10).await.expect("subscribe");
    let wakeups = Wakeups::start(Arc::clone(&bus), Duration::from_secs(2));
    for round in 1..=3 {
        wakeups.turn_appended(tenant("u1"), "s".into(), round);
        let delivery = expect_delivery(sub.as_mut(), "this round's wake-up").await;
        assert!(
            matches!(delivery.event, Ok(Event::TurnAppended { last_seq, .. }) if last_seq == round),
            "{:?}",
            delivery.event
        );
        sub.settle(delivery, Outcome::Ack).await.expect("ack");
    }
    wakeups.close().await;
}

#[tokio::test]
async fn amqp_coalesces_per_session_and_drains_on_close() {
    let broker = TestBroker::start("wakeup_coalesce").await;
    coalesces_per_session_and_drains_on_close(Arc::new(broker.bus().await)).await;
    broker.cleanup().await;
}

#[tokio::test]
async fn local_coalesces_per_session_and_drains_on_close() {
    coalesces_per_session_and_drains_on_close(Arc::new(LocalBus::new(3, Duration::from_millis(150)))).await;
}

#[tokio::test]
async fn amqp_keeps_publishing_after_a_round() {
    let broker = TestBroker::start("wakeup_rounds").await;
    keeps_publishing_after_a_round(Arc::new(broker.bus().await)).await;
    broker.cleanup().await;
}

#[tokio::test]
async fn local_keeps_publishing_after_a_round() {
    keeps_publishing_after_a_round(Arc::new(LocalBus::new(3, Duration::from_millis(150)))).await;
}

/// Past `MAX_PENDING` waiting sessions a new one is dropped (the sweep finds its turns), while
/// a session already waiting still coalesces.
#[tokio::test]
async fn waiting_sessions_are_bounded() {
    let bus: Arc<dyn EventBus> = Arc::new(LocalBus::new(3, Duration::from_millis(150)));
    let wakeups = Wakeups::start(bus, Duration::from_secs(2));
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

    let wakeups = Wakeups::start(bus, Duration::from_millis(300));
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
