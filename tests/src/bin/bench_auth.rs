//! What authentication costs a request, on the embedded API (the real server in this process,
//! over loopback HTTP).
//!
//! Three set-ups serve the same cheap read (`GET /v1/sessions/{id}/messages?limit=1`): auth off,
//! auth on with the key cached (every request but the first in a cache period), and auth on with
//! a cache period of 1 ms (every request reads the key from the store, which also writes its
//! last use). For each it measures capacity (closed loop, `BENCH_CLIENTS` clients, default 8)
//! and then latency in an open loop: Poisson arrivals at `BENCH_RATE` requests/s (default 300),
//! timed from each request's scheduled send time, so a stall delays every request behind it.
//! CPU is the process's own (server and clients share it: one process), per request.
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_auth
//! BENCH_SECONDS=10 BENCH_RATE=500 cargo run --release -p integration-tests --bin bench_auth
//! ```

use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::cpu::process_seconds;
use integration_tests::env_or;
use integration_tests::stats::{percentile, poisson_arrivals};
use reqwest::RequestBuilder;
use serde_json::{json, Value};
use shared::domain::Tenant;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdef-0123456789";

struct Setup {
    label: &'static str,
    app: TestApp,
    tenant: Tenant,
    key: Option<String>,
}

impl Setup {
    async fn start(label: &'static str, env: Vec<(&'static str, String)>) -> Self {
        let auth = env.iter().any(|(k, _)| *k == "ADMIN_KEY");
        let app = TestApp::with(
            Mode::Embedded,
            Options {
                env,
                ..Options::default()
            },
        )
        .await;
        let tenant = tenant();
        let key = if auth {
            let created: Value = app
                .client
                .post(app.url("/v1/admin/keys"))
                .bearer_auth(ADMIN_KEY)
                .json(&json!({ "team_id": tenant.team, "permission": "write" }))
                .send()
                .await
                .expect("create key")
                .json()
                .await
                .expect("json");
            Some(created["key"].as_str().expect("a key").to_owned())
        } else {
            None
        };
        let setup = Self {
            label,
            app,
            tenant,
            key,
        };
        let appended = setup
            .request(reqwest::Method::POST, "/v1/sessions/bench/messages")
            .json(&json!({ "messages": [{ "role": "user", "content": "one turn to read back" }] }))
            .send()
            .await
            .expect("append");
        assert_eq!(appended.status(), 201);
        setup
    }

    fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        let mut req = self
            .app
            .client
            .request(method, self.app.url(path))
            .header(api::AGENT_HEADER, &self.tenant.agent)
            .header(api::USER_HEADER, &self.tenant.user);
        req = match &self.key {
            Some(key) => req.bearer_auth(key),
            None => req.header(api::TEAM_HEADER, &self.tenant.team),
        };
        req
    }

    async fn read(&self) -> Duration {
        let start = Instant::now();
        let r = self
            .request(reqwest::Method::GET, "/v1/sessions/bench/messages?limit=1")
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 200);
        r.bytes().await.expect("body");
        start.elapsed()
    }
}

/// Requests per second with `clients` each sending the next as soon as the last returned.
async fn capacity(setup: &Setup, clients: usize, seconds: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let done: Vec<usize> = futures::future::join_all((0..clients).map(|_| async {
        let mut n = 0;
        while Instant::now() < deadline {
            setup.read().await;
            n += 1;
        }
        n
    }))
    .await;
    done.iter().sum::<usize>() as f64 / started.elapsed().as_secs_f64()
}

/// Open loop: Poisson arrivals at `rate`, each timed from its scheduled send time. Returns the
/// sorted latencies and the CPU seconds this process spent per request.
async fn open_loop(setup: &Setup, rate: f64, seconds: f64) -> (Vec<Duration>, f64) {
    let schedule = poisson_arrivals(rate, seconds);
    let cpu_before = process_seconds("self").unwrap_or(f64::NAN);
    let start = Instant::now();
    let mut latencies: Vec<Duration> = futures::future::join_all(schedule.iter().map(|offset| async move {
        let due = start + *offset;
        tokio::time::sleep_until(due.into()).await;
        setup.read().await;
        due.elapsed()
    }))
    .await;
    let cpu_seconds = process_seconds("self").unwrap_or(f64::NAN) - cpu_before;
    latencies.sort_unstable();
    let per_request = cpu_seconds / latencies.len().max(1) as f64;
    (latencies, per_request)
}

#[tokio::main]
async fn main() {
    let clients: usize = env_or("BENCH_CLIENTS", 8);
    let rate: f64 = env_or("BENCH_RATE", 300.0);
    let seconds: f64 = env_or("BENCH_SECONDS", 5.0);
    let mut setups = [
        Setup::start("auth off", Vec::new()).await,
        Setup::start("key, cached", vec![("ADMIN_KEY", ADMIN_KEY.into())]).await,
        Setup::start(
            "key, read every time",
            vec![("ADMIN_KEY", ADMIN_KEY.into()), ("AUTH_KEY_CACHE_MS", "1".into())],
        )
        .await,
    ];
    for setup in &setups {
        for _ in 0..200 {
            setup.read().await;
        }
    }
    println!("closed loop, {clients} clients, {seconds} s; open loop, Poisson {rate}/s, {seconds} s");
    for setup in &setups {
        let per_second = capacity(setup, clients, seconds).await;
        let (latencies, cpu_per_request) = open_loop(setup, rate, seconds).await;
        println!(
            "{:<22} capacity {:>7.0} req/s | open loop n={} p50 {:>6.2} ms p99 {:>6.2} ms | CPU {:>5.0} µs/request",
            setup.label,
            per_second,
            latencies.len(),
            percentile(&latencies, 0.50).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            cpu_per_request * 1e6,
        );
    }
    // Stopped before their directories go: a shard dropped after its files would fail its flush.
    for setup in &mut setups {
        setup.app.stop().await;
    }
}
