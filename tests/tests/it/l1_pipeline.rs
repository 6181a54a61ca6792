//! The L1 pipeline's failure paths against real Postgres and Qdrant Edge, with the rules
//! engines: racing workers, a crash before the commit, an index outage during dedup and after
//! the commit. Nothing accepted is lost; nothing is written twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use async_trait::async_trait;
use integration_tests::app::tenant;
use integration_tests::faulty_index::FaultyIndex;
use integration_tests::pg::TestDb;
use shared::bus::LocalBus;
use shared::domain::{NewTurn, SessionId, SessionKey, Tenant};
use shared::index::{EdgeIndex, PointKind, SearchIndex};
use shared::memory::pipeline::{MemoryIndexer, Pipeline, PipelineSettings};
use shared::memory::rules::{RulesExtractor, RulesJudge};
use shared::memory::schedule::{ScheduleSettings, Scheduler};
use shared::memory::MemoryStatus;
use shared::store::memory::{
    BatchCommit, CommitOutcome, MemoryCursor, MemoryFilter, MemoryPatch, MemoryStore, OutboxEntry, ProvenanceRecord,
    ScheduleState,
};
use shared::store::{PostgresStore, StoreError, StoreResult, TranscriptStore};
use uuid::Uuid;

/// A memory store whose next `fail_commits` commits fail as if the process died before the
/// transaction committed, and whose next `meeting_commits` commits wait for each other at
/// `meet` before going on, so that runs race on demand rather than by chance.
struct Crashing {
    inner: Arc<PostgresStore>,
    fail_commits: AtomicUsize,
    meeting_commits: AtomicUsize,
    meet: tokio::sync::Barrier,
}

impl Crashing {
    fn failing(inner: Arc<PostgresStore>, fail_commits: usize) -> Self {
        Self {
            inner,
            fail_commits: AtomicUsize::new(fail_commits),
            meeting_commits: AtomicUsize::new(0),
            meet: tokio::sync::Barrier::new(1),
        }
    }

    /// The next `runs` commits each wait until all of them have arrived.
    fn meeting(inner: Arc<PostgresStore>, runs: usize) -> Self {
        Self {
            inner,
            fail_commits: AtomicUsize::new(0),
            meeting_commits: AtomicUsize::new(runs),
            meet: tokio::sync::Barrier::new(runs),
        }
    }
}

