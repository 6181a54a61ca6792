//! Persona builds: decide whether an owner's persona needs one (`trigger::decide`), hold the
//! owner's persona lease, build (LLM or rules), write the document, commit the row.
//!
//! Each build writes a new object (`paths::persona_build_key`: version and lease token in the
//! name), and the row names the current one; so a stale builder that lost its lease can never
//! overwrite the persona that a newer build committed, and readers never see a half-written
//! persona.
//!
//! The lease is short (`SEDIMENT_PERSONA_LEASE_MS`, 30 s) and renewed every third of it while
//! the build works, so a builder that dies (SIGKILL, OOM) holds its owner one lease at most,
//! not as long as the slowest build might take; a build itself may last up to
//! [`MAX_BUILD`]. A build that finds its lease taken goes on to its commit, which is fenced by
//! the token and fails, and removes its object.
//!
//! Secrets: the LLM engine's brief is masked (`memory::redact`) before it is sent, though its
//! scenes and memories were stored masked already, and the persona it writes is masked before
//! it is parsed, so a secret the model makes up or repeats is never stored.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use super::doc::PersonaDoc;
use super::rules::build_persona;
use super::trigger::{decide, PersonaState, PersonaTrigger, PersonaTriggerSettings};
use crate::bus::{Event, WorkerKind};
use crate::domain::Tenant;
use crate::files::{FileError, FileStore};
use crate::lease;
use crate::llm::{trace, CallLabels, ChatClient, Message, Prompts, TemplateId};
use crate::memory::redact::{count_masked, redact, redact_json};
use crate::memory::{Category, EngineError, EngineRun, Memory, MemoryStatus, TemplateRef};
use crate::metrics;
use crate::runtime::{error_chain, Handler, HandlerError};
use crate::scene::doc::SceneDoc;
use crate::scene::paths;
use crate::store::memory::{MemoryFilter, MemoryStore};
use crate::store::scene::{ArtifactProvenance, PersonaCommit, PersonaRow, SceneStore, LAYER_L3};
use crate::store::StoreError;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq)]
pub struct PersonaSettings {
    pub trigger: PersonaTriggerSettings,
    /// How long a build holds its owner without renewing; it renews every third of it.
    pub lease: Duration,
    /// Most memories of each persona-relevant category given to one build.
    pub max_memories: u32,
}

impl Default for PersonaSettings {
    fn default() -> Self {
        Self {
            trigger: PersonaTriggerSettings::default(),
            lease: Duration::from_secs(30),
            max_memories: 100,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PersonaError {
    #[error("store failed")]
    Store(#[from] StoreError),
    #[error("file store failed")]
    Files(#[from] FileError),
    #[error("persona engine failed")]
    Engine(#[from] EngineError),
    #[error("the build produced an empty persona; the current one is kept")]
    Empty,
    #[error("the build took longer than its limit ({MAX_BUILD:?}); the current persona is kept")]
    Deadline,
}

impl PersonaError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::Files(e) => e.is_retryable(),
            Self::Engine(EngineError::Unavailable(_) | EngineError::Malformed(_)) | Self::Deadline => true,
            Self::Engine(EngineError::Rejected(_)) | Self::Empty => false,
        }
    }
}

/// What a build is given.
#[derive(Debug, Clone)]
pub struct PersonaInput {
    /// The current persona (incremental builds only).
    pub current: Option<PersonaDoc>,
    /// All active scenes (first build, self-heal) or only those changed since the last build.
    pub scenes: Vec<SceneDoc>,
    /// The owner's persona, instruction and work-method memories, highest priority first.
    pub memories: Vec<Memory>,
    pub trigger: PersonaTrigger,
}

/// Builds a persona document.
#[async_trait]
pub trait PersonaEngine: Send + Sync + 'static {
    fn mode(&self) -> &'static str;
    async fn build(&self, tenant: &Tenant, input: &PersonaInput) -> Result<(PersonaDoc, EngineRun), EngineError>;
}

/// Rules mode: aggregates memories and scene bullets into the four layers.
#[derive(Debug, Clone, Default)]
pub struct RulesPersonaEngine;

/// The rules engine's version, recorded in provenance.
pub const RULES_VERSION: &str = "1";

#[async_trait]
impl PersonaEngine for RulesPersonaEngine {
    fn mode(&self) -> &'static str {
        "rules"
    }

    async fn build(&self, _tenant: &Tenant, input: &PersonaInput) -> Result<(PersonaDoc, EngineRun), EngineError> {
        let doc = build_persona(input.current.as_ref(), &input.memories, &input.scenes);
        let run = EngineRun {
            template: TemplateRef {
                id: "l3-persona-rules".into(),
                version: RULES_VERSION.into(),
                source: "rules".into(),
                hash: String::new(),
            },
            model: "rules".into(),
        };
        Ok((doc, run))
    }
}

/// The redaction metric's label for the persona.
const STAGE: &str = "persona";

/// The LLM persona engine, under the effective `l3-persona` template. The answer is
/// `{"persona": "<markdown>"}`; the Markdown must parse into the four layers.
#[derive(Debug, Clone)]
pub struct LlmPersonaEngine {
    chat: Arc<ChatClient>,
    prompts: Prompts,
}

impl LlmPersonaEngine {
    pub fn new(chat: Arc<ChatClient>, prompts: Prompts) -> Self {
        Self { chat, prompts }
    }
}

#[async_trait]
impl PersonaEngine for LlmPersonaEngine {
    fn mode(&self) -> &'static str {
        "llm"
    }

