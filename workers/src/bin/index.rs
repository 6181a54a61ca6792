//! `index` worker: consumes `turn.appended` and indexes L0 turns for conversation search.

use anyhow::Context as _;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = shared::config::Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-worker-index",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let shutdown = shared::shutdown::signal();
    let result = workers::run_index_worker(settings, shutdown).await;
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}
