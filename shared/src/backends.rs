//! Builds the set of backends a process uses from its settings: the one place that knows
//! which implementation of each port goes with which deployment.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use crate::background::{self, Placement};
use crate::bus::{AmqpBus, AmqpSettings, EventBus, LocalBus, WorkerKind};
use crate::config::{
    Deployment, EmbeddingSettings, FileStoreSettings, IndexBackend, LayerSettings, LlmSettings, Settings,
};
use crate::embed::{Embedder, LocalEmbedder, OpenAiEmbedder, OpenAiSettings};
use crate::files::{FileStore, LocalFileStore, S3FileStore};
use crate::index::{EdgeIndex, QdrantIndex, SearchIndex};
use crate::llm::{ChatClient, ChatSettings, InstanceTemplates, Prompts};
use crate::memory::llm::{LlmExtractor, LlmJudge};
use crate::memory::pipeline::{MemoryIndexer, Pipeline};
use crate::memory::rules::{RulesExtractor, RulesJudge};
use crate::memory::schedule::Scheduler;
use crate::memory::{CardExtractor, ConflictJudge};
use crate::persona::build::{LlmPersonaEngine, PersonaBuilder, PersonaEngine, PersonaHandler, RulesPersonaEngine};
use crate::runtime::Handler;
use crate::scene::editor::{LlmSceneEditor, RulesSceneEditor, SceneEditor};
use crate::scene::run::{SceneClock, SceneHandler, SceneRunner};
use crate::store::audit::AuditLog;
use crate::store::compaction::CompactionStore;
use crate::store::erase::EraseStore;
use crate::store::keys::KeyStore;
use crate::store::memory::MemoryStore;
use crate::store::portable::PortableStore;
use crate::store::prompts::{PromptStore, StoredOverrides};
use crate::store::scene::SceneStore;
use crate::store::{PostgresStore, SqliteStore, TranscriptStore, INDEX_CONSUMER};

