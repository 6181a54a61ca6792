//! Faults under load, each scenario's short form (`integration_tests::chaos`; tests/README.md,
//! "Faults: the chaos suite"). A test fails when an invariant breaks or the system does not
//! catch up after a fault; the report it prints says what was measured.

use std::path::Path;

use integration_tests::chaos::{Form, Scenario};

const SERVER: &str = env!("CARGO_BIN_EXE_sediment-api");

async fn holds(scenario: Scenario) {
    let report = scenario.run(Path::new(SERVER), Form::Short).await;
    println!("{report}");
    assert!(report.passed(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_kill_mid_write_loses_and_duplicates_nothing() {
    holds(Scenario::EmbeddedKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_outage_keeps_ingest_answering_and_recovers() {
    holds(Scenario::RabbitmqOutage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_refuses_with_503_and_recovers() {
    holds(Scenario::PostgresRestart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_faults_keep_ingest_answering_and_extract_each_turn_once() {
    holds(Scenario::LlmFaults).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_outage_keeps_ingest_and_recall_answering_and_layers_recover() {
    holds(Scenario::S3Outage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_ten_times_the_drain_is_accepted_and_drains_in_bounded_memory() {
    holds(Scenario::Backpressure).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_mid_run_lose_nothing_and_their_work_is_taken_over() {
    holds(Scenario::WorkerKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_nothing_and_every_stop_is_clean() {
    holds(Scenario::RollingRestart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_past_its_lease_neither_commits_nor_writes_over_the_newer_run() {
    holds(Scenario::WorkerPause).await;
}
