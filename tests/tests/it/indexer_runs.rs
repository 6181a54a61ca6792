//! The index worker's one-run-per-session rule: concurrent wake-ups for one session index each
//! turn once, and turns appended while a run is in progress are still indexed by that run.
//! Real SQLite store and Qdrant Edge index; the index is wrapped only to count, slow or fail
//! writes.

use std::sync::Arc;
use std::time::Duration;

use integration_tests::app::tenant;
use integration_tests::faulty_index::FaultyIndex;
use shared::domain::{NewTurn, SessionId, Tenant};
use shared::index::{EdgeIndex, PointKind, SearchIndex};
use shared::indexer::Indexer;
use shared::store::{SqliteStore, TranscriptStore, INDEX_CONSUMER};

async fn append(store: &dyn TranscriptStore, t: &Tenant, from: usize, to: usize) {
    let session = SessionId::parse("hot").unwrap();
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
        let indexer = indexer.clone();
        runs.spawn(async move { indexer.index_session("hot").await.unwrap() });
    }
    // Turns appended mid-run, announced by a run that finds the session busy.
    tokio::time::sleep(Duration::from_millis(120)).await;
    append(&*store, &t, 1_000, 1_250).await;
    assert_eq!(
        indexer.index_session("hot").await.unwrap(),
        0,
        "a run on a busy session leaves the work to the running one"
    );
    let mut indexed = 0;
    while let Some(n) = runs.join_next().await {
        indexed += n.unwrap();
    }

    assert_eq!(indexed, 1_250, "every turn indexed by exactly one run");
    assert_eq!(counting.upserted(), 1_250, "no turn written twice");
    assert_eq!(edge.count(&t, PointKind::Turn).await.unwrap(), 1_250);
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 0);
    // The session is free again: a later run starts, finds nothing, and says so.
    append(&*store, &t, 1_250, 1_260).await;
    assert_eq!(indexer.index_session("hot").await.unwrap(), 10);
}

/// A run that fails frees the session, so the retried delivery can run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_frees_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TranscriptStore> = Arc::new(SqliteStore::open(&dir.path().join("db.sqlite")).await.unwrap());
    let t = tenant();
    append(&*store, &t, 0, 20).await;
    let down = FaultyIndex::new(Arc::new(
        EdgeIndex::open(&dir.path().join("index"), 5_000, None).unwrap(),
    ));
    down.set_writes_down(true);
    let failing = Indexer::new(store.clone(), Arc::new(down), None, 100);
    assert!(failing.index_session("hot").await.is_err());
    assert!(
        failing.index_session("hot").await.is_err(),
        "the retry runs again rather than finding the session busy"
    );
    assert_eq!(store.lag(INDEX_CONSUMER).await.unwrap().turns, 20);
}
