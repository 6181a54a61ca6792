//! The index worker's rounds: wake-ups that arrive while a round runs are indexed together in
//! the next, each turn once; a call returns once its turns are indexed; a failed round fails
//! every call in it, and a cancelled one is run again by a caller waiting on it. Its syncs:
//! rounds write unsynced and share one sync, which alone moves their cursors; a failed or
//! cancelled sync leaves them for the next, and a crash before it for the next process. Real
//! SQLite store and Qdrant Edge index; the index is wrapped only to count, slow or fail writes
//! and syncs.

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use integration_tests::app::tenant;
use integration_tests::fake_openai::{embed_text, FakeOpenAi, Fault};
use integration_tests::faulty_index::FaultyIndex;
use shared::domain::{NewTurn, SessionId, SessionKey, Tenant};
use shared::embed::{Embedder, OpenAiEmbedder, OpenAiSettings};
use shared::index::{EdgeIndex, Fusion, IndexQuery, PointKind, SearchIndex, Strategy};
use shared::indexer::Indexer;
use shared::store::{SqliteStore, TranscriptStore, INDEX_CONSUMER};

fn key(t: &Tenant, session: &str) -> SessionKey {
    SessionKey::new(t.clone(), session)
}

fn keys(t: &Tenant, sessions: &[String]) -> Vec<SessionKey> {
    sessions.iter().map(|s| key(t, s)).collect()
}

async fn append(store: &dyn TranscriptStore, t: &Tenant, from: usize, to: usize) {
    append_to(store, t, "hot", from, to).await;
}

async fn append_to(store: &dyn TranscriptStore, t: &Tenant, session: &str, from: usize, to: usize) {
    let session = SessionId::parse(session).unwrap();
    let turns: Vec<NewTurn> = (from..to)
        .map(|i| NewTurn::new("user", &format!("turn number {i} about replicas"), None, None, None).unwrap())
        .collect();
    store.append(t, &session, &turns).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_on_one_session_index_each_turn_once() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TranscriptStore> = Arc::new(SqliteStore::open(&dir.path().join("db.sqlite")).await.unwrap());
    let edge: Arc<dyn SearchIndex> = Arc::new(EdgeIndex::open(&dir.path().join("index"), 5_000, None).unwrap());
    let counting = Arc::new(FaultyIndex::new(edge.clone()).with_upsert_delay(Duration::from_millis(50)));
    let t = tenant();
    append(&*store, &t, 0, 1_000).await;
    // Batches of 100: the first run needs ten upserts, so the others arrive while it runs.
    let indexer = Indexer::new(store.clone(), counting.clone(), None, 100);

    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (indexer, session) = (indexer.clone(), key(&t, "hot"));
        runs.spawn(async move { indexer.index_session(&session).await.unwrap() });
    }
    // Turns appended mid-run, announced by a call that finds a round running.
    tokio::time::sleep(Duration::from_millis(120)).await;
    append(&*store, &t, 1_000, 1_250).await;
    let mut indexed = indexer.index_session(&key(&t, "hot")).await.unwrap();
    assert_eq!(
        store.lag(INDEX_CONSUMER).await.unwrap().turns,
        0,
        "a call returns only once the turns stored before it are indexed"
    );
    while let Some(n) = runs.join_next().await {
        indexed += n.unwrap();
    }

    assert_eq!(indexed, 1_250, "every turn counted by exactly one call");
    assert_eq!(counting.upserted(), 1_250, "no turn written twice");
    assert_eq!(edge.count(&t, PointKind::Turn).await.unwrap(), 1_250);
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
    // The indexer is idle again: a later call runs its own round at once.
    append(&*store, &t, 1_250, 1_260).await;
    assert_eq!(indexer.index_session(&key(&t, "hot")).await.unwrap(), 10);
}

async fn sqlite_and_edge(dir: &std::path::Path) -> (Arc<dyn TranscriptStore>, Arc<dyn SearchIndex>) {
    let store = SqliteStore::open(&dir.join("db.sqlite")).await.unwrap();
    let edge = EdgeIndex::open(&dir.join("index"), 5_000, None).unwrap();
    (Arc::new(store), Arc::new(edge))
}

