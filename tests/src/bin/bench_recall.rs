//! Recall as an agent meets it, at 100k and 1M turns in one tenant: `POST /v1/recall` over
//! HTTP on the embedded server (the real binary, a child process), including the local model's
//! embedding of each question.
//!
//! ```sh
//! bash api/fetch-model.sh
//! cargo build --release -p integration-tests --bin sediment-api --bin bench_recall
//! cargo run --release -p integration-tests --bin bench_recall [-- 100000 1000000]
//! ```
//!
//! Each size (default 100000) is loaded on top of the last: synthetic turns
//! (`integration_tests::synthetic`), 1,000 to a session and to a request, four requests in
//! flight. Embedding a million turns with the local model would take over two hours on two
//! cores (`bench_embed`: 134 sentences/s), so the server loads them with
//! `SEDIMENT_EMBEDDING=openai` against the scripted endpoint in this process, whose 384
//! dimensions are hashed from the words and all used (cheap, and an HNSW graph over them
//! behaves as over a model's). Once the index has caught up and its optimizer is idle, recall
//! is timed with those query vectors (the index and HTTP alone). Then the server is stopped
//! and started again on the same directories with the local model (`SEDIMENT_EMBEDDING=local`,
//! query vector cache off, so every question is embedded), and recall is timed again: the
//! latency a user meets. The model's question vectors come from another space than the turns'
//! vectors, so what the dense channel finds means nothing here; the index's work per query
//! (a walk of the same graphs with the same search width) depends little on where the query
//! vector lies.
//!
//! Load model: an open loop, Poisson arrivals at `BENCH_RATE` recalls/s (default 10), each
//! timed from its scheduled send time, `BENCH_QUERIES` questions (default 200) of 13-15 words
//! per strategy (keyword, semantic, hybrid; limit 10), the strategies alternated over two
//! rounds. Reported per size: the load's time and the server's CPU per turn (append, keyword
//! and dense indexing, the scripted vectors excluded), the store's and index's size on disk,
//! the server's resident memory (anonymous and file-backed, as the index maps its files), the
//! restart's time to ready, and per strategy p50/p99 and the server's CPU per recall.
//! The state goes under `BENCH_DIR` (default: the system's temporary directory) and is removed
//! at the end.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use integration_tests::app::{tenant, TenantHeaders as _};
use integration_tests::env_or;
use integration_tests::fake_openai::FakeOpenAi;
use integration_tests::process::ApiProcess;
use integration_tests::stats::{percentile, poisson_arrivals};
use integration_tests::synthetic::{sentence, Rng};
use serde_json::{json, Value};
use shared::domain::Tenant;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

const TURNS_PER_REQUEST: usize = 1_000;
const IN_FLIGHT: usize = 4;
const STRATEGIES: [&str; 3] = ["keyword", "semantic", "hybrid"];

/// Where the query vectors come from.
#[derive(Clone, Copy)]
enum Embedding {
    /// The scripted endpoint: the index and HTTP alone.
    Scripted,
    /// The local model, as a user runs it.
    Local,
}

/// Starts the embedded server on `dir`, its query vectors from `embedding`.
async fn start(dir: &Path, embedding: Embedding, fake: &FakeOpenAi) -> (ApiProcess, Duration) {
    let mut env = vec![
        ("DATA_DIR", dir.join("data").display().to_string()),
        ("INDEX_DIR", dir.join("index").display().to_string()),
        ("EXTRACT", "false".to_owned()),
        ("QUERY_VECTOR_CACHE", "0".to_owned()),
        ("LOG", "warn".to_owned()),
    ];
    match embedding {
        Embedding::Scripted => {
            env.push(("EMBEDDING", "openai".to_owned()));
            env.push(("EMBEDDING_URL", fake.base_url()));
        }
        Embedding::Local => env.push(("EMBEDDING", "local".to_owned())),
    }
    if let Ok(model_dir) = std::env::var("SEDIMENT_MODEL_DIR") {
        env.push(("MODEL_DIR", model_dir));
    }
    ApiProcess::start(&env, &dir.join("server.log")).await
}

/// Recalls `query` as `t`; asserts it answered with no error, ranked by `strategy`, and found
/// something.
async fn recall(server: &ApiProcess, t: &Tenant, query: &str, strategy: &str) {
    let response = server
        .client
        .post(format!("{}/v1/recall", server.base))
        .tenant_headers(t)
        .json(&json!({ "query": query, "strategy": strategy, "limit": 10 }))
        .send()
        .await
        .expect("recall");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("recall body");
    assert_eq!(body["errors"], json!([]), "{body}");
    assert_eq!(body["strategy"], strategy, "{body}");
    assert!(
        body["dynamic"].as_array().is_some_and(|items| !items.is_empty()),
        "{strategy} recall found nothing: {body}"
    );
}

