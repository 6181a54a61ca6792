//! Typed settings, read once at start-up from defaults overlaid by environment variables, and
//! validated before any connection is opened (STYLE R5).
//!
//! Which deployment runs follows from the URLs: with none set, sediment is the embedded
//! deployment (SQLite, in-process queue, Qdrant Edge under `data_dir`); with
//! `SEDIMENT_DATABASE_URL` and `SEDIMENT_AMQP_URL` it is the cluster deployment.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::auth::Permission;
use crate::index::DEFAULT_BACKGROUND_NICE;

/// Prefix of every environment variable sediment reads.
pub const ENV_PREFIX: &str = "SEDIMENT_";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: format!("{ENV_PREFIX}{key}"),
        reason: reason.into(),
    }
}

/// Where the search index lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexBackend {
    /// Qdrant Edge, in-process, in this directory.
    Edge { dir: PathBuf },
    /// A Qdrant server.
    Qdrant { url: String, collection: String },
}

/// Which set of backends the process uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deployment {
    /// SQLite + in-process queue, all state under `data_dir`; the API runs every worker.
    Embedded { data_dir: PathBuf },
    /// Postgres + RabbitMQ; workers run as their own processes.
    Cluster { database_url: String, amqp_url: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Largest export stream `POST /v1/import` accepts, in bytes. It is read whole before
    /// anything is written (one transaction per owner), so this bounds the import's memory.
    pub max_import_bytes: usize,
    /// Most turns accepted in one append request.
    pub max_turns_per_request: usize,
    /// Most results one search may ask for.
    pub max_search_limit: usize,
    /// Most turns one list call may return.
    pub max_list_limit: u32,
    /// Requests per second each team may make of one API replica (`SEDIMENT_RATE_LIMIT_RPS`),
    /// if limited.
    pub rate_limit: Option<RateLimit>,
    /// Most turns each team may store (`SEDIMENT_QUOTA_TURNS`), if limited.
    pub turn_quota: Option<TurnQuota>,
}

/// A cap on a team's stored turns. Each API replica reads a team's count at most every
/// `refresh` and adds what it accepts itself in between, so a team can pass its quota by what
/// other replicas accept within one `refresh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnQuota {
    pub max_turns: u64,
    pub refresh: Duration,
}

/// A token bucket per team: `per_second` requests a second on average, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: u32,
    pub burst: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSettings {
    /// Unsettled deliveries per consumer (AMQP prefetch).
    pub prefetch: u16,
    /// Most turns of one session the index worker indexes per round.
    pub batch_size: u32,
    /// Least time between two syncs of the index worker's unsynced writes (Qdrant Edge).
    pub index_sync_interval: Duration,
    /// How often the backlog sweep runs.
    pub sweep_interval: Duration,
    /// Where a worker binary serves /healthz, /readyz and /metrics.
    pub health_listen: SocketAddr,
    /// Attempts before a failing message is parked.
    pub max_attempts: u32,
    /// Base backoff between attempts.
    pub retry_delay: Duration,
    /// Embedded: messages one in-process queue holds before new events are dropped.
    pub queue_limit: u64,
}

/// Which embedding provider computes dense vectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbeddingSettings {
    /// The local model if `model_dir` holds one, otherwise none (the embedded default).
    Auto { model_dir: PathBuf },
    /// BM25 only.
    None,
    /// A sentence-transformers model run in-process.
    Local { model_dir: PathBuf },
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    OpenAi {
        /// Base URL including `/v1`.
        url: String,
        model: String,
        api_key: Option<Secret>,
        /// Expected dimension, checked against the endpoint at start.
        dimension: Option<usize>,
        batch_size: usize,
        timeout: Duration,
        max_retries: u32,
    },
}

/// The OpenAI-compatible chat endpoint of the LLM engines (L1 extraction and dedup, and the
/// later LLM jobs). With none configured, sediment runs its rules engines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmSettings {
    /// Base URL including `/v1`; requests go to `{url}/chat/completions`.
    pub url: String,
    pub model: String,
    pub api_key: Option<Secret>,
    /// Limit of one HTTP request, from connecting to the last byte of the answer.
    pub timeout: Duration,
    /// Retries of one request on connect errors, timeouts, 429 and 5xx.
    pub max_retries: u32,
    /// Instance-wide prompt overrides, one `{template id}.md` file each.
    pub prompts_dir: Option<PathBuf>,
}

/// L1 extraction: batch sizes and the schedule (see `memory::schedule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractSettings {
    /// Run L1 extraction at all (`SEDIMENT_EXTRACT`); off leaves turns as L0 only.
    pub enabled: bool,
    pub pipeline: crate::memory::pipeline::PipelineSettings,
    pub schedule: crate::memory::schedule::ScheduleSettings,
}

/// Defaults of `POST /v1/recall` and of hybrid queries.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallSettings {
    /// Items returned when a request gives no limit.
    pub default_limit: usize,
    /// Longest item, in code points, when a request gives no budget.
    pub item_chars: usize,
    /// Most code points of all items together, when a request gives no budget.
    pub total_chars: usize,
    /// Deadline of a recall when a request gives none.
    pub timeout: Duration,
    /// Hybrid fusion: candidates per channel and the RRF constant.
    pub fusion: crate::index::Fusion,
    /// Re-rank by recency by default (`SEDIMENT_RECALL_RECENCY`; see `recall`).
    pub recency: bool,
    /// How much a memory's own rank counts in recall's one ranking of memories and turns
    /// (`SEDIMENT_RECALL_MEMORY_WEIGHT`, 0 or more; see `recall::fuse`).
    pub memory_weight: f32,
    /// Query vectors kept per process (`SEDIMENT_QUERY_VECTOR_CACHE`; 0 turns the cache off;
    /// see `embed::QueryVectorCache`).
    pub query_vector_cache: usize,
}

/// Who may read the API's ops page (`/ops`, `/ops/state`). It shows operational data across
/// tenants (counts, lag, liveness, failure kinds and errors; no content and no tenant ids), so
/// it is closed to the network by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsSettings {
    /// Serve the ops page at all (`SEDIMENT_OPS_ENABLED`); off, it answers 404.
    pub enabled: bool,
    /// `SEDIMENT_OPS_TOKEN`: with one, any client presenting it as a bearer token may read the
    /// page, and no other; without one, only clients on a loopback address may (a local
    /// browser, or `kubectl port-forward`).
    pub token: Option<Secret>,
}

/// Shortest accepted ops token: it guards data across every tenant.
pub const MIN_OPS_TOKEN_CHARS: usize = 16;

impl OpsSettings {
    fn from_map(vars: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let token = vars.get("OPS_TOKEN").map(|v| v.trim()).filter(|v| !v.is_empty());
        if token.is_some_and(|t| t.chars().count() < MIN_OPS_TOKEN_CHARS) {
            return Err(invalid(
                "OPS_TOKEN",
                format!("must be at least {MIN_OPS_TOKEN_CHARS} characters"),
            ));
        }
        Ok(Self {
            enabled: parse(vars, "OPS_ENABLED", true)?,
            token: token.map(Secret::new),
        })
    }
}

