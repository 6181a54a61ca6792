//! The API as a real process: SIGKILL mid-indexing loses nothing and duplicates nothing, and
//! SIGTERM drains and exits 0 promptly.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use integration_tests::amqp::TestBroker;
use integration_tests::app::{tenant, TenantHeaders as _};
use integration_tests::pg::TestDb;
use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::index::{EdgeIndex, PointKind, SearchIndex};
use shared::store::memory::MemoryStore as _;
use shared::store::{PostgresStore, TranscriptStore, INDEX_CONSUMER};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_sediment-test-server");

struct Proc {
    child: Child,
    base: String,
}

async fn spawn(env: &[(String, String)]) -> Proc {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_LISTEN", format!("127.0.0.1:{port}"))
        .env("SEDIMENT_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn the server binary");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let start = Instant::now();
    loop {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(30), "server did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Proc { child, base }
}

async fn append(base: &str, t: &Tenant, session: &str, messages: Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/sessions/{session}/messages"))
        .tenant_headers(t)
        .json(&json!({ "messages": messages }))
        .send()
        .await
        .expect("append");
    assert_eq!(r.status(), 201);
}

async fn sigterm_and_wait(mut proc: Proc) {
    let pid = proc.child.id().expect("pid") as i32;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    let exit = tokio::time::timeout(Duration::from_secs(10), proc.child.wait())
        .await
        .expect("exit within 10 s of SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?} after SIGTERM");
    eprintln!("stopped {} in {:?}", proc.base, start.elapsed());
}

#[tokio::test]
async fn sigkill_mid_indexing_loses_and_duplicates_nothing() {
    let db = TestDb::create().await;
    let broker = TestBroker::start("sigkill").await;
    let amqp = broker.settings();
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = vec![
        ("SEDIMENT_DATABASE_URL".into(), db.url.clone()),
        ("SEDIMENT_AMQP_URL".into(), amqp.url.clone()),
        ("SEDIMENT_AMQP_PREFIX".into(), amqp.prefix.clone()),
        ("SEDIMENT_AUTH".into(), "off".into()),
        (
            "SEDIMENT_INDEX_DIR".into(),
            dir.path().join("index").display().to_string(),
        ),
        (
            "SEDIMENT_FILES_DIR".into(),
            dir.path().join("files").display().to_string(),
        ),
        // Small batches and a long sweep period: indexing is slow and driven by events, so the
        // kill lands mid-way.
        ("SEDIMENT_WORKER_BATCH_SIZE".into(), "5".into()),
        ("SEDIMENT_WORKER_SWEEP_INTERVAL_MS".into(), "600000".into()),
    ];
    let t = tenant();
    let store = PostgresStore::connect(&db.url, 2).await.unwrap();

    let mut first = spawn(&env).await;
    for batch in 0..20 {
        let turns: Vec<Value> = (0..100)
            .map(|i| json!({"role": "user", "content": format!("crash test {batch}-{i} platypus")}))
            .collect();
        append(&first.base, &t, &format!("crash-{}", batch % 4), Value::Array(turns)).await;
    }
    let lag = store.lag(INDEX_CONSUMER).await.unwrap();
    assert!(
        lag.turns > 0,
        "the kill must land before indexing finished (lag {lag:?})"
    );
    first.child.kill().await.unwrap();
    eprintln!("killed with index lag {lag:?}");

    // The restarted process's start-up sweep finds what the dead one left.
    let second = spawn(&env).await;
    let start = Instant::now();
    while store.lag(INDEX_CONSUMER).await.unwrap().turns > 0 {
        assert!(
            // A liveness bound, generous because a loaded 2-core machine indexes slowly.
            start.elapsed() < Duration::from_secs(180),
            "indexing did not finish after restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sigterm_and_wait(second).await;

    let index = EdgeIndex::open(&dir.path().join("index"), 5_000, None).unwrap();
    assert_eq!(
        index.count(&t, PointKind::Turn).await.unwrap(),
        2_000,
        "every turn indexed exactly once"
    );
}

#[tokio::test]
async fn sigterm_in_embedded_mode_exits_zero_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = vec![(
        "SEDIMENT_DATA_DIR".into(),
        dir.path().join("data").display().to_string(),
    )];
    let t = tenant();
    let proc = spawn(&env).await;
    append(
        &proc.base,
        &t,
        "term",
        json!([{"role": "user", "content": "survive the restart"}]),
    )
    .await;
    sigterm_and_wait(proc).await;
    let proc = spawn(&env).await;
    let r = reqwest::Client::new()
        .get(format!("{}/v1/sessions/term/messages", proc.base))
        .tenant_headers(&t)
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["messages"][0]["content"], "survive the restart");
    sigterm_and_wait(proc).await;
}

/// Cgroups this test made, removed at the end (once the server that used them has exited).
struct Cgroups(Vec<PathBuf>);

impl Drop for Cgroups {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// With `SEDIMENT_INDEX_CGROUP` and `SEDIMENT_INDEX_OPTIMIZER_CGROUP`, a real server's index
/// writes and optimizer runs happen on its low-priority threads inside those cgroups. It needs
/// a v1 `cpu` hierarchy where this process may create cgroups (as root on the CI machine).
#[tokio::test]
async fn index_threads_of_a_server_join_the_cgroups_it_is_given() {
    let root = Path::new("/sys/fs/cgroup/cpu");
    let cgroup = |role: &str| root.join(format!("sediment-e2e-{}-{role}", std::process::id()));
    let mut made = Cgroups(Vec::new());
    for dir in [cgroup("writes"), cgroup("optimizer")] {
        if std::fs::create_dir(&dir).is_err() {
            println!("skipped: cannot create cgroups under {}", root.display());
            return;
        }
        made.0.push(dir);
    }
    let (writes, optimizer) = (made.0[0].clone(), made.0[1].clone());
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = vec![
        (
            "SEDIMENT_DATA_DIR".into(),
            dir.path().join("data").display().to_string(),
        ),
        ("SEDIMENT_INDEX_CGROUP".into(), writes.display().to_string()),
        (
            "SEDIMENT_INDEX_OPTIMIZER_CGROUP".into(),
            optimizer.display().to_string(),
        ),
        // An optimizer run after the first write.
        ("SEDIMENT_INDEX_OPTIMIZE_EVERY".into(), "1".into()),
    ];
    let t = tenant();
    let proc = spawn(&env).await;
    let pid = proc.child.id().expect("pid");
    append(
        &proc.base,
        &t,
        "placed",
        json!([{"role": "user", "content": "a heron in the reeds"}]),
    )
    .await;
    // The names of the server's threads in `cgroup`; a thread of another process fails the test.
    let threads_in = |cgroup: &Path| -> Vec<String> {
        let tasks = std::fs::read_to_string(cgroup.join("tasks")).unwrap();
        tasks
            .lines()
            .map(|tid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"));
                comm.unwrap_or_else(|_| panic!("thread {tid} in {} is not the server's", cgroup.display()))
            })
            .map(|comm| comm.trim_end().to_owned())
            .collect()
    };
    let client = reqwest::Client::new();
    let start = Instant::now();
    loop {
        let found: Value = client
            .post(format!("{}/v1/conversations/search", proc.base))
            .tenant_headers(&t)
            .json(&json!({"query": "heron"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let indexed = found["items"].as_array().is_some_and(|items| !items.is_empty());
        if indexed && !threads_in(&optimizer).is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not indexed and optimized: {found}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let writers = threads_in(&writes);
    assert!(!writers.is_empty());
    assert!(writers.iter().all(|name| name == "sediment-nice10"), "{writers:?}");
    let optimizers = threads_in(&optimizer);
    assert!(
        optimizers.iter().all(|name| name == "sediment-nice10"),
        "{optimizers:?}"
    );
    sigterm_and_wait(proc).await;
}

#[tokio::test]
async fn a_server_refuses_an_index_cgroup_that_is_not_one() {
    let dir = tempfile::tempdir().unwrap();
    let env = std::collections::HashMap::from([
        ("DATA_DIR".to_owned(), dir.path().join("data").display().to_string()),
        ("INDEX_CGROUP".to_owned(), dir.path().display().to_string()),
    ]);
    let settings = shared::config::Settings::from_map(&env).unwrap();
    let err = shared::backends::Backends::connect(&settings)
        .await
        .err()
        .expect("a directory without cgroup files is refused");
    let err = format!("{err:#}");
    assert!(err.contains("SEDIMENT_INDEX_CGROUP"), "{err}");
    assert!(err.contains("is not a cgroup directory"), "{err}");
}

#[tokio::test]
async fn the_index_worker_refuses_an_index_it_cannot_share() {
    // Qdrant Edge lives inside one process; a separate index worker writing its own copy would
    // leave the API's index empty. The worker must say so instead of starting.
    let dir = tempfile::tempdir().unwrap();
    let env = std::collections::HashMap::from([("DATA_DIR".to_owned(), dir.path().display().to_string())]);
    let settings = shared::config::Settings::from_map(&env).unwrap();
    let err = workers::run_index_worker(settings, tokio_util::sync::CancellationToken::new())
        .await
        .expect_err("an Edge index cannot be shared with the API");
    assert!(err.to_string().contains("SEDIMENT_QDRANT_URL"), "{err:#}");
}

/// The scene timer survives a restart: the run is due 2 s after the batch, the process stops
/// before that, and the restarted process runs it (its timer wake-up was in memory; the
/// due-time is in the database, and the scene worker's sweep finds it).
#[tokio::test]
async fn a_pending_scene_run_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = vec![
        (
            "SEDIMENT_DATA_DIR".into(),
            dir.path().join("data").display().to_string(),
        ),
        ("SEDIMENT_EMBEDDING".into(), "none".into()),
        ("SEDIMENT_SCENE_AFTER_L1_MS".into(), "2000".into()),
        ("SEDIMENT_SCENE_MIN_GAP_MS".into(), "2000".into()),
        ("SEDIMENT_PERSONA_MEMORY_THRESHOLD".into(), "1000".into()),
        ("SEDIMENT_WORKER_SWEEP_INTERVAL_MS".into(), "200".into()),
    ];
    let t = tenant();
    let proc = spawn(&env).await;
    append(
        &proc.base,
        &t,
        "timer-restart",
        json!([{"role": "user", "content": "我是腾讯云 DBA，主要管北京区的 TDSQL-C"}]),
    )
    .await;
    let scenes = |base: String, t: Tenant| async move {
        let r = reqwest::Client::new()
            .get(format!("{base}/v1/scenes"))
            .tenant_headers(&t)
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()["items"].as_array().map_or(0, Vec::len)
    };
    // The first turn is extracted at once (warm-up), so the timer is armed; stop before it fires.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(scenes(proc.base.clone(), t.clone()).await, 0, "ran too early");
    sigterm_and_wait(proc).await;

    let proc = spawn(&env).await;
    let start = Instant::now();
    while scenes(proc.base.clone(), t.clone()).await == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the pending scene run was lost"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sigterm_and_wait(proc).await;
}

/// A process killed mid-extraction leaves its session's lease behind (here one of 10 minutes,
/// as a long `SEDIMENT_EXTRACT_LEASE_MS` would). The next embedded process on the data
/// directory is the only one extracting from it, so it releases such leases at start and the
/// session's extraction goes on at once.
#[tokio::test]
async fn an_embedded_restart_takes_over_a_killed_process_extraction_lease() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let env: Vec<(String, String)> = vec![
        ("SEDIMENT_DATA_DIR".into(), data.display().to_string()),
        ("SEDIMENT_EMBEDDING".into(), "none".into()),
        ("SEDIMENT_EXTRACT_IDLE_FLUSH_MS".into(), "300".into()),
    ];
    let t = tenant();
    let proc = spawn(&env).await;
    append(
        &proc.base,
        &t,
        "leased",
        json!([{"role": "user", "content": "hello there"}]),
    )
    .await;
    sigterm_and_wait(proc).await;
    // What a SIGKILL mid-batch leaves: the lease of a run that will never release it.
    let store = shared::store::SqliteStore::open(&data.join("sediment.db"))
        .await
        .unwrap();
    let until = chrono::Utc::now() + chrono::Duration::minutes(10);
    assert!(store
        .claim_session(
            &shared::domain::SessionKey::new(t.clone(), "leased"),
            uuid::Uuid::new_v4(),
            until
        )
        .await
        .unwrap());
    drop(store);

    let proc = spawn(&env).await;
    append(
        &proc.base,
        &t,
        "leased",
        json!([{"role": "user", "content": "I prefer blue-green deploys for the billing service"}]),
    )
    .await;
    let client = reqwest::Client::new();
    let start = Instant::now();
    loop {
        let memories: Value = client
            .get(format!("{}/v1/memories?session_id=leased", proc.base))
            .tenant_headers(&t)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if memories["items"].as_array().is_some_and(|items| !items.is_empty()) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the session's extraction waits for the dead process's lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sigterm_and_wait(proc).await;
}
