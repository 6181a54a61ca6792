//! Builds the set of backends a process uses from its settings: the one place that knows
//! which implementation of each port goes with which deployment.

use std::sync::Arc;

use anyhow::Context as _;

use crate::bus::{AmqpBus, AmqpSettings, EventBus, LocalBus};
use crate::config::{Deployment, IndexBackend, Settings};
use crate::index::{EdgeIndex, QdrantIndex, SearchIndex};
use crate::store::{PostgresStore, SqliteStore, TranscriptStore};

/// One implementation of every port.
#[derive(Clone)]
pub struct Backends {
    pub store: Arc<dyn TranscriptStore>,
    pub bus: Arc<dyn EventBus>,
    pub index: Arc<dyn SearchIndex>,
    /// True in the embedded deployment.
    pub embedded: bool,
    /// True when the index lives inside this process (Qdrant Edge): then only this process
    /// can write it, so the API runs the index worker itself.
    pub api_runs_index_worker: bool,
}

impl Backends {
    /// Connects every backend. In the cluster deployment it also applies the Postgres
    /// migrations (safe when several replicas start at once).
    pub async fn connect(settings: &Settings) -> anyhow::Result<Self> {
        let (store, bus, embedded): (Arc<dyn TranscriptStore>, Arc<dyn EventBus>, bool) = match &settings.deployment {
            Deployment::Embedded { data_dir } => {
                std::fs::create_dir_all(data_dir)
                    .with_context(|| format!("create data directory {}", data_dir.display()))?;
                let store = SqliteStore::open(&data_dir.join("sediment.db"))
                    .await
                    .context("open the SQLite store")?;
                let bus = LocalBus::new(settings.worker.max_attempts, settings.worker.retry_delay);
                (Arc::new(store), Arc::new(bus), true)
            }
            Deployment::Cluster { database_url, amqp_url } => {
                let store = PostgresStore::connect(database_url, settings.db_pool_size)
                    .await
                    .context("connect to Postgres")?;
                store.migrate().await.context("apply Postgres migrations")?;
                let bus = AmqpBus::connect(AmqpSettings {
                    url: amqp_url.clone(),
                    prefix: settings.amqp_prefix.clone(),
                    max_attempts: settings.worker.max_attempts,
                    retry_delay: settings.worker.retry_delay,
                    ..AmqpSettings::default()
                })
                .await
                .context("connect to RabbitMQ")?;
                (Arc::new(store), Arc::new(bus), false)
            }
        };
        let index: Arc<dyn SearchIndex> = match &settings.index {
            IndexBackend::Edge { dir } => {
                std::fs::create_dir_all(dir).with_context(|| format!("create index directory {}", dir.display()))?;
                // Opening blocks (segment loads, up to 30 s waiting for the directory lock).
                let (dir, every) = (dir.clone(), settings.index_optimize_every);
                let index = tokio::task::spawn_blocking(move || EdgeIndex::open(&dir, every))
                    .await
                    .context("join the index opener")?
                    .context("open the Qdrant Edge index")?;
                Arc::new(index)
            }
            IndexBackend::Qdrant { url, collection } => {
                let api_key = settings.qdrant_api_key.as_ref().map(|key| key.expose().to_owned());
                Arc::new(
                    QdrantIndex::connect(url, collection, api_key)
                        .await
                        .with_context(|| format!("connect to the Qdrant server at {url}"))?,
                )
            }
        };
        let api_runs_index_worker = embedded || matches!(settings.index, IndexBackend::Edge { .. });
        Ok(Self {
            store,
            bus,
            index,
            embedded,
            api_runs_index_worker,
        })
    }
}
