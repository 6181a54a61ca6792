//! The soak's CI form (`integration_tests::soak`; tests/README.md, "Soak"): 3 minutes of steady
//! appends and recalls per deployment. A test fails when a request fails, the workers fall
//! behind, or the server's open files, sockets, threads or heap keep growing; the report it
//! prints has the trends and the latencies of the first and last windows.

use std::path::Path;

use integration_tests::soak::{self, Deployment, Plan};

const SERVER: &str = env!("CARGO_BIN_EXE_sediment-api");

async fn holds(deployment: Deployment) {
    let report = soak::run(Path::new(SERVER), deployment, Plan::minutes(3.0, 39)).await;
    println!("{report}");
    assert!(report.passed(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_minutes_of_steady_load_embedded_leak_nothing() {
    holds(Deployment::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_minutes_of_steady_load_cluster_leak_nothing() {
    holds(Deployment::Cluster).await;
}
