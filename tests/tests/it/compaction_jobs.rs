//! The compaction job's state machine on real stores (Postgres and SQLite), with a crash or a
//! failure at each step: the event lost before the job ran, the worker dead between its claim
//! and its result, a worker stalled past its lease waking up after another finished the job,
//! a summarizer that fails, hangs or panics, and a redelivered event after the job finished.
//!
//! Leases here are 1 s and retries start at 200 ms, so expiry is real time, not mocked.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use integration_tests::amqp::TestBroker;
use integration_tests::mixed_session;
use integration_tests::pg::TestDb;
use shared::bus::{Event, EventBus, LocalBus};
use shared::context::summary::{SummarizeError, Summarizer, Summary, SummaryRequest};
use shared::context::{CompactHandler, Compactor, ContextSettings, JobOutcome, RulesSummarizer};
use shared::domain::{NewTurn, SessionId, Tenant};
use shared::runtime::{run_consumer, ConsumerSettings, Handler, Heartbeat};
use shared::store::compaction::{CompactionRecord, CompactionRequest, CompactionStatus, RequestOutcome};
use shared::store::compaction_testsuite::Both;
use shared::store::SqliteStore;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_millis(1_000);
const RETRY: Duration = Duration::from_millis(200);

fn settings() -> ContextSettings {
    ContextSettings {
        lease: LEASE,
        summarize_timeout: Duration::from_millis(500),
        retry_delay: RETRY,
        max_attempts: 3,
        ..ContextSettings::default()
    }
}

/// What the scripted summarizer does on its next call; after the script, it summarizes.
#[derive(Debug, Clone, Copy)]
enum Step {
    Fail,
    Hang,
    Panic,
}

#[derive(Default)]
struct Scripted {
    script: Mutex<VecDeque<Step>>,
    calls: AtomicU32,
}

impl Scripted {
    fn new(steps: &[Step]) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(steps.iter().copied().collect()),
            calls: AtomicU32::new(0),
        })
    }
}

#[async_trait]
impl Summarizer for Scripted {
    fn name(&self) -> String {
        "scripted".into()
    }

    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, SummarizeError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let step = self.script.lock().expect("script lock").pop_front();
        match step {
            None => RulesSummarizer.summarize(request).await,
            Some(Step::Fail) => Err(SummarizeError {
                retryable: true,
                source: "model overloaded".into(),
            }),
            Some(Step::Hang) => {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                unreachable!("the job's timeout ends the wait")
            }
            Some(Step::Panic) => panic!("induced summarizer panic"),
        }
    }
}

struct Fixture<G> {
    store: Arc<dyn Both>,
    _guard: G,
}

impl<G> Fixture<G> {
    fn compactor(&self, summarizer: Arc<dyn Summarizer>) -> Compactor {
        Compactor::new(self.store.clone(), self.store.clone(), summarizer, settings())
    }

    /// A session of `n` mixed turns.
    async fn session(&self, n: usize) -> (Tenant, SessionId) {
        let t = tenant();
        let s = SessionId::parse(&format!("s-{}", uuid::Uuid::new_v4().simple())).expect("session id");
        self.append(&t, &s, 0, n).await;
        (t, s)
    }

    async fn append(&self, t: &Tenant, s: &SessionId, from: usize, n: usize) {
        let turns: Vec<NewTurn> = mixed_session::turns_from(7, from, n)
            .iter()
            .map(|v| {
                NewTurn::new(
                    v["role"].as_str().expect("role"),
                    v["content"].as_str().expect("content"),
                    None,
                    None,
                    None,
                )
                .expect("a valid turn")
            })
            .collect();
        self.store.append(t, s, &turns).await.expect("append");
    }

    async fn request(&self, t: &Tenant, s: &SessionId, force: bool) -> RequestOutcome {
        let seen = self.record_opt(t, s).await.and_then(|r| r.summary).map(|s| s.last_seq);
        self.store
            .request_compaction(
                t,
                s,
                CompactionRequest {
                    force,
                    seen_last_seq: seen,
                    now: Utc::now(),
                    lease: LEASE,
                },
            )
            .await
            .expect("request")
    }