    async fn build(&self, tenant: &Tenant, input: &PersonaInput) -> Result<(PersonaDoc, EngineRun), EngineError> {
        let template = self
            .prompts
            .effective(TemplateId::L3Persona, tenant)
            .await
            .map_err(|e| EngineError::Unavailable(Box::new(e)))?;
        let run = EngineRun {
            template: template.template,
            model: self.chat.model().to_owned(),
        };
        let mode = if input.current.is_some() {
            "incremental"
        } else {
            "first"
        };
        let mut brief = json!({
            "mode": mode,
            "trigger": input.trigger.as_str(),
            "current_persona": input.current.as_ref().map(PersonaDoc::render),
            "scenes": input.scenes.iter().map(SceneDoc::render).collect::<Vec<_>>(),
            "memories": input.memories.iter().map(|m| json!({
                "category": m.category.as_str(),
                "priority": m.priority,
                "content": m.content,
            })).collect::<Vec<_>>(),
        });
        count_masked(STAGE, "input", redact_json(&mut brief));
        let labels = CallLabels::new(trace::L3_PERSONA, tenant, None);
        let messages = vec![Message::system(template.text), Message::user(brief.to_string())];
        let reply = self.chat.complete_json(&labels, messages, parse_persona).await?;
        Ok((reply.value, run))
    }
}

fn parse_persona(value: Value) -> Result<PersonaDoc, String> {
    let Some(markdown) = value.get("persona").and_then(Value::as_str) else {
        return Err("expected {\"persona\": \"<the whole persona as Markdown>\"}".into());
    };
    let redacted = redact(markdown);
    count_masked(STAGE, "output", redacted.count);
    let doc = PersonaDoc::parse(&redacted.text).map_err(|e| format!("persona: {e}"))?;
    if doc.is_empty() {
        return Err("persona: every section is empty; keep what the current persona says and add to it".into());
    }
    Ok(doc)
}

/// What [`PersonaBuilder::check`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildOutcome {
    /// No trigger fired.
    NotNeeded,
    /// Another build holds the owner.
    Busy,
    /// A new persona version was committed.
    Built { version: i64, trigger: PersonaTrigger },
    /// The lease was lost before the commit.
    LeaseLost,
}

/// Evaluates an owner's persona triggers and builds when one fires.
#[derive(Clone)]
pub struct PersonaBuilder {
    memories: Arc<dyn MemoryStore>,
    scenes: Arc<dyn SceneStore>,
    files: Arc<dyn FileStore>,
    engine: Arc<dyn PersonaEngine>,
    settings: PersonaSettings,
    /// The persona sweep's position in the owner list (it pages through all owners).
    sweep_after: Arc<tokio::sync::Mutex<Option<Tenant>>>,
}

/// Owners the sweep looks at per pass.
const SWEEP_PAGE: u32 = 100;

/// The longest a build may take before it gives up writing its persona: what the 10-minute
/// lease builds held before it was renewed allowed (half of it).
pub const MAX_BUILD: Duration = Duration::from_secs(300);

impl PersonaBuilder {
    pub fn new(
        memories: Arc<dyn MemoryStore>,
        scenes: Arc<dyn SceneStore>,
        files: Arc<dyn FileStore>,
        engine: Arc<dyn PersonaEngine>,
        settings: PersonaSettings,
    ) -> Self {
        Self {
            memories,
            scenes,
            files,
            engine,
            settings,
            sweep_after: Arc::default(),
        }
    }

