//! Qdrant Edge index micro-benchmark: upsert cost per batch size (each upsert is flushed for
//! durability) and query latency.
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_index -- 10 100 1000
//! cargo run --release -p integration-tests --bin bench_index -- stream [POINTS] [BATCH]
//! cargo run --release -p integration-tests --bin bench_index -- bm25
//! ```
//!
//! `bm25` times the BM25 embedding of the quality dataset's English and Chinese turns, ours
//! against qdrant-edge's `Multilingual` model alone.
//!
//! `stream` is the index worker's write path under sustained ingest, without HTTP or the
//! store: turns as the worker indexes them (synthetic text and date tags, by
//! `retrieval::keyword_text` and `turn_tags`, 64 sessions) are upserted back to back in
//! `BATCH`-point writes (default 1,400, what the combiner makes of the cluster bench's paced
//! load) until `POINTS` (default 100k), with the background optimizer as in production. Every
//! 10k points it prints the write latency, the throughput and the process's CPU time per point
//! (writer, optimizer and text generation together: what indexing takes from cores that ingest
//! also needs), so a cost that grows with the shard shows. Once the optimizer has settled, it
//! times 2,000 two-word keyword queries against the shard.

use std::time::{Duration, Instant};

use integration_tests::quality::{Dataset, Lang};
use integration_tests::stats::percentile;
use integration_tests::synthetic::{sentence, Rng};
use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};
use qdrant_edge::TokenizerType;
use shared::domain::Role;
use shared::domain::Tenant;
use shared::index::{Bm25, EdgeIndex, Fusion, IndexPoint, IndexQuery, PointKind, SearchIndex, Strategy};
use shared::retrieval::{keyword_text, turn_tags, TurnFields};

/// BM25 embedding of the quality dataset's turns (realistic English and Chinese conversation),
/// per language: the project's `Bm25` (its fast path, charabia for the rest, numbers marked)
/// against qdrant-edge's `Multilingual` model alone. Timing only: `shared`'s unit tests check
/// that the fast path gives charabia's vectors.
fn bm25() {
    let dataset = Dataset::generate(7);
    let ours = Bm25::new();
    let charabia = EdgeBm25::new(EdgeBm25Config {
        tokenizer: TokenizerType::Multilingual,
        lowercase: Some(true),
        ..EdgeBm25Config::default()
    })
    .expect("the default config is valid");
    for lang in [Lang::En, Lang::Zh] {
        let texts: Vec<&str> = dataset
            .owners
            .iter()
            .filter(|o| o.lang == lang)
            .flat_map(|o| {
                o.sessions
                    .iter()
                    .flat_map(|s| s.turns.iter().map(|t| t.content.as_str()))
            })
            .collect();
        let ascii = texts.iter().filter(|t| t.is_ascii()).count();
        let time = |embed: &dyn Fn(&str) -> usize| {
            let mut best = Duration::MAX;
            for _ in 0..5 {
                let start = Instant::now();
                std::hint::black_box(texts.iter().map(|t| embed(t)).sum::<usize>());
                best = best.min(start.elapsed());
            }
            best.as_secs_f64() * 1e6 / texts.len() as f64
        };
        let ours_us = time(&|t| ours.embed_document(t).indices.len());
        let charabia_us = time(&|t| charabia.embed_document(t).indices.len());
        println!(
            "bm25 {}: {} turns ({:.0} % ASCII), {ours_us:.1} µs/turn against charabia's {charabia_us:.1} ({:.1}×)",
            lang.as_str(),
            texts.len(),
            100.0 * ascii as f64 / texts.len() as f64,
            charabia_us / ours_us,
        );
    }
}

fn point(tenant: &Tenant, i: usize) -> IndexPoint {
    IndexPoint {
        id: uuid::Uuid::new_v4(),
        kind: PointKind::Turn,
        tenant: tenant.clone(),
        session_id: format!("s{}", i % 50),
        text: format!(
            "turn {i} about database index replica backup 订单 索引 latency {}",
            i % 977
        ),
        tags: Vec::new(),
        task: None,
        dense: None,
    }
}

/// A turn's point as the index worker makes it (`indexer::index_pending`).
fn turn_point(tenant: &Tenant, i: usize) -> IndexPoint {
    let content = sentence(i);
    let fields = TurnFields {
        role: Role::User,
        content: &content,
        created_at: chrono::Utc::now(),
        caption: None,
        speaker: None,
    };
    IndexPoint {
        id: uuid::Uuid::new_v4(),
        kind: PointKind::Turn,
        tenant: tenant.clone(),
        session_id: format!("s{}", i % 64),
        text: keyword_text(fields),
        tags: turn_tags(fields),
        task: None,
        dense: None,
    }
}

