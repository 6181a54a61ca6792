//! `sediment` API binary: the embedded deployment by default, the cluster API when
//! `SEDIMENT_DATABASE_URL` and `SEDIMENT_AMQP_URL` are set.
//!
//! `sediment migrate` applies the Postgres migrations and exits, serving nothing: the Helm
//! chart's pre-install/pre-upgrade hook Job. It reads and validates the same settings as the
//! server, so a release whose configuration would not boot fails before any pod rolls.

use anyhow::Context as _;
use shared::config::{Deployment, Settings};
use shared::store::PostgresStore;

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::from_env().context("load settings")?;
    let telemetry = shared::telemetry::init(
        "sediment-api",
        &settings.log_filter,
        &settings.log_format,
        &settings.traces,
    );
    let result = match std::env::args().nth(1).as_deref() {
        None => api::run(settings, shared::shutdown::signal()).await,
        Some("migrate") => migrate(&settings).await,
        Some(other) => Err(anyhow::anyhow!("unknown command {other:?} (usage: sediment [migrate])")),
    };
    telemetry.shutdown(shared::telemetry::FLUSH_DEADLINE).await;
    result
}

/// Applies the migrations that are not applied yet (under the store's advisory lock).
async fn migrate(settings: &Settings) -> anyhow::Result<()> {
    let Deployment::Cluster { database_url, .. } = &settings.deployment else {
        anyhow::bail!("sediment migrate needs the cluster deployment: set SEDIMENT_DATABASE_URL and SEDIMENT_AMQP_URL");
    };
    let store = PostgresStore::connect(database_url, 1)
        .await
        .context("connect to Postgres")?;
    store.migrate().await.context("apply Postgres migrations")?;
    tracing::info!("migrations are up to date");
    Ok(())
}
