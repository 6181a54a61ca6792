//! A volume filling up (issue 39, "the index unavailable", and a disk full beneath the
//! embedded server), for real: a tmpfs that the test fills to the last byte.
//! - The search index's volume: Qdrant Edge writes through memory maps, and a page it cannot
//!   allocate there is a SIGBUS that killed the whole server; the index now keeps
//!   `SEDIMENT_INDEX_MIN_FREE_MB` free and refuses writes below it.
//! - The whole data directory (SQLite and the index): appends answer 503
//!   `backend_unavailable` while nothing can be written, never 500 and never a 201.
//!
//! Mounting needs root (CI runs as root); elsewhere the tests say they skipped.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use integration_tests::app::{tenant, TenantHeaders as _};
use integration_tests::process::{free_port, metric_sum, ApiProcess};
use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::metrics::INDEX_WRITES_REFUSED;

const SERVER: &str = env!("CARGO_BIN_EXE_sediment-api");
const VOLUME_MB: u64 = 16;
/// Far below the default (128 MB), to fit the small volume; the rule is the same.
const RESERVE_MB: u64 = 4;
/// Longest wait for the index to refuse, or to catch up.
const WAIT: Duration = Duration::from_secs(60);

/// A tmpfs mounted on a directory, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, mb: u64) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Self(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the server may still hold files there if the test failed before stopping it.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:")).map(str::to_owned))
        .and_then(|uids| uids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

/// Writes zeros into `path` until the volume is full; returns the bytes written.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).expect("create the filler");
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("fill the volume: {e}"),
        }
    }
    // tmpfs takes what is left a page at a time: the last bytes of a page.
    while let Ok(n @ 1..) = file.write(&chunk[..1]) {
        written += n as u64;
    }
    written
}

async fn append(server: &ApiProcess, t: &Tenant, session: &str, words: &str) -> u16 {
    append_answer(server, t, session, words).await.0
}

/// Appends one user turn about `words`: the status and the error code, if any.
async fn append_answer(server: &ApiProcess, t: &Tenant, session: &str, words: &str) -> (u16, String) {
    let response = server
        .client
        .post(format!("{}/v1/sessions/{session}/messages", server.base))
        .tenant_headers(t)
        .json(&json!({ "messages": [{ "role": "user", "content": format!("I keep notes about {words}.") }] }))
        .send()
        .await
        .expect("append");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

/// Mounts a `mb` MB tmpfs on `dir`; `None` (the test skips) when not root.
fn volume(dir: &Path, mb: u64) -> Option<Tmpfs> {
    match Tmpfs::mount(dir, mb) {
        Ok(volume) => Some(volume),
        Err(e) if !is_root() => {
            eprintln!("full_volume: SKIPPED: mounting a tmpfs needs root ({e})");
            None
        }
        Err(e) => panic!("mount a tmpfs as root: {e}"),
    }
}

/// The embedded server on `data`, keyword search only, the sweep every second (what indexes
/// the refused turns once the wake-ups' retries are spent).
async fn server(dir: &Path, data: &Path, reserve_mb: u64) -> ApiProcess {
    let env = [
        ("AUTH", "off".to_owned()),
        ("EMBEDDING", "none".to_owned()),
        ("DATA_DIR", data.display().to_string()),
        ("INDEX_MIN_FREE_MB", reserve_mb.to_string()),
        ("LOG", "warn".to_owned()),
        ("WORKER_SWEEP_INTERVAL_MS", "1000".to_owned()),
    ];
    let (server, _) = ApiProcess::start_at(Path::new(SERVER), free_port(), &env, &dir.join("server.log")).await;
    server
}

/// The parked messages of every queue, from `/ops/state`.
async fn parked(server: &ApiProcess) -> u64 {
    let state = server.ops_state().await.expect("ops state");
    state["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["parked"].as_u64())
        .sum()
}

/// Keyword search for `words`: its status and how many turns it found.
async fn found(server: &ApiProcess, t: &Tenant, words: &str) -> (u16, usize) {
    let response = server
        .client
        .post(format!("{}/v1/conversations/search", server.base))
        .tenant_headers(t)
        .json(&json!({ "query": words, "strategy": "keyword", "limit": 10 }))
        .send()
        .await
        .expect("search");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["items"].as_array().map_or(0, Vec::len))
}

async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < WAIT, "not within {WAIT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The volume full: appends are still accepted, searches still answer what was indexed, the
/// server stays up and its index writes are refused and counted; once the space is freed,
/// everything accepted meanwhile is indexed and nothing was parked.
#[tokio::test]
async fn a_full_index_volume_refuses_index_writes_and_indexing_catches_up_once_freed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let Some(volume) = volume(&data.join("index"), VOLUME_MB) else {
        return;
    };
    let server = server(dir.path(), &data, RESERVE_MB).await;
    let t = tenant();

    assert_eq!(append(&server, &t, "before", "alpine lakes").await, 201);
    eventually("the first turn indexed", || async { server.lag("index").await == 0 }).await;

    let filler = volume.0.join("filler");
    let filled = fill(&filler);
    assert!(filled > 0, "the volume had room to fill");
    for (n, words) in ["basalt cliffs", "coral reefs", "desert dunes"].iter().enumerate() {
        assert_eq!(
            append(&server, &t, &format!("full-{n}"), words).await,
            201,
            "an append is accepted with the index volume full"
        );
    }
    // More turns: edge's first writes may land in pages it already holds, and only a write
    // that needs a new page fails (without the reserve, the 5th to the 22nd killed the server).
    for n in 0..40 {
        let words = format!("field trip {n} to the glacier museum, with the ferry timetable and a packed lunch");
        assert_eq!(append(&server, &t, "bulk", &words).await, 201);
    }
    // The index worker tries those turns at once and retries them: time enough to kill a
    // server that let the writes run (it did, by SIGBUS, within a second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        found(&server, &t, "alpine lakes").await,
        (200, 1),
        "the server is up and search answers what was indexed before the volume filled"
    );
    eventually("index writes refused and counted", || async {
        metric_sum(&server.metrics().await, INDEX_WRITES_REFUSED, &[]) > 0.0
    })
    .await;
    assert_eq!(
        found(&server, &t, "basalt cliffs").await,
        (200, 0),
        "a turn appended while the volume is full is not indexed yet"
    );
    assert!(
        server.lag("index").await > 0,
        "the turns appended meanwhile wait past the index cursor"
    );

    std::fs::remove_file(&filler).expect("free the space");
    eventually("the index caught up once the space was freed", || async {
        server.lag("index").await == 0
    })
    .await;
    for words in ["basalt cliffs", "coral reefs", "desert dunes"] {
        assert_eq!(found(&server, &t, words).await, (200, 1), "{words} indexed once");
    }
    assert_eq!(
        parked(&server).await,
        0,
        "nothing parked: the sweep redoes refused index writes"
    );
    server.stop().await;
}

