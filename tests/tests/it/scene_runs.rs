//! Scene runs against real stores and file stores (SQLite + a local directory; Postgres + the
//! S3 server when `SEDIMENT_TEST_S3_URL` is set, else a local directory): the cap through the
//! editor's tools, two runners racing on one owner, rollback of a failed edit, recovery of a
//! run that died mid-edit, and the lease a long run renews.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use async_trait::async_trait;
use chrono::{SubsecRound as _, Utc};
use shared::bus::{Event, EventBus, LocalBus};
use shared::domain::{NewTurn, SessionId, Tenant};
use shared::files::{FileStore, LocalFileStore, S3FileStore};
use shared::memory::{Category, EngineError, Memory, MemoryStatus};
use shared::runtime::Handler as _;
use shared::scene::doc::{SceneDoc, SceneEvent};
use shared::scene::editor::{EditError, EditOutcome, RulesSceneEditor, SceneEditor};
use shared::scene::journal::Journal;
use shared::scene::paths;
use shared::scene::run::{RunOutcome, SceneError, SceneHandler, SceneRunner, SceneSettings};
use shared::scene::timer::SceneTimerSettings;
use shared::scene::workspace::{Refusal, Workspace, WorkspaceError, WriteDeadline};
use shared::store::memory::{BatchCommit, MemoryStore};
use shared::store::scene::{SceneSchedule, SceneStore, LAYER_L2};
use shared::store::TranscriptStore;
use uuid::Uuid;

trait Stores: TranscriptStore + MemoryStore + SceneStore {}
impl<T: TranscriptStore + MemoryStore + SceneStore> Stores for T {}

/// A store of each backend with a file store beside it, and what keeps them alive.
struct Fixture {
    store: Arc<dyn Stores>,
    files: Arc<dyn FileStore>,
    _guards: Vec<Box<dyn std::any::Any + Send>>,
}

impl Fixture {
    async fn sqlite() -> Self {
        let (store, dir) = integration_tests::stores::sqlite().await;
        let files_dir = tempfile::tempdir().expect("temp dir");
        let files = LocalFileStore::open(files_dir.path()).expect("open local files");
        Self {
            store: Arc::new(store),
            files: Arc::new(files),
            _guards: vec![Box::new(dir), Box::new(files_dir)],
        }
    }

    async fn postgres() -> Self {
        let (store, db) = integration_tests::stores::postgres().await;
        let mut guards: Vec<Box<dyn std::any::Any + Send>> = vec![Box::new(db)];
        let files: Arc<dyn FileStore> = match integration_tests::s3::TestBucket::start("scene-runs").await {
            Some(bucket) => {
                let store = S3FileStore::new(bucket.settings()).expect("S3 client");
                guards.push(Box::new(bucket));
                Arc::new(store)
            }
            None => {
                let dir = tempfile::tempdir().expect("temp dir");
                let files = LocalFileStore::open(dir.path()).expect("open local files");
                guards.push(Box::new(dir));
                Arc::new(files)
            }
        };
        Self {
            store: Arc::new(store),
            files,
            _guards: guards,
        }
    }

    fn runner(&self, editor: Arc<dyn SceneEditor>, settings: SceneSettings) -> SceneRunner {
        let bus: Arc<dyn EventBus> = Arc::new(LocalBus::new(3, Duration::from_millis(50)));
        SceneRunner::new(
            self.store.clone(),
            self.store.clone(),
            self.files.clone(),
            bus,
            editor,
            settings,
        )
    }
}

fn settings() -> SceneSettings {
    SceneSettings {
        timer: SceneTimerSettings {
            after_l1: Duration::from_millis(1),
            min_gap: Duration::from_millis(1),
            max_wait: Duration::from_secs(60),
        },
        retry_after: Duration::from_secs(600),
        ..SceneSettings::default()
    }
}