/// A sweep catching up on a backlog of several pages publishes the lag after each page: an
/// operator watching `sediment_index_lag_turns` sees the catch-up, not the value from before
/// it, which had stayed at 0 while a million turns waited (`bench_recall`).
#[tokio::test(flavor = "current_thread")]
async fn a_sweep_publishes_the_lag_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let slow = Arc::new(FaultyIndex::new(edge).with_upsert_delay(Duration::from_millis(300)));
    let t = tenant();
    // A sweep page is 100 sessions: one turn in each of 150 sessions makes two pages.
    for s in 0..150 {
        append_to(&*store, &t, &format!("s{s}"), s, s + 1).await;
    }
    let indexer = Indexer::new(store.clone(), slow, None, 100);
    // The gauges are set on this thread (a current-thread runtime runs the spawned sweep here
    // too), so a recorder of its own sees them and no other test's.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let gauges = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let lag = || {
        gauges
            .render()
            .lines()
            .find_map(|l| l.strip_prefix("sediment_index_lag_turns ").map(str::to_owned))
    };

    let sweep = tokio::spawn(async move { indexer.sweep(&CancellationToken::new()).await.unwrap() });
    let mut seen = Vec::new();
    while !sweep.is_finished() {
        if let Some(value) = lag() {
            if seen.last() != Some(&value) {
                seen.push(value);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sweep.await.unwrap(), 150);
    seen.extend(lag().filter(|v| seen.last() != Some(v)));
    assert_eq!(seen, ["50", "0"], "the lag after the first page, then after the last");
}

/// Twenty sessions woken at once: the first call's round runs alone, and the nineteen that
/// arrive meanwhile share the next one, a single read, upsert and cursor write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_woken_together_share_a_round() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let counting = Arc::new(FaultyIndex::new(edge.clone()).with_upsert_delay(Duration::from_millis(300)));
    let t = tenant();
    let sessions: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    for session in &sessions {
        append_to(&*store, &t, session, 0, 10).await;
    }
    let indexer = Indexer::new(store.clone(), counting.clone(), None, 1_000);

    let mut calls = tokio::task::JoinSet::new();
    for session in &sessions {
        let (indexer, session) = (indexer.clone(), key(&t, session));
        calls.spawn(async move { indexer.index_session(&session).await.unwrap() });
    }
    let mut indexed = 0;
    while let Some(n) = calls.join_next().await {
        indexed += n.unwrap();
    }

    assert_eq!(indexed, 200, "every turn counted once");
    assert_eq!(edge.count(&t, PointKind::Turn).await.unwrap(), 200);
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
    assert!(
        counting.upserts() <= 2,
        "20 sessions took {} upserts; the calls that waited should share one round",
        counting.upserts()
    );
}

/// A round reads one batch per session: a session with more is carried into the next round,
/// and its call returns once it has caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_takes_one_batch_per_session_and_carries_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let counting = Arc::new(FaultyIndex::new(edge.clone()));
    let t = tenant();
    append_to(&*store, &t, "long", 0, 25).await;
    append_to(&*store, &t, "short", 0, 5).await;
    let indexer = Indexer::new(store.clone(), counting.clone(), None, 10);

    let sessions = ["long".to_owned(), "short".to_owned()];
    assert_eq!(indexer.index_sessions(&keys(&t, &sessions)).await.unwrap(), 30);
    assert_eq!(
        counting.upserts(),
        3,
        "10 + 5 turns, then the carried session's 10, then its last 5"
    );
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
}

