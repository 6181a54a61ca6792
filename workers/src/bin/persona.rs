//! `persona` worker: consumes `persona.due` and builds an owner's L3 persona when a trigger fires.

use anyhow::Context as _;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = shared::config::Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-worker-persona",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let shutdown = shared::shutdown::signal();
    let result = workers::run_persona_worker(settings, shutdown).await;
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}