/// Who may call `/v1` (`SEDIMENT_AUTH`, `SEDIMENT_ADMIN_KEY`, `SEDIMENT_ADMIN_KEY_FILE`,
/// `SEDIMENT_AUTH_JWKS_*`). The API decides from these and its listen address whether auth is on
/// (`api`'s `auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSettings {
    pub mode: AuthMode,
    /// The operator's key: it manages the teams' API keys (`/v1/admin/keys`) and nothing else.
    pub admin_key: Option<Secret>,
    /// How long a replica trusts what it read of a key (`SEDIMENT_AUTH_KEY_CACHE_MS`): a
    /// revoked key stops working on every replica within this bound.
    pub key_cache_ttl: Duration,
    /// Tokens of the organisation's identity provider, accepted in place of an API key when a
    /// JWKS is configured. Enough on its own to turn auth on: no admin key is needed.
    pub jwt: Option<JwtSettings>,
}

/// Where the identity provider's signing keys (a JWKS document) come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// `SEDIMENT_AUTH_JWKS_FILE`: re-read every refresh period, so a mounted Secret or
    /// ConfigMap can rotate keys without a restart.
    File(PathBuf),
    /// `SEDIMENT_AUTH_JWKS_URL`: the identity provider's JWKS endpoint.
    Url(String),
}

/// How tokens of the identity provider are checked and what their claims mean
/// (`api/README.md`, "Tokens of an identity provider").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    pub jwks: JwksSource,
    /// How long keys read from the JWKS are trusted before they are read again
    /// (`SEDIMENT_AUTH_JWKS_REFRESH_MS`).
    pub refresh: Duration,
    /// The `iss` every token must carry, if set (`SEDIMENT_AUTH_JWT_ISSUER`).
    pub issuer: Option<String>,
    /// A value every token's `aud` must hold, if set (`SEDIMENT_AUTH_JWT_AUDIENCE`); unset, `aud`
    /// is not checked.
    pub audience: Option<String>,
    /// The claim naming the token's team; a token without it is refused.
    pub team_claim: String,
    /// The claim that, when a token carries it, pins the one agent the token may act as.
    pub agent_claim: String,
    /// The claim that, when a token carries it, pins the one user the token may act as.
    pub user_claim: String,
    /// The claim holding the token's permission: `read`, `write` or `admin` (or
    /// `sediment:read`, ...), a space-separated list of them or an array; the highest counts.
    pub permission_claim: String,
    /// The permission of a token without the permission claim.
    pub default_permission: Permission,
}

/// `SEDIMENT_AUTH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// On with an admin key or a JWKS; without either, off on a loopback address in the
    /// embedded deployment and a refusal to start anywhere else.
    Auto,
    /// On; an admin key or a JWKS is required.
    On,
    /// Off, wherever the API listens: every caller is whichever tenant it names.
    Off,
}

/// Shortest accepted admin key: it can mint a key for any team.
pub const MIN_ADMIN_KEY_CHARS: usize = 32;

impl AuthSettings {
    fn from_map(vars: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let get = |key: &str| vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let mode = match get("AUTH").unwrap_or("auto") {
            "auto" => AuthMode::Auto,
            "on" => AuthMode::On,
            "off" => AuthMode::Off,
            _ => return Err(invalid("AUTH", "must be auto, on or off")),
        };
        let admin_key = match (get("ADMIN_KEY"), get("ADMIN_KEY_FILE")) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "ADMIN_KEY_FILE",
                    "set SEDIMENT_ADMIN_KEY or SEDIMENT_ADMIN_KEY_FILE, not both",
                ))
            }
            (Some(key), None) => Some(key.to_owned()),
            (None, Some(path)) => {
                let key = std::fs::read_to_string(path)
                    .map_err(|e| invalid("ADMIN_KEY_FILE", format!("cannot read {path}: {e}")))?;
                Some(key.trim().to_owned())
            }
            (None, None) => None,
        };
        if let Some(key) = &admin_key {
            if key.chars().count() < MIN_ADMIN_KEY_CHARS {
                let source = if get("ADMIN_KEY").is_some() {
                    "ADMIN_KEY"
                } else {
                    "ADMIN_KEY_FILE"
                };
                return Err(invalid(
                    source,
                    format!("the admin key must be at least {MIN_ADMIN_KEY_CHARS} characters"),
                ));
            }
        }
        let jwt = JwtSettings::from_map(vars)?;
        if mode == AuthMode::On && admin_key.is_none() && jwt.is_none() {
            return Err(invalid(
                "AUTH",
                "on needs an admin key or an identity provider: set SEDIMENT_ADMIN_KEY, \
                 SEDIMENT_ADMIN_KEY_FILE, SEDIMENT_AUTH_JWKS_FILE or SEDIMENT_AUTH_JWKS_URL",
            ));
        }
        Ok(Self {
            mode,
            admin_key: admin_key.map(Secret::new),
            key_cache_ttl: millis(vars, "AUTH_KEY_CACHE_MS", 10_000)?,
            jwt,
        })
    }
}

impl JwtSettings {
    /// `None` unless a JWKS file or URL is set: the other `SEDIMENT_AUTH_JWT_*` settings mean
    /// nothing without one.
    fn from_map(vars: &HashMap<String, String>) -> Result<Option<Self>, ConfigError> {
        let get = |key: &str| vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let jwks = match (get("AUTH_JWKS_FILE"), get("AUTH_JWKS_URL")) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "AUTH_JWKS_URL",
                    "set SEDIMENT_AUTH_JWKS_FILE or SEDIMENT_AUTH_JWKS_URL, not both",
                ))
            }
            (Some(path), None) => JwksSource::File(PathBuf::from(path)),
            (None, Some(url)) if url.starts_with("https://") || url.starts_with("http://") => {
                JwksSource::Url(url.to_owned())
            }
            (None, Some(_)) => return Err(invalid("AUTH_JWKS_URL", "must start with https:// or http://")),
            (None, None) => return Ok(None),
        };
        let claim = |key: &str, default: &'static str| get(key).unwrap_or(default).to_owned();
        let default_permission = get("AUTH_JWT_DEFAULT_PERMISSION").unwrap_or("write");
        let default_permission = Permission::parse(default_permission)
            .ok_or_else(|| invalid("AUTH_JWT_DEFAULT_PERMISSION", "must be read, write or admin"))?;
        Ok(Some(Self {
            jwks,
            refresh: millis(vars, "AUTH_JWKS_REFRESH_MS", 300_000)?,
            issuer: get("AUTH_JWT_ISSUER").map(str::to_owned),
            audience: get("AUTH_JWT_AUDIENCE").map(str::to_owned),
            team_claim: claim("AUTH_JWT_TEAM_CLAIM", "team"),
            agent_claim: claim("AUTH_JWT_AGENT_CLAIM", "agent"),
            user_claim: claim("AUTH_JWT_USER_CLAIM", "user"),
            permission_claim: claim("AUTH_JWT_PERMISSION_CLAIM", "permission"),
            default_permission,
        }))
    }
}

/// Trace export (`SEDIMENT_OTLP_*`, `SEDIMENT_TRACE_SAMPLE_RATIO`); see `telemetry`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// OTLP/HTTP base URL of a collector (`http://otel-collector:4318`; `/v1/traces` is added
    /// unless the URL already ends with it). `None` exports nothing, unless the standard
    /// `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` is set.
    pub otlp_endpoint: Option<String>,
    /// Share of new traces kept, 0.0 to 1.0; a trace continued from a caller or a message keeps
    /// the caller's decision.
    pub sample_ratio: f64,
}