/// A session with a long backlog takes one batch per round, so a session woken after it is
/// indexed in the next round rather than after the whole backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_backlog_does_not_hold_up_a_session_woken_later() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let slow = Arc::new(FaultyIndex::new(edge.clone()).with_upsert_delay(Duration::from_millis(20)));
    let t = tenant();
    append_to(&*store, &t, "backlog", 0, 400).await;
    let indexer = Indexer::new(store.clone(), slow.clone(), None, 10);

    let backlog = {
        let (indexer, session) = (indexer.clone(), key(&t, "backlog"));
        tokio::spawn(async move { indexer.index_session(&session).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    append_to(&*store, &t, "late", 0, 1).await;
    assert_eq!(indexer.index_session(&key(&t, "late")).await.unwrap(), 1);
    let left = store.lag(INDEX_CONSUMER).await.unwrap().turns;
    assert!(
        left > 100,
        "the late session waited for the backlog ({left} turns of 400 were left)"
    );
    assert_eq!(backlog.await.unwrap(), 400);
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
}

/// A round of many sessions (a sweep after an outage, say) reads, writes and advances at most
/// 32 sessions per batch, which bounds what a worker holds at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_many_sessions_goes_in_bounded_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let counting = Arc::new(FaultyIndex::new(edge.clone()));
    let t = tenant();
    let sessions: Vec<String> = (0..40).map(|i| format!("s{i:02}")).collect();
    for session in &sessions {
        append_to(&*store, &t, session, 0, 2).await;
    }
    let indexer = Indexer::new(store.clone(), counting.clone(), None, 10);

    assert_eq!(indexer.index_sessions(&keys(&t, &sessions)).await.unwrap(), 80);
    assert_eq!(
        (counting.upserts(), counting.upserted()),
        (2, 80),
        "40 sessions in batches of 32 and 8"
    );
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
}

/// A round that fails fails every call in it (so each delivery is retried), and the cursors
/// stay where they were; once the index is back, the retries index everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_round_fails_every_call_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let faulty = Arc::new(FaultyIndex::new(edge.clone()).with_upsert_delay(Duration::from_millis(100)));
    let t = tenant();
    let sessions: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    for session in &sessions {
        append_to(&*store, &t, session, 0, 4).await;
    }
    faulty.set_writes_down(true);
    let indexer = Indexer::new(store.clone(), faulty.clone(), None, 100);

    let mut calls = tokio::task::JoinSet::new();
    for session in &sessions {
        let (indexer, session) = (indexer.clone(), key(&t, session));
        calls.spawn(async move { indexer.index_session(&session).await });
    }
    while let Some(result) = calls.join_next().await {
        let error = result.unwrap().expect_err("a call in a failed round succeeded");
        assert!(error.is_retryable(), "an index outage must be retried: {error:?}");
    }
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 20, "no cursor moved");

    faulty.set_writes_down(false);
    let mut indexed = 0;
    for session in &sessions {
        indexed += indexer.index_session(&key(&t, session)).await.unwrap();
    }
    assert_eq!(indexed, 20);
    assert_eq!(edge.count(&t, PointKind::Turn).await.unwrap(), 20);
}

