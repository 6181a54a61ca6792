//! `scene` worker: consumes `scene.due` and edits an owner's L2 scene documents when their timer is due.

use anyhow::Context as _;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = shared::config::Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-worker-scene",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let shutdown = shared::shutdown::signal();
    let result = workers::run_scene_worker(settings, shutdown).await;
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}