impl TraceSettings {
    fn from_map(vars: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let get = |key: &str| vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let otlp_endpoint = get("OTLP_ENDPOINT");
        if otlp_endpoint.is_some_and(|url| !(url.starts_with("http://") || url.starts_with("https://"))) {
            return Err(invalid("OTLP_ENDPOINT", "must start with http:// or https://"));
        }
        // Only OTLP/HTTP with protobuf bodies: it rides on the reqwest client already in the
        // binary; an OpenTelemetry Collector bridges to gRPC-only back ends.
        match get("OTLP_PROTOCOL").unwrap_or("http/protobuf") {
            "http/protobuf" => {}
            _ => return Err(invalid("OTLP_PROTOCOL", "must be http/protobuf")),
        }
        let sample_ratio: f64 = parse(vars, "TRACE_SAMPLE_RATIO", 1.0)?;
        if !(0.0..=1.0).contains(&sample_ratio) {
            return Err(invalid("TRACE_SAMPLE_RATIO", "must be between 0.0 and 1.0"));
        }
        Ok(Self {
            otlp_endpoint: otlp_endpoint.map(str::to_owned),
            sample_ratio,
        })
    }
}

/// Where the file store (L2 scenes, L3 persona, skills) keeps its objects; see `files`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileStoreSettings {
    /// A local directory: the embedded default `{data_dir}/files`, or `SEDIMENT_FILES_DIR`.
    Local { root: PathBuf },
    /// An S3-protocol bucket (`SEDIMENT_S3_BUCKET` and the other `SEDIMENT_S3_*`).
    S3(crate::files::S3Settings),
}

impl FileStoreSettings {
    fn from_map(
        vars: &HashMap<String, String>,
        data_dir: &std::path::Path,
        cluster: bool,
    ) -> Result<Self, ConfigError> {
        let get = |key: &str| vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let Some(bucket) = get("S3_BUCKET") else {
            // Settings that only mean something with a bucket are a half-done S3 set-up: a
            // local directory instead would lose the files on the next pod restart.
            for key in [
                "S3_ENDPOINT",
                "S3_REGION",
                "S3_PATH_STYLE",
                "S3_ACCESS_KEY_ID",
                "S3_SECRET_ACCESS_KEY",
                "S3_PREFIX",
            ] {
                if get(key).is_some() {
                    return Err(invalid("S3_BUCKET", format!("must be set when SEDIMENT_{key} is set")));
                }
            }
            let root = match get("FILES_DIR") {
                Some(dir) => PathBuf::from(dir),
                None if cluster => PathBuf::from("./data/files"),
                None => data_dir.join("files"),
            };
            return Ok(Self::Local { root });
        };
        // S3's naming rules (which MinIO and COS share): 3 to 63 lowercase letters, digits,
        // '.' and '-'.
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
        if !valid_bucket {
            return Err(invalid(
                "S3_BUCKET",
                "must be 3 to 63 lowercase letters, digits, '.' or '-'",
            ));
        }
        let endpoint = get("S3_ENDPOINT");
        if endpoint.is_some_and(|url| !(url.starts_with("http://") || url.starts_with("https://"))) {
            return Err(invalid("S3_ENDPOINT", "must start with http:// or https://"));
        }
        let credentials = match (get("S3_ACCESS_KEY_ID"), get("S3_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) => Some(crate::files::S3Credentials {
                access_key_id: id.to_owned(),
                secret_access_key: Secret::new(secret),
            }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(invalid(
                    "S3_SECRET_ACCESS_KEY",
                    "must be set with SEDIMENT_S3_ACCESS_KEY_ID",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "S3_ACCESS_KEY_ID",
                    "must be set with SEDIMENT_S3_SECRET_ACCESS_KEY",
                ))
            }
        };
        // Accepted with or without slashes around it; kept as a folder (`a/b/`).
        let root_prefix = match get("S3_PREFIX").map(|p| p.trim_matches('/')).filter(|p| !p.is_empty()) {
            Some(prefix) => {
                if crate::files::validate_key(prefix).is_err() {
                    return Err(invalid(
                        "S3_PREFIX",
                        "must be a plain path: no empty, '.' or '..' segment, backslash or control character",
                    ));
                }
                format!("{prefix}/")
            }
            None => String::new(),
        };
        let mut s3 = crate::files::S3Settings::new(bucket);
        s3.endpoint = endpoint.map(str::to_owned);
        s3.region = get("S3_REGION").unwrap_or(&s3.region).to_owned();
        s3.force_path_style = parse(vars, "S3_PATH_STYLE", true)?;
        s3.credentials = credentials;
        s3.root_prefix = root_prefix;
        Ok(Self::S3(s3))
    }
}

/// A secret setting (an API key): its value never shows in `Debug` output, so settings can be
/// logged whole.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for handing to the client that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub deployment: Deployment,
    pub embedding: EmbeddingSettings,
    pub extract: ExtractSettings,
    /// The LLM endpoint; `None` (no `SEDIMENT_LLM_URL`) runs the rules engines.
    pub llm: Option<LlmSettings>,
    pub recall: RecallSettings,
    pub index: IndexBackend,
    /// API key of the Qdrant server (`SEDIMENT_QDRANT_API_KEY`), if it requires one.
    pub qdrant_api_key: Option<Secret>,
    /// Where the API listens.
    pub listen: SocketAddr,
    /// Where the API serves `/healthz`, `/readyz` and `/metrics` instead, when set
    /// (`SEDIMENT_HEALTH_LISTEN`): probes and scrapes then never share the tenants' address.
    pub health_listen: Option<SocketAddr>,
    /// Names of the exchange and queues (`{prefix}.events`, `{prefix}.index`, ...).
    pub amqp_prefix: String,
    /// Postgres pool size.
    pub db_pool_size: usize,
    /// Upserts between two index optimizations.
    pub index_optimize_every: usize,
    /// MB the Qdrant Edge index keeps free on its volume (`SEDIMENT_INDEX_MIN_FREE_MB`); 0: off.
    pub index_min_free_mb: u64,
    /// Nice value (0 to 19) of the embedded index's writes and optimizer runs; 0 gives them the
    /// priority of requests.
    pub index_nice: i32,
    /// Cgroup directory the embedded index's write threads join (Linux), if any.
    pub index_cgroup: Option<PathBuf>,
    /// Cgroup directory its optimizer threads join; `index_cgroup` when unset.
    pub index_optimizer_cgroup: Option<PathBuf>,
    pub limits: Limits,
    pub worker: WorkerSettings,
    /// How long shutdown may spend draining in-flight work.
    pub shutdown_deadline: Duration,
    /// Default `tracing` filter when `RUST_LOG` is unset.
    pub log_filter: String,
    /// `text` or `json`.
    pub log_format: String,
    /// Trace export over OTLP (`SEDIMENT_OTLP_*`).
    pub traces: TraceSettings,
    /// Session context: truncation, summary reuse and compaction (`SEDIMENT_CONTEXT_*`,
    /// `SEDIMENT_COMPACTION_*`).
    pub context: crate::context::ContextSettings,
    /// Access to the API's ops page (`SEDIMENT_OPS_*`).
    pub ops: OpsSettings,
    /// Who may call `/v1` (`SEDIMENT_AUTH`, `SEDIMENT_ADMIN_KEY[_FILE]`).
    pub auth: AuthSettings,
    /// The file store (`SEDIMENT_S3_*`, `SEDIMENT_FILES_DIR`).
    pub files: FileStoreSettings,
    /// L2 scenes and the L3 persona (`SEDIMENT_LAYERS`, `SEDIMENT_SCENE_*`,
    /// `SEDIMENT_PERSONA_*`).
    pub layers: LayerSettings,
}

