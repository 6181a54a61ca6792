//! L2/L3 costs, two measures:
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_layers            # local file store
//! SEDIMENT_TEST_S3_URL=http://127.0.0.1:9000 cargo run --release -p integration-tests --bin bench_layers
//! ```
//!
//! 1. **L1 batch → updated persona**, embedded API, timers scaled down (scene run 100 ms after
//!    the batch, 300 ms between runs), rules mode and LLM mode (the scripted server answering
//!    after 200 ms): for each of `OWNERS` owners, the time from appending a turn to
//!    `GET /v1/persona` answering with it. This is timer + extraction + scene run + persona
//!    build; the scaled timers are the floor.
//! 2. **File-store round trips per scene edit**: scene runs (rules editor) over SQLite and the
//!    configured file store (S3 when `SEDIMENT_TEST_S3_URL` is set), each with new memories for
//!    an owner with a few scenes; every file-store call is counted and timed by operation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{SubsecRound as _, Utc};
use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::fake_openai::{chat_message, FakeOpenAi};
use integration_tests::stats::percentile;
use reqwest::Method;
use serde_json::{json, Value};
use shared::bus::{EventBus, LocalBus};
use shared::domain::{NewTurn, SessionId, Tenant};
use shared::files::{FileResult, FileStore, LocalFileStore, ObjectMeta, S3FileStore};
use shared::memory::{Category, Memory, MemoryStatus};
use shared::scene::editor::RulesSceneEditor;
use shared::scene::run::{RunOutcome, SceneRunner, SceneSettings};
use shared::store::memory::{BatchCommit, MemoryStore};
use shared::store::scene::{SceneSchedule, SceneStore};
use shared::store::{SqliteStore, TranscriptStore};
use uuid::Uuid;

const OWNERS: usize = 10;
const RUN_OWNERS: usize = 10;
const RUNS_PER_OWNER: usize = 5;
const MEMORIES_PER_RUN: usize = 4;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// 1. L1 batch → persona

fn persona_answer(body: &Value) -> Option<String> {
    let system = chat_message(body, "system").unwrap_or_default();
    let payload: Value = chat_message(body, "user")
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    if payload.get("mode").is_some() && system.contains("persona") {
        return Some(json!({"persona": "# Persona\n\n## Identity\n- 腾讯云 DBA\n"}).to_string());
    }
    if system.contains("scene documents") {
        if payload.get("results").is_some() {
            return Some(json!({"actions": [], "done": true}).to_string());
        }
        let doc = "# 实例 A 慢查询\n\n## Overview\n排查与修复。\n\n## Event chain\n- [02:10] 慢查询\n";
        return Some(
            json!({"actions": [{"tool": "create", "content": doc}], "done": true, "persona_worthy": true}).to_string(),
        );
    }
    if let Some(turns) = payload["turns"].as_array() {
        let cards: Vec<Value> = turns
            .iter()
            .map(|t| json!({"content": t["content"], "category": "persona", "priority": 90, "source_message_ids": [t["ref"]]}))
            .collect();
        return Some(json!({"scenes": [{"scene": "自我介绍", "cards": cards}]}).to_string());
    }
    if let Some(cards) = payload["cards"].as_array() {
        let decisions: Vec<Value> = cards
            .iter()
            .map(|c| json!({"card": c["ref"], "action": "add"}))
            .collect();
        return Some(json!({"decisions": decisions}).to_string());
    }
    None
}