    async fn record_opt(&self, t: &Tenant, s: &SessionId) -> Option<CompactionRecord> {
        self.store.compaction(t, s).await.expect("read the compaction")
    }

    async fn record(&self, t: &Tenant, s: &SessionId) -> CompactionRecord {
        self.record_opt(t, s).await.expect("a compaction row")
    }
}

async fn postgres() -> Fixture<TestDb> {
    let db = TestDb::create().await;
    let store = db.store().await;
    Fixture {
        store: Arc::new(store),
        _guard: db,
    }
}

async fn sqlite() -> Fixture<tempfile::TempDir> {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(&dir.path().join("sediment.db"))
        .await
        .expect("open sqlite");
    Fixture {
        store: Arc::new(store),
        _guard: dir,
    }
}

fn tenant() -> Tenant {
    let id = uuid::Uuid::new_v4().simple().to_string();
    Tenant {
        team: format!("team-{id}"),
        agent: "agent".into(),
        user: "user".into(),
    }
}

async fn past_the_lease() {
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
}

/// The turns of the session that a summary item may quote.
fn assert_extractive(summary: &serde_json::Value, turns: usize) {
    let contents: Vec<String> = mixed_session::turns(7, turns)
        .iter()
        .map(|t| t["content"].as_str().expect("content").to_owned())
        .collect();
    let dims = summary.as_object().expect("summary object");
    let mut items = 0;
    for list in dims.values() {
        for item in list.as_array().expect("a list") {
            let item = item.as_str().expect("a string");
            let body = item.split_once("] ").map_or(item, |(_, b)| b).trim_end_matches('…');
            assert!(contents.iter().any(|c| c.contains(body)), "invented item {item:?}");
            items += 1;
        }
    }
    assert!(items > 0, "the summary is empty");
}

macro_rules! both {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::postgres().await).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::sqlite().await).await;
                }
            )*
        }
    };
}

both!(
    a_job_whose_event_was_lost_is_run_by_the_sweep,
    a_worker_dead_after_its_claim_is_replaced_once_the_lease_expires,
    a_stalled_worker_waking_after_another_finished_stores_nothing,
    a_failing_summarizer_fails_the_job_and_the_sweep_retries_it,
    a_hanging_summarizer_times_out_as_a_failure,
    failing_jobs_stop_at_the_attempt_cap_until_forced,
    a_redelivered_event_after_success_does_nothing,
    compaction_is_incremental_and_starts_over_after_a_reset,
);

async fn a_job_whose_event_was_lost_is_run_by_the_sweep<G>(f: Fixture<G>) {
    let (t, s) = f.session(20).await;
    // Queued, then the process dies before publishing: no event will ever come.
    assert_eq!(f.request(&t, &s, false).await, RequestOutcome::Queued);
    let compactor = f.compactor(Arc::new(RulesSummarizer));
    assert_eq!(compactor.sweep(&CancellationToken::new()).await.expect("sweep"), 1);
    let record = f.record(&t, &s).await;
    assert_eq!(record.status, CompactionStatus::Success);
    let summary = record.summary.expect("a summary");
    assert_eq!(
        (summary.first_seq, summary.last_seq),
        (1, 15),
        "all but the last 5 turns"
    );
    assert_eq!(summary.message_count, 15);
    assert_eq!(summary.summarizer, "rules");
    assert_eq!(summary.prompt_version, "compact.v1");
    assert_eq!(summary.input_hash.len(), 64);
    assert!(
        summary.source_tokens > summary.token_count,
        "the summary is smaller than its turns"
    );
    assert!(summary
        .content
        .starts_with("Summary of the earlier conversation (turns 1–15, 15 turns)"));
    assert_extractive(&summary.summary, 20);
    assert_eq!(
        compactor.sweep(&CancellationToken::new()).await.expect("sweep again"),
        0,
        "nothing is left to do"
    );
}