/// L2 scenes and the L3 persona.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSettings {
    /// Build scenes and persona at all (`SEDIMENT_LAYERS`, default on); needs L1 extraction.
    pub enabled: bool,
    pub scene: crate::scene::run::SceneSettings,
    pub persona: crate::persona::build::PersonaSettings,
}

impl LayerSettings {
    fn from_map(vars: &HashMap<String, String>, extract: bool) -> Result<Self, ConfigError> {
        let timer = crate::scene::timer::SceneTimerSettings {
            after_l1: millis(vars, "SCENE_AFTER_L1_MS", 90_000)?,
            min_gap: millis(vars, "SCENE_MIN_GAP_MS", 900_000)?,
            max_wait: millis(vars, "SCENE_MAX_WAIT_MS", 3_600_000)?,
        };
        if timer.max_wait < timer.after_l1 {
            return Err(invalid(
                "SCENE_MAX_WAIT_MS",
                "must be at least SEDIMENT_SCENE_AFTER_L1_MS",
            ));
        }
        let cap: usize = positive(vars, "SCENE_CAP", crate::scene::cap::DEFAULT_CAP)?;
        if cap < crate::scene::cap::MIN_CAP {
            return Err(invalid(
                "SCENE_CAP",
                format!("must be at least {}", crate::scene::cap::MIN_CAP),
            ));
        }
        let scene = crate::scene::run::SceneSettings {
            cap,
            timer,
            lease: millis(vars, "SCENE_LEASE_MS", 30_000)?,
            max_steps: positive(vars, "SCENE_MAX_STEPS", 8)?,
            max_memories: positive(vars, "SCENE_MAX_MEMORIES", 200)?,
            retry_after: millis(vars, "SCENE_RETRY_MS", 120_000)?,
            ..crate::scene::run::SceneSettings::default()
        };
        let persona = crate::persona::build::PersonaSettings {
            trigger: crate::persona::trigger::PersonaTriggerSettings {
                memory_threshold: positive(vars, "PERSONA_MEMORY_THRESHOLD", 20)?,
            },
            lease: millis(vars, "PERSONA_LEASE_MS", 30_000)?,
            ..crate::persona::build::PersonaSettings::default()
        };
        // Scenes are built from memories: without extraction there is nothing to build.
        Ok(Self {
            enabled: parse(vars, "LAYERS", true)? && extract,
            scene,
            persona,
        })
    }
}