    /// Builds the owner's persona if a trigger fires (and nobody else is building it).
    #[tracing::instrument(skip(self), fields(team = %tenant.team, agent = %tenant.agent, user = %tenant.user))]
    pub async fn check(&self, tenant: &Tenant) -> Result<BuildOutcome, PersonaError> {
        let row = self.scenes.persona(tenant).await?;
        let scenes = self.scenes.scenes(tenant, false).await?;
        let object_nonempty = match row.as_ref().and_then(|r| r.object_key.as_deref()) {
            Some(key) => self
                .files
                .get(key)
                .await?
                .is_some_and(|bytes| !String::from_utf8_lossy(&bytes).trim().is_empty()),
            None => false,
        };
        let memory_count = self.memories.count_memories(tenant, MemoryStatus::Active).await?;
        let state = PersonaState {
            built: row.as_ref().is_some_and(|r| r.version > 0),
            object_nonempty,
            signal_pending: row.as_ref().is_some_and(|r| r.signal_at.is_some()),
            scene_count: scenes.len(),
            scenes_at_build: row
                .as_ref()
                .map_or(0, |r| usize::try_from(r.scenes_at_build).unwrap_or(0)),
            memories_since_build: u64::try_from(memory_count - row.as_ref().map_or(0, |r| r.memories_at_build))
                .unwrap_or(0),
        };
        let Some(trigger) = decide(&state, &self.settings.trigger) else {
            return Ok(BuildOutcome::NotNeeded);
        };
        let now = Utc::now();
        let Some(lease) = self.scenes.claim_persona(tenant, now, self.settings.lease).await? else {
            return Ok(BuildOutcome::Busy);
        };
        let started = Instant::now();
        let token = lease.token;
        let build = self.build(tenant, row.as_ref(), trigger, memory_count, lease, started);
        tokio::pin!(build);
        let result = tokio::select! {
            result = &mut build => result,
            // Another build holds the owner now: this one's commit is fenced and fails, and it
            // removes its object; let it get there rather than leave the object behind.
            () = self.keep_lease(tenant, token) => build.await,
        };
        let label = match &result {
            Ok(BuildOutcome::Built { .. }) => "built",
            Ok(BuildOutcome::LeaseLost) => "lease_lost",
            Ok(BuildOutcome::NotNeeded | BuildOutcome::Busy) => "skipped",
            Err(_) => "failed",
        };
        ::metrics::counter!(metrics::PERSONA_BUILDS, "trigger" => trigger.as_str(), "result" => label).increment(1);
        ::metrics::histogram!(metrics::PERSONA_BUILD_SECONDS).record(started.elapsed().as_secs_f64());
        if result.is_err() {
            if let Err(e) = self.scenes.release_persona(tenant, token).await {
                tracing::warn!(error = %error_chain(&e), "failed to release the persona lease; it expires on its own");
            }
        }
        result
    }

    async fn build(
        &self,
        tenant: &Tenant,
        row: Option<&PersonaRow>,
        trigger: PersonaTrigger,
        memory_count: i64,
        lease: crate::store::scene::Lease,
        started: Instant,
    ) -> Result<BuildOutcome, PersonaError> {
        let started_at = Utc::now();
        let deadline = started + MAX_BUILD;
        let full = trigger.full_rebuild();
        let current = match (full, row.and_then(|r| r.object_key.as_deref())) {
            (false, Some(key)) => match self.files.get(key).await? {
                Some(bytes) => PersonaDoc::parse(&String::from_utf8_lossy(&bytes)).ok(),
                None => None,
            },
            _ => None,
        };
        let watermark = row.and_then(|r| r.scene_watermark);
        // Read again under the lease: a scene run that committed after `check` listed the scenes
        // signalled before this claim, so this build's commit clears that signal; its scene
        // must therefore be in this build.
        let rows = self.scenes.scenes(tenant, false).await?;
        let scene_count = rows.len();
        let newest: Option<DateTime<Utc>> = rows.iter().map(|r| r.updated_at).max();
        let mut scene_docs = Vec::new();
        let mut input_refs = Vec::new();
        for scene in &rows {
            // Incremental: only what changed since the last build (seed 001, 增量模式).
            if !full && current.is_some() && watermark.is_some_and(|w| scene.updated_at <= w) {
                continue;
            }
            if let Some(bytes) = self.files.get(&scene.object_key).await? {
                if let Ok(doc) = SceneDoc::parse(&String::from_utf8_lossy(&bytes)) {
                    scene_docs.push(doc);
                    input_refs.push(format!("scene:{}@{}", scene.id, scene.version));
                }
            }
        }
        let memories = self.persona_memories(tenant).await?;
        input_refs.extend(memories.iter().map(|m| format!("memory:{}", m.id)));
        let input = PersonaInput {
            current,
            scenes: scene_docs,
            memories,
            trigger,
        };
        let (doc, run) = self.engine.build(tenant, &input).await?;
        if doc.is_empty() {
            return Err(PersonaError::Empty);
        }
        if Instant::now() >= deadline {
            return Err(PersonaError::Deadline);
        }
        let version = row.map_or(0, |r| r.version) + 1;
        let key = paths::persona_build_key(tenant, version, lease.token);
        self.files.put(&key, doc.render().into_bytes()).await?;
        let provenance = ArtifactProvenance {
            id: Uuid::new_v4(),
            tenant: tenant.clone(),
            layer: LAYER_L3.to_owned(),
            scene_id: None,
            event: "build".to_owned(),
            template: Some(run.template.clone()),
            model: Some(run.model.clone()),
            input_refs,
            output_refs: vec![format!("persona@{version}")],
            detail: json!({
                "trigger": trigger.as_str(),
                "full": full,
                "object_key": key,
                "scenes_given": input.scenes.len(),
            }),
            started_at,
            duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
        };
        let commit = PersonaCommit {
            object_key: key.clone(),
            built_at: Utc::now(),
            memories_at_build: memory_count,
            scenes_at_build: i64::try_from(scene_count).unwrap_or(i64::MAX),
            scene_watermark: newest.or(watermark),
            provenance,
        };
        match self.scenes.commit_persona(tenant, &lease, &commit).await? {
            Some(row) => {
                tracing::info!(
                    version = row.version,
                    trigger = trigger.as_str(),
                    mode = self.engine.mode(),
                    "persona built"
                );
                Ok(BuildOutcome::Built {
                    version: row.version,
                    trigger,
                })
            }
            None => {
                // Unreferenced, and never to be: remove it.
                if let Err(e) = self.files.delete(&key).await {
                    tracing::warn!(error = %error_chain(&e), "failed to remove an uncommitted persona object");
                }
                Ok(BuildOutcome::LeaseLost)
            }
        }
    }

