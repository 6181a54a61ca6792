//! Local (candle) embedding throughput: sentences/s and per-call latency at several batch sizes.
//!
//! ```sh
//! bash api/fetch-model.sh
//! cargo run --release -p integration-tests --bin bench_embed [-- N [BATCH...]]
//! ```
//!
//! N sentences (default 256) of 10-60 words are embedded in calls of BATCH texts (default 1, 8
//! and 32). `BENCH_SUB_BATCH` sets the embedder's forward-pass size (default: its own), and
//! `BENCH_CONCURRENCY` how many calls run at once (default 1). A call's sub-batches run side by
//! side, one core each; a question is one sub-batch, on one core.
//!
//! `-- --queries N [--dump FILE]` embeds N questions of 10-20 words one at a time, as recall
//! embeds a query, and prints p50 and p99 per question; FILE gets the questions and their
//! vectors, for the numpy reference (`tests/embed_reference.py`) to time the same questions and
//! check the vectors against.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use integration_tests::stats::percentile;
use shared::embed::{Embedder, LocalEmbedder};

const WORDS: &[&str] = &[
    "the",
    "user",
    "prefers",
    "postgres",
    "for",
    "orders",
    "and",
    "wants",
    "nightly",
    "backups",
    "of",
    "database",
    "replica",
    "lag",
    "stayed",
    "under",
    "two",
    "seconds",
    "deploy",
    "staging",
    "before",
    "migration",
    "runs",
    "we",
    "agreed",
    "to",
    "keep",
    "index",
    "latency",
    "low",
    "while",
    "search",
    "results",
    "improve",
    "agent",
    "memory",
    "session",
    "remembers",
    "dark",
    "mode",
    "editor",
    "keybindings",
    "team",
    "meeting",
    "moved",
    "thursday",
    "订单",
    "索引",
    "数据库",
    "because",
    "it",
    "is",
    "faster",
    "than",
    "the",
    "old",
    "queue",
    "rabbitmq",
    "consumer",
    "retries",
    "failed",
    "messages",
    "with",
    "backoff",
    "release",
    "notes",
    "mention",
    "a",
    "bug",
    "in",
    "parser",
];

/// A deterministic pseudo-random generator, so every run embeds the same texts.
struct Lcg(u64);

impl Lcg {
    fn pick(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below as u64) as usize
    }
}

fn sentences(n: usize) -> Vec<String> {
    let mut rng = Lcg(42);
    (0..n)
        .map(|_| {
            let words = 10 + rng.pick(51);
            let mut s: Vec<&str> = (0..words).map(|_| WORDS[rng.pick(WORDS.len())]).collect();
            s[0] = "Note:";
            format!("{}.", s.join(" "))
        })
        .collect()
}

fn model_dir() -> PathBuf {
    std::env::var_os("SEDIMENT_MODEL_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/sediment/models/all-MiniLM-L6-v2")
        })
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

/// `n` questions of 10-20 words, as an agent asks before an LLM call.
fn questions(n: usize) -> Vec<String> {
    const OPENERS: &[&str] = &["What", "When", "Why", "How", "Which", "Who"];
    let mut rng = Lcg(7);
    (0..n)
        .map(|_| {
            let words = 9 + rng.pick(11);
            let rest: Vec<&str> = (0..words).map(|_| WORDS[rng.pick(WORDS.len())]).collect();
            format!("{} {}?", OPENERS[rng.pick(OPENERS.len())], rest.join(" "))
        })
        .collect()
}

/// Embeds each question alone and reports the latency of one, as a recall meets it.
async fn queries(embedder: &dyn Embedder, n: usize, dump: Option<PathBuf>) {
    let texts = questions(n);
    for text in texts.iter().take(8) {
        embedder.embed(std::slice::from_ref(text)).await.expect("warm-up");
    }
    let mut latencies = Vec::with_capacity(n);
    let mut vectors = Vec::with_capacity(n);
    for text in &texts {
        let t = Instant::now();
        let mut v = embedder.embed(std::slice::from_ref(text)).await.expect("embed");
        latencies.push(t.elapsed());
        vectors.push(v.pop().expect("one vector"));
    }
    latencies.sort();
    println!(
        "queries: {n} questions of 10-20 words, one per call: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    if let Some(path) = dump {
        let rows: Vec<serde_json::Value> = texts
            .iter()
            .zip(&vectors)
            .map(|(text, vector)| serde_json::json!({ "text": text, "vector": vector }))
            .collect();
        std::fs::write(&path, serde_json::to_vec(&rows).expect("json")).expect("write the dump");
        println!("questions and vectors written to {}", path.display());
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let query_mode = args.peek().is_some_and(|a| a == "--queries");
    if query_mode {
        args.next();
    }
    let n: usize = args
        .next()
        .map(|a| a.parse().expect("N"))
        .unwrap_or(if query_mode { 200 } else { 256 });
    let dump = if query_mode && args.peek().is_some_and(|a| a == "--dump") {
        args.next();
        Some(PathBuf::from(args.next().expect("--dump FILE")))
    } else {
        None
    };
    let mut batches: Vec<usize> = args.map(|a| a.parse().expect("batch size")).collect();
    if batches.is_empty() {
        batches = vec![1, 8, 32];
    }
    let concurrency = env_usize("BENCH_CONCURRENCY").unwrap_or(1).max(1);

    let dir = model_dir();
    assert!(
        LocalEmbedder::is_model_dir(&dir),
        "no model in {}: run `bash api/fetch-model.sh`",
        dir.display()
    );
    let start = Instant::now();
    let mut embedder = LocalEmbedder::load(&dir).expect("load model");
    if let Some(sub) = env_usize("BENCH_SUB_BATCH") {
        embedder = embedder.with_batch_size(sub);
    }
    let embedder = Arc::new(embedder);
    if query_mode {
        println!(
            "model {} loaded in {:.0} ms",
            embedder.model(),
            start.elapsed().as_secs_f64() * 1e3,
        );
        queries(embedder.as_ref(), n, dump).await;
        return;
    }
    println!(
        "model {} (dim {}) loaded in {:.0} ms; {n} sentences, concurrency {concurrency}",
        embedder.model(),
        embedder.dimension(),
        start.elapsed().as_secs_f64() * 1e3,
    );
    let texts = Arc::new(sentences(n));
    embedder.embed(&texts[..8]).await.expect("warm-up");

    for batch in batches {
        let calls: Vec<std::ops::Range<usize>> = (0..n).step_by(batch).map(|lo| lo..(lo + batch).min(n)).collect();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let calls = Arc::new(calls);
        let start = Instant::now();
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let (embedder, texts, calls, next) = (embedder.clone(), texts.clone(), calls.clone(), next.clone());
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(range) = calls.get(i) else { break };
                        let t = Instant::now();
                        let v = embedder.embed(&texts[range.clone()]).await.expect("embed");
                        latencies.push(t.elapsed());
                        assert_eq!(v.len(), range.len());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for w in workers {
            latencies.extend(w.await.expect("worker"));
        }
        let elapsed = start.elapsed();
        latencies.sort();
        println!(
            "batch={batch:>3}: {:>7.1} sentences/s, per call p50 {:>8.2} ms, p99 {:>8.2} ms ({} calls)",
            n as f64 / elapsed.as_secs_f64(),
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            latencies.len()
        );
    }
}