async fn a_worker_dead_after_its_claim_is_replaced_once_the_lease_expires<G>(f: Fixture<G>) {
    let (t, s) = f.session(12).await;
    f.request(&t, &s, false).await;
    // Worker A claims the job and dies before storing anything.
    let dead = f
        .store
        .claim_compaction(&t, s.as_str(), Utc::now(), LEASE, 3)
        .await
        .expect("claim")
        .expect("the job is free");
    let compactor = f.compactor(Arc::new(RulesSummarizer));
    assert_eq!(
        compactor.run(&t, s.as_str()).await.expect("run"),
        JobOutcome::Skipped,
        "A's lease holds"
    );
    assert_eq!(
        compactor.sweep(&CancellationToken::new()).await.expect("sweep"),
        0,
        "not due while A's lease runs"
    );
    let record = f.record(&t, &s).await;
    assert!(record.claimed && record.status == CompactionStatus::Pending);

    past_the_lease().await;
    assert_eq!(
        compactor.sweep(&CancellationToken::new()).await.expect("sweep"),
        1,
        "the expired job is claimed again"
    );
    let record = f.record(&t, &s).await;
    assert_eq!(record.status, CompactionStatus::Success);
    assert_eq!(record.summary.expect("summary").last_seq, 7);
    // A is gone; its token is spent.
    assert!(!f
        .store
        .complete_compaction(&t, s.as_str(), dead.token, None)
        .await
        .expect("complete"));
}

async fn a_stalled_worker_waking_after_another_finished_stores_nothing<G>(f: Fixture<G>) {
    let (t, s) = f.session(12).await;
    f.request(&t, &s, false).await;
    let stalled = f
        .store
        .claim_compaction(&t, s.as_str(), Utc::now(), LEASE, 3)
        .await
        .expect("claim")
        .expect("the job is free");
    past_the_lease().await;
    let compactor = f.compactor(Arc::new(RulesSummarizer));
    assert!(matches!(
        compactor.run(&t, s.as_str()).await.expect("run"),
        JobOutcome::Compacted { turns: 7 }
    ));
    let finished = f.record(&t, &s).await.summary.expect("summary");

    // More turns arrive; then the stalled worker wakes and finishes its (now different) job.
    f.append(&t, &s, 12, 10).await;
    assert_eq!(
        compactor.run_claimed(&t, s.as_str(), stalled).await.expect("late run"),
        JobOutcome::LeaseLost
    );
    let record = f.record(&t, &s).await;
    assert_eq!(record.status, CompactionStatus::Success);
    assert_eq!(record.summary.as_ref(), Some(&finished), "the late result was dropped");
}

async fn a_failing_summarizer_fails_the_job_and_the_sweep_retries_it<G>(f: Fixture<G>) {
    let (t, s) = f.session(12).await;
    f.request(&t, &s, false).await;
    let summarizer = Scripted::new(&[Step::Fail]);
    let compactor = f.compactor(summarizer.clone());
    let before = Utc::now();
    assert_eq!(compactor.run(&t, s.as_str()).await.expect("run"), JobOutcome::Failed);
    let record = f.record(&t, &s).await;
    assert_eq!(record.status, CompactionStatus::Failed);
    assert!(
        record.error.as_deref().is_some_and(|e| e.contains("model overloaded")),
        "{:?}",
        record.error
    );
    let retry_at = record.retry_at.expect("a retry time");
    assert!(
        retry_at >= before + chrono::Duration::milliseconds(190),
        "{retry_at} vs {before}"
    );
    assert_eq!(record.summary, None);
    assert_eq!(
        compactor.sweep(&CancellationToken::new()).await.expect("sweep"),
        0,
        "not due yet"
    );

    tokio::time::sleep(RETRY + Duration::from_millis(100)).await;
    assert_eq!(
        compactor.sweep(&CancellationToken::new()).await.expect("sweep"),
        1,
        "due now"
    );
    let record = f.record(&t, &s).await;
    assert_eq!(record.status, CompactionStatus::Success);
    assert_eq!(record.error, None, "a success clears the error");
    assert_eq!(record.attempts, 0);
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 2);
}

