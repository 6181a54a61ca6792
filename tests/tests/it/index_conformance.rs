//! The `SearchIndex` conformance suite on every backend, plus what only the embedded backend
//! promises: reopening a directory and optimizing in the background.
//!
//! The Qdrant-server run needs `QDRANT_URL` (the gRPC URL, e.g. `http://localhost:6334`, and
//! `QDRANT_API_KEY` if the server wants one); it works in a collection of its own and drops it.
//! Without `QDRANT_URL` it is skipped, loudly.

use std::time::{Duration, Instant};

use shared::index::testsuite::{self, assert_all_searchable, bulk_points, unique_tenant, SUITE_DIMENSION};
use shared::index::{EdgeIndex, QdrantIndex, SearchIndex};

/// Upserts between two optimizer runs in these tests: small, so that the suite crosses it.
const OPTIMIZE_EVERY: usize = 500;

fn open(dir: &tempfile::TempDir) -> EdgeIndex {
    EdgeIndex::open(dir.path(), OPTIMIZE_EVERY, Some(SUITE_DIMENSION)).expect("open edge index")
}

/// An index whose optimizer has real work after a few hundred points.
fn open_small(dir: &tempfile::TempDir) -> EdgeIndex {
    EdgeIndex::open_with_small_segments(dir.path(), OPTIMIZE_EVERY, Some(SUITE_DIMENSION)).expect("open edge index")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_backend_passes_the_suite() {
    let dir = tempfile::tempdir().unwrap();
    let index = open_small(&dir);
    testsuite::search_index_suite(&index).await;
    // Once more over optimized segments (waits for a background run in progress).
    index.optimize().await.unwrap();
    assert!(
        index.optimizations() > 0,
        "the suite never went through a real optimization"
    );
    testsuite::search_index_suite(&index).await;
}

/// The server from `QDRANT_URL`, its API key and a fresh collection name; `None`, after saying
/// that `what` is skipped, when `QDRANT_URL` is not set.
fn qdrant_server(what: &str) -> Option<(String, Option<String>, String)> {
    let Some(url) = std::env::var("QDRANT_URL").ok().filter(|url| !url.trim().is_empty()) else {
        eprintln!("index conformance: Qdrant server {what} SKIPPED (QDRANT_URL not set)");
        return None;
    };
    let api_key = std::env::var("QDRANT_API_KEY").ok().filter(|key| !key.is_empty());
    let collection = format!("sediment_test_{}", uuid::Uuid::new_v4().simple());
    Some((url, api_key, collection))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qdrant_server_backend_passes_the_suite() {
    let Some((url, api_key, collection)) = qdrant_server("backend") else {
        return;
    };
    let index = std::sync::Arc::new(
        QdrantIndex::connect(&url, &collection, api_key.clone(), Some(SUITE_DIMENSION))
            .await
            .expect("connect to the Qdrant server"),
    );
    // The suite runs in a task, so that the collection is dropped even when a check fails.
    let suite = tokio::spawn({
        let index = std::sync::Arc::clone(&index);
        async move {
            testsuite::search_index_suite(&*index).await;
            // Connecting again to the existing, populated collection is fine.
            QdrantIndex::connect(&url, &collection, api_key, Some(SUITE_DIMENSION))
                .await
                .expect("reconnect to an existing collection");
        }
    })
    .await;
    index.drop_collection().await.expect("drop the test collection");
    if let Err(failed) = suite {
        std::panic::resume_unwind(failed.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qdrant_server_refuses_a_collection_of_another_index_version() {
    let Some((url, api_key, collection)) = qdrant_server("index-version check") else {
        return;
    };
    let index = QdrantIndex::connect(&url, &collection, api_key.clone(), None)
        .await
        .expect("connect to the Qdrant server");
    index
        .record_other_index_version("text 0, payload 0")
        .await
        .expect("record another index version");
    let refused = QdrantIndex::connect(&url, &collection, api_key, None).await;
    index.drop_collection().await.expect("drop the test collection");
    let error = refused.expect_err("a collection of another index version must be refused");
    assert!(!error.is_retryable(), "{error:?}");
    assert!(format!("{error:?}").contains("text 0, payload 0"), "{error:?}");
}

#[tokio::test]
async fn qdrant_connect_to_a_closed_port_is_retryable() {
    let started = Instant::now();
    let error = QdrantIndex::connect("http://127.0.0.1:1", "sediment_test_unreachable", None, None)
        .await
        .expect_err("nothing listens on port 1");
    assert!(error.is_retryable(), "not retryable: {error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_points_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = unique_tenant();
    let points = bulk_points(&tenant, 120);
    {
        let index = open(&dir);
        index.upsert(&points[..100]).await.unwrap();
        index.upsert(&points[100..]).await.unwrap();
        index.delete(&[points[0].id]).await.unwrap();
    }
    let index = open(&dir);
    index.upsert(&points[..1]).await.unwrap();
    assert_all_searchable(&index, &tenant, &points).await;
    // And the reopened shard still filters fast and correctly by tenant.
    assert_eq!(
        index
            .count(&unique_tenant(), shared::index::PointKind::Turn)
            .await
            .unwrap(),
        0
    );
}

/// How many closed segments the WAL of the shard in `dir` holds.
fn closed_wal_segments(dir: &tempfile::TempDir) -> usize {
    std::fs::read_dir(dir.path().join("wal"))
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("closed-")
        })
        .count()
}

/// The ids of `tenant`'s turns that a search for `word` finds.
async fn found(index: &EdgeIndex, tenant: &shared::domain::Tenant, word: &str) -> Vec<uuid::Uuid> {
    testsuite::search_ids(index, &testsuite::query(tenant, word)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_prunes_its_wal_on_open_and_keeps_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = unique_tenant();
    let mut points = bulk_points(&tenant, 450);
    {
        // Small WAL segments: 400 single-point writes fill several.
        let index = open_small(&dir);
        for point in &points[..400] {
            index.upsert(std::slice::from_ref(point)).await.unwrap();
        }
    }
    let before = closed_wal_segments(&dir);
    assert!(before >= 3, "the writes closed only {before} WAL segments");

    // The newest closed segment stays; the payload-index checks at open may close one more.
    let index = open_small(&dir);
    let after = closed_wal_segments(&dir);
    assert!(after <= 2, "{after} closed WAL segments after the prune");
    assert_all_searchable(&index, &tenant, &points[..400]).await;
    // Writes to points written before the prune still apply: the WAL numbers operations on from
    // its newest segment, and a segment ignores an operation numbered below its point's version.
    index.delete(&[points[3].id]).await.unwrap();
    points[2].text = format!("{} rewritten", points[2].text);
    index.upsert(&points[2..3]).await.unwrap();
    index.upsert(&points[400..]).await.unwrap();
    assert_eq!(found(&index, &tenant, "rewritten").await, vec![points[2].id]);
    assert!(
        found(&index, &tenant, &testsuite::code_word(3)).await.is_empty(),
        "the delete applied"
    );
    drop(index);

    let index = open_small(&dir);
    assert!(closed_wal_segments(&dir) <= 2);
    assert_eq!(found(&index, &tenant, "rewritten").await, vec![points[2].id]);
    assert!(
        found(&index, &tenant, &testsuite::code_word(3)).await.is_empty(),
        "the delete applied"
    );
    index.upsert(&points[3..4]).await.unwrap();
    assert_all_searchable(&index, &tenant, &points).await;
}

/// Set for the child process of `edge_upserts_survive_a_crash`: the shard directory.
const CRASH_DIR_ENV: &str = "SEDIMENT_TEST_CRASH_DIR";
const CRASH_POINTS: usize = 150;

#[test]
fn edge_upserts_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // The child upserts, then exits without running any destructor (no flush on drop).
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "index_conformance::edge_crash_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CRASH_DIR_ENV, dir.path())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(17), "the child did not reach its crash point");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let index = open(&dir);
        let tenant = crash_tenant();
        assert_all_searchable(&index, &tenant, &bulk_points_with_ids(&tenant)).await;
    });
}

/// Runs only as the child of `edge_upserts_survive_a_crash`.
#[test]
#[ignore = "child process of edge_upserts_survive_a_crash"]
fn edge_crash_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let index = runtime.block_on(async {
        let index = EdgeIndex::open(std::path::Path::new(&dir), OPTIMIZE_EVERY, Some(SUITE_DIMENSION)).unwrap();
        let tenant = crash_tenant();
        for batch in bulk_points_with_ids(&tenant).chunks(50) {
            index.upsert(batch).await.unwrap();
        }
        index
    });
    // Like a kill -9 right after the upserts returned: nothing is dropped, nothing flushed.
    std::mem::forget(index);
    std::process::exit(17);
}

fn crash_tenant() -> shared::domain::Tenant {
    shared::domain::Tenant {
        team: "crash-team".to_owned(),
        agent: "crash-agent".to_owned(),
        user: "crash-user".to_owned(),
    }
}

/// `bulk_points` with ids fixed by position, so that parent and child agree.
fn bulk_points_with_ids(tenant: &shared::domain::Tenant) -> Vec<shared::index::IndexPoint> {
    let mut points = bulk_points(tenant, CRASH_POINTS);
    for (i, point) in points.iter_mut().enumerate() {
        point.id = uuid::Uuid::from_u128(i as u128 + 1);
    }
    points
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_optimizes_in_the_background_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = unique_tenant();
    let points = bulk_points(&tenant, 3 * OPTIMIZE_EVERY + 50);
    let index = open_small(&dir);
    for batch in points.chunks(50) {
        index.upsert(batch).await.unwrap();
    }
    // Searches run while the optimizer may be busy...
    assert_all_searchable(&index, &tenant, &points).await;

    // ...and after it has changed the segments at least once, with no explicit call.
    let deadline = Instant::now() + Duration::from_secs(120);
    while index.optimizations() == 0 {
        assert!(Instant::now() < deadline, "no background optimization within 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    index.optimize().await.unwrap();
    assert!(
        !index.optimize().await.unwrap(),
        "a second run right after has nothing to do"
    );
    assert_all_searchable(&index, &tenant, &points).await;

    // Deletes after optimization hit the optimized segments; a reopen keeps all of it.
    index.delete(&[points[1].id]).await.unwrap();
    let tenant_count = index.count(&tenant, shared::index::PointKind::Turn).await.unwrap();
    assert_eq!(tenant_count, points.len() as u64 - 1);
    drop(index);
    let index = open_small(&dir);
    index.upsert(&points[1..2]).await.unwrap();
    assert_all_searchable(&index, &tenant, &points).await;
}

/// The config edge saved with the shard in `dir`, optimizer settings included.
fn saved_config(dir: &tempfile::TempDir) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.path().join("edge_config.json")).unwrap()).unwrap()
}