/// One implementation of every port.
#[derive(Clone)]
pub struct Backends {
    pub store: Arc<dyn TranscriptStore>,
    /// The same database as `store`, seen through the memory port.
    pub memories: Arc<dyn MemoryStore>,
    /// The same database again, for the audit log.
    pub audit: Arc<dyn AuditLog>,
    /// The same database as `store`, seen through the session-compaction port.
    pub compactions: Arc<dyn CompactionStore>,
    /// The same database as `store`, seen through the scene/persona port.
    pub scenes: Arc<dyn SceneStore>,
    /// The same database as `store`, seen through the prompt-override port.
    pub prompt_store: Arc<dyn PromptStore>,
    /// The same database as `store`, for the API keys of teams.
    pub keys: Arc<dyn KeyStore>,
    pub erasures: Arc<dyn EraseStore>,
    /// The same database, for an owner's export and import.
    pub portable: Arc<dyn PortableStore>,
    /// The effective prompt templates: builtin, the instance directory, and the overrides of
    /// `prompt_store`, read on every call.
    pub prompts: Prompts,
    pub bus: Arc<dyn EventBus>,
    pub index: Arc<dyn SearchIndex>,
    /// `None` when no embedding provider is configured (keyword search only).
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Documents of scenes, persona and skills: S3, or a local directory.
    pub files: Arc<dyn FileStore>,
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
        type Stores = (
            Arc<dyn TranscriptStore>,
            Arc<dyn MemoryStore>,
            Arc<dyn CompactionStore>,
            Arc<dyn PromptStore>,
            Arc<dyn AuditLog>,
        );
        type Ports = (Stores, Arc<dyn EventBus>, bool);
        // Set in each arm below, from the same database object as `store`.
        let scenes: Arc<dyn SceneStore>;
        let keys: Arc<dyn KeyStore>;
        let erasures: Arc<dyn EraseStore>;
        let portable: Arc<dyn PortableStore>;
        // The embedded store, for what only its owner may do once the index is open.
        let mut sqlite: Option<Arc<SqliteStore>> = None;
        let ((store, memories, compactions, prompt_store, audit), bus, embedded): Ports = match &settings.deployment {
            Deployment::Embedded { data_dir } => {
                std::fs::create_dir_all(data_dir)
                    .with_context(|| format!("create data directory {}", data_dir.display()))?;
                let store = SqliteStore::open(&data_dir.join("sediment.db"))
                    .await
                    .context("open the SQLite store")?;
                let bus = LocalBus::new(settings.worker.max_attempts, settings.worker.retry_delay)
                    .muting(&muted_kinds(settings))
                    .limiting(settings.worker.queue_limit);
                let store = Arc::new(store);
                sqlite = Some(store.clone());
                scenes = store.clone();
                keys = store.clone();
                erasures = store.clone();
                portable = store.clone();
                (
                    (store.clone(), store.clone(), store.clone(), store.clone(), store),
                    Arc::new(bus),
                    true,
                )
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
                    muted: muted_kinds(settings),
                    ..AmqpSettings::default()
                })
                .await
                .context("connect to RabbitMQ")?;
                let store = Arc::new(store);
                scenes = store.clone();
                keys = store.clone();
                erasures = store.clone();
                portable = store.clone();
                (
                    (store.clone(), store.clone(), store.clone(), store.clone(), store),
                    Arc::new(bus),
                    false,
                )
            }
        };
        let prompts = prompts_for(settings.llm.as_ref(), prompt_store.clone())?;
        let embedder = connect_embedder(&settings.embedding).await?;
        let dense_dimension = embedder.as_ref().map(|e| e.dimension());
        let index: Arc<dyn SearchIndex> = match &settings.index {
            IndexBackend::Edge { dir } => {
                std::fs::create_dir_all(dir).with_context(|| format!("create index directory {}", dir.display()))?;
                // Opening blocks (segment loads, up to 30 s waiting for the directory lock).
                let (dir, every) = (dir.clone(), settings.index_optimize_every);
                let index = tokio::task::spawn_blocking(move || EdgeIndex::open(&dir, every, dense_dimension))
                    .await
                    .context("join the index opener")?
                    .context("open the Qdrant Edge index")?;
                let placed = |key: &str, cgroup: &Option<PathBuf>| -> anyhow::Result<Placement> {
                    if let Some(dir) = cgroup {
                        background::cgroup_threads_file(dir).map_err(|e| anyhow::anyhow!("SEDIMENT_{key}: {e}"))?;
                    }
                    Ok(Placement {
                        nice: settings.index_nice,
                        cgroup: cgroup.clone(),
                    })
                };
                let writes = placed("INDEX_CGROUP", &settings.index_cgroup)?;
                let optimizer = placed("INDEX_OPTIMIZER_CGROUP", &settings.index_optimizer_cgroup)?;
                Arc::new(
                    index
                        .with_background(writes, optimizer)
                        .with_min_free_mb(settings.index_min_free_mb),
                )
            }
            IndexBackend::Qdrant { url, collection } => {
                let api_key = settings.qdrant_api_key.as_ref().map(|key| key.expose().to_owned());
                Arc::new(
                    QdrantIndex::connect(url, collection, api_key, dense_dimension)
                        .await
                        .with_context(|| format!("connect to the Qdrant server at {url}"))?,
                )
            }
        };
        if let (Some(sqlite), IndexBackend::Edge { .. }) = (&sqlite, &settings.index) {
            // The Edge index's directory lock makes this the only process extracting from this
            // database: an extraction lease still held was left by one that was killed.
            let released = sqlite
                .release_extract_leases()
                .await
                .context("release the extraction leases of a stopped process")?;
            if released > 0 {
                tracing::warn!(sessions = released, "released extraction leases a stopped process held");
            }
        }
        if index.created() {
            // A new, empty index: whatever the cursors say was indexed is gone with the old
            // one (a removed directory, a new collection), so index everything again.
            let sessions = store
                .reset_cursors(INDEX_CONSUMER)
                .await
                .context("reset the index cursors for a new index")?;
            if sessions > 0 {
                tracing::warn!(sessions, "the search index is new: re-indexing every stored turn");
            }
            let requeued = memories
                .requeue_all()
                .await
                .context("queue every memory for a new index")?;
            if requeued > 0 {
                tracing::warn!(
                    memories = requeued,
                    "the search index is new: re-indexing every active memory"
                );
            }
        }
        let files = connect_files(settings, embedded).await?;
        let api_runs_index_worker = embedded || matches!(settings.index, IndexBackend::Edge { .. });
        Ok(Self {
            store,
            memories,
            audit,
            compactions,
            scenes,
            prompt_store,
            keys,
            erasures,
            portable,
            prompts,
            bus,
            index,
            embedder,
            embedded,
            api_runs_index_worker,
            files,
        })
    }
}