impl Settings {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        let vars: HashMap<String, String> = std::env::vars()
            .filter_map(|(k, v)| k.strip_prefix(ENV_PREFIX).map(|k| (k.to_owned(), v)))
            .collect();
        Self::from_map(&vars)
    }

    /// Builds settings from `KEY -> value` pairs (keys without the `SEDIMENT_` prefix).
    /// Unknown keys are ignored; every known key is validated.
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let get = |key: &str| vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let data_dir = PathBuf::from(get("DATA_DIR").unwrap_or("./data"));

        let deployment = match (get("DATABASE_URL"), get("AMQP_URL")) {
            (None, None) => Deployment::Embedded {
                data_dir: data_dir.clone(),
            },
            (Some(db), Some(amqp)) => {
                if !(db.starts_with("postgres://") || db.starts_with("postgresql://")) {
                    return Err(invalid("DATABASE_URL", "must start with postgres://"));
                }
                if !(amqp.starts_with("amqp://") || amqp.starts_with("amqps://")) {
                    return Err(invalid("AMQP_URL", "must start with amqp://"));
                }
                Deployment::Cluster {
                    database_url: db.to_owned(),
                    amqp_url: amqp.to_owned(),
                }
            }
            (Some(_), None) => {
                return Err(invalid(
                    "AMQP_URL",
                    "must be set with SEDIMENT_DATABASE_URL (cluster deployment)",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "DATABASE_URL",
                    "must be set with SEDIMENT_AMQP_URL (cluster deployment)",
                ))
            }
        };

        let index = match get("QDRANT_URL") {
            Some(url) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid("QDRANT_URL", "must start with http:// or https://"));
                }
                IndexBackend::Qdrant {
                    url: url.to_owned(),
                    collection: get("QDRANT_COLLECTION").unwrap_or("sediment").to_owned(),
                }
            }
            None => IndexBackend::Edge {
                dir: get("INDEX_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| data_dir.join("index")),
            },
        };

        let files = FileStoreSettings::from_map(vars, &data_dir, matches!(deployment, Deployment::Cluster { .. }))?;

        let amqp_prefix = get("AMQP_PREFIX").unwrap_or("sediment").to_owned();
        if !amqp_prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Err(invalid(
                "AMQP_PREFIX",
                "may hold only ASCII letters, digits, '.', '-' and '_'",
            ));
        }

        let model_dir = get("MODEL_DIR").map(PathBuf::from).unwrap_or_else(default_model_dir);
        let embedding = match get("EMBEDDING").unwrap_or("auto") {
            "auto" => EmbeddingSettings::Auto { model_dir },
            "none" => EmbeddingSettings::None,
            "local" => EmbeddingSettings::Local { model_dir },
            "openai" => {
                let Some(url) = get("EMBEDDING_URL") else {
                    return Err(invalid("EMBEDDING_URL", "must be set when SEDIMENT_EMBEDDING=openai"));
                };
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid("EMBEDDING_URL", "must start with http:// or https://"));
                }
                EmbeddingSettings::OpenAi {
                    url: url.to_owned(),
                    model: get("EMBEDDING_MODEL").unwrap_or("text-embedding-3-small").to_owned(),
                    api_key: get("EMBEDDING_API_KEY").map(Secret::new),
                    dimension: match get("EMBEDDING_DIMENSION") {
                        Some(_) => Some(positive(vars, "EMBEDDING_DIMENSION", 1)?),
                        None => None,
                    },
                    batch_size: positive(vars, "EMBEDDING_BATCH_SIZE", 64)?,
                    timeout: millis(vars, "EMBEDDING_TIMEOUT_MS", 10_000)?,
                    max_retries: parse(vars, "EMBEDDING_MAX_RETRIES", 3)?,
                }
            }
            _ => return Err(invalid("EMBEDDING", "must be auto, none, local or openai")),
        };

        let llm = match get("LLM_URL") {
            Some(url) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid("LLM_URL", "must start with http:// or https://"));
                }
                let Some(model) = get("LLM_MODEL") else {
                    return Err(invalid("LLM_MODEL", "must be set when SEDIMENT_LLM_URL is set"));
                };
                Some(LlmSettings {
                    url: url.to_owned(),
                    model: model.to_owned(),
                    api_key: get("LLM_API_KEY").map(Secret::new),
                    timeout: millis(vars, "LLM_TIMEOUT_MS", 60_000)?,
                    max_retries: parse(vars, "LLM_MAX_RETRIES", 2)?,
                    prompts_dir: get("PROMPTS_DIR").map(PathBuf::from),
                })
            }
            None => {
                // Settings that only mean something with an endpoint are a half-done LLM set-up:
                // running the rules engines instead would hide the mistake.
                for key in ["LLM_MODEL", "LLM_API_KEY", "PROMPTS_DIR"] {
                    if get(key).is_some() {
                        return Err(invalid("LLM_URL", format!("must be set when SEDIMENT_{key} is set")));
                    }
                }
                None
            }
        };

        let extract = ExtractSettings {
            enabled: parse(vars, "EXTRACT", true)?,
            pipeline: crate::memory::pipeline::PipelineSettings {
                batch_turns: positive(vars, "EXTRACT_BATCH_TURNS", 10)?,
                context_turns: parse(vars, "EXTRACT_CONTEXT_TURNS", 5)?,
                candidates: parse(vars, "EXTRACT_CANDIDATES", 5)?,
            },
            schedule: crate::memory::schedule::ScheduleSettings {
                steady_every: positive(vars, "EXTRACT_EVERY", 5)?,
                idle_flush: millis(vars, "EXTRACT_IDLE_FLUSH_MS", 60_000)?,
                lease: millis(vars, "EXTRACT_LEASE_MS", 30_000)?,
            },
        };

        let recall = RecallSettings {
            default_limit: positive(vars, "RECALL_LIMIT", 10)?,
            item_chars: positive(vars, "RECALL_ITEM_CHARS", 1_000)?,
            total_chars: positive(vars, "RECALL_TOTAL_CHARS", 6_000)?,
            timeout: millis(vars, "RECALL_TIMEOUT_MS", 5_000)?,
            fusion: crate::index::Fusion {
                keyword_prefetch: positive(vars, "FUSION_KEYWORD_PREFETCH", 50)?,
                semantic_prefetch: positive(vars, "FUSION_SEMANTIC_PREFETCH", 50)?,
                rrf_k: positive(vars, "FUSION_RRF_K", 60)?,
                weights: None,
            },
            recency: parse(vars, "RECALL_RECENCY", false)?,
            memory_weight: {
                let weight: f32 = parse(vars, "RECALL_MEMORY_WEIGHT", crate::recall::DEFAULT_MEMORY_WEIGHT)?;
                if !(weight.is_finite() && weight >= 0.0) {
                    return Err(invalid("RECALL_MEMORY_WEIGHT", "must be a number, 0 or more"));
                }
                weight
            },
            // About 5.6 MB at most with 384 dimensions; a hit saves a query's embedding.
            query_vector_cache: parse(vars, "QUERY_VECTOR_CACHE", 1_024)?,
        };

        let layers = LayerSettings::from_map(vars, extract.enabled)?;
        Ok(Self {
            deployment,
            embedding,
            llm,
            extract,
            recall,
            index,
            qdrant_api_key: get("QDRANT_API_KEY").map(Secret::new),
            listen: parse(vars, "LISTEN", "127.0.0.1:8080".parse().expect("valid default"))?,
            health_listen: match get("HEALTH_LISTEN") {
                Some(addr) => Some(
                    addr.parse()
                        .map_err(|e| invalid("HEALTH_LISTEN", format!("not an address: {e}")))?,
                ),
                None => None,
            },
            amqp_prefix,
            db_pool_size: positive(vars, "DB_POOL_SIZE", 16)?,
            index_optimize_every: positive(vars, "INDEX_OPTIMIZE_EVERY", 5_000)?,
            index_min_free_mb: parse(vars, "INDEX_MIN_FREE_MB", crate::index::DEFAULT_MIN_FREE_MB)?,
            index_nice: nice(vars, "INDEX_NICE", DEFAULT_BACKGROUND_NICE)?,
            index_cgroup: get("INDEX_CGROUP").map(PathBuf::from),
            index_optimizer_cgroup: get("INDEX_OPTIMIZER_CGROUP").or(get("INDEX_CGROUP")).map(PathBuf::from),
            limits: Limits {
                max_body_bytes: positive(vars, "MAX_BODY_BYTES", 1024 * 1024)?,
                // About 400k turns of chat; the import holds the parsed stream in memory.
                max_import_bytes: positive(vars, "MAX_IMPORT_BYTES", 256 * 1024 * 1024)?,
                max_turns_per_request: positive(vars, "MAX_TURNS_PER_REQUEST", 1_000)?,
                max_search_limit: positive(vars, "MAX_SEARCH_LIMIT", 100)?,
                max_list_limit: positive(vars, "MAX_LIST_LIMIT", 1_000)?,
                rate_limit: match parse::<u32>(vars, "RATE_LIMIT_RPS", 0)? {
                    0 => None,
                    per_second => Some(RateLimit {
                        per_second,
                        burst: positive(vars, "RATE_LIMIT_BURST", per_second.saturating_mul(2))?,
                    }),
                },
                turn_quota: match parse::<u64>(vars, "QUOTA_TURNS", 0)? {
                    0 => None,
                    max_turns => Some(TurnQuota {
                        max_turns,
                        refresh: millis(vars, "QUOTA_REFRESH_MS", 5_000)?,
                    }),
                },
            },
            worker: WorkerSettings {
                prefetch: positive(vars, "WORKER_PREFETCH", 32)?,
                batch_size: positive(vars, "WORKER_BATCH_SIZE", 1_000)?,
                index_sync_interval: millis(
                    vars,
                    "INDEX_SYNC_INTERVAL_MS",
                    crate::indexer::DEFAULT_SYNC_INTERVAL.as_millis() as u64,
                )?,
                sweep_interval: millis(vars, "WORKER_SWEEP_INTERVAL_MS", 30_000)?,
                health_listen: parse(
                    vars,
                    "WORKER_HEALTH_LISTEN",
                    "127.0.0.1:9090".parse().expect("valid default"),
                )?,
                max_attempts: positive(vars, "WORKER_MAX_ATTEMPTS", 5)?,
                retry_delay: millis(vars, "WORKER_RETRY_DELAY_MS", 1_000)?,
                queue_limit: positive(vars, "WORKER_QUEUE_LIMIT", crate::bus::LOCAL_QUEUE_LIMIT)?,
            },
            shutdown_deadline: millis(vars, "SHUTDOWN_DEADLINE_MS", 8_000)?,
            log_filter: get("LOG").unwrap_or("info").to_owned(),
            log_format: match get("LOG_FORMAT").unwrap_or("text") {
                f @ ("text" | "json") => f.to_owned(),
                _ => return Err(invalid("LOG_FORMAT", "must be text or json")),
            },
            traces: TraceSettings::from_map(vars)?,
            context: crate::context::ContextSettings::from_map(vars)?,
            ops: OpsSettings::from_map(vars)?,
            auth: AuthSettings::from_map(vars)?,
            files,
            layers,
        })
    }

    /// The data directory of the embedded deployment, if this is one.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        match &self.deployment {
            Deployment::Embedded { data_dir } => Some(data_dir),
            Deployment::Cluster { .. } => None,
        }
    }
}