/// A shard made with other optimizer settings (an older version's, here the small test ones)
/// takes this version's on open: the segment cap and the HNSW build threads, kept in its
/// config file. Its points stay searchable, and the next optimizer run follows the new cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_adopts_the_current_optimizer_settings_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = unique_tenant();
    let points = bulk_points(&tenant, 200);
    let index = open_small(&dir);
    index.upsert(&points).await.unwrap();
    drop(index);
    let config = || saved_config(&dir);
    assert_eq!(config()["optimizers"]["max_segment_size"], 400, "{}", config());

    let index = open(&dir);
    assert!(!index.created());
    let saved = config();
    assert_eq!(
        saved["optimizers"]["max_segment_size"],
        shared::index::DEFAULT_MAX_SEGMENT_KB,
        "{saved}"
    );
    assert_eq!(
        saved["hnsw_config"]["max_indexing_threads"],
        shared::index::index_build_threads(),
        "{saved}"
    );
    assert!(
        shared::index::index_build_threads() < std::thread::available_parallelism().unwrap().get().max(2),
        "an HNSW build leaves cores for queries"
    );
    index.optimize().await.unwrap();
    assert_all_searchable(&index, &tenant, &points).await;
}

/// A keyword-only shard caps its segments lower than one with dense vectors, whose vectors
/// are several times the size (see `KEYWORD_MAX_SEGMENT_KB`), and a keyword-only process that
/// opens a shard with dense vectors leaves that shard's cap alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_caps_keyword_only_segments_by_what_the_shard_holds() {
    let max_segment = |dir: &tempfile::TempDir| saved_config(dir)["optimizers"]["max_segment_size"].clone();
    let tenant = unique_tenant();
    let points = bulk_points(&tenant, 50);

    let keyword = tempfile::tempdir().unwrap();
    let index = EdgeIndex::open(keyword.path(), OPTIMIZE_EVERY, None).unwrap();
    index.upsert(&points).await.unwrap();
    drop(index);
    assert_eq!(max_segment(&keyword), shared::index::KEYWORD_MAX_SEGMENT_KB);
    // A shard saved with another cap (an older version's 32 MB; here the test one) takes
    // this version's on open.
    let index = EdgeIndex::open_with_small_segments(keyword.path(), OPTIMIZE_EVERY, None).unwrap();
    drop(index);
    assert_eq!(max_segment(&keyword), 400);
    let index = EdgeIndex::open(keyword.path(), OPTIMIZE_EVERY, None).unwrap();
    assert_eq!(max_segment(&keyword), shared::index::KEYWORD_MAX_SEGMENT_KB);
    assert_all_searchable(&index, &tenant, &points).await;
    drop(index);

    let dense = tempfile::tempdir().unwrap();
    drop(open(&dense));
    assert_eq!(max_segment(&dense), shared::index::DEFAULT_MAX_SEGMENT_KB);
    let index = EdgeIndex::open(dense.path(), OPTIMIZE_EVERY, None).unwrap();
    assert!(
        !index.created(),
        "a keyword-only process reads a shard with dense vectors"
    );
    assert_eq!(max_segment(&dense), shared::index::DEFAULT_MAX_SEGMENT_KB);
}