async fn a_hanging_summarizer_times_out_as_a_failure<G>(f: Fixture<G>) {
    let (t, s) = f.session(12).await;
    f.request(&t, &s, false).await;
    let compactor = f.compactor(Scripted::new(&[Step::Hang]));
    let started = Instant::now();
    assert_eq!(compactor.run(&t, s.as_str()).await.expect("run"), JobOutcome::Failed);
    assert!(started.elapsed() < LEASE, "the timeout ends the job before its lease");
    let record = f.record(&t, &s).await;
    assert_eq!(record.status, CompactionStatus::Failed);
    assert!(record.error.expect("error").contains("timed out"));
}

async fn failing_jobs_stop_at_the_attempt_cap_until_forced<G>(f: Fixture<G>) {
    let (t, s) = f.session(12).await;
    f.request(&t, &s, false).await;
    let summarizer = Scripted::new(&[Step::Fail, Step::Fail, Step::Fail]);
    let compactor = f.compactor(summarizer.clone());
    assert_eq!(compactor.run(&t, s.as_str()).await.expect("run"), JobOutcome::Failed);
    for attempt in 2..=3 {
        let retry_at = f.record(&t, &s).await.retry_at.expect("retry time");
        let wait = (retry_at - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(50);
        tokio::time::sleep(wait).await;
        assert_eq!(
            compactor.sweep(&CancellationToken::new()).await.expect("sweep"),
            1,
            "attempt {attempt} is due"
        );
        assert_eq!(f.record(&t, &s).await.attempts, attempt);
    }
    let record = f.record(&t, &s).await;
    assert_eq!(record.status, CompactionStatus::Failed);
    tokio::time::sleep(
        (record.retry_at.expect("retry time") - Utc::now())
            .to_std()
            .unwrap_or_default(),
    )
    .await;
    assert_eq!(
        compactor.sweep(&CancellationToken::new()).await.expect("sweep"),
        0,
        "the cap stops the sweep"
    );
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 3);

    assert_eq!(
        f.request(&t, &s, true).await,
        RequestOutcome::Queued,
        "forcing queues it again"
    );
    assert!(matches!(
        compactor.run(&t, s.as_str()).await.expect("run"),
        JobOutcome::Compacted { .. }
    ));
    assert_eq!(f.record(&t, &s).await.status, CompactionStatus::Success);
}

async fn a_redelivered_event_after_success_does_nothing<G>(f: Fixture<G>) {
    let (t, s) = f.session(12).await;
    f.request(&t, &s, false).await;
    let summarizer = Scripted::new(&[]);
    let handler = CompactHandler(f.compactor(summarizer.clone()));
    let event = Event::CompactionRequested {
        tenant: t.clone(),
        session_id: s.as_str().to_owned(),
    };
    handler.handle(&event).await.expect("handle");
    let done = f.record(&t, &s).await;
    assert_eq!(done.status, CompactionStatus::Success);
    // The worker died after storing, before acking: the event comes again.
    handler.handle(&event).await.expect("handle the redelivery");
    assert_eq!(f.record(&t, &s).await, done, "a redelivery changes nothing");
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 1);
    // Events of other kinds are not this worker's.
    let other = Event::TurnAppended {
        tenant: t.clone(),
        session_id: s.as_str().to_owned(),
        last_seq: 12,
    };
    handler.handle(&other).await.expect("ignore");
    assert_eq!(f.record(&t, &s).await, done);
}