fn optimize_every() -> usize {
    std::env::var("BENCH_OPTIMIZE_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

async fn stream(tenant: &Tenant, points: usize, batch: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let index = EdgeIndex::open(dir.path(), optimize_every(), None).expect("open index");
    let mut latencies: Vec<Duration> = Vec::new();
    let mut phase = Instant::now();
    let mut phase_cpu = cpu_seconds();
    let mut n = 0;
    while n < points {
        let writes: Vec<_> = (n..n + batch).map(|i| turn_point(tenant, i)).collect();
        let start = Instant::now();
        index.upsert(&writes).await.expect("upsert");
        latencies.push(start.elapsed());
        n += batch;
        if n % 10_000 < batch || n >= points {
            latencies.sort_unstable();
            let q = |p: f64| percentile(&latencies, p).as_secs_f64() * 1e3;
            let cpu = cpu_seconds();
            println!(
                "stream {n:>7} points: write p50={:.1}ms p99={:.1}ms max={:.1}ms, {:.0} points/s, process CPU {:.0} µs/point | {}",
                q(0.5),
                q(0.99),
                q(1.0),
                (latencies.len() * batch) as f64 / phase.elapsed().as_secs_f64(),
                (cpu - phase_cpu) * 1e6 / (latencies.len() * batch) as f64,
                index.shard_summary()
            );
            latencies.clear();
            phase = Instant::now();
            phase_cpu = cpu;
        }
    }
    // Dropping the index under a running optimizer would remove its directory mid-run; and
    // the queries below are timed against the settled segments.
    while index.optimizing() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let texts = (0..2_000u64).map(|q| {
        let mut rng = Rng(q * 7_919 + 17);
        format!("{} {}", rng.word(), rng.word())
    });
    let latencies = time_searches(&index, tenant, texts).await;
    println!(
        "stream {n:>7} points, settled: keyword search p50={:.2}ms p99={:.2}ms | {}",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        index.shard_summary()
    );
}

/// Times one keyword search of `tenant`'s turns per text; the latencies, sorted.
async fn time_searches(index: &EdgeIndex, tenant: &Tenant, texts: impl Iterator<Item = String>) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for text in texts {
        let query = IndexQuery {
            tenant: tenant.clone(),
            kind: PointKind::Turn,
            session_id: None,
            text,
            tags: Vec::new(),
            task: None,
            limit: 10,
            dense: None,
            strategy: Strategy::Keyword,
            fusion: Fusion::default(),
        };
        let start = Instant::now();
        index.search(&query).await.expect("search");
        latencies.push(start.elapsed());
    }
    latencies.sort_unstable();
    latencies
}

/// User and system CPU time of this process so far (Linux: `/proc/self/stat`, in clock ticks
/// of 10 ms). Counts every thread: writers, the optimizer and the text generation alike.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime: fields 14 and 15 of the line, so 11 and 12 (from 0) after the name.
    (ticks(11) + ticks(12)) / 100.0
}

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tenant = Tenant {
        team: "t".into(),
        agent: "a".into(),
        user: "u".into(),
    };
    if args.first().map(String::as_str) == Some("bm25") {
        bm25();
        return;
    }
    if args.first().map(String::as_str) == Some("stream") {
        let arg = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().expect("a number"));
        stream(&tenant, arg(1, 100_000), arg(2, 1_400)).await;
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let index = EdgeIndex::open(dir.path(), optimize_every(), None).expect("open index");
    let mut n = 0;
    for batch in args
        .iter()
        .map(|a| a.parse::<usize>().expect("batch size"))
        .collect::<Vec<_>>()
    {
        let rounds = (20_000 / batch).clamp(5, 50);
        let start = Instant::now();
        for _ in 0..rounds {
            let points: Vec<_> = (0..batch).map(|i| point(&tenant, n + i)).collect();
            n += batch;
            index.upsert(&points).await.expect("upsert");
        }
        let per = start.elapsed() / rounds as u32;
        println!(
            "upsert batch={batch:>5}: {:>8.2} ms/batch, {:>8.0} points/s",
            per.as_secs_f64() * 1e3,
            batch as f64 / per.as_secs_f64()
        );
    }
    // Concurrent writers share flushes (group commit).
    let index = std::sync::Arc::new(index);
    for writers in [1usize, 8, 32] {
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..writers {
            let (index, tenant) = (index.clone(), tenant.clone());
            let base = n + w * 1_000_000;
            tasks.spawn(async move {
                for b in 0..(64 / writers).max(2) {
                    let points: Vec<_> = (0..50).map(|i| point(&tenant, base + b * 50 + i)).collect();
                    index.upsert(&points).await.expect("upsert");
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let total = writers * (64 / writers).max(2) * 50;
        n += total;
        println!(
            "concurrent writers={writers:>2} (50-point batches): {:>8.0} points/s",
            total as f64 / start.elapsed().as_secs_f64()
        );
    }
    // Growth: does a batch get slower as the shard grows?
    for step in 0..10 {
        let start = Instant::now();
        for _ in 0..10 {
            let points: Vec<_> = (0..100).map(|i| point(&tenant, n + i)).collect();
            n += 100;
            index.upsert(&points).await.expect("upsert");
        }
        println!(
            "growth step {step}: {n} points, {:.2} ms per 100-point batch",
            start.elapsed().as_secs_f64() * 1e3 / 10.0
        );
    }
    let latencies = time_searches(&index, &tenant, (0..1000).map(|q| format!("replica {}", q % 977))).await;
    println!(
        "search over {n} points: p50={:.2}ms p99={:.2}ms",
        latencies[500].as_secs_f64() * 1e3,
        latencies[990].as_secs_f64() * 1e3
    );
}
