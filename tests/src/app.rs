//! `TestApp`: the real API (and its in-process index worker) on 127.0.0.1:0 over real
//! backends — SQLite + in-process queue + Qdrant Edge (embedded), or a fresh Postgres database
//! + RabbitMQ with unique names + Qdrant Edge (cluster). Everything is torn down on drop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Client, RequestBuilder, Response};
use serde_json::{json, Value};
use shared::backends::Backends;
use shared::bus::{BusResult, Event, EventBus, QueueStats, Replayed, Subscription, WorkerKind};
use shared::config::Settings;
use shared::domain::Tenant;
use shared::files::{FileError, FileResult, FileStore, ObjectMeta};
use shared::index::PointKind;
use shared::indexer::Indexer;
use shared::runtime::{run_consumer, ConsumerSettings, Heartbeat, IndexHandler};
use shared::store::INDEX_CONSUMER;
use tokio_util::sync::CancellationToken;

use crate::amqp::TestBroker;
use crate::pg::TestDb;

/// Which deployment a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Embedded,
    Cluster,
}

/// Both deployments, for tests that must hold in each.
pub const MODES: [Mode; 2] = [Mode::Embedded, Mode::Cluster];

pub struct TestApp {
    pub mode: Mode,
    pub base: String,
    pub client: Client,
    pub backends: Backends,
    pub settings: Settings,
    shutdown: CancellationToken,
    server: Option<api::Server>,
    _dir: tempfile::TempDir,
    _index_dir: Option<tempfile::TempDir>,
    _db: Option<TestDb>,
    _broker: Option<TestBroker>,
    _bucket: Option<crate::s3::TestBucket>,
}

