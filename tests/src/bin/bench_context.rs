//! Latency of `GET /v1/sessions/{id}/context` on a 10k-turn mixed Chinese/English session, in
//! either deployment, over HTTP from one sequential client:
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_context -- embedded
//! cargo run --release -p integration-tests --bin bench_context -- cluster   # Postgres + RabbitMQ
//! ```
//!
//! Scenarios, each `CALLS` calls after a few warm-up calls:
//! - `whole session`: a 2M-token window holds the whole session (~590k estimated tokens), so
//!   every turn is read, cut and returned (a ~2 MB answer); nothing is due.
//! - `no summary yet` (cluster only: no compact worker runs yet, so the job stays pending): a
//!   128k window over the session without a summary; the read stops once the window is full.
//! - `summary`: after compaction, a 128k and an 8k window: the summary plus the turns after it.
//!
//! The index and extract workers are off (`no_worker`), so only context work runs; the embedded
//! API runs its compact worker, the cluster one gets one started here for the last scenario.

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::mixed_session;
use integration_tests::stats::percentile;
use serde_json::Value;
use shared::context::{CompactHandler, Compactor};
use shared::domain::Tenant;
use shared::runtime::{run_consumer, ConsumerSettings, Heartbeat};
use tokio_util::sync::CancellationToken;

const TURNS: usize = 10_000;
const BATCH: usize = 500;
const CALLS: usize = 500;
const WARM_UP: usize = 10;
const SESSION: &str = "bench-context";

async fn measure(app: &TestApp, t: &Tenant, window: u64, calls: usize, label: &str) -> Value {
    let path = format!("/v1/sessions/{SESSION}/context?window_tokens={window}");
    let mut last = Value::Null;
    for _ in 0..WARM_UP {
        last = call(app, t, &path).await;
    }
    let mut latencies = Vec::with_capacity(calls);
    let mut bytes = 0;
    for _ in 0..calls {
        let start = Instant::now();
        let response = app.req(reqwest::Method::GET, &path, t).send().await.expect("send");
        assert_eq!(response.status(), 200);
        let body = response.bytes().await.expect("body");
        latencies.push(start.elapsed());
        bytes = body.len();
        last = serde_json::from_slice(&body).expect("json");
    }
    latencies.sort_unstable();
    println!(
        "{:?} {label}: window {window}: {} messages, summary_used {}, estimate {} tokens, {} KiB; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({calls} calls)",
        app.mode,
        last["messages"].as_array().map_or(0, Vec::len),
        last["summary_used"],
        last["token_estimate"],
        bytes / 1024,
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().expect("calls").as_secs_f64() * 1e3,
    );
    last
}

async fn call(app: &TestApp, t: &Tenant, path: &str) -> Value {
    let response = app.req(reqwest::Method::GET, path, t).send().await.expect("send");
    assert_eq!(response.status(), 200);
    response.json().await.expect("json")
}

async fn wait_compacted(app: &TestApp, t: &Tenant) {
    let started = Instant::now();
    loop {
        let state = call(app, t, &format!("/v1/sessions/{SESSION}/compaction")).await;
        if state["status"] == "success" && !state["last_seq"].is_null() {
            println!(
                "{:?} compacted {} turns into {} tokens in {:.1} s",
                app.mode,
                state["message_count"],
                state["token_count"],
                started.elapsed().as_secs_f64()
            );
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "no compaction: {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() {
    let mode = match std::env::args().nth(1).as_deref() {
        Some("cluster") => Mode::Cluster,
        Some("embedded") | None => Mode::Embedded,
        Some(other) => panic!("unknown mode {other:?}; use embedded or cluster"),
    };
    let mut app = TestApp::with(
        mode,
        Options {
            no_worker: true,
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    let load = Instant::now();
    for from in (0..TURNS).step_by(BATCH) {
        app.append_ok(&t, SESSION, Value::Array(mixed_session::turns_from(42, from, BATCH)))
            .await;
    }
    println!("{mode:?} loaded {TURNS} turns in {:.1} s", load.elapsed().as_secs_f64());

    measure(&app, &t, 2_000_000, 100, "whole session").await;
    let worker = CancellationToken::new();
    if mode == Mode::Cluster {
        measure(&app, &t, 128_000, CALLS, "no summary yet").await;
        tokio::spawn(run_consumer(
            app.backends.bus.clone(),
            Arc::new(CompactHandler(
                Compactor::from_backends(&app.backends, &app.settings).expect("a compactor"),
            )),
            ConsumerSettings {
                prefetch: 8,
                sweep_interval: Duration::from_secs(1),
                shutdown_deadline: Duration::from_secs(5),
            },
            Arc::new(Heartbeat::default()),
            worker.clone(),
        ));
    } else {
        // The first call past 75 % queues the job for the in-process worker.
        call(
            &app,
            &t,
            &format!("/v1/sessions/{SESSION}/context?window_tokens=128000"),
        )
        .await;
    }
    wait_compacted(&app, &t).await;
    measure(&app, &t, 128_000, CALLS, "summary").await;
    measure(&app, &t, 8_000, CALLS, "summary").await;
    worker.cancel();
    app.stop().await;
}
