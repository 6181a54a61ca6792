//! Qdrant Edge dense-channel micro-benchmark: loads `BENCH_DENSE_ITEMS` (default 100k) points
//! with 384-dimensional vectors (the scripted embedder's, as `bench recall` uses) into one
//! tenant, then times semantic and hybrid index queries, with the background optimizer as
//! configured and again after an explicit `optimize()`.
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_dense
//! ```

use std::time::{Duration, Instant};

use integration_tests::fake_openai::embed_text;
use shared::domain::Tenant;
use shared::index::{EdgeIndex, Fusion, IndexPoint, IndexQuery, PointKind, SearchIndex, Strategy};

const DIMENSION: usize = 384;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn word(&mut self) -> String {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0 + 1e-6;
        format!("term{}", (20_000.0 * u * u) as usize)
    }
}

fn sentence(seed: usize) -> String {
    let mut rng = Rng(seed as u64 * 2_654_435_761 + 0x9e37_79b9);
    let words: Vec<String> = (0..12).map(|_| rng.word()).collect();
    format!("{} #{seed}", words.join(" "))
}

async fn measure(index: &EdgeIndex, tenant: &Tenant, label: &str) {
    for strategy in [Strategy::Semantic, Strategy::Hybrid] {
        let mut latencies: Vec<Duration> = Vec::new();
        for q in 0..300u64 {
            let mut rng = Rng(q * 7_919 + 17);
            let text = format!("{} {} {}", rng.word(), rng.word(), rng.word());
            let query = IndexQuery {
                tenant: tenant.clone(),
                kind: PointKind::Turn,
                session_id: None,
                dense: Some(embed_text(&text, DIMENSION)),
                text,
                limit: 10,
                strategy,
                fusion: Fusion::default(),
            };
            let start = Instant::now();
            index.search(&query).await.expect("search");
            latencies.push(start.elapsed());
        }
        latencies.sort_unstable();
        let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
        println!(
            "{label}: {}: p50={:.2}ms p99={:.2}ms  ({})",
            strategy.as_str(),
            at(0.5),
            at(0.99),
            index.shard_summary()
        );
    }
}

#[tokio::main]
async fn main() {
    let items: usize = std::env::var("BENCH_DENSE_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let index = EdgeIndex::open(dir.path(), 5_000, Some(DIMENSION)).expect("open index");
    let tenant = Tenant {
        team: "t".into(),
        agent: "a".into(),
        user: "u".into(),
    };
    let started = Instant::now();
    for chunk in (0..items).step_by(500) {
        let points: Vec<_> = (chunk..(chunk + 500).min(items))
            .map(|i| {
                let text = sentence(i);
                IndexPoint {
                    id: uuid::Uuid::new_v4(),
                    kind: PointKind::Turn,
                    tenant: tenant.clone(),
                    session_id: format!("s{}", (i / 1_000) % 50),
                    dense: Some(embed_text(&text, DIMENSION)),
                    text,
                }
            })
            .collect();
        index.upsert(&points).await.expect("upsert");
    }
    println!(
        "loaded {items} points in {:.1}s ({})",
        started.elapsed().as_secs_f64(),
        index.shard_summary()
    );
    measure(&index, &tenant, "as loaded").await;
    let started = Instant::now();
    index.optimize().await.expect("optimize");
    println!("optimize() took {:.1}s", started.elapsed().as_secs_f64());
    measure(&index, &tenant, "optimized").await;
}
