//! Export and import throughput for one owner with `BENCH_TURNS` turns (default 100,000), in both
//! directions between the deployments: the owner is appended to an embedded app, exported,
//! imported into a fresh cluster app (Postgres, RabbitMQ, Qdrant Edge), exported from there, and
//! imported into a fresh embedded app. Each step is timed from the request to its last byte
//! (the import's answer comes once its transaction committed; the target's indexing runs after
//! it and is not counted; the time until the target's index has caught up is reported beside
//! it). Turns of about 150 characters, 1,000 per session; the background layers are off, so the
//! owner has turns and sessions only, and the index is keyword-only (`SEDIMENT_EMBEDDING=none`:
//! embedding 100k turns takes minutes and is `bench_embed`'s subject). Each export starts once
//! its instance has indexed everything, so no step shares the cores with indexing. Beside each
//! step: where the cores' time went (this process holds the client and the API; Postgres and
//! RabbitMQ are their own processes).
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_portable
//! ```

use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::cpu;
use integration_tests::env_or;
use reqwest::Method;
use serde_json::{json, Value};
use shared::domain::Tenant;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

const PER_SESSION: usize = 1_000;
const INDEX_WAIT: Duration = Duration::from_secs(1_800);

fn options() -> Options {
    Options {
        env: vec![
            ("LAYERS", "false".into()),
            ("EXTRACT", "false".into()),
            ("EMBEDDING", "none".into()),
        ],
        ..Options::default()
    }
}

/// Where the cores' time went from `before` to now.
fn usage_since(before: Option<cpu::Sample>) -> String {
    before
        .zip(cpu::Sample::now())
        .map_or_else(String::new, |(a, b)| a.until(&b).to_string())
}

async fn export(app: &TestApp, t: &Tenant) -> (String, f64, String) {
    let cpu = cpu::Sample::now();
    let started = Instant::now();
    let response = app.req(Method::GET, "/v1/export", t).send().await.expect("export");
    assert!(response.status().is_success(), "export: {}", response.status());
    let stream = response.text().await.expect("the stream");
    let seconds = started.elapsed().as_secs_f64();
    (stream, seconds, usage_since(cpu))
}

/// Seconds to commit the import, where the cores' time went meanwhile, and the seconds until
/// the target's index caught up.
async fn import(app: &TestApp, t: &Tenant, stream: &str) -> (f64, String, f64) {
    let cpu = cpu::Sample::now();
    let started = Instant::now();
    let response = app
        .req(Method::POST, "/v1/import", t)
        .header("content-type", "application/x-ndjson")
        .body(stream.to_owned())
        .send()
        .await
        .expect("import");
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "import: {status} {body}");
    let committed = started.elapsed().as_secs_f64();
    let usage = usage_since(cpu);
    app.wait_indexed(INDEX_WAIT).await;
    (committed, usage, started.elapsed().as_secs_f64() - committed)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let turns: usize = env_or("BENCH_TURNS", 100_000);
    let mut source = TestApp::with(Mode::Embedded, options()).await;
    let t = tenant();
    let filler = "we moved the quarterly planning review to thursday because the venue in the old \
                  harbour district was double booked, and everyone agreed";
    let started = Instant::now();
    for session in 0..turns.div_ceil(PER_SESSION) {
        let in_session = PER_SESSION.min(turns - session * PER_SESSION);
        let messages: Vec<Value> = (0..in_session)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({ "role": role, "content": format!("{filler} (turn {i} of session {session})") })
            })
            .collect();
        source.append_ok(&t, &format!("bench-{session}"), json!(messages)).await;
    }
    eprintln!("appended {turns} turns in {:.1} s", started.elapsed().as_secs_f64());
    source.wait_indexed(INDEX_WAIT).await;

    let (stream, embedded_export, embedded_cpu) = export(&source, &t).await;
    let mb = stream.len() as f64 / 1e6;
    let mut cluster = TestApp::with(Mode::Cluster, options()).await;
    let into_cluster = import(&cluster, &t, &stream).await;
    let (again, cluster_export, cluster_cpu) = export(&cluster, &t).await;
    assert_eq!(again.lines().count(), stream.lines().count());
    let mut embedded = TestApp::with(Mode::Embedded, options()).await;
    let into_embedded = import(&embedded, &t, &again).await;

    let rate = |seconds: f64| turns as f64 / seconds;
    println!(
        "owner: {turns} turns, {} sessions, stream {mb:.1} MB",
        turns.div_ceil(PER_SESSION)
    );
    println!("| step | seconds | turns/s | CPU during the step | then indexed in |");
    println!("|---|---|---|---|---|");
    let (into_cluster, into_cluster_cpu, cluster_indexed) = into_cluster;
    let (into_embedded, into_embedded_cpu, embedded_indexed) = into_embedded;
    for (step, seconds, usage, indexed) in [
        ("export from embedded (SQLite)", embedded_export, embedded_cpu, None),
        (
            "import into cluster (Postgres)",
            into_cluster,
            into_cluster_cpu,
            Some(cluster_indexed),
        ),
        ("export from cluster (Postgres)", cluster_export, cluster_cpu, None),
        (
            "import into embedded (SQLite)",
            into_embedded,
            into_embedded_cpu,
            Some(embedded_indexed),
        ),
    ] {
        let indexed = indexed.map_or(String::new(), |s: f64| format!("{s:.1} s"));
        println!("| {step} | {seconds:.2} | {:.0} | {usage} | {indexed} |", rate(seconds));
    }
    // Stopped before their data directories go, so no index flushes into a removed one.
    for app in [&mut source, &mut cluster, &mut embedded] {
        app.stop().await;
    }
}
