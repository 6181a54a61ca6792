//! The scene and persona worker binaries' wiring (`workers/src/bin/{scene,persona}.rs`), built
//! inside the test crate so integration tests can run them as real processes
//! (`CARGO_BIN_EXE_sediment-test-layers scene|persona`).

use anyhow::Context as _;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let kind = std::env::args().nth(1).unwrap_or_default();
    let settings = shared::config::Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-test-layers",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let shutdown = shared::shutdown::signal();
    let result = match kind.as_str() {
        "scene" => workers::run_scene_worker(settings, shutdown).await,
        "persona" => workers::run_persona_worker(settings, shutdown).await,
        other => Err(anyhow::anyhow!(
            "usage: sediment-test-layers scene|persona (got {other:?})"
        )),
    };
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}
