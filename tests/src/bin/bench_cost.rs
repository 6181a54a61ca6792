//! What a turn costs: CPU time per ingested turn, summed over every process involved and split
//! by process (read from `/proc`), in both deployments, for the L0 path and for what runs
//! behind it.
//!
//! ```sh
//! bash api/fetch-model.sh      # for the `dense` case
//! cargo build --release -p integration-tests --bin sediment-api --bin bench_cost
//! cargo run --release -p integration-tests --bin bench_cost [-- embedded|cluster [CASE...]]
//! ```
//!
//! Each case starts the API binary as a child process on fresh state, with the index in that
//! process (Qdrant Edge; in the cluster too, where the API then runs the index and extract
//! workers itself), against this machine's Postgres and RabbitMQ in the cluster. It appends
//! turns in an open loop (Poisson arrivals of requests of 10 turns, or
//! `BENCH_TURNS_PER_REQUEST`, each to one of 100 sessions), waits until the index (and
//! extraction) have caught up and the server has been idle for a second, and divides each
//! process's CPU time over that whole window by the turns. The cases:
//! - `keyword`: append and keyword indexing, no embedder, no extraction (issue 37's target:
//!   100 µs a turn); `BENCH_TURNS` turns (default 20,000) at `BENCH_RATE` turns/s (2,000);
//! - `dense`: the same with the local model's dense vectors, `BENCH_DENSE_TURNS` (2,000) at
//!   `BENCH_DENSE_RATE` (100, within what two cores embed); embedding's own cost is the
//!   difference to `keyword`;
//! - `rules`: `keyword` plus L1 extraction by the rules engine, the memories indexed too.
//!
//! L2 scenes and L3 personas run minutes later, on timers (`bench_layers` measures them). The
//! processes are reported by name: `sediment-api`, and in the cluster `postgres` (every
//! backend) and RabbitMQ's (`beam.smp` and its helpers); `bench_cost` itself is the client, not
//! counted. Run it on an otherwise idle machine: whatever else runs (1 µs a turn or more) is
//! listed under its own names, apart from the total.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use integration_tests::amqp::TestBroker;
use integration_tests::app::tenant;
use integration_tests::cpu::Sample;
use integration_tests::env_or;
use integration_tests::pg::TestDb;
use integration_tests::process::ApiProcess;
use integration_tests::stats::poisson_arrivals;
use integration_tests::synthetic::sentence;
use serde_json::json;
use shared::store::memory::EXTRACT_CONSUMER;
use shared::store::INDEX_CONSUMER;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

const SESSIONS: usize = 100;
/// The processes that make up the service in each deployment; anything else the window saw is
/// the machine's (in the embedded deployment, an idle Postgres or RabbitMQ too).
const EMBEDDED: &[&str] = &["sediment-api"];
const CLUSTER: &[&str] = &[
    "sediment-api",
    "postgres",
    "beam.smp",
    "erl_child_setup",
    "epmd",
    "inet_gethost",
];