async fn l1_to_persona(label: &str, llm: Option<&FakeOpenAi>) {
    let mut env = vec![
        ("SCENE_AFTER_L1_MS", "100".to_owned()),
        ("SCENE_MIN_GAP_MS", "300".to_owned()),
        ("SCENE_MAX_WAIT_MS", "5000".to_owned()),
        ("PERSONA_MEMORY_THRESHOLD", "1000".to_owned()),
    ];
    if let Some(llm) = llm {
        env.extend([
            ("LLM_URL", llm.base_url()),
            ("LLM_MODEL", "fake-model".to_owned()),
            ("LLM_MAX_RETRIES", "0".to_owned()),
        ]);
    }
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    let mut latencies = Vec::new();
    for _ in 0..OWNERS {
        let t = tenant();
        let started = Instant::now();
        let session = format!("bench-{}", Uuid::new_v4().simple());
        app.append_ok(
            &t,
            &session,
            json!([{"role": "user", "content": "我是腾讯云 DBA，主要管北京区的 TDSQL-C"}]),
        )
        .await;
        loop {
            let response = app.req(Method::GET, "/v1/persona", &t).send().await.expect("persona");
            if response.status() == 200 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "no persona after 60 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    println!(
        "| {label} | {OWNERS} | {:.0} | {:.0} | {:.0} |",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.9)),
        ms(*latencies.last().expect("latencies"))
    );
    app.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 2. File-store round trips per scene run

/// Counts and times every call, by operation.
struct Counting {
    inner: Arc<dyn FileStore>,
    calls: Mutex<BTreeMap<&'static str, (u64, Duration)>>,
}

impl Counting {
    fn record(&self, op: &'static str, elapsed: Duration) {
        let mut calls = self.calls.lock().expect("lock");
        let entry = calls.entry(op).or_default();
        entry.0 += 1;
        entry.1 += elapsed;
    }
    fn take(&self) -> BTreeMap<&'static str, (u64, Duration)> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }
}

macro_rules! timed {
    ($self:ident, $op:literal, $call:expr) => {{
        let started = Instant::now();
        let result = $call.await;
        $self.record($op, started.elapsed());
        result
    }};
}

#[async_trait]
impl FileStore for Counting {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn put(&self, key: &str, body: Vec<u8>) -> FileResult<()> {
        timed!(self, "put", self.inner.put(key, body))
    }
    async fn get(&self, key: &str) -> FileResult<Option<Vec<u8>>> {
        timed!(self, "get", self.inner.get(key))
    }
    async fn list(&self, prefix: &str) -> FileResult<Vec<ObjectMeta>> {
        timed!(self, "list", self.inner.list(prefix))
    }
    async fn delete(&self, key: &str) -> FileResult<()> {
        timed!(self, "delete", self.inner.delete(key))
    }
    async fn delete_prefix(&self, prefix: &str) -> FileResult<usize> {
        timed!(self, "delete_prefix", self.inner.delete_prefix(prefix))
    }
    async fn copy_prefix(&self, from: &str, to: &str) -> FileResult<usize> {
        timed!(self, "copy_prefix", self.inner.copy_prefix(from, to))
    }
    async fn check(&self) -> FileResult<()> {
        self.inner.check().await
    }
}

async fn add_memories(store: &SqliteStore, t: &Tenant, round: usize) {
    let session = SessionId::parse(&format!("s-{}", Uuid::new_v4().simple())).expect("session");
    let turns: Vec<NewTurn> = (0..MEMORIES_PER_RUN)
        .map(|i| NewTurn::new("user", &format!("round {round} fact {i}"), None, None, None).expect("turn"))
        .collect();
    TranscriptStore::append(store, t, &session, &turns)
        .await
        .expect("append");
    let stored = TranscriptStore::list(store, t, &session, 0, 100).await.expect("list");
    let now = Utc::now().trunc_subsecs(6);
    let scenes = ["慢查询排查", "版本升级", "容量规划"];
    let memories: Vec<Memory> = stored
        .iter()
        .enumerate()
        .map(|(i, turn)| Memory {
            id: Uuid::new_v4(),
            tenant: t.clone(),
            session_id: session.as_str().to_owned(),
            content: format!("实例 {round}-{i} 在 02:{i:02} 出现慢查询，Buffer Pool 命中率 9{i}%"),
            category: if i % 2 == 0 {
                Category::Episodic
            } else {
                Category::WorkFact
            },
            priority: 60,
            scene: Some(scenes[(round + i) % scenes.len()].to_owned()),
            occurred_at: Some(format!("2026-11-{:02}", 1 + round)),
            source_message_ids: vec![turn.id],
            status: MemoryStatus::Active,
            superseded_by: None,
            task: None,
            created_at: now,
            updated_at: now,
        })
        .collect();
    store
        .commit_batch(&BatchCommit {
            tenant: t.clone(),
            session_id: session.as_str().to_owned(),
            expected_cursor: 0,
            new_cursor: stored.last().expect("turns").seq,
            memories,
            archive: Vec::new(),
            provenance: Vec::new(),
            now,
        })
        .await
        .expect("commit");
    store
        .update_scene_schedule(t, &move |s| SceneSchedule {
            due_at: Some(now),
            last_l1_at: Some(now),
            ..s
        })
        .await
        .expect("due");
}