fn tenant() -> Tenant {
    Tenant {
        team: format!("team-{}", Uuid::new_v4().simple()),
        agent: "agent/with slash".into(),
        user: "用户".into(),
    }
}

/// Stores one memory of `tenant` (through a session of its own) and makes the scene run due.
async fn add_memory(store: &dyn Stores, tenant: &Tenant, content: &str, category: Category, scene: &str) -> Memory {
    let memory = commit_memory(store, tenant, content, category, scene).await;
    let now = memory.created_at;
    store
        .update_scene_schedule(tenant, &move |s| SceneSchedule {
            due_at: Some(now),
            last_l1_at: Some(now),
            ..s
        })
        .await
        .expect("make the run due");
    memory
}

/// Stores one memory of `tenant` through a session of its own, as an L1 batch commits it, and
/// nothing else (as if moving the scene timer afterwards had failed).
async fn commit_memory(store: &dyn Stores, tenant: &Tenant, content: &str, category: Category, scene: &str) -> Memory {
    let session = SessionId::parse(&format!("s-{}", Uuid::new_v4().simple())).expect("session");
    let turn = NewTurn::new("user", content, None, None, None).expect("turn");
    TranscriptStore::append(store, tenant, &session, &[turn])
        .await
        .expect("append");
    let turns = TranscriptStore::list(store, tenant, &session, 0, 10)
        .await
        .expect("list");
    let now = Utc::now().trunc_subsecs(6);
    let memory = Memory {
        id: Uuid::new_v4(),
        tenant: tenant.clone(),
        session_id: session.as_str().to_owned(),
        content: content.to_owned(),
        category,
        priority: 70,
        scene: Some(scene.to_owned()),
        occurred_at: Some("2026-11-30".into()),
        source_message_ids: vec![turns[0].id],
        status: MemoryStatus::Active,
        superseded_by: None,
        task: None,
        created_at: now,
        updated_at: now,
    };
    store
        .commit_batch(&BatchCommit {
            tenant: tenant.clone(),
            session_id: session.as_str().to_owned(),
            expected_cursor: 0,
            new_cursor: turns[0].seq,
            memories: vec![memory.clone()],
            archive: Vec::new(),
            provenance: Vec::new(),
            now,
        })
        .await
        .expect("commit memory");
    memory
}

/// The owner's scene documents as stored, by id.
async fn documents(f: &Fixture, tenant: &Tenant) -> Vec<(Uuid, String)> {
    let mut out = Vec::new();
    for row in f.store.scenes(tenant, false).await.expect("scenes") {
        let bytes = f
            .files
            .get(&row.object_key)
            .await
            .expect("get")
            .expect("document exists");
        out.push((row.id, String::from_utf8(bytes).expect("utf-8")));
    }
    out.sort();
    out
}

/// The rules editor, slowed down so that two runs overlap.
struct Slow(Duration);

#[async_trait]
impl SceneEditor for Slow {
    fn mode(&self) -> &'static str {
        "rules"
    }
    async fn edit(&self, workspace: &mut Workspace, memories: &[Memory]) -> Result<EditOutcome, EditError> {
        tokio::time::sleep(self.0).await;
        RulesSceneEditor.edit(workspace, memories).await
    }
}

/// Writes half an edit, then fails like a model that gave up.
struct FailsMidway;

#[async_trait]
impl SceneEditor for FailsMidway {
    fn mode(&self) -> &'static str {
        "llm"
    }
    async fn edit(&self, workspace: &mut Workspace, _memories: &[Memory]) -> Result<EditOutcome, EditError> {
        let entry = workspace.entries()[0].clone();
        let mut doc = entry.doc.clone();
        doc.overview = "half-written".into();
        doc.events.clear();
        workspace
            .update(&entry.reference, doc)
            .await?
            .expect("the update itself is allowed");
        Err(EditError::Engine(EngineError::Malformed("the model gave up".into())))
    }
}

