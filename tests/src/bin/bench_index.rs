//! Qdrant Edge index micro-benchmark: upsert cost per batch size (each upsert is flushed for
//! durability) and query latency.
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_index
//! ```

use std::time::{Duration, Instant};

use shared::domain::Tenant;
use shared::index::{EdgeIndex, Fusion, IndexPoint, IndexQuery, PointKind, SearchIndex, Strategy};

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
        dense: None,
    }
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let index = EdgeIndex::open(
        dir.path(),
        std::env::var("BENCH_OPTIMIZE_EVERY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5_000),
        None,
    )
    .expect("open index");
    let tenant = Tenant {
        team: "t".into(),
        agent: "a".into(),
        user: "u".into(),
    };
    let mut n = 0;
    for batch in std::env::args()
        .skip(1)
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
    let mut latencies: Vec<Duration> = Vec::new();
    for q in 0..1000 {
        let query = IndexQuery {
            tenant: tenant.clone(),
            kind: PointKind::Turn,
            session_id: None,
            text: format!("replica {}", q % 977),
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
    println!(
        "search over {n} points: p50={:.2}ms p99={:.2}ms",
        latencies[500].as_secs_f64() * 1e3,
        latencies[990].as_secs_f64() * 1e3
    );
}
