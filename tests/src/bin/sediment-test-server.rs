//! The API binary's wiring, built inside the test crate so integration tests can run it as a
//! real process (`CARGO_BIN_EXE_sediment-test-server`) and kill it.

use anyhow::Context as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = shared::config::Settings::from_env().context("load settings")?;
    shared::telemetry::init("sediment-test-server", &settings.log_filter, &settings.log_format);
    let shutdown = shared::shutdown::signal();
    api::run(settings, shutdown).await
}