    /// Renews the build's lease while it lasts (`lease::keep`); returns only once another
    /// build holds the owner.
    async fn keep_lease(&self, tenant: &Tenant, token: Uuid) {
        let scenes = &self.scenes;
        lease::keep(self.settings.lease, "persona", |until| {
            scenes.renew_persona(tenant, token, until)
        })
        .await;
        tracing::warn!("lost the persona lease to another build; its commit will fail");
    }

    /// The memories that speak to who the owner is and how they work, highest priority first.
    async fn persona_memories(&self, tenant: &Tenant) -> Result<Vec<Memory>, PersonaError> {
        let mut out = Vec::new();
        for category in [Category::Persona, Category::Instruction, Category::WorkMethod] {
            let filter = MemoryFilter {
                category: Some(category),
                status: Some(MemoryStatus::Active),
                ..MemoryFilter::default()
            };
            out.extend(
                self.memories
                    .list_memories(tenant, &filter, None, self.settings.max_memories)
                    .await?,
            );
        }
        out.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.created_at.cmp(&b.created_at)));
        Ok(out)
    }

    /// The safety net: evaluates the next page of owners (self-heal, thresholds, lost events).
    ///
    /// Takes no further owner once `stop` is cancelled.
    pub async fn sweep(&self, stop: &CancellationToken) -> Result<usize, PersonaError> {
        let mut after = self.sweep_after.lock().await;
        let owners = self.scenes.layer_owners(after.as_ref(), SWEEP_PAGE).await?;
        *after = if owners.len() < SWEEP_PAGE as usize {
            None
        } else {
            owners.last().cloned()
        };
        drop(after);
        let mut built = 0;
        for tenant in owners {
            if stop.is_cancelled() {
                break;
            }
            match self.check(&tenant).await {
                Ok(BuildOutcome::Built { .. }) => built += 1,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %error_chain(&e), "persona build failed in the sweep"),
            }
        }
        Ok(built)
    }
}

/// The persona worker's handler: `persona.due` events and the sweep.
pub struct PersonaHandler(pub PersonaBuilder);

impl From<PersonaError> for HandlerError {
    fn from(e: PersonaError) -> Self {
        Self {
            retryable: e.is_retryable(),
            // The sweep checks every owner's triggers again, page by page: a wake-up that used
            // up its attempts is not work for a human.
            swept: true,
            source: Box::new(e),
        }
    }
}

#[async_trait]
impl Handler for PersonaHandler {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Persona
    }

    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        match event {
            Event::PersonaDue { tenant } => {
                self.0.check(tenant).await?;
                Ok(())
            }
            // Not routed to the persona queue.
            Event::TurnAppended { .. }
            | Event::TurnsAppended { .. }
            | Event::ExtractDue { .. }
            | Event::CompactionRequested { .. }
            | Event::SceneDue { .. } => Ok(()),
        }
    }

    async fn sweep(&self, stop: &CancellationToken) -> Result<usize, HandlerError> {
        Ok(self.0.sweep(stop).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_persona_is_stored_without_its_secrets() {
        let markdown =
            "# Persona\n\n## Identity\n- DBA, logs in with password=hunter2x\n\n## Preferences\n- terse answers\n";
        let doc = parse_persona(json!({ "persona": markdown })).expect("a persona");
        assert_eq!(doc.identity, ["DBA, logs in with password=[REDACTED:password]"]);
        assert_eq!(doc.preferences, ["terse answers"]);
    }
}
