//! `sediment` API binary: the embedded deployment by default, the cluster API when
//! `SEDIMENT_DATABASE_URL` and `SEDIMENT_AMQP_URL` are set.

use anyhow::Context as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = shared::config::Settings::from_env().context("load settings")?;
    shared::telemetry::init("sediment-api", &settings.log_filter, &settings.log_format);
    let shutdown = shared::shutdown::signal();
    api::run(settings, shutdown).await
}