async fn compaction_is_incremental_and_starts_over_after_a_reset<G>(f: Fixture<G>) {
    let (t, s) = f.session(20).await;
    let compactor = f.compactor(Arc::new(RulesSummarizer));
    f.request(&t, &s, false).await;
    compactor.run(&t, s.as_str()).await.expect("run");
    let first = f.record(&t, &s).await.summary.expect("summary");
    assert_eq!((first.first_seq, first.last_seq, first.message_count), (1, 15, 15));

    // Nothing new past the kept turns: success, same summary.
    assert_eq!(f.request(&t, &s, true).await, RequestOutcome::Queued);
    assert_eq!(
        compactor.run(&t, s.as_str()).await.expect("run"),
        JobOutcome::NothingNew
    );
    assert_eq!(f.record(&t, &s).await.summary.as_ref(), Some(&first));

    f.append(&t, &s, 20, 10).await;
    f.request(&t, &s, false).await;
    assert!(matches!(
        compactor.run(&t, s.as_str()).await.expect("run"),
        JobOutcome::Compacted { turns: 10 }
    ));
    let second = f.record(&t, &s).await.summary.expect("summary");
    assert_eq!((second.first_seq, second.last_seq, second.message_count), (1, 25, 25));
    assert!(second.source_tokens > first.source_tokens);
    assert_ne!(second.input_hash, first.input_hash);
    assert_extractive(&second.summary, 30);

    // After a reset the old summary describes turns the window no longer holds.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let reset_at = f.store.reset(&t, &s).await.expect("reset");
    tokio::time::sleep(Duration::from_millis(5)).await;
    f.append(&t, &s, 30, 8).await;
    f.request(&t, &s, false).await;
    assert!(matches!(
        compactor.run(&t, s.as_str()).await.expect("run"),
        JobOutcome::Compacted { turns: 3 }
    ));
    let third = f.record(&t, &s).await.summary.expect("summary");
    assert_eq!((third.first_seq, third.last_seq, third.message_count), (31, 33, 3));
    assert_eq!(third.reset_at, Some(reset_at));
}

/// The real consumer runtime around a summarizer that panics: the panic costs the delivery
/// (retried, then found held and acked) and the job waits out its lease, then the sweep
/// finishes it. Postgres with RabbitMQ, and SQLite with the in-process bus.
async fn a_panicking_summarizer_costs_a_lease_not_the_job<G>(f: Fixture<G>, bus: Arc<dyn EventBus>) {
    let (t, s) = f.session(12).await;
    let summarizer = Scripted::new(&[Step::Panic]);
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(run_consumer(
        bus.clone(),
        Arc::new(CompactHandler(f.compactor(summarizer.clone()))),
        ConsumerSettings {
            prefetch: 4,
            sweep_interval: Duration::from_millis(200),
            shutdown_deadline: Duration::from_secs(2),
        },
        Arc::new(Heartbeat::default()),
        shutdown.clone(),
    ));
    assert_eq!(f.request(&t, &s, false).await, RequestOutcome::Queued);
    bus.publish(&Event::CompactionRequested {
        tenant: t.clone(),
        session_id: s.as_str().to_owned(),
    })
    .await
    .expect("publish");
    let started = Instant::now();
    loop {
        let record = f.record(&t, &s).await;
        if record.status == CompactionStatus::Success {
            assert_eq!(record.attempts, 0);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the job never finished: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        started.elapsed() >= LEASE - Duration::from_millis(100),
        "the job waited out the lease of the panicked run"
    );
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        2,
        "one panicked run, one good one"
    );
    assert!(!worker.is_finished(), "the worker survived the panic");
    shutdown.cancel();
    worker.await.expect("join").expect("worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_local_bus_a_panicking_summarizer_costs_a_lease_not_the_job() {
    let f = sqlite().await;
    let bus = Arc::new(LocalBus::new(3, Duration::from_millis(50)));
    a_panicking_summarizer_costs_a_lease_not_the_job(f, bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rabbitmq_a_panicking_summarizer_costs_a_lease_not_the_job() {
    let f = postgres().await;
    let broker = TestBroker::start("compaction-panic").await;
    let bus = Arc::new(broker.bus().await);
    a_panicking_summarizer_costs_a_lease_not_the_job(f, bus).await;
    broker.cleanup().await;
}