impl Backends {
    /// The runner of erasure jobs over these backends.
    pub fn eraser(&self) -> crate::erase::Eraser {
        crate::erase::Eraser::new(
            self.erasures.clone(),
            self.index.clone(),
            self.files.clone(),
            self.audit.clone(),
        )
    }

    /// The L1 extraction scheduler over these backends: the LLM engines when an LLM is
    /// configured, the rules engines otherwise.
    pub fn extract_scheduler(&self, settings: &Settings) -> anyhow::Result<Scheduler> {
        let (extractor, judge): (Arc<dyn CardExtractor>, Arc<dyn ConflictJudge>) = match &settings.llm {
            None => (Arc::new(RulesExtractor::new()), Arc::new(RulesJudge::new())),
            Some(llm) => {
                let chat = Arc::new(ChatClient::new(ChatSettings::from_config(llm)).context("build the LLM client")?);
                let prompts = self.prompts.clone();
                tracing::info!(model = %llm.model, "L1 extraction uses the LLM engines");
                (
                    Arc::new(LlmExtractor::new(chat.clone(), prompts.clone())),
                    Arc::new(LlmJudge::new(chat, prompts)),
                )
            }
        };
        let pipeline = Pipeline::new(
            self.store.clone(),
            self.memories.clone(),
            self.index.clone(),
            self.embedder.clone(),
            extractor,
            judge,
            settings.extract.pipeline.clone(),
        );
        let indexer = MemoryIndexer::new(self.memories.clone(), self.index.clone(), self.embedder.clone());
        let scheduler = Scheduler::new(
            self.store.clone(),
            pipeline,
            indexer,
            self.bus.clone(),
            settings.extract.schedule.clone(),
        );
        Ok(if settings.layers.enabled {
            scheduler.with_scene_clock(SceneClock::new(
                self.scenes.clone(),
                self.bus.clone(),
                settings.layers.scene.timer.clone(),
            ))
        } else {
            scheduler
        })
    }

    /// The scene and persona workers' handlers over these backends (LLM engines when an LLM
    /// is configured, rules otherwise).
    pub fn layer_handlers(&self, settings: &Settings) -> anyhow::Result<(Arc<dyn Handler>, Arc<dyn Handler>)> {
        let (editor, engine) = layer_engines(settings.llm.as_ref(), &self.prompts, &settings.layers)?;
        let runner = SceneRunner::new(
            self.memories.clone(),
            self.scenes.clone(),
            self.files.clone(),
            self.bus.clone(),
            editor,
            settings.layers.scene.clone(),
        );
        let builder = PersonaBuilder::new(
            self.memories.clone(),
            self.scenes.clone(),
            self.files.clone(),
            engine,
            settings.layers.persona.clone(),
        );
        Ok((Arc::new(SceneHandler(runner)), Arc::new(PersonaHandler(builder))))
    }
}

/// Worker kinds whose events nobody consumes in this deployment: `extract` when L1 extraction
/// is off (SEDIMENT_EXTRACT=false). Each bus drops their events instead of queueing them.
fn muted_kinds(settings: &Settings) -> Vec<WorkerKind> {
    if settings.extract.enabled {
        Vec::new()
    } else {
        vec![WorkerKind::Extract]
    }
}

/// The effective prompt templates: the instance directory (read now, so that a broken template
/// fails the boot, not the first call) and the overrides kept in `prompt_store`.
pub fn prompts_for(llm: Option<&LlmSettings>, prompt_store: Arc<dyn PromptStore>) -> anyhow::Result<Prompts> {
    let instance = match llm.and_then(|llm| llm.prompts_dir.as_ref()) {
        Some(dir) => InstanceTemplates::load(dir).context("load the instance prompt templates")?,
        None => InstanceTemplates::default(),
    };
    Ok(Prompts::new(instance, Arc::new(StoredOverrides(prompt_store))))
}

