//! How long erasing a user takes, and what is left, for an owner with `BENCH_TURNS` turns
//! (default 10 000, in sessions of 100), indexed and extracted into memories, beside a
//! neighbour of the same size that must keep everything. Runs the real server in this process
//! (`BENCH_MODE` `embedded`, the default, or `cluster`, which needs the CI services) and reports
//! the time from `DELETE /v1/users/{user_id}` to `done`, what was deleted and the residue per
//! store, and where the machine's CPU went over the erasure (every process: this one, which
//! holds the server, and Postgres and RabbitMQ in the cluster).
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_erase
//! BENCH_TURNS=2000 BENCH_MODE=cluster cargo run --release -p integration-tests --bin bench_erase
//! ```

use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, TestApp};
use integration_tests::cpu;
use integration_tests::env_or;
use reqwest::Method;
use serde_json::{json, Value};
use shared::domain::Tenant;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

const SESSION_TURNS: usize = 100;

async fn populate(app: &TestApp, owner: &Tenant, turns: usize) {
    for s in 0..turns.div_ceil(SESSION_TURNS) {
        let n = SESSION_TURNS.min(turns - s * SESSION_TURNS);
        let messages: Vec<Value> = (0..n)
            .map(|i| {
                json!({
                    "role": if i % 2 == 0 { "user" } else { "assistant" },
                    "content": format!("I moved to city {s} in year {} and I work on project {i}", 2000 + i),
                })
            })
            .collect();
        app.append_ok(owner, &format!("s-{s}-{}", owner.user), json!(messages))
            .await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let turns: usize = env_or("BENCH_TURNS", 10_000);
    let mode = match std::env::var("BENCH_MODE").as_deref() {
        Ok("cluster") => Mode::Cluster,
        _ => Mode::Embedded,
    };
    let mut app = TestApp::start(mode).await;
    let owner = tenant();
    let neighbour = Tenant {
        user: "neighbour".into(),
        ..owner.clone()
    };
    let loaded = Instant::now();
    populate(&app, &owner, turns).await;
    populate(&app, &neighbour, turns).await;
    app.wait_indexed(Duration::from_secs(1800)).await;
    app.wait_extracted(Duration::from_secs(1800)).await;
    eprintln!(
        "loaded {} turns for two owners in {:.1} s",
        2 * turns,
        loaded.elapsed().as_secs_f64()
    );
    let memories = app.memories(&owner, "?limit=1").await;
    eprintln!(
        "owner has memories: {}",
        !memories["items"].as_array().expect("items").is_empty()
    );

    let cpu_before = cpu::Sample::now();
    let started = Instant::now();
    let response = app
        .req(Method::DELETE, &format!("/v1/users/{}", owner.user), &owner)
        .send()
        .await
        .expect("DELETE user");
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().expect("ascii").to_owned();
    let job = loop {
        let job: Value = app
            .req(Method::GET, &location, &owner)
            .send()
            .await
            .expect("GET erasure")
            .json()
            .await
            .expect("json");
        if job["status"] == "done" {
            break job;
        }
        assert!(started.elapsed() < Duration::from_secs(1800), "not done: {job}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let elapsed = started.elapsed();
    let usage = cpu_before.zip(cpu::Sample::now()).map(|(a, b)| a.until(&b));
    let left = app.indexed_count(&neighbour).await;
    println!(
        "{}",
        json!({
            "mode": format!("{mode:?}"),
            "turns": turns,
            "erase_seconds": elapsed.as_secs_f64(),
            "cpu": usage.map(|u| u.to_string()),
            "attempts": job["attempts"],
            "deleted": job["deleted"],
            "residue": job["residue"],
            "neighbour_points_kept": left,
        })
    );
    app.stop().await;
}