/// Options a test may change before start.
#[derive(Default, Clone)]
pub struct Options {
    /// Extra `SEDIMENT_*` settings (without the prefix).
    pub env: Vec<(&'static str, String)>,
    /// Start without the in-process index worker (as if the worker were down).
    pub no_worker: bool,
    /// Lose every event the API publishes (as if the broker dropped them).
    pub lose_events: bool,
    /// While this is true, every call to the file store fails as unavailable (an S3 outage),
    /// for the API and the workers it runs.
    pub file_store_down: Option<Arc<AtomicBool>>,
    /// Keep the embedded index under this directory (another disk, a tmpfs) rather than beside
    /// the rest of the app's state.
    pub index_parent: Option<std::path::PathBuf>,
}

/// Wraps a real bus and loses every published event, reporting success: the worst a broker
/// can do to a hint. Consuming goes to the real bus.
struct LosingBus(Arc<dyn EventBus>);

#[async_trait::async_trait]
impl EventBus for LosingBus {
    async fn publish(&self, _event: &Event) -> BusResult<()> {
        Ok(())
    }
    async fn publish_delayed(&self, _event: &Event, _delay: std::time::Duration) -> BusResult<()> {
        Ok(())
    }
    async fn subscribe(&self, kind: WorkerKind, prefetch: u16) -> BusResult<Box<dyn Subscription>> {
        self.0.subscribe(kind, prefetch).await
    }
    async fn depth(&self, kind: WorkerKind) -> BusResult<Option<u64>> {
        self.0.depth(kind).await
    }
    async fn stats(&self, kind: WorkerKind) -> BusResult<QueueStats> {
        self.0.stats(kind).await
    }
    async fn ping(&self) -> BusResult<()> {
        self.0.ping().await
    }
    async fn replay_parked(&self, kind: WorkerKind, limit: usize) -> BusResult<Vec<Replayed>> {
        self.0.replay_parked(kind, limit).await
    }
}

/// Wraps a real file store and fails every call while `down` is set, as a store that cannot
/// be reached does.
struct SwitchedFiles {
    inner: Arc<dyn FileStore>,
    down: Arc<AtomicBool>,
}

impl SwitchedFiles {
    fn up(&self) -> FileResult<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(FileError::Unavailable("the test took the file store down".into()));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl FileStore for SwitchedFiles {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn put(&self, key: &str, body: Vec<u8>) -> FileResult<()> {
        self.up()?;
        self.inner.put(key, body).await
    }
    async fn get(&self, key: &str) -> FileResult<Option<Vec<u8>>> {
        self.up()?;
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str) -> FileResult<Vec<ObjectMeta>> {
        self.up()?;
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> FileResult<()> {
        self.up()?;
        self.inner.delete(key).await
    }
    async fn delete_prefix(&self, prefix: &str) -> FileResult<usize> {
        self.up()?;
        self.inner.delete_prefix(prefix).await
    }
    async fn copy_prefix(&self, from: &str, to: &str) -> FileResult<usize> {
        self.up()?;
        self.inner.copy_prefix(from, to).await
    }
    async fn check(&self) -> FileResult<()> {
        self.up()?;
        self.inner.check().await
    }
}

impl TestApp {
    pub async fn start(mode: Mode) -> Self {
        Self::with(mode, Options::default()).await
    }

    pub async fn with(mode: Mode, options: Options) -> Self {
        let dir = tempfile::tempdir().expect("create temp dir");
        let mut env: HashMap<String, String> = HashMap::new();
        env.insert("DATA_DIR".into(), dir.path().join("data").display().to_string());
        let index_dir = options
            .index_parent
            .as_ref()
            .map(|parent| tempfile::tempdir_in(parent).expect("create index dir"));
        let index_path = index_dir
            .as_ref()
            .map_or_else(|| dir.path().join("index"), |d| d.path().join("index"));
        env.insert("INDEX_DIR".into(), index_path.display().to_string());
        // The cluster deployment's file store defaults to a directory under the working dir.
        env.insert("FILES_DIR".into(), dir.path().join("files").display().to_string());
        env.insert("WORKER_SWEEP_INTERVAL_MS".into(), "200".into());
        env.insert("WORKER_RETRY_DELAY_MS".into(), "100".into());
        env.insert("SHUTDOWN_DEADLINE_MS".into(), "5000".into());
        // Keyword only unless a test asks for an embedder: the local model costs seconds.
        env.insert("EMBEDDING".into(), "none".into());
        let (db, broker) = match mode {
            Mode::Embedded => (None, None),
            Mode::Cluster => {
                let db = TestDb::create().await;
                let broker = TestBroker::start("app").await;
                let amqp = broker.settings();
                env.insert("DATABASE_URL".into(), db.url.clone());
                env.insert("AMQP_URL".into(), amqp.url);
                env.insert("AMQP_PREFIX".into(), amqp.prefix);
                (Some(db), Some(broker))
            }
        };
        // The cluster keeps scenes and persona on the S3 server when the tests have one (CI
        // does), under a root prefix of this app's own.
        let bucket = match mode {
            Mode::Cluster if std::env::var_os(crate::s3::URL_ENV).is_some() => {
                crate::s3::TestBucket::start("app").await
            }
            Mode::Cluster | Mode::Embedded => None,
        };
        if let Some(bucket) = &bucket {
            let s3 = bucket.settings();
            env.insert("S3_BUCKET".into(), s3.bucket.clone());
            env.insert("S3_ENDPOINT".into(), s3.endpoint.clone().unwrap_or_default());
            env.insert("S3_PREFIX".into(), s3.root_prefix.clone());
            if let Some(credentials) = &s3.credentials {
                env.insert("S3_ACCESS_KEY_ID".into(), credentials.access_key_id.clone());
                env.insert(
                    "S3_SECRET_ACCESS_KEY".into(),
                    credentials.secret_access_key.expose().to_owned(),
                );
            }
        }
        for (k, v) in &options.env {
            env.insert((*k).to_owned(), v.clone());
        }
        // The cluster refuses to start without auth. Tests that are not about auth run it off
        // (the embedded app on 127.0.0.1 is off by default); auth tests set SEDIMENT_ADMIN_KEY.
        if mode == Mode::Cluster && !env.contains_key("ADMIN_KEY") && !env.contains_key("AUTH") {
            env.insert("AUTH".into(), "off".into());
        }
        let settings = Settings::from_map(&env).expect("valid test settings");
        let mut backends = Backends::connect(&settings).await.expect("connect test backends");
        if options.no_worker {
            backends.api_runs_index_worker = false;
        }
        if options.lose_events {
            backends.bus = Arc::new(LosingBus(backends.bus.clone()));
        }
        if let Some(down) = options.file_store_down {
            backends.files = Arc::new(SwitchedFiles {
                inner: backends.files.clone(),
                down,
            });
        }
        let shutdown = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind test listener");
        let server = api::start(listener, backends.clone(), &settings, shutdown.clone())
            .await
            .expect("start the api");
        let base = format!("http://{}", server.addr);
        Self {
            mode,
            base,
            client: Client::new(),
            backends,
            settings,
            shutdown,
            server: Some(server),
            _dir: dir,
            _index_dir: index_dir,
            _db: db,
            _broker: broker,
            _bucket: bucket,
        }
    }

    /// Stops the server and its workers gracefully and waits for them.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server.wait().await.expect("server stops cleanly");
        }
    }