async fn round_trips() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(SqliteStore::open(&dir.path().join("bench.db")).await.expect("sqlite"));
    let bucket = integration_tests::s3::TestBucket::start("bench-layers").await;
    let inner: Arc<dyn FileStore> = match &bucket {
        Some(bucket) => Arc::new(S3FileStore::new(bucket.settings()).expect("s3")),
        None => Arc::new(LocalFileStore::open(&dir.path().join("files")).expect("local")),
    };
    let files = Arc::new(Counting {
        inner,
        calls: Mutex::default(),
    });
    let bus: Arc<dyn EventBus> = Arc::new(LocalBus::new(3, Duration::from_millis(50)));
    let mut settings = SceneSettings::default();
    settings.timer.after_l1 = Duration::from_millis(1);
    settings.timer.min_gap = Duration::from_millis(1);
    let runner = SceneRunner::new(
        store.clone(),
        store.clone(),
        files.clone(),
        bus,
        Arc::new(RulesSceneEditor),
        settings,
    );
    let mut per_op: BTreeMap<&'static str, (u64, Duration)> = BTreeMap::new();
    let mut runs = 0u64;
    let mut edits = 0u64;
    let mut run_times = Vec::new();
    for _ in 0..RUN_OWNERS {
        let t = tenant();
        for round in 0..RUNS_PER_OWNER {
            add_memories(&store, &t, round).await;
            files.take();
            let started = Instant::now();
            let outcome = runner.run(&t).await.expect("scene run");
            run_times.push(started.elapsed());
            if let RunOutcome::Edited { scenes, .. } = outcome {
                runs += 1;
                edits += scenes as u64;
            }
            for (op, (n, d)) in files.take() {
                let entry = per_op.entry(op).or_default();
                entry.0 += n;
                entry.1 += d;
            }
        }
    }
    run_times.sort();
    let backend = if bucket.is_some() {
        "S3 (moto)"
    } else {
        "local directory"
    };
    println!("\nFile-store calls per scene run ({backend}; {runs} runs editing {edits} scenes, rules editor):\n");
    println!("| operation | calls per run | calls per scene edit | mean ms per call |");
    println!("|---|---|---|---|");
    let mut total = 0u64;
    for (op, (n, d)) in &per_op {
        total += n;
        println!(
            "| {op} | {:.1} | {:.1} | {:.2} |",
            *n as f64 / runs as f64,
            *n as f64 / edits as f64,
            ms(*d) / *n as f64
        );
    }
    println!(
        "| all | {:.1} | {:.1} | |",
        total as f64 / runs as f64,
        total as f64 / edits as f64
    );
    println!(
        "\nscene run p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms (claim to commit, incl. snapshot)",
        ms(percentile(&run_times, 0.5)),
        ms(percentile(&run_times, 0.9)),
        ms(*run_times.last().expect("runs"))
    );
    if let Some(bucket) = bucket {
        bucket.cleanup().await;
    }
}

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() {
    println!("L1 batch → persona (embedded, timers 100 ms / 300 ms):\n");
    println!("| mode | owners | p50 ms | p90 ms | max ms |");
    println!("|---|---|---|---|---|");
    l1_to_persona("rules", None).await;
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(persona_answer);
    llm.set_latency(Duration::from_millis(200));
    l1_to_persona("LLM, 200 ms per call", Some(&llm)).await;
    llm.stop().await;
    round_trips().await;
}