struct Case {
    name: &'static str,
    turns: usize,
    rate: f64,
    env: Vec<(&'static str, String)>,
    extract: bool,
}

fn cases() -> Vec<Case> {
    let (turns, rate) = (env_or("BENCH_TURNS", 20_000), env_or("BENCH_RATE", 2_000.0));
    let keyword = || vec![("EMBEDDING", "none".to_owned()), ("EXTRACT", "false".to_owned())];
    let mut dense = keyword();
    dense[0].1 = "local".to_owned();
    if let Ok(model_dir) = std::env::var("SEDIMENT_MODEL_DIR") {
        dense.push(("MODEL_DIR", model_dir));
    }
    let mut rules = keyword();
    rules[1].1 = "true".to_owned();
    vec![
        Case {
            name: "keyword",
            turns,
            rate,
            env: keyword(),
            extract: false,
        },
        Case {
            name: "dense",
            turns: env_or("BENCH_DENSE_TURNS", 2_000),
            rate: env_or("BENCH_DENSE_RATE", 100.0),
            env: dense,
            extract: false,
        },
        Case {
            name: "rules",
            turns,
            rate,
            env: rules,
            extract: true,
        },
    ]
}

/// Runs `case` in `mode` on fresh state and prints its cost per turn by process.
async fn run(mode: &str, case: &Case) {
    let dir = tempfile::tempdir().expect("state directory");
    let mut env = case.env.clone();
    env.push(("DATA_DIR", dir.path().join("data").display().to_string()));
    env.push(("INDEX_DIR", dir.path().join("index").display().to_string()));
    env.push(("FILES_DIR", dir.path().join("files").display().to_string()));
    env.push(("LOG", "warn".to_owned()));
    let mut cluster = None;
    if mode == "cluster" {
        let (db, broker) = (TestDb::create().await, TestBroker::start("cost").await);
        let amqp = broker.settings();
        env.push(("DATABASE_URL", db.url.clone()));
        env.push(("AMQP_URL", amqp.url));
        env.push(("AMQP_PREFIX", amqp.prefix));
        env.push(("AUTH", "off".to_owned()));
        cluster = Some((db, broker));
    }
    let (server, _) = ApiProcess::start(&env, &dir.path().join("server.log")).await;
    let t = tenant();
    // Each request is committed on its own: larger requests spread that commit over more turns.
    let per_request: usize = env_or("BENCH_TURNS_PER_REQUEST", 10);
    let requests = case.turns.div_ceil(per_request);
    let schedule = poisson_arrivals(case.rate / per_request as f64, 2.0 * case.turns as f64 / case.rate);
    assert!(schedule.len() >= requests, "the schedule is long enough");
    let before = Sample::now().expect("/proc");
    let start = Instant::now();
    futures::stream::iter(schedule.into_iter().take(requests).enumerate())
        .map(|(r, offset)| {
            let (server, t) = (&server, &t);
            async move {
                tokio::time::sleep_until((start + offset).into()).await;
                let turns = (r * per_request..(r + 1) * per_request)
                    .map(|i| json!({ "role": if i % 2 == 0 { "user" } else { "assistant" }, "content": sentence(i) }))
                    .collect();
                server.append(t, &format!("s{}", r % SESSIONS), turns).await;
            }
        })
        .buffer_unordered(256)
        .collect::<Vec<()>>()
        .await;
    let appended = start.elapsed();
    // Caught up, and then idle: the index optimizer and the memory outbox run after the lag
    // is gone, and belong to the turns' cost.
    let (mut idle, mut caught_up_at) = (0, None);
    let mut cpu = server.cpu_seconds();
    while idle < 2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = server.cpu_seconds();
        let caught_up =
            server.lag(INDEX_CONSUMER).await == 0 && (!case.extract || server.lag(EXTRACT_CONSUMER).await == 0);
        if !caught_up {
            caught_up_at = None;
        } else if caught_up_at.is_none() {
            caught_up_at = Some(start.elapsed());
        }
        idle = if caught_up && now - cpu < 0.01 { idle + 1 } else { 0 };
        cpu = now;
    }
    let caught_up_at = caught_up_at.expect("caught up");
    let usage = before.until(&Sample::now().expect("/proc"));
    let turns = (requests * per_request) as f64;
    let per_turn = |seconds: f64| seconds / turns * 1e6;
    let mut service = 0.0;
    let mut parts = Vec::new();
    let mut others = Vec::new();
    let service_names = if mode == "cluster" { CLUSTER } else { EMBEDDED };
    for (name, seconds) in usage.seconds_by_name() {
        if service_names.contains(&name) {
            service += seconds;
            parts.push(format!("{name} {:.0}", per_turn(seconds)));
        } else if per_turn(seconds) >= 1.0 {
            others.push(format!("{name} {:.0}", per_turn(seconds)));
        }
    }
    println!(
        "{mode:<8} {:<7} {} turns at {}/s in requests of {per_request}, appended in {:.1} s, caught up {:.1} s later | µs/turn: service {:.0} ({}) | not counted: {}",
        case.name,
        turns,
        case.rate,
        appended.as_secs_f64(),
        caught_up_at.saturating_sub(appended).as_secs_f64(),
        per_turn(service),
        parts.join(", "),
        others.join(", "),
    );
    server.stop().await;
    if let Some((_db, broker)) = cluster {
        broker.cleanup().await;
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let modes: Vec<&str> = match args.first().map(String::as_str) {
        Some(mode @ ("embedded" | "cluster")) => vec![mode],
        Some(other) => panic!("unknown deployment {other:?}; use embedded or cluster"),
        None => vec!["embedded", "cluster"],
    };
    let wanted: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| wanted.is_empty() || wanted.contains(&c.name))
        .collect();
    assert!(!cases.is_empty(), "cases are keyword, dense and rules");
    for mode in modes {
        for case in &cases {
            run(mode, case).await;
        }
    }
}