    /// Starts an index worker on this app's backends (as a separate worker process would).
    pub fn spawn_index_worker(&self) -> CancellationToken {
        let token = self.shutdown.child_token();
        let indexer = Indexer::new(
            self.backends.store.clone(),
            self.backends.index.clone(),
            self.backends.embedder.clone(),
            self.settings.worker.batch_size,
        )
        .with_sync_interval(self.settings.worker.index_sync_interval);
        tokio::spawn(run_consumer(
            self.backends.bus.clone(),
            Arc::new(IndexHandler(indexer)),
            ConsumerSettings {
                prefetch: self.settings.worker.prefetch,
                sweep_interval: self.settings.worker.sweep_interval,
                shutdown_deadline: self.settings.shutdown_deadline,
            },
            Arc::new(Heartbeat::default()),
            token.clone(),
        ));
        token
    }

    /// Starts the scene and persona workers on this app's backends (as the `sediment-scene`
    /// and `sediment-persona` processes would in the cluster; the embedded API runs its own).
    pub fn spawn_layer_workers(&self) -> CancellationToken {
        let token = self.shutdown.child_token();
        let (scenes, personas) = self
            .backends
            .layer_handlers(&self.settings)
            .expect("build the layer workers");
        let consumer = ConsumerSettings {
            prefetch: self.settings.worker.prefetch,
            sweep_interval: self.settings.worker.sweep_interval,
            shutdown_deadline: self.settings.shutdown_deadline,
        };
        for handler in [scenes, personas] {
            tokio::spawn(run_consumer(
                self.backends.bus.clone(),
                handler,
                consumer.clone(),
                Arc::new(Heartbeat::default()),
                token.clone(),
            ));
        }
        token
    }