/// Question `q`: 13-15 words around three terms of the synthetic text, as an agent asks
/// before an LLM call.
fn question(q: usize) -> String {
    const OPENERS: [&str; 6] = [
        "What did we decide about",
        "When did the team last talk about",
        "Why was there trouble with",
        "How should I handle",
        "Which option did we pick for",
        "Who was looking into",
    ];
    let mut rng = Rng(q as u64 * 7_919 + 17);
    let (a, b, c) = (rng.word(), rng.word(), rng.word());
    format!(
        "{} {a} and {b} after the {c} problem last week?",
        OPENERS[q % OPENERS.len()]
    )
}

/// Bytes on disk under `path` (allocated blocks, as `du`).
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&entry.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Appends turns `from..to` to `t`, a session per request; prints the time and the server's CPU
/// per turn.
async fn load(server: &ApiProcess, t: &Tenant, from: usize, to: usize) {
    let cpu = server.cpu_seconds();
    let started = Instant::now();
    futures::stream::iter((from..to).step_by(TURNS_PER_REQUEST))
        .map(|first| async move {
            let turns = (first..(first + TURNS_PER_REQUEST).min(to))
                .map(|i| json!({ "role": "user", "content": sentence(i) }))
                .collect();
            server
                .append(t, &format!("s{}", first / TURNS_PER_REQUEST), turns)
                .await;
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    let appended = started.elapsed();
    server.wait_indexed().await;
    let indexed = started.elapsed();
    let turns = (to - from) as f64;
    println!(
        "loaded turns {from}..{to}: appended in {:.1} s ({:.0} turns/s), indexed and optimized in {:.1} s; \
         server CPU {:.0} µs/turn",
        appended.as_secs_f64(),
        turns / appended.as_secs_f64(),
        indexed.as_secs_f64(),
        (server.cpu_seconds() - cpu) / turns * 1e6,
    );
}

/// Times `questions` recalls of `strategy` in an open loop at `rate`; prints p50/p99 and the
/// server's CPU per recall.
async fn timed(server: &ApiProcess, t: &Tenant, label: &str, strategy: &str, questions: usize, rate: f64) {
    // Twice the expected span, then cut to the count: every run sends the same questions.
    let schedule: Vec<Duration> = poisson_arrivals(rate, 2.0 * questions as f64 / rate)
        .into_iter()
        .take(questions)
        .collect();
    let cpu = server.cpu_seconds();
    let start = Instant::now();
    let mut latencies: Vec<Duration> = futures::future::join_all(schedule.iter().enumerate().map(|(q, offset)| {
        let query = question(q);
        async move {
            let due = start + *offset;
            tokio::time::sleep_until(due.into()).await;
            recall(server, t, &query, strategy).await;
            due.elapsed()
        }
    }))
    .await;
    latencies.sort_unstable();
    println!(
        "  {label:<20} {strategy:<8} n={} p50 {:>6.2} ms p99 {:>6.2} ms | server CPU {:>6.2} ms/recall",
        latencies.len(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        (server.cpu_seconds() - cpu) / latencies.len().max(1) as f64 * 1e3,
    );
}

/// Both rounds of every strategy, then the server's memory.
async fn measure(server: &ApiProcess, t: &Tenant, label: &str, questions: usize, rate: f64) {
    // Warm-up: the first recalls fault the index's files in and fill the allocator's pools.
    for q in 0..20 {
        for strategy in STRATEGIES {
            recall(server, t, &question(questions + q), strategy).await;
        }
    }
    for _round in 0..2 {
        for strategy in STRATEGIES {
            timed(server, t, label, strategy, questions, rate).await;
        }
    }
    println!("  {label:<20} {}", server.memory());
}

#[tokio::main]
async fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("sizes are turn counts"))
        .collect();
    if sizes.is_empty() {
        sizes.push(100_000);
    }
    sizes.sort_unstable();
    let questions: usize = env_or("BENCH_QUERIES", 200);
    let rate: f64 = env_or("BENCH_RATE", 10.0);
    let temp = match std::env::var_os("BENCH_DIR") {
        Some(parent) => tempfile::tempdir_in(parent),
        None => tempfile::tempdir(),
    }
    .expect("state directory");
    let dir = temp.path();
    let fake = FakeOpenAi::start(384).await;
    fake.set_dense(true);
    let t = tenant();
    println!(
        "open loop, Poisson {rate}/s, {questions} questions a strategy and round, limit 10; state in {}",
        dir.display()
    );
    let mut loaded = 0;
    for size in sizes {
        let (server, _) = start(dir, Embedding::Scripted, &fake).await;
        load(&server, &t, loaded, size).await;
        loaded = size;
        println!(
            "{size} turns: store {:.0} MB, index {:.0} MB on disk",
            disk_bytes(&dir.join("data")) as f64 / 1e6,
            disk_bytes(&dir.join("index")) as f64 / 1e6,
        );
        measure(&server, &t, "scripted vectors", questions, rate).await;
        server.stop().await;
        let (server, ready) = start(dir, Embedding::Local, &fake).await;
        println!(
            "{size} turns: restarted with the local model, ready in {:.1} s, {}",
            ready.as_secs_f64(),
            server.memory()
        );
        measure(&server, &t, "local model", questions, rate).await;
        server.stop().await;
    }
}