/// The task running a round is cancelled mid-round (a delivery abandoned at the shutdown
/// deadline, say): a caller waiting for the next round must not wait forever, and the
/// cancelled round's turns are indexed by the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_round_frees_the_indexer() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let slow = Arc::new(FaultyIndex::new(edge.clone()).with_upsert_delay(Duration::from_secs(1)));
    let t = tenant();
    append_to(&*store, &t, "first", 0, 5).await;
    append_to(&*store, &t, "second", 0, 5).await;
    let indexer = Indexer::new(store.clone(), slow.clone(), None, 100);

    let running = {
        let (indexer, session) = (indexer.clone(), key(&t, "first"));
        tokio::spawn(async move { indexer.index_session(&session).await })
    };
    while slow.upserts_begun() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waiting = {
        let (indexer, session) = (indexer.clone(), key(&t, "second"));
        tokio::spawn(async move { indexer.index_session(&session).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    running.abort();
    let indexed = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting call hangs after its predecessor was cancelled")
        .unwrap()
        .unwrap();
    assert_eq!(indexed, 5, "the waiting call ran its own round");
    assert_eq!(slow.upserted(), 5, "the cancelled round wrote nothing");
    assert_eq!(indexer.index_session(&key(&t, "first")).await.unwrap(), 5);
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
}

/// A keyword query for the turns of one session.
fn keyword(t: &Tenant, session: &str) -> IndexQuery {
    IndexQuery {
        tenant: t.clone(),
        kind: PointKind::Turn,
        session_id: Some(session.to_owned()),
        text: "replicas".to_owned(),
        tags: Vec::new(),
        task: None,
        dense: None,
        strategy: Strategy::Keyword,
        fusion: Fusion::default(),
        limit: 100,
    }
}

/// Over Qdrant Edge, rounds write unsynced and go on: their turns are searchable at once, and
/// one sync a sync interval later makes them all durable and moves all their cursors. Each call
/// returns only after that sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_share_a_sync_and_cursors_move_only_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let counting = Arc::new(FaultyIndex::new(edge.clone()));
    assert!(counting.defers_sync(), "Qdrant Edge leaves durability to sync");
    let t = tenant();
    let sessions: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for session in &sessions {
        append_to(&*store, &t, session, 0, 5).await;
    }
    append_to(&*store, &t, "warm", 0, 1).await;
    let indexer = Indexer::new(store.clone(), counting.clone(), None, 100).with_sync_interval(Duration::from_secs(2));
    // The first sync runs at once; the next may not start before two seconds after it.
    assert_eq!(indexer.index_session(&key(&t, "warm")).await.unwrap(), 1);
    assert_eq!(counting.syncs(), 1);
    let upserts_before = counting.upserts();

    let mut calls = tokio::task::JoinSet::new();
    for session in &sessions {
        let (indexer, session) = (indexer.clone(), key(&t, session));
        calls.spawn(async move { indexer.index_session(&session).await.unwrap() });
        // Each call finds the last one waiting for the sync, not in a round.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(counting.upserted(), 31, "every round wrote without waiting for a sync");
    assert!(
        counting.upserts() - upserts_before >= 3,
        "6 calls 60 ms apart ran only {} rounds: rounds waited for the sync",
        counting.upserts() - upserts_before
    );
    for session in &sessions {
        assert_eq!(
            counting.search(&keyword(&t, session)).await.unwrap().len(),
            5,
            "unsynced turns of {session} are searchable"
        );
    }
    assert_eq!(
        store.lag(INDEX_CONSUMER).await.unwrap().turns,
        30,
        "no cursor moves before the sync"
    );
    assert!(calls.try_join_next().is_none(), "a call returned before its sync");

    let mut indexed = 0;
    while let Some(n) = calls.join_next().await {
        indexed += n.unwrap();
    }
    assert_eq!(indexed, 30);
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
    assert_eq!(counting.syncs(), 2, "one sync covered every round after the first");
    assert_eq!(counting.upserted(), 31, "no turn written twice");
}

/// The sync fails (a disk that stops taking flushes, say): every call waiting on it fails and
/// may be retried, and no cursor moves. The turns stay searchable and are not written again
/// while the sync keeps failing; once it succeeds, the cursors catch up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_fails_its_calls_and_keeps_the_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let faulty = Arc::new(FaultyIndex::new(edge.clone()));
    let t = tenant();
    let sessions: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    for session in &sessions {
        append_to(&*store, &t, session, 0, 3).await;
    }
    faulty.set_syncs_down(true);
    let indexer = Indexer::new(store.clone(), faulty.clone(), None, 100).with_sync_interval(Duration::from_millis(50));

    let mut calls = tokio::task::JoinSet::new();
    for session in &sessions {
        let (indexer, session) = (indexer.clone(), key(&t, session));
        calls.spawn(async move { indexer.index_session(&session).await });
    }
    while let Some(result) = calls.join_next().await {
        let error = result.unwrap().expect_err("a call whose sync failed succeeded");
        assert!(error.is_retryable(), "a failed sync must be retried: {error:?}");
    }
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 12, "no cursor moved");
    assert_eq!(
        edge.count(&t, PointKind::Turn).await.unwrap(),
        12,
        "the turns are searchable"
    );
    // A retry while the sync still fails writes nothing again.
    assert!(indexer.index_session(&key(&t, "s0")).await.is_err());
    assert_eq!(
        faulty.upserted(),
        12,
        "turns written once, however often the sync failed"
    );

    faulty.set_syncs_down(false);
    indexer.index_sessions(&keys(&t, &sessions)).await.unwrap();
    assert_eq!(
        store.lag(INDEX_CONSUMER).await.unwrap().turns,
        0,
        "the cursors caught up"
    );
    assert_eq!(faulty.upserted(), 12);
    assert_eq!(edge.count(&t, PointKind::Turn).await.unwrap(), 12);
}

/// The process dies with turns written but not synced: their cursors never moved, so the next
/// process indexes them again, onto the same points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_written_but_not_synced_are_indexed_again_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let faulty = Arc::new(FaultyIndex::new(edge.clone()));
    let t = tenant();
    append_to(&*store, &t, "lost", 0, 7).await;
    faulty.set_syncs_down(true);
    let before_crash = Indexer::new(store.clone(), faulty.clone(), None, 100);
    assert!(before_crash.index_session(&key(&t, "lost")).await.is_err());
    drop(before_crash);

    faulty.set_syncs_down(false);
    let after_restart = Indexer::new(store.clone(), faulty.clone(), None, 100);
    assert_eq!(
        after_restart.sweep(&CancellationToken::new()).await.unwrap(),
        7,
        "the sweep finds the unsynced turns"
    );
    assert_eq!(faulty.upserted(), 14, "written again");
    assert_eq!(
        edge.count(&t, PointKind::Turn).await.unwrap(),
        7,
        "onto the same points"
    );
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
}