async fn racing_runners(f: Fixture) {
    let t = tenant();
    add_memory(
        &*f.store,
        &t,
        "实例 A 在 02:10 出现慢查询，持续 45 分钟",
        Category::Episodic,
        "慢查询",
    )
    .await;
    let slow: Arc<dyn SceneEditor> = Arc::new(Slow(Duration::from_millis(300)));
    let a = f.runner(slow.clone(), settings());
    let b = f.runner(slow, settings());
    let (ra, rb) = tokio::join!(a.run(&t), b.run(&t));
    let mut outcomes = vec![ra.expect("run a"), rb.expect("run b")];
    outcomes.sort_by_key(|o| matches!(o, RunOutcome::Busy));
    assert!(
        matches!(outcomes[0], RunOutcome::Edited { scenes: 1, memories: 1 }),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], RunOutcome::Busy, "{outcomes:?}");
    let docs = documents(&f, &t).await;
    assert_eq!(docs.len(), 1);
    let doc = SceneDoc::parse(&docs[0].1).expect("a well-formed document");
    assert!(doc.events.iter().any(|e| e.what.contains("慢查询")), "{doc:?}");
    let rows = f.store.scenes(&t, false).await.expect("rows");
    assert_eq!(rows[0].version, 1);
    // Nothing left behind: the snapshot of the run is gone.
    let leftovers = f
        .files
        .list(&format!("{}snapshots/", paths::owner_prefix(&t)))
        .await
        .expect("list");
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runners_on_one_owner_never_corrupt_a_document_sqlite() {
    racing_runners(Fixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runners_on_one_owner_never_corrupt_a_document_postgres() {
    racing_runners(Fixture::postgres().await).await;
}

/// Writes half an edit to the first scene, works on (`None`: for ever), then writes again:
/// an editor as slow as an LLM agent can be.
struct WritesThenWorks(Option<Duration>);

#[async_trait]
impl SceneEditor for WritesThenWorks {
    fn mode(&self) -> &'static str {
        "llm"
    }
    async fn edit(&self, workspace: &mut Workspace, _memories: &[Memory]) -> Result<EditOutcome, EditError> {
        let entry = workspace.entries()[0].clone();
        let mut doc = entry.doc.clone();
        doc.overview = "half-written".into();
        workspace
            .update(&entry.reference, doc.clone())
            .await?
            .expect("the update itself is allowed");
        match self.0 {
            Some(work) => tokio::time::sleep(work).await,
            None => std::future::pending().await,
        }
        doc.overview = "written late".into();
        workspace
            .update(&entry.reference, doc)
            .await?
            .expect("the update itself is allowed");
        Err(EditError::Engine(EngineError::Malformed(
            "not meant to get this far".into(),
        )))
    }
}

/// The owner with one scene, edited by a first run; returns the folder after it.
async fn one_scene(f: &Fixture, t: &Tenant) -> Vec<(Uuid, String)> {
    add_memory(&*f.store, t, "报表任务 02:00 批量执行", Category::Episodic, "慢查询").await;
    let rules = f.runner(Arc::new(RulesSceneEditor), settings());
    assert!(matches!(
        rules.run(t).await.expect("first run"),
        RunOutcome::Edited { .. }
    ));
    documents(f, t).await
}

/// A run three leases long (an LLM editor that takes its time) renews its lease: two leases
/// in, another runner finds the owner busy, and the run's write at the end is still inside its
/// deadline, so it commits. Without the renewal the other runner took the owner after one
/// lease and the long run's write was refused at half of it.
async fn long_run_renews(f: Fixture) {
    let t = tenant();
    add_memory(
        &*f.store,
        &t,
        "实例 A 在 02:10 出现慢查询",
        Category::Episodic,
        "慢查询",
    )
    .await;
    // Renewed every 0.5 s, so the deadline is always at least 0.25 s ahead: room for a busy
    // machine's late timers.
    let lease = Duration::from_millis(1500);
    let short = SceneSettings { lease, ..settings() };
    let long = f.runner(Arc::new(Slow(lease * 3)), short.clone());
    let other = f.runner(Arc::new(RulesSceneEditor), short);
    let owner = t.clone();
    let run = tokio::spawn(async move { long.run(&owner).await });
    tokio::time::sleep(lease * 2).await;
    assert_eq!(
        other.run(&t).await.expect("the other run"),
        RunOutcome::Busy,
        "two leases in, the long run still holds the owner"
    );
    assert_eq!(
        run.await.expect("join").expect("the long run"),
        RunOutcome::Edited { scenes: 1, memories: 1 }
    );
    let rows = f.store.scenes(&t, false).await.expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].version, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_many_leases_long_renews_its_lease_and_commits_sqlite() {
    long_run_renews(Fixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_many_leases_long_renews_its_lease_and_commits_postgres() {
    long_run_renews(Fixture::postgres().await).await;
}

/// A run killed mid-edit (its task dropped, as a SIGKILLed worker's would stop) holds its
/// owner one lease at most: another runner takes the owner within a lease of the kill,
/// restores what the dead run wrote, and does its own work.
async fn killed_run_frees_owner(f: Fixture) {
    let t = tenant();
    let before = one_scene(&f, &t).await;
    add_memory(&*f.store, &t, "新 SQL 没有走索引", Category::WorkFact, "慢查询").await;
    let lease = Duration::from_secs(1);
    let short = SceneSettings { lease, ..settings() };
    let hangs = f.runner(Arc::new(WritesThenWorks(None)), short.clone());
    let other = f.runner(Arc::new(RulesSceneEditor), short);
    let owner = t.clone();
    let run = tokio::spawn(async move { hangs.run(&owner).await });
    let written = Instant::now();
    while !documents(&f, &t).await[0].1.contains("half-written") {
        assert!(
            written.elapsed() < Duration::from_secs(10),
            "the hanging run never wrote"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(lease * 2).await;
    assert_eq!(
        other.run(&t).await.expect("busy"),
        RunOutcome::Busy,
        "renewed while it works"
    );

    run.abort();
    let killed = Instant::now();
    let outcome = loop {
        let outcome = other.run(&t).await.expect("the other run");
        if outcome != RunOutcome::Busy {
            break outcome;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let waited = killed.elapsed();
    assert!(matches!(outcome, RunOutcome::Edited { .. }), "{outcome:?}");
    assert!(waited < lease * 3, "the owner waited {waited:?} after the kill");
    let after = documents(&f, &t).await;
    assert!(!after[0].1.contains("half-written"), "the dead run's edit is undone");
    let old = SceneDoc::parse(&before[0].1).expect("old");
    let doc = SceneDoc::parse(&after[0].1).expect("a well-formed document");
    assert_eq!(doc.overview, old.overview);
    assert!(doc.conclusions.iter().any(|c| c.contains("没有走索引")), "{doc:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_frees_its_owner_within_one_lease_sqlite() {
    killed_run_frees_owner(Fixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_frees_its_owner_within_one_lease_postgres() {
    killed_run_frees_owner(Fixture::postgres().await).await;
}

/// A run past its longest time writes no more edits, however well it renews; while its lease
/// is still safe it rolls back what it wrote and gives the owner back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_longest_time_stops_editing_and_rolls_back() {
    let f = Fixture::sqlite().await;
    let t = tenant();
    let before = one_scene(&f, &t).await;
    add_memory(&*f.store, &t, "新 SQL 没有走索引", Category::WorkFact, "慢查询").await;
    let capped = SceneSettings {
        lease: Duration::from_secs(3),
        max_run: Duration::from_millis(300),
        ..settings()
    };
    let slow = f.runner(Arc::new(WritesThenWorks(Some(Duration::from_millis(600)))), capped);
    let error = slow.run(&t).await.expect_err("the run is cut off");
    assert!(
        matches!(error, SceneError::Edit(EditError::Workspace(WorkspaceError::Deadline))),
        "{error:?}"
    );
    assert_eq!(documents(&f, &t).await, before, "the folder is restored");
    assert!(
        f.store
            .claim_scene_run(&t, Utc::now(), Duration::from_secs(1))
            .await
            .expect("claim")
            .is_some(),
        "the owner was given back"
    );
}

/// A run that stalled past its lease (it stopped renewing at its longest time, then stayed
/// stuck for a whole lease) fails, and leaves what it wrote for the next claim to restore: a
/// newer run may hold the owner. Its wake-up is done, not parked (found by the chaos scenario
/// worker-pause, where a SIGSTOPped scene worker resumed past its lease), and the next run
/// restores the folder and does its own work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stalled_past_its_lease_leaves_the_restore_to_the_next_and_its_wake_up_is_done() {
    let f = Fixture::sqlite().await;
    let t = tenant();
    let before = one_scene(&f, &t).await;
    add_memory(&*f.store, &t, "新 SQL 没有走索引", Category::WorkFact, "慢查询").await;
    let stalls = SceneSettings {
        lease: Duration::from_millis(300),
        max_run: Duration::from_millis(100),
        ..settings()
    };
    let stalled = f.runner(Arc::new(WritesThenWorks(Some(Duration::from_millis(900)))), stalls);
    SceneHandler(stalled)
        .handle(&Event::SceneDue { tenant: t.clone() })
        .await
        .expect("the wake-up is done");
    assert!(
        documents(&f, &t).await[0].1.contains("half-written"),
        "past its lease the run restores nothing itself"
    );

    let next = f.runner(Arc::new(RulesSceneEditor), settings());
    assert!(matches!(
        next.run(&t).await.expect("the next run"),
        RunOutcome::Edited { .. }
    ));
    let after = documents(&f, &t).await;
    assert!(!after[0].1.contains("half-written"), "the next run restored the folder");
    let old = SceneDoc::parse(&before[0].1).expect("old");
    let doc = SceneDoc::parse(&after[0].1).expect("a well-formed document");
    assert_eq!(doc.overview, old.overview);
}

async fn failed_edit_rolls_back(f: Fixture) {
    let t = tenant();
    add_memory(&*f.store, &t, "报表任务 02:00 批量执行", Category::Episodic, "慢查询").await;
    let rules = f.runner(Arc::new(RulesSceneEditor), settings());
    assert!(matches!(
        rules.run(&t).await.expect("first run"),
        RunOutcome::Edited { .. }
    ));
    let before = documents(&f, &t).await;

    add_memory(&*f.store, &t, "新 SQL 没有走索引", Category::WorkFact, "慢查询").await;
    let failing = f.runner(Arc::new(FailsMidway), settings());
    let error = failing.run(&t).await.expect_err("the run fails");
    assert!(matches!(error, SceneError::Edit(_)), "{error:?}");
    assert_eq!(documents(&f, &t).await, before, "the folder is restored");
    let rows = f.store.scenes(&t, false).await.expect("rows");
    assert_eq!(rows[0].version, 1, "no row was committed");
    let records = f
        .store
        .artifact_provenance(&t, LAYER_L2, None, 10)
        .await
        .expect("provenance");
    assert_eq!(records[0].event, "rollback", "{records:?}");
    assert!(records[0].detail["reason"]
        .as_str()
        .unwrap_or_default()
        .contains("gave up"));
    // The owner was given back, and the retry is scheduled (not now: `retry_after` is 10 min).
    let schedule = f.store.scene_schedule(&t).await.expect("schedule");
    assert!(schedule
        .due_at
        .is_some_and(|due| due > Utc::now() + chrono::Duration::minutes(5)));
    assert!(f
        .store
        .claim_scene_run(&t, Utc::now(), Duration::from_secs(1))
        .await
        .expect("claim")
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_edit_is_rolled_back_sqlite() {
    failed_edit_rolls_back(Fixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_edit_is_rolled_back_postgres() {
    failed_edit_rolls_back(Fixture::postgres().await).await;
}

async fn dead_run_is_restored(f: Fixture) {
    let t = tenant();
    add_memory(
        &*f.store,
        &t,
        "Buffer Pool 命中率跌至 92%",
        Category::Episodic,
        "慢查询",
    )
    .await;
    let rules = f.runner(Arc::new(RulesSceneEditor), settings());
    assert!(matches!(
        rules.run(&t).await.expect("first run"),
        RunOutcome::Edited { .. }
    ));
    let before = documents(&f, &t).await;

    // A run claims the owner, journals a document, scribbles over it, creates another, dies.
    let lease = f
        .store
        .claim_scene_run(&t, Utc::now(), Duration::from_millis(50))
        .await
        .expect("claim")
        .expect("free");
    let mut journal = Journal::new(f.files.clone(), &t, lease.token);
    let key = f.store.scenes(&t, false).await.expect("rows")[0].object_key.clone();
    journal.before_write(&key).await.expect("journal");
    f.files.put(&key, b"garbage".to_vec()).await.expect("scribble");
    let stray = paths::scene_key(&t, Uuid::new_v4());
    journal.before_write(&stray).await.expect("journal");
    f.files.put(&stray, b"# half a scene".to_vec()).await.expect("create");
    tokio::time::sleep(Duration::from_millis(100)).await;

    // The next run finds the abandoned lease, restores the folder, then does its own work.
    add_memory(
        &*f.store,
        &t,
        "优化后 SQL 耗时从 12 秒降到 80 毫秒",
        Category::Episodic,
        "慢查询",
    )
    .await;
    assert!(matches!(
        rules.run(&t).await.expect("next run"),
        RunOutcome::Edited { .. }
    ));
    let after = documents(&f, &t).await;
    assert_eq!(after.len(), 1);
    assert_eq!(
        f.files.get(&stray).await.expect("get"),
        None,
        "the dead run's new object is gone"
    );
    let doc = SceneDoc::parse(&after[0].1).expect("a well-formed document");
    let old = SceneDoc::parse(&before[0].1).expect("old");
    for event in &old.events {
        assert!(doc.events.contains(event), "{event:?} survived: {doc:?}");
    }
    assert!(doc.events.iter().any(|e| e.what.contains("80 毫秒")), "{doc:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_died_mid_edit_is_restored_by_the_next_sqlite() {
    dead_run_is_restored(Fixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_died_mid_edit_is_restored_by_the_next_postgres() {
    dead_run_is_restored(Fixture::postgres().await).await;
}

fn doc(name: &str) -> SceneDoc {
    let mut doc = SceneDoc::new(name, Utc::now());
    doc.overview = format!("about {name}");
    doc.events.push(SceneEvent {
        when: Some("2026-11-30".into()),
        what: format!("{name} happened"),
    });
    doc
}

fn journal(f: &Fixture, t: &Tenant) -> Journal {
    Journal::new(f.files.clone(), t, Uuid::new_v4())
}

/// The cap through the tools: creates stop one below the cap; at the cap (lowered by config)
/// nothing but a merge goes, and after the merge the others work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_enforces_the_cap_and_the_folder() {
    let f = Fixture::sqlite().await;
    let t = tenant();
    let deadline = WriteDeadline::new(Instant::now(), Duration::from_secs(120), Duration::from_secs(60));
    let mut ws = Workspace::new(
        t.clone(),
        f.files.clone(),
        Vec::new(),
        4,
        Utc::now(),
        deadline.clone(),
        journal(&f, &t),
    );
    for i in 0..3 {
        ws.create(doc(&format!("topic {i}")))
            .await
            .expect("io")
            .expect("created");
    }
    let refused = ws.create(doc("topic 3")).await.expect("io").expect_err("fourth create");
    assert!(matches!(refused, Refusal::Cap(_)), "{refused:?}");
    ws.update("s1", doc("topic 0 again"))
        .await
        .expect("io")
        .expect("updates still go");
    assert!(matches!(
        ws.update("s9", doc("x")).await.expect("io"),
        Err(Refusal::Invalid(_))
    ));
    assert!(matches!(
        ws.create(SceneDoc::new("", Utc::now())).await.expect("io"),
        Err(Refusal::Invalid(_) | Refusal::Cap(_))
    ));
    ws.delete("s3").await.expect("io").expect("deleted");
    assert!(matches!(
        ws.update("s3", doc("x")).await.expect("io"),
        Err(Refusal::Invalid(_))
    ));
    assert_eq!(ws.active_count(), 2);
    // Only the owner's scene folder (and its trash) was written.
    let all = f.files.list("").await.expect("list");
    let owner = paths::owner_prefix(&t);
    assert!(all.iter().all(|o| o.key.starts_with(&owner)), "{all:?}");
    assert!(all.iter().any(|o| o.key.starts_with(&paths::scenes_prefix(&t))));

    // Cap lowered to 2 with 2 active scenes: everything but a merge is refused.
    let rows: Vec<_> = ws
        .entries()
        .iter()
        .filter(|e| e.is_active())
        .map(|e| (e.row.clone(), e.doc.clone()))
        .collect();
    let mut ws = Workspace::new(
        t.clone(),
        f.files.clone(),
        rows,
        2,
        Utc::now(),
        deadline.clone(),
        journal(&f, &t),
    );
    assert!(matches!(
        ws.update("s1", doc("a")).await.expect("io"),
        Err(Refusal::Cap(_))
    ));
    assert!(matches!(ws.create(doc("b")).await.expect("io"), Err(Refusal::Cap(_))));
    ws.merge(&["s1".into(), "s2".into()], doc("merged"))
        .await
        .expect("io")
        .expect("merge");
    assert_eq!(ws.active_count(), 1);
    ws.update("s1", doc("merged, updated"))
        .await
        .expect("io")
        .expect("update after the merge");

    // Past the deadline the workspace writes nothing more.
    let mut late = Workspace::new(
        t.clone(),
        f.files.clone(),
        Vec::new(),
        4,
        Utc::now(),
        WriteDeadline::new(Instant::now(), Duration::ZERO, Duration::ZERO),
        journal(&f, &t),
    );
    assert!(late.create(doc("late")).await.is_err());
}

async fn lost_timer_update_is_repaired(f: Fixture) {
    let t = tenant();
    commit_memory(
        &*f.store,
        &t,
        "实例 A 在 02:10 出现慢查询",
        Category::Episodic,
        "慢查询",
    )
    .await;
    let schedule = f.store.scene_schedule(&t).await.expect("schedule");
    assert!(schedule.last_l1_at.is_some(), "the batch marks the owner: {schedule:?}");
    assert_eq!(schedule.due_at, None);
    let runner = f.runner(Arc::new(RulesSceneEditor), settings());
    // A sweep finds the owner and schedules a run (due 1 ms later); that sweep or the next
    // one runs it.
    let mut runs = 0;
    for _ in 0..5 {
        runs += runner.sweep(&CancellationToken::new()).await.expect("sweep");
        if runs > 0 {
            break;
        }
        assert!(f.store.scene_schedule(&t).await.expect("schedule").due_at.is_some());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(runs, 1);
    assert_eq!(documents(&f, &t).await.len(), 1);
    // Done: nothing unscheduled is left for this owner.
    let left = f
        .store
        .unscheduled_scene_owners(Utc::now(), 1000)
        .await
        .expect("unscheduled");
    assert!(!left.contains(&t), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_whose_timer_update_was_lost_get_a_scene_run_sqlite() {
    lost_timer_update_is_repaired(Fixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_whose_timer_update_was_lost_get_a_scene_run_postgres() {
    lost_timer_update_is_repaired(Fixture::postgres().await).await;
}