#[async_trait]
impl MemoryStore for Crashing {
    async fn commit_batch(&self, commit: &BatchCommit) -> StoreResult<CommitOutcome> {
        if self
            .fail_commits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StoreError::Unavailable("connection reset before COMMIT".into()));
        }
        if self
            .meeting_commits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            self.meet.wait().await;
        }
        self.inner.commit_batch(commit).await
    }
    async fn record_provenance(&self, records: &[ProvenanceRecord]) -> StoreResult<()> {
        self.inner.record_provenance(records).await
    }
    async fn memories_by_id(&self, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<Vec<shared::memory::Memory>> {
        self.inner.memories_by_id(tenant, ids).await
    }
    async fn list_memories(
        &self,
        tenant: &Tenant,
        filter: &MemoryFilter,
        after: Option<MemoryCursor>,
        limit: u32,
    ) -> StoreResult<Vec<shared::memory::Memory>> {
        self.inner.list_memories(tenant, filter, after, limit).await
    }
    async fn memory_history(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<shared::memory::Memory>> {
        self.inner.memory_history(tenant, id).await
    }
    async fn memory_provenance(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<ProvenanceRecord>> {
        self.inner.memory_provenance(tenant, id).await
    }
    async fn patch_memory(
        &self,
        tenant: &Tenant,
        id: Uuid,
        patch: &MemoryPatch,
        record: &ProvenanceRecord,
    ) -> StoreResult<Option<shared::memory::Memory>> {
        self.inner.patch_memory(tenant, id, patch, record).await
    }
    async fn delete_memory(&self, tenant: &Tenant, id: Uuid) -> StoreResult<bool> {
        self.inner.delete_memory(tenant, id).await
    }
    async fn outbox(&self, limit: u32) -> StoreResult<Vec<OutboxEntry>> {
        self.inner.outbox(limit).await
    }
    async fn requeue_all(&self) -> StoreResult<u64> {
        self.inner.requeue_all().await
    }
    async fn clear_outbox(&self, seqs: &[i64]) -> StoreResult<()> {
        self.inner.clear_outbox(seqs).await
    }
    async fn schedule(&self, session: &SessionKey) -> StoreResult<ScheduleState> {
        self.inner.schedule(session).await
    }
    async fn set_idle_due(&self, session: &SessionKey, due: chrono::DateTime<chrono::Utc>) -> StoreResult<()> {
        self.inner.set_idle_due(session, due).await
    }
    async fn claim_session(
        &self,
        session: &SessionKey,
        owner: Uuid,
        until: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<bool> {
        self.inner.claim_session(session, owner, until).await
    }
    async fn release_session(&self, session: &SessionKey, owner: Uuid) -> StoreResult<()> {
        self.inner.release_session(session, owner).await
    }
    async fn due_sessions(&self, now: chrono::DateTime<chrono::Utc>, limit: u32) -> StoreResult<Vec<SessionKey>> {
        self.inner.due_sessions(now, limit).await
    }
    async fn recent_failures(&self, limit: u32) -> StoreResult<Vec<ProvenanceRecord>> {
        self.inner.recent_failures(limit).await
    }
    async fn count_memories(&self, tenant: &Tenant, status: MemoryStatus) -> StoreResult<i64> {
        self.inner.count_memories(tenant, status).await
    }
}

struct Fixture {
    store: Arc<PostgresStore>,
    index: Arc<FaultyIndex>,
    _db: TestDb,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let db = TestDb::create().await;
    let store = Arc::new(db.store().await);
    let dir = tempfile::tempdir().expect("temp dir");
    let edge = EdgeIndex::open(&dir.path().join("index"), 1_000, None).expect("open index");
    Fixture {
        store,
        index: Arc::new(FaultyIndex::new(Arc::new(edge))),
        _db: db,
        _dir: dir,
    }
}

fn pipeline(turns: Arc<PostgresStore>, memories: Arc<dyn MemoryStore>, index: Arc<FaultyIndex>) -> Pipeline {
    Pipeline::new(
        turns,
        memories,
        index,
        None,
        Arc::new(RulesExtractor::new()),
        Arc::new(RulesJudge::new()),
        PipelineSettings::default(),
    )
}

const FACTS: [&str; 4] = [
    "I am a database administrator.",
    "I prefer PostgreSQL over MySQL.",
    "Never restart the primary during business hours.",
    "Our staging cluster runs in Frankfurt.",
];

/// The tests' session "s1" of `t`.
fn s1(t: &Tenant) -> SessionKey {
    SessionKey::new(t.clone(), "s1")
}

async fn append_facts(store: &PostgresStore, t: &Tenant, session: &str) {
    let session = SessionId::parse(session).unwrap();
    let turns: Vec<NewTurn> = FACTS
        .iter()
        .map(|f| NewTurn::new("user", f, None, None, None).unwrap())
        .collect();
    store.append(t, &session, &turns).await.expect("append");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_workers_write_each_memory_once() {
    let f = fixture().await;
    let t = tenant();
    append_facts(&f.store, &t, "s1").await;
    // Both runs read the batch before either commits: left to chance, one run may finish
    // before the other starts, and then finds nothing to do.
    let meeting = Arc::new(Crashing::meeting(f.store.clone(), 2));
    let a = pipeline(f.store.clone(), meeting.clone(), f.index.clone());
    let b = pipeline(f.store.clone(), meeting, f.index.clone());
    let session = s1(&t);
    let (ra, rb) = tokio::join!(a.run_batch(&session), b.run_batch(&session));
    let (ra, rb) = (
        ra.expect("run a").expect("a batch"),
        rb.expect("run b").expect("a batch"),
    );
    assert!(ra.raced ^ rb.raced, "exactly one run commits: {ra:?} {rb:?}");
    let count = f.store.count_memories(&t, MemoryStatus::Active).await.unwrap();
    assert_eq!(count as usize, FACTS.len(), "no memory written twice");
    assert!(a.run_batch(&s1(&t)).await.unwrap().is_none(), "nothing is left pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_before_the_commit_redoes_the_batch_once() {
    let f = fixture().await;
    let t = tenant();
    append_facts(&f.store, &t, "s1").await;
    let crashing = Arc::new(Crashing::failing(f.store.clone(), 1));
    let p = pipeline(f.store.clone(), crashing, f.index.clone());
    let error = p.run_batch(&s1(&t)).await.expect_err("the commit fails");
    assert!(error.is_retryable(), "a crash is retried, never given up: {error:?}");
    assert_eq!(f.store.count_memories(&t, MemoryStatus::Active).await.unwrap(), 0);
    let report = p.run_batch(&s1(&t)).await.expect("retry").expect("a batch");
    assert_eq!(report.added, FACTS.len());
    let again = p.run_batch(&s1(&t)).await.expect("redelivery");
    assert!(again.is_none(), "a redelivered event finds nothing to do");
    assert_eq!(
        f.store.count_memories(&t, MemoryStatus::Active).await.unwrap() as usize,
        FACTS.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_index_outage_loses_no_memory() {
    let f = fixture().await;
    let t = tenant();
    // Dedup cannot read candidates and the index cannot be written: the batch still commits.
    f.index.set_reads_down(true);
    f.index.set_writes_down(true);
    append_facts(&f.store, &t, "s1").await;
    let scheduler = Scheduler::new(
        f.store.clone(),
        pipeline(f.store.clone(), f.store.clone(), f.index.clone()),
        MemoryIndexer::new(f.store.clone(), f.index.clone(), None),
        Arc::new(LocalBus::default()),
        ScheduleSettings::default(),
    );
    scheduler
        .poll(&s1(&t), shared::memory::schedule::Trigger::NewTurns)
        .await
        .expect("extraction does not need the index");
    assert_eq!(
        f.store.count_memories(&t, MemoryStatus::Active).await.unwrap() as usize,
        FACTS.len(),
        "every card is stored when dedup cannot run"
    );
    let memory = &f
        .store
        .list_memories(&t, &MemoryFilter::default(), None, 1)
        .await
        .unwrap()[0];
    let provenance = f.store.memory_provenance(&t, memory.id).await.unwrap();
    let warnings = provenance[0].detail["warnings"].to_string();
    assert!(
        warnings.contains("index failed"),
        "the degraded dedup is recorded: {warnings}"
    );
    assert_eq!(f.index.count(&t, PointKind::Memory).await.unwrap(), 0);
    assert!(
        !f.store.outbox(100).await.unwrap().is_empty(),
        "the index work waits in the outbox"
    );
    assert!(
        scheduler.sweep(&CancellationToken::new()).await.is_err(),
        "the sweep fails while the index is down"
    );

    f.index.set_reads_down(false);
    f.index.set_writes_down(false);
    scheduler
        .sweep(&CancellationToken::new())
        .await
        .expect("sweep after the outage");
    assert_eq!(
        f.index.count(&t, PointKind::Memory).await.unwrap() as usize,
        FACTS.len(),
        "the outbox brought the index up to date"
    );
    assert!(f.store.outbox(100).await.unwrap().is_empty());
}

/// Removing the index directory loses no memory: the new, empty index gets every active
/// memory again (as it gets every turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_index_gets_every_memory_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env: std::collections::HashMap<String, String> = [
        ("DATA_DIR", dir.path().join("data").display().to_string()),
        ("EMBEDDING", "none".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let settings = shared::config::Settings::from_map(&env).expect("settings");
    let t = tenant();
    {
        let backends = shared::backends::Backends::connect(&settings).await.expect("connect");
        let session = SessionId::parse("s1").unwrap();
        let turn = NewTurn::new("user", "I am the on-call engineer this week.", None, None, None).unwrap();
        backends.store.append(&t, &session, &[turn]).await.unwrap();
        let scheduler = backends.extract_scheduler(&settings).expect("scheduler");
        scheduler
            .poll(&s1(&t), shared::memory::schedule::Trigger::Flush)
            .await
            .expect("extract");
        assert_eq!(backends.index.count(&t, PointKind::Memory).await.unwrap(), 1);
    }
    std::fs::remove_dir_all(dir.path().join("data").join("index")).expect("remove the index");
    let backends = shared::backends::Backends::connect(&settings).await.expect("reconnect");
    assert!(backends.index.created());
    assert_eq!(backends.index.count(&t, PointKind::Memory).await.unwrap(), 0);
    let scheduler = backends.extract_scheduler(&settings).expect("scheduler");
    scheduler.sweep(&CancellationToken::new()).await.expect("sweep");
    assert_eq!(
        backends.index.count(&t, PointKind::Memory).await.unwrap(),
        1,
        "the memory is back in the new index"
    );
}

/// Two schedulers (two worker replicas) woken for the same session at once: one runs the
/// batch, the other sees the lease and does not start a second run (in LLM mode, a second LLM
/// call for a batch the first will commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_polls_of_a_session_run_one_batch() {
    let f = fixture().await;
    let t = tenant();
    append_facts(&f.store, &t, "s1").await;
    // A slow engine (like an LLM call): both polls are inside it at once unless one waits.
    let (a, b, calls) = slow_replicas(&f, Duration::from_millis(300), ScheduleSettings::default());
    let trigger = shared::memory::schedule::Trigger::NewTurns;
    let session = s1(&t);
    let (ra, rb) = tokio::join!(a.poll(&session, trigger), b.poll(&session, trigger));
    assert_eq!(ra.unwrap() + rb.unwrap(), 1, "exactly one run extracted the batch");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the engine was called once, not once per run"
    );
    assert_eq!(
        f.store.count_memories(&t, MemoryStatus::Active).await.unwrap() as usize,
        FACTS.len()
    );
    // The lease was released: the next poll is free to run.
    let more = SessionId::parse("s1").unwrap();
    f.store
        .append(
            &t,
            &more,
            &[NewTurn::new("user", "I prefer vim.", None, None, None).unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(
        a.poll(&s1(&t), shared::memory::schedule::Trigger::Flush).await.unwrap(),
        1
    );
}

/// A worker killed in the middle of a long batch: while it lived, its lease held however long
/// the batch took (a second worker polling then ran nothing), and once it died the session was
/// another worker's one lease later, with every memory written once. The lease used to be
/// renewed only between batches and to last 10 minutes, for the slowest LLM call; a killed
/// worker's sessions then waited those 10 minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_keeps_its_lease_while_it_works_and_a_killed_one_frees_the_session() {
    let f = fixture().await;
    let t = tenant();
    append_facts(&f.store, &t, "s1").await;
    let lease = Duration::from_millis(600);
    // Four leases long: a lease renewed only before the batch lapses three times in it.
    let settings = ScheduleSettings {
        lease,
        ..ScheduleSettings::default()
    };
    let (a, b, calls) = slow_replicas(&f, lease * 4, settings);
    let trigger = shared::memory::schedule::Trigger::Flush;
    let session = s1(&t);
    let killed = tokio::spawn(async move { a.poll(&session, trigger).await });
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(lease * 2).await;
    assert_eq!(
        b.poll(&s1(&t), trigger).await.unwrap(),
        0,
        "the working run's lease holds past its length"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no second run started the batch");

    // SIGKILL: the run stops where it is, without releasing anything.
    killed.abort();
    assert!(killed.await.unwrap_err().is_cancelled());
    let started = std::time::Instant::now();
    let ran = loop {
        let ran = b.poll(&s1(&t), trigger).await.unwrap();
        if ran > 0 {
            break ran;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the killed run's lease never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ran, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        f.store.count_memories(&t, MemoryStatus::Active).await.unwrap() as usize,
        FACTS.len(),
        "every memory once"
    );
}

/// Two schedulers (two worker replicas) sharing one pipeline whose engine is the rules
/// extractor slowed by `delay`, and the count of that engine's calls.
fn slow_replicas(f: &Fixture, delay: Duration, settings: ScheduleSettings) -> (Scheduler, Scheduler, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let slow = Pipeline::new(
        f.store.clone(),
        f.store.clone(),
        f.index.clone(),
        None,
        Arc::new(Slow::new(delay, calls.clone())),
        Arc::new(RulesJudge::new()),
        PipelineSettings::default(),
    );
    let scheduler = || {
        Scheduler::new(
            f.store.clone(),
            slow.clone(),
            MemoryIndexer::new(f.store.clone(), f.index.clone(), None),
            Arc::new(LocalBus::default()),
            settings.clone(),
        )
    };
    (scheduler(), scheduler(), calls)
}

/// The rules extractor, slower by a fixed delay, counting its calls.
struct Slow {
    rules: RulesExtractor,
    delay: Duration,
    calls: Arc<AtomicUsize>,
}

impl Slow {
    fn new(delay: Duration, calls: Arc<AtomicUsize>) -> Self {
        Self {
            rules: RulesExtractor::new(),
            delay,
            calls,
        }
    }
}

#[async_trait]
impl shared::memory::CardExtractor for Slow {
    fn mode(&self) -> &'static str {
        "slow"
    }
    async fn extract(
        &self,
        batch: &shared::memory::Batch,
    ) -> Result<shared::memory::Extraction, shared::memory::EngineError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.rules.extract(batch).await
    }
}