/// The task running a sync is cancelled mid-sync (a delivery abandoned at the shutdown
/// deadline, say): the cursor advances it had taken go back, and the next call's sync makes
/// them, without writing the turns again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sync_leaves_its_cursors_to_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let (store, edge) = sqlite_and_edge(dir.path()).await;
    let slow = Arc::new(FaultyIndex::new(edge.clone()).with_sync_delay(Duration::from_millis(500)));
    let t = tenant();
    append_to(&*store, &t, "cut", 0, 4).await;
    let indexer = Indexer::new(store.clone(), slow.clone(), None, 100).with_sync_interval(Duration::from_millis(10));

    let running = {
        let (indexer, session) = (indexer.clone(), key(&t, "cut"));
        tokio::spawn(async move { indexer.index_session(&session).await })
    };
    while slow.syncs_begun() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    assert_eq!(slow.syncs(), 0);
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 4);

    let again = tokio::time::timeout(Duration::from_secs(10), indexer.index_session(&key(&t, "cut")))
        .await
        .expect("a call hangs after a cancelled sync")
        .unwrap();
    assert_eq!(again, 0, "nothing left to write");
    assert_eq!(slow.upserted(), 4, "the turns were not written again");
    assert_eq!(
        store.lag(INDEX_CONSUMER).await.unwrap().turns,
        0,
        "the next sync moved the cursor"
    );
}

/// The provider refuses a round's texts for good: the round asks again one session at a time,
/// so only the session whose turns it refuses goes without dense vectors (and is still indexed
/// for keyword search); the other keeps its vectors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_session_loses_only_its_own_vectors() {
    const DIMENSION: usize = 32;
    let fake = FakeOpenAi::start(DIMENSION).await;
    let settings = OpenAiSettings {
        retry_base_delay: Duration::from_millis(10),
        ..OpenAiSettings::new(fake.base_url(), "fake-embed")
    };
    let embedder: Arc<dyn Embedder> = Arc::new(OpenAiEmbedder::connect(settings).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TranscriptStore> = Arc::new(SqliteStore::open(&dir.path().join("db.sqlite")).await.unwrap());
    let edge: Arc<dyn SearchIndex> =
        Arc::new(EdgeIndex::open(&dir.path().join("index"), 5_000, Some(DIMENSION)).unwrap());
    let t = tenant();
    let said = |session: &str| format!("the {session} cluster lost its kubernetes control plane");
    for session in ["refused", "welcome"] {
        let turn = NewTurn::new("user", &said(session), None, None, None).unwrap();
        store
            .append(&t, &SessionId::parse(session).unwrap(), &[turn])
            .await
            .unwrap();
    }
    let indexer = Indexer::new(store.clone(), edge.clone(), Some(embedder), 100);

    // The whole round, then the first session ("refused" sorts first).
    fake.embeddings()
        .push_times(Fault::error(400, "input rejected by the content filter"), 2);
    let requests_before = fake.embeddings().requests();
    let sessions = ["refused".to_owned(), "welcome".to_owned()];
    assert_eq!(indexer.index_sessions(&keys(&t, &sessions)).await.unwrap(), 2);

    let inputs: Vec<usize> = fake.embeddings().bodies()[requests_before..]
        .iter()
        .map(|body| body["input"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(inputs, [2, 1, 1], "one request for the round, then one per session");
    assert_eq!(edge.count(&t, PointKind::Turn).await.unwrap(), 2, "both indexed");
    let semantic = |session: &str| IndexQuery {
        tenant: t.clone(),
        kind: PointKind::Turn,
        session_id: Some(session.to_owned()),
        text: said(session),
        tags: Vec::new(),
        task: None,
        dense: Some(embed_text(&said(session), DIMENSION)),
        strategy: Strategy::Semantic,
        fusion: Fusion::default(),
        limit: 5,
    };
    assert_eq!(
        edge.search(&semantic("welcome")).await.unwrap().len(),
        1,
        "kept its vector"
    );
    assert!(
        edge.search(&semantic("refused")).await.unwrap().is_empty(),
        "the refused session has no vector"
    );
}