    /// The cluster app's share of the broker (its prefix), to publish what the bus would not.
    pub fn broker(&self) -> Option<&TestBroker> {
        self._broker.as_ref()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request carrying the tenant headers.
    pub fn req(&self, method: reqwest::Method, path: &str, tenant: &Tenant) -> RequestBuilder {
        self.client.request(method, self.url(path)).tenant_headers(tenant)
    }

    pub async fn append(&self, tenant: &Tenant, session: &str, messages: Value) -> Response {
        self.req(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/messages"),
            tenant,
        )
        .json(&json!({ "messages": messages }))
        .send()
        .await
        .expect("send append")
    }

    /// Appends and asserts 201; returns the response body.
    pub async fn append_ok(&self, tenant: &Tenant, session: &str, messages: Value) -> Value {
        let response = self.append(tenant, session, messages).await;
        let status = response.status();
        let body: Value = response.json().await.expect("json body");
        assert_eq!(status, 201, "append failed: {body}");
        body
    }

    pub async fn list(&self, tenant: &Tenant, session: &str, query: &str) -> Response {
        self.req(
            reqwest::Method::GET,
            &format!("/v1/sessions/{session}/messages{query}"),
            tenant,
        )
        .send()
        .await
        .expect("send list")
    }

    pub async fn search(&self, tenant: &Tenant, body: Value) -> Response {
        self.req(reqwest::Method::POST, "/v1/conversations/search", tenant)
            .json(&body)
            .send()
            .await
            .expect("send search")
    }

    pub async fn recall(&self, tenant: &Tenant, body: Value) -> Response {
        self.req(reqwest::Method::POST, "/v1/recall", tenant)
            .json(&body)
            .send()
            .await
            .expect("send recall")
    }

    /// Recalls, asserting 200; returns the body.
    pub async fn recall_ok(&self, tenant: &Tenant, body: Value) -> Value {
        let response = self.recall(tenant, body).await;
        let status = response.status();
        let body: Value = response.json().await.expect("json body");
        assert_eq!(status, 200, "recall failed: {body}");
        body
    }

    /// Searches and returns the items' contents, asserting 200.
    pub async fn search_contents(&self, tenant: &Tenant, query: &str) -> Vec<String> {
        let response = self.search(tenant, json!({ "query": query, "limit": 20 })).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.expect("json body");
        body["items"]
            .as_array()
            .expect("items array")
            .iter()
            .map(|i| i["content"].as_str().expect("content").to_owned())
            .collect()
    }

    /// Waits until nothing is left to index, or panics after `timeout`.
    pub async fn wait_indexed(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            let lag = self.backends.store.lag(INDEX_CONSUMER).await.expect("read lag");
            if lag.turns == 0 {
                return;
            }
            assert!(start.elapsed() < timeout, "index lag still {lag:?} after {timeout:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lists the tenant's memories (`query` is the query string, e.g. `?status=active`);
    /// asserts 200 and returns the body.
    pub async fn memories(&self, tenant: &Tenant, query: &str) -> Value {
        let response = self
            .req(reqwest::Method::GET, &format!("/v1/memories{query}"), tenant)
            .send()
            .await
            .expect("send list memories");
        let status = response.status();
        let body: Value = response.json().await.expect("json body");
        assert_eq!(status, 200, "list memories failed: {body}");
        body
    }

    /// The contents of the tenant's active memories, newest first.
    pub async fn memory_contents(&self, tenant: &Tenant) -> Vec<String> {
        self.memories(tenant, "?status=active&limit=500").await["items"]
            .as_array()
            .expect("items array")
            .iter()
            .map(|m| m["content"].as_str().expect("content").to_owned())
            .collect()
    }

    /// Waits until nothing is left to extract and the memory index has caught up, or panics
    /// after `timeout`.
    pub async fn wait_extracted(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            let lag = self
                .backends
                .store
                .lag(shared::store::memory::EXTRACT_CONSUMER)
                .await
                .expect("read lag");
            let outbox = self.backends.memories.outbox(1).await.expect("read outbox");
            if lag.turns == 0 && outbox.is_empty() {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "extraction lag still {lag:?} (outbox empty: {}) after {timeout:?}",
                outbox.is_empty()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The API's `/metrics` body (Prometheus text).
    pub async fn metrics_text(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics body")
    }

    /// Points of a tenant's turns in the index.
    pub async fn indexed_count(&self, tenant: &Tenant) -> u64 {
        self.backends
            .index
            .count(tenant, PointKind::Turn)
            .await
            .expect("count points")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Sends a request as a tenant: its ids in the `X-Sediment-*` headers.
pub trait TenantHeaders {
    fn tenant_headers(self, tenant: &Tenant) -> Self;
}

impl TenantHeaders for RequestBuilder {
    fn tenant_headers(self, tenant: &Tenant) -> Self {
        self.header(api::TEAM_HEADER, &tenant.team)
            .header(api::AGENT_HEADER, &tenant.agent)
            .header(api::USER_HEADER, &tenant.user)
    }
}

/// Layer timers scaled down from 90 s / 900 s / 1 h, and a persona after the first memory:
/// settings for tests that wait for scenes and a persona.
pub fn fast_layer_env() -> Vec<(&'static str, String)> {
    vec![
        ("SCENE_AFTER_L1_MS", "100".into()),
        ("SCENE_MIN_GAP_MS", "300".into()),
        ("SCENE_MAX_WAIT_MS", "5000".into()),
        ("SCENE_RETRY_MS", "600000".into()),
        ("PERSONA_MEMORY_THRESHOLD", "1".into()),
        ("EXTRACT_IDLE_FLUSH_MS", "300".into()),
    ]
}

/// A tenant with unique ids, so tests never share data even on shared backends.
pub fn tenant() -> Tenant {
    let id = uuid::Uuid::new_v4().simple().to_string();
    Tenant {
        team: format!("team-{id}"),
        agent: "agent-1".into(),
        user: "user-1".into(),
    }
}

impl TestApp {
    /// Starts a compact worker on this app's backends (as the `sediment-compact` process
    /// would in the cluster; the embedded API runs its own).
    pub fn spawn_compact_worker(&self) -> CancellationToken {
        let token = self.shutdown.child_token();
        let compactor =
            shared::context::Compactor::from_backends(&self.backends, &self.settings).expect("build the compactor");
        tokio::spawn(run_consumer(
            self.backends.bus.clone(),
            Arc::new(shared::context::CompactHandler(compactor)),
            ConsumerSettings {
                prefetch: self.settings.worker.prefetch,
                sweep_interval: self.settings.worker.sweep_interval,
                shutdown_deadline: self.settings.shutdown_deadline,
            },
            Arc::new(Heartbeat::default()),
            token.clone(),
        ));
        token
    }
}
