//! The compact worker binary's wiring (`workers/src/bin/compact.rs`), built inside the test
//! crate so integration tests can run it as a real process (`CARGO_BIN_EXE_sediment-test-compact`)
//! and kill it.

use anyhow::Context as _;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = shared::config::Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-test-compact",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let shutdown = shared::shutdown::signal();
    let result = workers::run_compact_worker(settings, shutdown).await;
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}
