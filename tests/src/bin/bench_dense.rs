//! Qdrant Edge dense-channel micro-benchmark: loads `BENCH_DENSE_ITEMS` (default 100k) points
//! with 384-dimensional vectors into one tenant and times semantic and hybrid index queries
//! (no HTTP, no embedding) in three states:
//! - `ingesting`: while the points are being loaded, so background optimizer runs compete
//!   with the queries for the CPU (one query every 5 ms, from a second task);
//! - `steady`: after loading, once the background optimizer is idle, as a serving index is
//!   most of the time;
//! - `optimized`: after an explicit `optimize()`, every segment indexed.
//!
//! Vectors are [`embed_text_dense`] by default (every dimension used, as a real model's);
//! `BENCH_DENSE_VECTORS=hashed` uses the fake endpoint's sparse hashed counts instead.
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_dense
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::fake_openai::{embed_text, embed_text_dense};
use integration_tests::synthetic::{tail_sentence, Rng};
use shared::domain::Tenant;
use shared::index::{EdgeIndex, Fusion, IndexPoint, IndexQuery, PointKind, SearchIndex, Strategy};

const DIMENSION: usize = 384;
const QUERIES: u64 = 300;

fn embed(text: &str) -> Vec<f32> {
    if std::env::var("BENCH_DENSE_VECTORS").is_ok_and(|v| v == "hashed") {
        embed_text(text, DIMENSION)
    } else {
        embed_text_dense(text, DIMENSION)
    }
}

fn query(tenant: &Tenant, q: u64, strategy: Strategy) -> IndexQuery {
    let mut rng = Rng(q * 7_919 + 17);
    let text = format!("{} {} {}", rng.tail_word(), rng.tail_word(), rng.tail_word());
    IndexQuery {
        tenant: tenant.clone(),
        kind: PointKind::Turn,
        session_id: None,
        dense: Some(embed(&text)),
        text,
        tags: Vec::new(),
        task: None,
        limit: 10,
        strategy,
        fusion: Fusion::default(),
    }
}

fn report(label: &str, strategy: Strategy, mut latencies: Vec<Duration>, index: &EdgeIndex) {
    latencies.sort_unstable();
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
    println!(
        "{label}: {}: p50={:.2}ms p99={:.2}ms max={:.2}ms n={}  ({})",
        strategy.as_str(),
        at(0.5),
        at(0.99),
        at(1.0),
        latencies.len(),
        index.shard_summary()
    );
}

async fn measure(index: &EdgeIndex, tenant: &Tenant, label: &str) {
    for strategy in [Strategy::Semantic, Strategy::Hybrid] {
        let mut latencies = Vec::new();
        for q in 0..QUERIES {
            let query = query(tenant, q, strategy);
            let start = Instant::now();
            index.search(&query).await.expect("search");
            latencies.push(start.elapsed());
        }
        report(label, strategy, latencies, index);
    }
}

async fn load(index: &EdgeIndex, tenant: &Tenant, items: usize) {
    for chunk in (0..items).step_by(500) {
        let points: Vec<_> = (chunk..(chunk + 500).min(items))
            .map(|i| {
                let text = tail_sentence(i);
                IndexPoint {
                    id: uuid::Uuid::new_v4(),
                    kind: PointKind::Turn,
                    tenant: tenant.clone(),
                    session_id: format!("s{}", (i / 1_000) % 50),
                    dense: Some(embed(&text)),
                    text,
                    tags: Vec::new(),
                    task: None,
                }
            })
            .collect();
        index.upsert(&points).await.expect("upsert");
    }
}

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() {
    let items: usize = std::env::var("BENCH_DENSE_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let index = Arc::new(EdgeIndex::open(dir.path(), 5_000, Some(DIMENSION)).expect("open index"));
    let tenant = Tenant {
        team: "t".into(),
        agent: "a".into(),
        user: "u".into(),
    };

    // Queries alternate strategies while the load runs; the first 10% of the load is skipped,
    // so an almost empty index does not flatter the numbers.
    let loading = Arc::new(AtomicBool::new(true));
    let prober = {
        let (index, tenant, loading) = (Arc::clone(&index), tenant.clone(), Arc::clone(&loading));
        tokio::spawn(async move {
            let (mut semantic, mut hybrid) = (Vec::new(), Vec::new());
            let mut q = 0;
            while loading.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if index.shard_points() < items / 10 {
                    continue;
                }
                let strategy = if q % 2 == 0 {
                    Strategy::Semantic
                } else {
                    Strategy::Hybrid
                };
                let query = query(&tenant, q, strategy);
                let start = Instant::now();
                index.search(&query).await.expect("search");
                let elapsed = start.elapsed();
                if q % 2 == 0 { &mut semantic } else { &mut hybrid }.push(elapsed);
                q += 1;
            }
            (semantic, hybrid)
        })
    };
    let started = Instant::now();
    load(&index, &tenant, items).await;
    loading.store(false, Ordering::Release);
    let (semantic, hybrid) = prober.await.expect("prober");
    println!(
        "loaded {items} points in {:.1}s ({}), {} optimizer runs changed segments",
        started.elapsed().as_secs_f64(),
        index.shard_summary(),
        index.optimizations()
    );
    report("ingesting", Strategy::Semantic, semantic, &index);
    report("ingesting", Strategy::Hybrid, hybrid, &index);

    let waited = Instant::now();
    while index.optimizing() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "background optimizer idle {:.1}s after the load",
        waited.elapsed().as_secs_f64()
    );
    measure(&index, &tenant, "steady").await;

    let started = Instant::now();
    index.optimize().await.expect("optimize");
    println!("optimize() took {:.1}s", started.elapsed().as_secs_f64());
    measure(&index, &tenant, "optimized").await;
}
