//! The consumer runtime's failure paths on a real (in-process) bus: a panicking handler costs a
//! delivery, never the worker; permanent errors park at once; retryable ones retry, then park.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use shared::bus::{Event, EventBus, LocalBus, WorkerKind};
use shared::domain::Tenant;
use shared::runtime::{run_consumer, ConsumerSettings, Handler, HandlerError, Heartbeat};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy)]
enum Failure {
    Panic,
    Permanent,
    Retryable,
}

struct Failing {
    failure: Failure,
    calls: AtomicU32,
}

#[async_trait]
impl Handler for Failing {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Index
    }

    async fn handle(&self, _event: &Event) -> Result<(), HandlerError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let error = |retryable| HandlerError {
            retryable,
            swept: false,
            source: "induced failure".into(),
        };
        match self.failure {
            Failure::Panic => panic!("induced panic"),
            Failure::Permanent => Err(error(false)),
            Failure::Retryable => Err(error(true)),
        }
    }

    async fn sweep(&self, _stop: &tokio_util::sync::CancellationToken) -> Result<usize, HandlerError> {
        Ok(0)
    }
}

fn event(session: &str) -> Event {
    Event::TurnAppended {
        tenant: Tenant {
            team: "t".into(),
            agent: "a".into(),
            user: "u".into(),
        },
        session_id: session.into(),
        last_seq: 1,
    }
}

/// Runs a consumer with `failure`, publishes `events`, and returns (handler calls, parked)
/// once `parked` reaches `events` (or panics after 10 s).
async fn run(failure: Failure, events: u64) -> (u32, u64) {
    let bus = Arc::new(LocalBus::new(3, Duration::from_millis(20)));
    let handler = Arc::new(Failing {
        failure,
        calls: AtomicU32::new(0),
    });
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(run_consumer(
        bus.clone(),
        handler.clone(),
        ConsumerSettings {
            prefetch: 4,
            sweep_interval: Duration::from_secs(600),
            shutdown_deadline: Duration::from_secs(2),
        },
        Arc::new(Heartbeat::default()),
        shutdown.clone(),
    ));
    for i in 0..events {
        bus.publish(&event(&format!("s{i}"))).await.unwrap();
    }
    let start = Instant::now();
    while bus.parked_count(WorkerKind::Index).await.unwrap() < events {
        assert!(start.elapsed() < Duration::from_secs(10), "messages were not parked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!worker.is_finished(), "the worker must survive its handler's failures");
    shutdown.cancel();
    worker.await.unwrap().unwrap();
    (
        handler.calls.load(Ordering::SeqCst),
        bus.parked_count(WorkerKind::Index).await.unwrap(),
    )
}

#[tokio::test]
async fn a_panicking_handler_costs_attempts_not_the_worker() {
    // Three attempts per message (the cap), then parked; both messages, so the worker lived on.
    assert_eq!(run(Failure::Panic, 2).await, (6, 2));
}

#[tokio::test]
async fn permanent_errors_park_at_once() {
    assert_eq!(run(Failure::Permanent, 2).await, (2, 2));
}

#[tokio::test]
async fn retryable_errors_retry_up_to_the_cap_then_park() {
    assert_eq!(run(Failure::Retryable, 1).await, (3, 1));
}
