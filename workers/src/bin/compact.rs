//! `compact` worker: consumes `compaction.requested` and compacts long sessions into a summary
//! (session context, L3).

use anyhow::Context as _;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = shared::config::Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-worker-compact",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let shutdown = shared::shutdown::signal();
    let result = workers::run_compact_worker(settings, shutdown).await;
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}
