//! What MCP costs over the same HTTP call, on the embedded API (the real server in this process,
//! over loopback).
//!
//! One read, a keyword conversation search (limit 10) over 500 stored turns, three ways: the
//! HTTP call itself (`POST /v1/conversations/search`), the `conversation_search` tool over
//! `/mcp` (the official Rust SDK's Streamable HTTP client), and the same tool through
//! `sediment mcp --url` on stdio (a child process that makes the HTTP call). Each runs an open
//! loop: Poisson arrivals at `BENCH_RATE` calls/s (default 100) for `BENCH_SECONDS` (default 5),
//! timed from each call's scheduled send time. CPU per call is this process's plus, for stdio,
//! the child's, from `/proc`.
//!
//! ```sh
//! cargo build --release -p integration-tests --bin sediment-api --bin bench_mcp
//! cargo run --release -p integration-tests --bin bench_mcp
//! ```

use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::cpu::process_seconds;
use integration_tests::env_or;
use integration_tests::stats::{percentile, poisson_arrivals};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt as _, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{json, Value};
use shared::domain::Tenant;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdef-0123456789";
const QUERY: &str = "where did the team decide to hold the offsite";

enum Path {
    Http,
    Mcp(RunningService<RoleClient, ()>),
}

struct Bench {
    app: TestApp,
    tenant: Tenant,
    key: String,
}

impl Bench {
    async fn call(&self, path: &Path) {
        match path {
            Path::Http => {
                let response = self
                    .app
                    .client
                    .post(self.app.url("/v1/conversations/search"))
                    .bearer_auth(&self.key)
                    .header(api::AGENT_HEADER, &self.tenant.agent)
                    .header(api::USER_HEADER, &self.tenant.user)
                    .json(&json!({ "query": QUERY, "strategy": "keyword", "limit": 10 }))
                    .send()
                    .await
                    .expect("search");
                assert_eq!(response.status(), 200);
                response.bytes().await.expect("body");
            }
            Path::Mcp(client) => {
                let Value::Object(arguments) = json!({ "query": QUERY, "strategy": "keyword", "limit": 10 }) else {
                    unreachable!()
                };
                let result = client
                    .call_tool(CallToolRequestParams::new("conversation_search").with_arguments(arguments))
                    .await
                    .expect("tools/call");
                assert_eq!(result.is_error, Some(false));
            }
        }
    }
}

/// Open loop: Poisson arrivals at `rate`, each timed from its scheduled send time. The sorted
/// latencies, and CPU seconds per call of this process and `child`.
async fn open_loop(bench: &Bench, path: &Path, child: Option<u32>, rate: f64, seconds: f64) -> (Vec<Duration>, f64) {
    let schedule = poisson_arrivals(rate, seconds);
    let seconds_of = |pid: &str| process_seconds(pid).unwrap_or(0.0);
    let cpu = || seconds_of("self") + child.map_or(0.0, |pid| seconds_of(&pid.to_string()));
    let before = cpu();
    let start = Instant::now();
    let mut latencies: Vec<Duration> = futures::future::join_all(schedule.iter().map(|offset| async move {
        let due = start + *offset;
        tokio::time::sleep_until(due.into()).await;
        bench.call(path).await;
        due.elapsed()
    }))
    .await;
    let per_call = (cpu() - before) / latencies.len().max(1) as f64;
    latencies.sort_unstable();
    (latencies, per_call)
}

#[tokio::main]
async fn main() {
    let rate: f64 = env_or("BENCH_RATE", 100.0);
    let seconds: f64 = env_or("BENCH_SECONDS", 5.0);
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("ADMIN_KEY", ADMIN_KEY.into())],
            ..Options::default()
        },
    )
    .await;
    let tenant = tenant();
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
    let key = created["key"].as_str().expect("a key").to_owned();
    let bench = Bench { app, tenant, key };
    for session in 0..10 {
        let messages: Vec<Value> = (0..50)
            .map(|i| json!({ "role": "user", "content": format!("turn {i} of session {session}: the team talked about the offsite, the budget and the roadmap") }))
            .collect();
        let response = bench
            .app
            .client
            .post(bench.app.url(&format!("/v1/sessions/bench-{session}/messages")))
            .bearer_auth(&bench.key)
            .header(api::AGENT_HEADER, &bench.tenant.agent)
            .header(api::USER_HEADER, &bench.tenant.user)
            .json(&json!({ "messages": messages }))
            .send()
            .await
            .expect("append");
        assert_eq!(response.status(), 201);
    }
    bench.app.wait_indexed(Duration::from_secs(60)).await;

    let mut headers = std::collections::HashMap::new();
    headers.insert(api::AGENT_HEADER.parse().unwrap(), bench.tenant.agent.parse().unwrap());
    headers.insert(api::USER_HEADER.parse().unwrap(), bench.tenant.user.parse().unwrap());
    let config = StreamableHttpClientTransportConfig::with_uri(bench.app.url("/mcp"))
        .auth_header(bench.key.clone())
        .custom_headers(headers);
    let http = ().serve(StreamableHttpClientTransport::from_config(config)).await.expect("handshake");
    // The test copy of the `sediment` binary sits beside this one.
    let bin = std::env::current_exe()
        .expect("this binary")
        .with_file_name("sediment-api");
    let (agent, user, key, base) = (
        bench.tenant.agent.clone(),
        bench.tenant.user.clone(),
        bench.key.clone(),
        bench.app.base.clone(),
    );
    let child = TokioChildProcess::new(tokio::process::Command::new(&bin).configure(|cmd| {
        cmd.args(["mcp", "--url", &base])
            .env("SEDIMENT_API_KEY", &key)
            .env("SEDIMENT_AGENT", &agent)
            .env("SEDIMENT_USER", &user)
            .env("SEDIMENT_LOG", "warn");
    }))
    .expect("start sediment mcp");
    let child_pid = child.id();
    let stdio = ().serve(child).await.expect("handshake on stdio");
    let paths = [
        ("HTTP /v1/conversations/search", Path::Http, None),
        ("MCP tool over /mcp", Path::Mcp(http), None),
        ("MCP tool over stdio (--url)", Path::Mcp(stdio), child_pid),
    ];
    for (_, path, _) in &paths {
        for _ in 0..200 {
            bench.call(path).await;
        }
    }
    println!("open loop, Poisson {rate}/s, {seconds} s each; keyword search, limit 10, 500 turns");
    for round in 1..=3 {
        for (label, path, child) in &paths {
            let (latencies, cpu) = open_loop(&bench, path, *child, rate, seconds).await;
            println!(
                "round {round} {label:<31} n={} p50 {:>6.2} ms p99 {:>6.2} ms | CPU {:>5.0} µs/call",
                latencies.len(),
                percentile(&latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&latencies, 0.99).as_secs_f64() * 1e3,
                cpu * 1e6,
            );
        }
    }
    for (_, path, _) in paths {
        if let Path::Mcp(client) = path {
            client.cancel().await.expect("close");
        }
    }
    let mut app = bench.app;
    app.stop().await;
}