/// Concurrent upserts are combined into fewer edge updates, and every writer's points land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_combines_concurrent_upserts() {
    let dir = tempfile::tempdir().unwrap();
    let index = std::sync::Arc::new(open(&dir));
    let tenant = unique_tenant();
    let points = bulk_points(&tenant, 32 * 10);
    let mut writers = tokio::task::JoinSet::new();
    for chunk in points.chunks(10) {
        let (index, chunk) = (std::sync::Arc::clone(&index), chunk.to_vec());
        writers.spawn(async move { index.upsert(&chunk).await });
    }
    while let Some(result) = writers.join_next().await {
        result.unwrap().expect("every writer's upsert succeeds");
    }
    assert!(
        index.writes() < 32,
        "32 concurrent upserts took {} edge updates",
        index.writes()
    );
    assert_eq!(
        index.count(&tenant, shared::index::PointKind::Turn).await.unwrap(),
        points.len() as u64
    );
    assert_all_searchable(&*index, &tenant, &points).await;
    // Durable: a reopen has every point.
    assert_eq!(std::sync::Arc::strong_count(&index), 1, "the writers let go");
    drop(index);
    let index = open(&dir);
    assert_all_searchable(&index, &tenant, &points).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_directory_is_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(&dir);
    let started = Instant::now();
    let second = tokio::task::spawn_blocking({
        let path = dir.path().to_owned();
        move || EdgeIndex::open(&path, OPTIMIZE_EVERY, Some(SUITE_DIMENSION))
    });
    // The second open waits for the lock (up to 30 s) rather than sharing the shard.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "a second index opened a directory in use");
    drop(first);
    second.await.unwrap().expect("open after the first index is dropped");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_refuses_a_shard_of_another_dimension() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(&dir);
    assert!(index.created(), "a new directory makes a new shard");
    let tenant = unique_tenant();
    index
        .upsert(&[testsuite::dense_turn(&tenant, "kept", [1.0, 0.0, 0.0, 0.0])])
        .await
        .unwrap();
    drop(index);

    // Another embedding model: its vectors cannot be compared with the stored ones.
    let error = EdgeIndex::open(dir.path(), OPTIMIZE_EVERY, Some(SUITE_DIMENSION + 1)).expect_err("other dimension");
    let message = format!("{:#}", anyhow::Error::from(error));
    assert!(message.contains("remove that directory"), "{message}");
    // Keyword-only processes may still read it; the same dimension reopens as before.
    drop(EdgeIndex::open(dir.path(), OPTIMIZE_EVERY, None).expect("keyword-only open"));
    let index = open(&dir);
    assert!(!index.created(), "an existing shard is loaded, not created");
    assert_eq!(index.count(&tenant, shared::index::PointKind::Turn).await.unwrap(), 1);

    // A shard made without dense vectors is refused once an embedder is configured.
    let plain = tempfile::tempdir().unwrap();
    drop(EdgeIndex::open(plain.path(), OPTIMIZE_EVERY, None).unwrap());
    let error = EdgeIndex::open(plain.path(), OPTIMIZE_EVERY, Some(SUITE_DIMENSION)).expect_err("no dense vectors");
    assert!(format!("{:#}", anyhow::Error::from(error)).contains("no dense vectors"));
}