/// The scene editor and persona engine: the LLM ones when an LLM is configured, rules otherwise.
pub fn layer_engines(
    llm: Option<&LlmSettings>,
    prompts: &Prompts,
    layers: &LayerSettings,
) -> anyhow::Result<(Arc<dyn SceneEditor>, Arc<dyn PersonaEngine>)> {
    Ok(match llm {
        None => (Arc::new(RulesSceneEditor), Arc::new(RulesPersonaEngine)),
        Some(llm) => {
            let chat = Arc::new(ChatClient::new(ChatSettings::from_config(llm)).context("build the LLM client")?);
            (
                Arc::new(LlmSceneEditor::new(
                    chat.clone(),
                    prompts.clone(),
                    layers.scene.max_steps,
                )),
                Arc::new(LlmPersonaEngine::new(chat, prompts.clone())),
            )
        }
    })
}

/// Builds the configured embedder. `Auto` uses the local model when its directory holds one.
pub async fn connect_embedder(settings: &EmbeddingSettings) -> anyhow::Result<Option<Arc<dyn Embedder>>> {
    let local = |dir: std::path::PathBuf| async move {
        let shown = dir.display().to_string();
        let model = tokio::task::spawn_blocking(move || LocalEmbedder::load(&dir))
            .await
            .context("join the model loader")?
            .with_context(|| format!("load the embedding model in {shown}"))?;
        tracing::info!(model = model.model(), dimension = model.dimension(), dir = %shown, "local embedding model loaded");
        anyhow::Ok(Some(Arc::new(model) as Arc<dyn Embedder>))
    };
    match settings {
        EmbeddingSettings::None => Ok(None),
        EmbeddingSettings::Auto { model_dir } => {
            if LocalEmbedder::is_model_dir(model_dir) {
                local(model_dir.clone()).await
            } else {
                tracing::info!(
                    dir = %model_dir.display(),
                    "no embedding model found: keyword search only (run `bash api/fetch-model.sh` to install one)"
                );
                Ok(None)
            }
        }
        EmbeddingSettings::Local { model_dir } => local(model_dir.clone()).await,
        EmbeddingSettings::OpenAi {
            url,
            model,
            api_key,
            dimension,
            batch_size,
            timeout,
            max_retries,
        } => {
            let mut openai = OpenAiSettings::new(url.clone(), model.clone());
            openai.api_key = api_key.clone();
            openai.dimension = *dimension;
            openai.batch_size = *batch_size;
            openai.timeout = *timeout;
            openai.max_retries = *max_retries;
            let embedder = OpenAiEmbedder::connect(openai)
                .await
                .with_context(|| format!("connect to the embeddings endpoint at {url}"))?;
            tracing::info!(model = %model, dimension = embedder.dimension(), "embeddings endpoint connected");
            Ok(Some(Arc::new(embedder)))
        }
    }
}

/// Builds the configured file store and checks that it answers, so that a wrong bucket or key
/// fails the boot rather than the first scene.
pub async fn connect_files(settings: &Settings, embedded: bool) -> anyhow::Result<Arc<dyn FileStore>> {
    let files: Arc<dyn FileStore> = match &settings.files {
        FileStoreSettings::Local { root } => {
            if !embedded {
                tracing::warn!(
                    dir = %root.display(),
                    "no SEDIMENT_S3_BUCKET: scenes, persona and skills are kept in a local directory, so each replica has its own"
                );
            }
            let dir = root.clone();
            let store = tokio::task::spawn_blocking(move || LocalFileStore::open(&dir))
                .await
                .context("join the file store opener")?
                .with_context(|| format!("open the file directory {}", root.display()))?;
            Arc::new(store)
        }
        FileStoreSettings::S3(s3) => {
            let store = S3FileStore::new(s3).context("configure the S3 client")?;
            store
                .check()
                .await
                .with_context(|| format!("reach S3 bucket {}", s3.bucket))?;
            tracing::info!(bucket = %s3.bucket, endpoint = s3.endpoint.as_deref().unwrap_or("aws"), "file store is S3");
            Arc::new(store)
        }
    };
    Ok(files)
}