/// `~/.cache/sediment/models/all-MiniLM-L6-v2`, where `api/fetch-model.sh` installs the model.
fn default_model_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/sediment/models/all-MiniLM-L6-v2")
}

fn parse<T: std::str::FromStr>(vars: &HashMap<String, String>, key: &str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|e| invalid(key, format!("{v:?} is not valid: {e}"))),
    }
}

fn positive<T>(vars: &HashMap<String, String>, key: &str, default: T) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + Default,
    T::Err: std::fmt::Display,
{
    let value = parse(vars, key, default)?;
    if value <= T::default() {
        return Err(invalid(key, "must be greater than zero"));
    }
    Ok(value)
}

/// A nice value a thread may give itself without privileges: 0 (normal) to 19 (lowest).
fn nice(vars: &HashMap<String, String>, key: &str, default: i32) -> Result<i32, ConfigError> {
    let value = parse(vars, key, default)?;
    if !(0..=crate::background::MAX_NICE).contains(&value) {
        return Err(invalid(
            key,
            format!("{value} is not a nice value from 0 to {}", crate::background::MAX_NICE),
        ));
    }
    Ok(value)
}

fn millis(vars: &HashMap<String, String>, key: &str, default: u64) -> Result<Duration, ConfigError> {
    positive(vars, key, default).map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn no_urls_means_embedded_with_defaults() {
        let s = Settings::from_map(&HashMap::new()).unwrap();
        assert_eq!(
            s.deployment,
            Deployment::Embedded {
                data_dir: "./data".into()
            }
        );
        assert_eq!(
            s.index,
            IndexBackend::Edge {
                dir: "./data/index".into()
            }
        );
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.limits.max_body_bytes, 1024 * 1024);
        assert_eq!(s.limits.max_turns_per_request, 1_000);
    }

    #[test]
    fn index_min_free_defaults_to_the_reserve_and_zero_turns_it_off() {
        let min_free = |v: &str| Settings::from_map(&map(&[("INDEX_MIN_FREE_MB", v)])).map(|s| s.index_min_free_mb);
        assert_eq!(
            Settings::from_map(&HashMap::new()).unwrap().index_min_free_mb,
            crate::index::DEFAULT_MIN_FREE_MB
        );
        assert_eq!(min_free("0").unwrap(), 0);
        assert_eq!(min_free("512").unwrap(), 512);
        assert!(min_free("-1").is_err());
        assert!(min_free("lots").is_err());
    }

    #[test]
    fn index_nice_is_a_nice_value() {
        let nice = |v: &str| Settings::from_map(&map(&[("INDEX_NICE", v)])).map(|s| s.index_nice);
        assert_eq!(Settings::from_map(&HashMap::new()).unwrap().index_nice, 10);
        assert_eq!(nice("0").unwrap(), 0);
        assert_eq!(nice("19").unwrap(), 19);
        for bad in ["20", "-1", "low"] {
            let err = nice(bad).unwrap_err().to_string();
            assert!(err.starts_with("SEDIMENT_INDEX_NICE"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_optimizer_joins_the_index_cgroup_unless_it_has_its_own() {
        let cgroups = |pairs: &[(&str, &str)]| {
            let s = Settings::from_map(&map(pairs)).unwrap();
            (s.index_cgroup, s.index_optimizer_cgroup)
        };
        assert_eq!(cgroups(&[]), (None, None));
        assert_eq!(cgroups(&[("INDEX_CGROUP", " ")]), (None, None));
        let index = Some(PathBuf::from("/sys/fs/cgroup/cpu/index"));
        assert_eq!(
            cgroups(&[("INDEX_CGROUP", "/sys/fs/cgroup/cpu/index")]),
            (index.clone(), index.clone())
        );
        let optimizer = Some(PathBuf::from("/sys/fs/cgroup/cpu/optimizer"));
        assert_eq!(
            cgroups(&[("INDEX_OPTIMIZER_CGROUP", "/sys/fs/cgroup/cpu/optimizer")]),
            (None, optimizer.clone())
        );
        assert_eq!(
            cgroups(&[
                ("INDEX_CGROUP", "/sys/fs/cgroup/cpu/index"),
                ("INDEX_OPTIMIZER_CGROUP", "/sys/fs/cgroup/cpu/optimizer")
            ]),
            (index, optimizer)
        );
    }

    #[test]
    fn cluster_needs_both_urls() {
        let err = Settings::from_map(&map(&[("DATABASE_URL", "postgres://x")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_AMQP_URL"), "{err}");
        let s = Settings::from_map(&map(&[("DATABASE_URL", "postgres://x"), ("AMQP_URL", "amqp://y")])).unwrap();
        assert!(matches!(s.deployment, Deployment::Cluster { .. }));
    }

    #[test]
    fn qdrant_api_key_is_read_and_never_printed() {
        let s = Settings::from_map(&map(&[
            ("QDRANT_URL", "http://qdrant:6334"),
            ("QDRANT_API_KEY", "hunter2-key"),
        ]))
        .unwrap();
        assert_eq!(s.qdrant_api_key.as_ref().map(Secret::expose), Some("hunter2-key"));
        let printed = format!("{s:?} {s:#?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("redacted"), "{printed}");
        assert_eq!(Settings::from_map(&HashMap::new()).unwrap().qdrant_api_key, None);
    }

    #[test]
    fn embedding_provider_is_chosen_and_validated() {
        let auto = Settings::from_map(&HashMap::new()).unwrap();
        assert!(
            matches!(&auto.embedding, EmbeddingSettings::Auto { model_dir } if model_dir.ends_with("all-MiniLM-L6-v2"))
        );
        let none = Settings::from_map(&map(&[("EMBEDDING", "none")])).unwrap();
        assert_eq!(none.embedding, EmbeddingSettings::None);
        let err = Settings::from_map(&map(&[("EMBEDDING", "openai")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_EMBEDDING_URL"), "{err}");
        let openai = Settings::from_map(&map(&[
            ("EMBEDDING", "openai"),
            ("EMBEDDING_URL", "http://tei:8080/v1"),
            ("EMBEDDING_API_KEY", "sk-secret"),
            ("EMBEDDING_DIMENSION", "768"),
        ]))
        .unwrap();
        let EmbeddingSettings::OpenAi { dimension, .. } = &openai.embedding else {
            panic!("{:?}", openai.embedding);
        };
        assert_eq!(*dimension, Some(768));
        assert!(!format!("{openai:?}").contains("sk-secret"));
        let err = Settings::from_map(&map(&[("EMBEDDING", "bert")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_EMBEDDING"), "{err}");
        assert_eq!(auto.recall.fusion.rrf_k, 60);
        assert_eq!(auto.recall.timeout, Duration::from_secs(5));
    }

    #[test]
    fn turn_quotas_are_off_unless_set() {
        assert_eq!(Settings::from_map(&HashMap::new()).unwrap().limits.turn_quota, None);
        let on = Settings::from_map(&map(&[("QUOTA_TURNS", "1000")])).unwrap();
        assert_eq!(
            on.limits.turn_quota,
            Some(TurnQuota {
                max_turns: 1000,
                refresh: Duration::from_secs(5)
            })
        );
        assert!(Settings::from_map(&map(&[("QUOTA_TURNS", "lots")])).is_err());
    }

    #[test]
    fn rate_limits_are_off_unless_set() {
        assert_eq!(Settings::from_map(&HashMap::new()).unwrap().limits.rate_limit, None);
        let on = Settings::from_map(&map(&[("RATE_LIMIT_RPS", "50")])).unwrap();
        assert_eq!(
            on.limits.rate_limit,
            Some(RateLimit {
                per_second: 50,
                burst: 100
            })
        );
        let burst = Settings::from_map(&map(&[("RATE_LIMIT_RPS", "5"), ("RATE_LIMIT_BURST", "7")])).unwrap();
        assert_eq!(burst.limits.rate_limit.map(|r| r.burst), Some(7));
        let err = Settings::from_map(&map(&[("RATE_LIMIT_RPS", "fast")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_RATE_LIMIT_RPS"), "{err}");
    }

    #[test]
    fn auth_settings_are_read_and_validated() {
        let default = Settings::from_map(&HashMap::new()).unwrap().auth;
        assert_eq!(default.mode, AuthMode::Auto);
        assert_eq!(default.admin_key, None);
        assert_eq!(default.key_cache_ttl, Duration::from_secs(10));
        let admin = "a".repeat(MIN_ADMIN_KEY_CHARS);
        let on = Settings::from_map(&map(&[("AUTH", "on"), ("ADMIN_KEY", &admin)])).unwrap();
        assert_eq!(on.auth.mode, AuthMode::On);
        assert_eq!(on.auth.admin_key.as_ref().map(Secret::expose), Some(admin.as_str()));
        assert!(
            !format!("{on:?}").contains(&admin),
            "the admin key never shows in Debug"
        );
        let err = Settings::from_map(&map(&[("AUTH", "on")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_AUTH"), "{err}");
        let err = Settings::from_map(&map(&[("AUTH", "yes")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_AUTH"), "{err}");
        let err = Settings::from_map(&map(&[("ADMIN_KEY", "short")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_ADMIN_KEY"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admin-key");
        std::fs::write(&file, format!("{admin}\n")).unwrap();
        let path = file.display().to_string();
        let from_file = Settings::from_map(&map(&[("ADMIN_KEY_FILE", &path)])).unwrap();
        assert_eq!(
            from_file.auth.admin_key.as_ref().map(Secret::expose),
            Some(admin.as_str())
        );
        let err = Settings::from_map(&map(&[("ADMIN_KEY_FILE", &path), ("ADMIN_KEY", &admin)])).unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        let missing = dir.path().join("missing").display().to_string();
        let err = Settings::from_map(&map(&[("ADMIN_KEY_FILE", &missing)])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_ADMIN_KEY_FILE"), "{err}");
    }

    #[test]
    fn jwt_settings_need_a_jwks_and_turn_auth_on_alone() {
        assert_eq!(Settings::from_map(&HashMap::new()).unwrap().auth.jwt, None);
        let url = "https://idp.example/.well-known/jwks.json";
        let on = Settings::from_map(&map(&[("AUTH", "on"), ("AUTH_JWKS_URL", url)])).unwrap();
        let jwt = on.auth.jwt.expect("jwt settings");
        assert_eq!(jwt.jwks, JwksSource::Url(url.into()));
        assert_eq!(jwt.refresh, Duration::from_secs(300));
        assert_eq!((jwt.issuer, jwt.audience), (None, None));
        assert_eq!(
            [jwt.team_claim, jwt.agent_claim, jwt.user_claim, jwt.permission_claim],
            ["team", "agent", "user", "permission"]
        );
        assert_eq!(jwt.default_permission, Permission::Write);
        let custom = Settings::from_map(&map(&[
            ("AUTH_JWKS_FILE", "/etc/sediment/jwks.json"),
            ("AUTH_JWT_ISSUER", "https://idp.example"),
            ("AUTH_JWT_AUDIENCE", "sediment"),
            ("AUTH_JWT_TEAM_CLAIM", "org"),
            ("AUTH_JWT_DEFAULT_PERMISSION", "read"),
        ]))
        .unwrap()
        .auth
        .jwt
        .unwrap();
        assert_eq!(custom.jwks, JwksSource::File("/etc/sediment/jwks.json".into()));
        assert_eq!(custom.issuer.as_deref(), Some("https://idp.example"));
        assert_eq!(custom.audience.as_deref(), Some("sediment"));
        assert_eq!(custom.team_claim, "org");
        assert_eq!(custom.default_permission, Permission::Read);
        for bad in [
            vec![("AUTH_JWKS_URL", url), ("AUTH_JWKS_FILE", "/x")],
            vec![("AUTH_JWKS_URL", "ftp://idp.example/jwks")],
            vec![("AUTH_JWKS_URL", url), ("AUTH_JWT_DEFAULT_PERMISSION", "root")],
            vec![("AUTH_JWKS_URL", url), ("AUTH_JWKS_REFRESH_MS", "0")],
        ] {
            let err = Settings::from_map(&map(&bad)).unwrap_err();
            assert!(err.to_string().starts_with("SEDIMENT_AUTH"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn llm_is_off_without_a_url_and_validated_with_one() {
        assert_eq!(Settings::from_map(&HashMap::new()).unwrap().llm, None);
        let s = Settings::from_map(&map(&[
            ("LLM_URL", "http://vllm:8000/v1"),
            ("LLM_MODEL", "qwen2.5-7b-instruct"),
            ("LLM_API_KEY", "sk-llm-secret"),
            ("PROMPTS_DIR", "/etc/sediment/prompts"),
        ]))
        .unwrap();
        assert_eq!(
            s.llm,
            Some(LlmSettings {
                url: "http://vllm:8000/v1".into(),
                model: "qwen2.5-7b-instruct".into(),
                api_key: Some(Secret::new("sk-llm-secret")),
                timeout: Duration::from_secs(60),
                max_retries: 2,
                prompts_dir: Some("/etc/sediment/prompts".into()),
            })
        );
        assert!(!format!("{s:?}").contains("sk-llm-secret"));
        let tuned = Settings::from_map(&map(&[
            ("LLM_URL", "https://api.openai.com/v1"),
            ("LLM_MODEL", "gpt-4o-mini"),
            ("LLM_TIMEOUT_MS", "1500"),
            ("LLM_MAX_RETRIES", "0"),
        ]))
        .unwrap()
        .llm
        .unwrap();
        assert_eq!((tuned.timeout, tuned.max_retries), (Duration::from_millis(1500), 0));
        assert_eq!((tuned.api_key, tuned.prompts_dir), (None, None));
    }

    #[test]
    fn half_configured_llm_is_refused() {
        let cases: [(&[(&str, &str)], &str); 6] = [
            (&[("LLM_URL", "http://vllm:8000/v1")], "SEDIMENT_LLM_MODEL"),
            (&[("LLM_URL", "vllm:8000"), ("LLM_MODEL", "m")], "SEDIMENT_LLM_URL"),
            (&[("LLM_MODEL", "m")], "SEDIMENT_LLM_URL"),
            (&[("LLM_API_KEY", "k")], "SEDIMENT_LLM_URL"),
            (&[("PROMPTS_DIR", "/p")], "SEDIMENT_LLM_URL"),
            (
                &[("LLM_URL", "http://x/v1"), ("LLM_MODEL", "m"), ("LLM_TIMEOUT_MS", "0")],
                "SEDIMENT_LLM_TIMEOUT_MS",
            ),
        ];
        for (vars, key) in cases {
            let err = Settings::from_map(&map(vars)).unwrap_err();
            assert!(err.to_string().starts_with(key), "{vars:?}: {err}");
        }
        let err = Settings::from_map(&map(&[
            ("LLM_URL", "http://x/v1"),
            ("LLM_MODEL", "m"),
            ("LLM_MAX_RETRIES", "-1"),
        ]))
        .unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_LLM_MAX_RETRIES"), "{err}");
    }

    #[test]
    fn ops_page_is_on_for_loopback_by_default_and_tokens_must_be_long() {
        let ops = Settings::from_map(&HashMap::new()).unwrap().ops;
        assert_eq!((ops.enabled, ops.token), (true, None));
        let ops = Settings::from_map(&map(&[("OPS_ENABLED", "false"), ("OPS_TOKEN", "0123456789abcdef")]))
            .unwrap()
            .ops;
        assert!(!ops.enabled);
        assert_eq!(ops.token.as_ref().map(Secret::expose), Some("0123456789abcdef"));
        let err = Settings::from_map(&map(&[("OPS_TOKEN", "short")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_OPS_TOKEN"), "{err}");
        let err = Settings::from_map(&map(&[("OPS_ENABLED", "yes")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_OPS_ENABLED"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = Settings::from_map(&map(&[("MAX_BODY_BYTES", "lots")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_MAX_BODY_BYTES"), "{err}");
        let err = Settings::from_map(&map(&[("WORKER_PREFETCH", "0")])).unwrap_err();
        assert!(err.to_string().contains("greater than zero"), "{err}");
        let err = Settings::from_map(&map(&[("QDRANT_URL", "localhost:6334")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_QDRANT_URL"), "{err}");
    }

    #[test]
    fn traces_are_off_by_default_and_checked_when_set() {
        let traces = Settings::from_map(&map(&[])).unwrap().traces;
        assert_eq!(traces.otlp_endpoint, None);
        assert_eq!(traces.sample_ratio, 1.0);
        let traces = Settings::from_map(&map(&[
            ("OTLP_ENDPOINT", "http://collector:4318"),
            ("TRACE_SAMPLE_RATIO", "0.25"),
        ]))
        .unwrap()
        .traces;
        assert_eq!(traces.otlp_endpoint.as_deref(), Some("http://collector:4318"));
        assert_eq!(traces.sample_ratio, 0.25);
        for (key, value) in [
            ("OTLP_ENDPOINT", "collector:4318"),
            ("OTLP_PROTOCOL", "grpc"),
            ("TRACE_SAMPLE_RATIO", "1.5"),
        ] {
            let err = Settings::from_map(&map(&[(key, value)])).unwrap_err();
            assert!(err.to_string().starts_with(&format!("SEDIMENT_{key}")), "{err}");
        }
    }

    #[test]
    fn files_are_local_by_default_and_in_s3_with_a_bucket() {
        let embedded = Settings::from_map(&map(&[("DATA_DIR", "/var/lib/sediment")])).unwrap();
        assert_eq!(
            embedded.files,
            FileStoreSettings::Local {
                root: "/var/lib/sediment/files".into()
            }
        );
        let cluster = [("DATABASE_URL", "postgres://x"), ("AMQP_URL", "amqp://y")];
        let s = Settings::from_map(&map(&cluster)).unwrap();
        assert_eq!(
            s.files,
            FileStoreSettings::Local {
                root: "./data/files".into()
            }
        );
        let s = Settings::from_map(&map(&[cluster[0], cluster[1], ("FILES_DIR", "/mnt/files")])).unwrap();
        assert_eq!(
            s.files,
            FileStoreSettings::Local {
                root: "/mnt/files".into()
            }
        );

        let s = Settings::from_map(&map(&[("S3_BUCKET", "sediment-files")])).unwrap();
        let FileStoreSettings::S3(s3) = &s.files else {
            panic!("{:?}", s.files);
        };
        assert_eq!(s3, &crate::files::S3Settings::new("sediment-files"));
        assert_eq!(
            (s3.region.as_str(), s3.force_path_style, s3.endpoint.as_deref()),
            ("us-east-1", true, None)
        );

        let s = Settings::from_map(&map(&[
            ("S3_BUCKET", "memory-1250000000"),
            ("S3_ENDPOINT", "https://cos.ap-beijing.myqcloud.com"),
            ("S3_REGION", "ap-beijing"),
            ("S3_PATH_STYLE", "false"),
            ("S3_ACCESS_KEY_ID", "AKIDEXAMPLE"),
            ("S3_SECRET_ACCESS_KEY", "s3-hunter2-secret"),
            ("S3_PREFIX", "/prod/sediment/"),
        ]))
        .unwrap();
        let FileStoreSettings::S3(s3) = &s.files else {
            panic!("{:?}", s.files);
        };
        assert_eq!(s3.endpoint.as_deref(), Some("https://cos.ap-beijing.myqcloud.com"));
        assert_eq!((s3.region.as_str(), s3.force_path_style), ("ap-beijing", false));
        assert_eq!(s3.root_prefix, "prod/sediment/");
        let credentials = s3.credentials.as_ref().unwrap();
        assert_eq!(credentials.access_key_id, "AKIDEXAMPLE");
        assert_eq!(credentials.secret_access_key.expose(), "s3-hunter2-secret");
        let printed = format!("{s:?} {s:#?}");
        assert!(!printed.contains("hunter2"), "{printed}");
    }

    #[test]
    fn half_configured_s3_is_refused() {
        let cases: [(&[(&str, &str)], &str); 8] = [
            (&[("S3_ENDPOINT", "http://minio:9000")], "SEDIMENT_S3_BUCKET"),
            (&[("S3_PREFIX", "x")], "SEDIMENT_S3_BUCKET"),
            (&[("S3_BUCKET", "ab")], "SEDIMENT_S3_BUCKET"),
            (&[("S3_BUCKET", "Upper_Case")], "SEDIMENT_S3_BUCKET"),
            (
                &[("S3_BUCKET", "bkt"), ("S3_ENDPOINT", "minio:9000")],
                "SEDIMENT_S3_ENDPOINT",
            ),
            (
                &[("S3_BUCKET", "bkt"), ("S3_ACCESS_KEY_ID", "id")],
                "SEDIMENT_S3_SECRET_ACCESS_KEY",
            ),
            (
                &[("S3_BUCKET", "bkt"), ("S3_SECRET_ACCESS_KEY", "k")],
                "SEDIMENT_S3_ACCESS_KEY_ID",
            ),
            (&[("S3_BUCKET", "bkt"), ("S3_PREFIX", "a/../b")], "SEDIMENT_S3_PREFIX"),
        ];
        for (vars, key) in cases {
            let err = Settings::from_map(&map(vars)).unwrap_err();
            assert!(err.to_string().starts_with(key), "{vars:?}: {err}");
        }
        let err = Settings::from_map(&map(&[("S3_BUCKET", "bkt"), ("S3_PATH_STYLE", "maybe")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_S3_PATH_STYLE"), "{err}");
    }
}