/// A shard built with another text analysis or payload layout (or by a build that recorded
/// only its text analysis) is rebuilt: its keyword vectors or its filters would not match
/// what queries compute now.
#[tokio::test]
async fn edge_rebuilds_a_shard_of_another_index_version() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = unique_tenant();
    let version_file = dir.path().join("sediment-index-version");
    let older_builds: [(&str, Option<&str>); 3] = [
        // Before the payload layout was versioned: the text analysis alone, in another file.
        ("the text analysis alone", None),
        ("another payload layout", Some("text 3, payload 1")),
        ("another text analysis", Some("text 1, payload 2")),
    ];
    for (what, recorded) in older_builds {
        {
            let index = open(&dir);
            index
                .upsert(&[testsuite::dense_turn(&tenant, "kept", [1.0, 0.0, 0.0, 0.0])])
                .await
                .unwrap();
        }
        let index = open(&dir);
        assert!(!index.created(), "the same version loads the shard");
        assert_eq!(index.count(&tenant, shared::index::PointKind::Turn).await.unwrap(), 1);
        drop(index);

        match recorded {
            Some(version) => std::fs::write(&version_file, version).unwrap(),
            None => {
                std::fs::remove_file(&version_file).unwrap();
                std::fs::write(dir.path().join("sediment-text-version"), "3").unwrap();
            }
        }
        let index = open(&dir);
        assert!(index.created(), "{what}: a new shard, so the store re-indexes it");
        assert_eq!(
            index.count(&tenant, shared::index::PointKind::Turn).await.unwrap(),
            0,
            "{what}"
        );
        drop(index);
        assert!(
            !open(&dir).created(),
            "{what}: the rebuilt shard records the current version"
        );
    }
}