/// The whole data directory full (the transcript's SQLite beside the index): an append that
/// cannot be written is refused with 503 `backend_unavailable`, a retryable answer, never a
/// 500 and never a 201; searches still answer; once space is freed appends are accepted again
/// and every accepted turn is indexed.
#[tokio::test]
async fn a_full_data_volume_refuses_appends_with_503_and_accepts_them_once_freed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let Some(volume) = volume(&data, VOLUME_MB) else { return };
    let server = server(dir.path(), &data, RESERVE_MB).await;
    let t = tenant();
    assert_eq!(append(&server, &t, "before", "alpine lakes").await, 201);
    eventually("the first turn indexed", || async { server.lag("index").await == 0 }).await;

    let filler = volume.0.join("filler");
    assert!(fill(&filler) > 0, "the volume had room to fill");
    // SQLite writes into pages its files already hold until it needs a new one: append until
    // it does, each answer either a stored turn or a refusal.
    let mut accepted = Vec::new();
    let mut refused = None;
    for n in 0..400 {
        let words = format!("harbour crane {n} lifting containers off the night ferry, each one logged twice");
        match append_answer(&server, &t, "full", &words).await {
            (201, _) => accepted.push(words),
            answer => {
                refused = Some(answer);
                break;
            }
        }
    }
    assert_eq!(
        refused,
        Some((503, "backend_unavailable".to_owned())),
        "an append the full volume cannot hold (after {} accepted)",
        accepted.len()
    );
    assert_eq!(
        found(&server, &t, "alpine lakes").await,
        (200, 1),
        "search answers with the volume full"
    );

    std::fs::remove_file(&filler).expect("free the space");
    assert_eq!(
        append(&server, &t, "after", "basalt cliffs").await,
        201,
        "appends are accepted once space is freed"
    );
    eventually("the index caught up once the space was freed", || async {
        server.lag("index").await == 0
    })
    .await;
    assert_eq!(found(&server, &t, "basalt cliffs").await, (200, 1));
    let stored = server
        .client
        .get(format!("{}/v1/sessions/full/messages?limit=1000", server.base))
        .tenant_headers(&t)
        .send()
        .await
        .expect("read the session")
        .json::<Value>()
        .await
        .expect("a page of turns");
    assert_eq!(
        stored["messages"].as_array().map_or(0, Vec::len),
        accepted.len(),
        "every accepted turn is stored, and nothing refused"
    );
    assert_eq!(parked(&server).await, 0);
    server.stop().await;
}
