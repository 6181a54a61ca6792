//! An owner's whole memory as one self-describing JSONL stream, and back: `sediment export` and
//! `sediment import`, between instances and between the two deployments.
//!
//! # The stream (format version 1)
//! One JSON object per line, each with a `kind`, in this order:
//! 1. `header`: `format` (`sediment-export`), `version`, the `owner`, and two instance-local
//!    fields, `exported_at` and `source`;
//! 2. `session` lines, then every `turn` of them, by session and seq;
//! 3. `memory` lines (every status, so the history chains stay whole), newest first;
//! 4. `memory_provenance` (L1), oldest first;
//! 5. `scene` lines, each with its Markdown `document` (none for a deleted scene);
//! 6. at most one `persona`, with its `document`;
//! 7. `artifact_provenance` (L2 and L3), oldest first;
//! 8. `end`, with how many lines of each kind came before it: a stream cut short lacks it, so
//!    a truncated file is refused instead of half-imported.
//!
//! Ids, seqs, timestamps and provenance are carried as they are. What is left out is
//! instance-local: object keys (the target files each document under its own layout), leases,
//! timers, the index cursors (the target indexes the turns itself) and session compactions
//! (recomputed on demand). Exporting the same owner from two instances that hold the same data
//! gives the same lines apart from the header's `exported_at` and `source`.
//!
//! # Import
//! The whole stream is read and checked first; an error names the line. Then the documents are
//! written to the file store, then every row in one transaction ([`PortableStore::import_owner`]):
//! a conflict or a failure rolls the rows back and deletes the documents this import wrote, so
//! nothing partial stays behind. Import adds what the target lacks and never overwrites, so a
//! second import of the same stream changes nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{Role, SessionId, StoredTurn, TaskId, Tenant};
use crate::files::{FileError, FileStore};
use crate::memory::{Category, Memory, MemoryStatus, TemplateRef};
use crate::scene::paths;
use crate::store::memory::{MemoryCursor, MemoryFilter, MemoryStore, ProvenanceRecord, LAYER_L1};
use crate::store::portable::{ImportOutcome, OwnerRows, PersonaRecord, PortableStore, SessionRecord};
use crate::store::scene::{ArtifactProvenance, SceneRow, SceneStatus, SceneStore, LAYER_L2, LAYER_L3};
use crate::store::{StoreError, TranscriptStore};

/// The `format` of the header line.
pub const FORMAT: &str = "sediment-export";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// The media type of the stream.
pub const MEDIA_TYPE: &str = "application/x-ndjson";

/// Rows read per store call while exporting.
const PAGE: u32 = 1_000;

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    Header(Header),
    Session(SessionLine),
    Turn(TurnLine),
    Memory(MemoryLine),
    MemoryProvenance(MemoryProvenanceLine),
    Scene(SceneLine),
    Persona(PersonaLine),
    ArtifactProvenance(ArtifactProvenanceLine),
    End(EndLine),
}

impl Line {
    /// The `kind` it is written with.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Header(_) => "header",
            Self::Session(_) => "session",
            Self::Turn(_) => "turn",
            Self::Memory(_) => "memory",
            Self::MemoryProvenance(_) => "memory_provenance",
            Self::Scene(_) => "scene",
            Self::Persona(_) => "persona",
            Self::ArtifactProvenance(_) => "artifact_provenance",
            Self::End(_) => "end",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Owner {
    pub team: String,
    pub agent: String,
    pub user: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub owner: Owner,
    /// Instance-local.
    pub exported_at: DateTime<Utc>,
    /// Instance-local: the deployment and build that wrote the stream.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionLine {
    pub id: String,
    pub created_at: DateTime<Utc>,
    pub last_seq: i64,
    pub reset_at: Option<DateTime<Utc>>,
    /// Turns up to this seq are already distilled into the stream's memories.
    pub extracted_through: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnLine {
    pub id: Uuid,
    pub session_id: String,
    pub seq: i64,
    pub role: Role,
    pub content: String,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    pub client_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub task: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryLine {
    pub id: Uuid,
    pub session_id: String,
    pub content: String,
    pub category: Category,
    pub priority: u8,
    pub scene: Option<String>,
    pub occurred_at: Option<String>,
    pub source_message_ids: Vec<Uuid>,
    pub status: MemoryStatus,
    pub superseded_by: Option<Uuid>,
    pub task: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryProvenanceLine {
    pub id: Uuid,
    pub memory_id: Option<Uuid>,
    pub session_id: String,
    pub layer: String,
    pub event: String,
    pub template: Option<TemplateRef>,
    pub model: Option<String>,
    pub input_message_ids: Vec<Uuid>,
    pub sibling_ids: Vec<Uuid>,
    pub detail: serde_json::Value,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SceneLine {
    pub id: Uuid,
    pub name: String,
    pub overview: String,
    pub tags: Vec<String>,
    pub version: i64,
    pub status: SceneStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The Markdown document; `None` for a deleted scene.
    pub document: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonaLine {
    pub version: i64,
    pub built_at: Option<DateTime<Utc>>,
    pub memories_at_build: i64,
    pub scenes_at_build: i64,
    pub scene_watermark: Option<DateTime<Utc>>,
    pub document: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactProvenanceLine {
    pub id: Uuid,
    pub layer: String,
    pub scene_id: Option<Uuid>,
    pub event: String,
    pub template: Option<TemplateRef>,
    pub model: Option<String>,
    pub input_refs: Vec<String>,
    pub output_refs: Vec<String>,
    pub detail: serde_json::Value,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndLine {
    /// Lines of each kind before this one (the header not counted).
    pub counts: BTreeMap<String, u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Files(#[from] FileError),
    #[error("the reader of the export went away")]
    Closed,
}

/// Why an import was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A line is not what the format allows there; nothing was written.
    #[error("line {line}: {message}")]
    Invalid { line: usize, message: String },
    /// The header names a format version this build does not read; nothing was written.
    #[error(
        "export format version {found} is not supported: this sediment reads version {}",
        VERSION
    )]
    UnsupportedVersion { found: u64 },
    /// The stream stops before its `end` line; nothing was written.
    #[error("the stream ends after line {lines} without its end line: it is truncated")]
    Truncated { lines: usize },
    /// A row's id is another owner's in the target; nothing was written.
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Files(#[from] FileError),
}

impl ImportError {
    fn invalid(line: usize, message: impl Into<String>) -> Self {
        Self::Invalid {
            line,
            message: message.into(),
        }
    }
}

/// What an import wrote: per kind, how many rows the stream held and how many were new.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    pub lines: usize,
    pub read: BTreeMap<String, u64>,
    pub inserted: BTreeMap<String, u64>,
    /// The sessions with turns, and each one's last seq: whom to wake up.
    #[serde(skip)]
    pub sessions: Vec<(String, i64)>,
}

/// The ports an export or import reads and writes.
#[derive(Clone)]
pub struct Portability {
    pub turns: Arc<dyn TranscriptStore>,
    pub memories: Arc<dyn MemoryStore>,
    pub scenes: Arc<dyn SceneStore>,
    pub portable: Arc<dyn PortableStore>,
    pub files: Arc<dyn FileStore>,
}

impl Portability {
    pub fn from_backends(backends: &crate::backends::Backends) -> Self {
        Self {
            turns: backends.store.clone(),
            memories: backends.memories.clone(),
            scenes: backends.scenes.clone(),
            portable: backends.portable.clone(),
            files: backends.files.clone(),
        }
    }

    /// Writes the owner's stream to `out`, one line (with its newline) per message. Not a
    /// snapshot: what is written during the export may or may not be in it, but every line is
    /// whole and the `end` line counts what came before it. Stops with
    /// [`ExportError::Closed`] when `out`'s reader is dropped.
    pub async fn export(
        &self,
        tenant: &Tenant,
        source: &str,
        out: tokio::sync::mpsc::Sender<String>,
    ) -> Result<(), ExportError> {
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut emit = |mut line: Line| {
            match &mut line {
                Line::Header(_) => {}
                Line::End(end) => end.counts = counts.clone(),
                other @ (Line::Session(_)
                | Line::Turn(_)
                | Line::Memory(_)
                | Line::MemoryProvenance(_)
                | Line::Scene(_)
                | Line::Persona(_)
                | Line::ArtifactProvenance(_)) => *counts.entry(other.kind().to_owned()).or_default() += 1,
            }
            let mut text = serde_json::to_string(&line).expect("export lines serialize");
            text.push('\n');
            text
        };
        let send = |text: String| {
            let out = out.clone();
            async move { out.send(text).await.map_err(|_| ExportError::Closed) }
        };

        send(emit(Line::Header(Header {
            format: FORMAT.to_owned(),
            version: VERSION,
            owner: Owner {
                team: tenant.team.clone(),
                agent: tenant.agent.clone(),
                user: tenant.user.clone(),
            },
            exported_at: Utc::now(),
            source: source.to_owned(),
        })))
        .await?;

        let sessions = self.portable.owner_sessions(tenant).await?;
        for s in &sessions {
            send(emit(Line::Session(SessionLine {
                id: s.id.clone(),
                created_at: s.created_at,
                last_seq: s.last_seq,
                reset_at: s.reset_at,
                extracted_through: s.extracted_through.min(s.last_seq),
            })))
            .await?;
        }
        for s in &sessions {
            let Ok(session) = SessionId::parse(&s.id) else {
                continue;
            };
            let mut after = 0;
            loop {
                let page = match self.turns.list(tenant, &session, after, PAGE).await {
                    Ok(page) => page,
                    // Erased while the export ran.
                    Err(StoreError::SessionNotFound) => break,
                    Err(e) => return Err(e.into()),
                };
                let Some(last) = page.last() else { break };
                after = last.seq;
                let full = page.len() == PAGE as usize;
                for turn in page {
                    send(emit(Line::Turn(TurnLine {
                        id: turn.id,
                        session_id: turn.session_id,
                        seq: turn.seq,
                        role: turn.role,
                        content: turn.content,
                        metadata: turn.metadata,
                        client_id: turn.client_id,
                        created_at: turn.created_at,
                        task: turn.task,
                    })))
                    .await?;
                }
                if !full {
                    break;
                }
            }
        }

        let mut cursor = None;
        loop {
            let page = self
                .memories
                .list_memories(tenant, &MemoryFilter::default(), cursor, PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            cursor = Some(MemoryCursor {
                created_at: last.created_at,
                id: last.id,
            });
            let full = page.len() == PAGE as usize;
            for m in page {
                send(emit(Line::Memory(MemoryLine {
                    id: m.id,
                    session_id: m.session_id,
                    content: m.content,
                    category: m.category,
                    priority: m.priority,
                    scene: m.scene,
                    occurred_at: m.occurred_at,
                    source_message_ids: m.source_message_ids,
                    status: m.status,
                    superseded_by: m.superseded_by,
                    task: m.task,
                    created_at: m.created_at,
                    updated_at: m.updated_at,
                })))
                .await?;
            }
            if !full {
                break;
            }
        }

        let mut after = None;
        loop {
            let page = self.portable.owner_memory_provenance(tenant, after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = Some((last.started_at, last.id));
            let full = page.len() == PAGE as usize;
            for r in page {
                send(emit(Line::MemoryProvenance(MemoryProvenanceLine {
                    id: r.id,
                    memory_id: r.memory_id,
                    session_id: r.session_id,
                    layer: r.layer,
                    event: r.event,
                    template: r.template,
                    model: r.model,
                    input_message_ids: r.input_message_ids,
                    sibling_ids: r.sibling_ids,
                    detail: r.detail,
                    started_at: r.started_at,
                    duration_ms: r.duration_ms,
                })))
                .await?;
            }
            if !full {
                break;
            }
        }

        let mut scenes = self.scenes.scenes(tenant, true).await?;
        scenes.sort_by_key(|s| (s.created_at, s.id));
        for s in scenes {
            let document = match s.status {
                SceneStatus::Active => self.files.get(&s.object_key).await?.map(document_text),
                SceneStatus::Deleted => None,
            };
            send(emit(Line::Scene(SceneLine {
                id: s.id,
                name: s.name,
                overview: s.overview,
                tags: s.tags,
                version: s.version,
                status: s.status,
                created_at: s.created_at,
                updated_at: s.updated_at,
                document,
            })))
            .await?;
        }

        if let Some(p) = self.scenes.persona(tenant).await?.filter(|p| p.version > 0) {
            let document = match &p.object_key {
                Some(key) => self.files.get(key).await?.map(document_text),
                None => None,
            };
            send(emit(Line::Persona(PersonaLine {
                version: p.version,
                built_at: p.built_at,
                memories_at_build: p.memories_at_build,
                scenes_at_build: p.scenes_at_build,
                scene_watermark: p.scene_watermark,
                document,
            })))
            .await?;
        }

        let mut after = None;
        loop {
            let page = self.portable.owner_artifact_provenance(tenant, after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = Some((last.started_at, last.id));
            let full = page.len() == PAGE as usize;
            for r in page {
                send(emit(Line::ArtifactProvenance(ArtifactProvenanceLine {
                    id: r.id,
                    layer: r.layer,
                    scene_id: r.scene_id,
                    event: r.event,
                    template: r.template,
                    model: r.model,
                    input_refs: r.input_refs,
                    output_refs: r.output_refs,
                    detail: r.detail,
                    started_at: r.started_at,
                    duration_ms: r.duration_ms,
                })))
                .await?;
            }
            if !full {
                break;
            }
        }

        send(emit(Line::End(EndLine {
            counts: BTreeMap::new(),
        })))
        .await
    }

    /// Imports a parsed stream for `tenant` (see the module docs).
    pub async fn import(&self, tenant: &Tenant, parsed: Parsed) -> Result<ImportReport, ImportError> {
        let Parsed {
            mut rows,
            documents,
            persona_document,
            read,
            lines,
        } = parsed;
        own(&mut rows, tenant);
        let sessions = rows.sessions.iter().map(|s| (s.id.clone(), s.last_seq)).collect();

        // Documents first: a scene or persona the target already holds keeps its own.
        let mut written = Vec::new();
        let result = async {
            // Moved in, and on to the store: the rows of a large stream are never copied.
            let mut rows = rows;
            for scene in &mut rows.scenes {
                scene.object_key = paths::scene_key(tenant, scene.id);
                let Some(document) = documents.get(&scene.id) else {
                    continue;
                };
                if self.scenes.scene(tenant, scene.id).await?.is_some() {
                    continue;
                }
                self.files.put(&scene.object_key, document.clone().into_bytes()).await?;
                written.push(scene.object_key.clone());
            }
            if let Some(persona) = &mut rows.persona {
                let built = self.scenes.persona(tenant).await?.is_some_and(|p| p.version > 0);
                match &persona_document {
                    Some(document) if !built => {
                        // The nil token never names a build's own object.
                        let key = paths::persona_build_key(tenant, persona.version, Uuid::nil());
                        self.files.put(&key, document.clone().into_bytes()).await?;
                        written.push(key.clone());
                        persona.object_key = Some(key);
                    }
                    _ => persona.object_key = None,
                }
            }
            match self.portable.import_owner(tenant, rows).await? {
                ImportOutcome::Imported(inserted) => Ok(inserted),
                ImportOutcome::Conflict(what) => Err(ImportError::Conflict(what)),
            }
        }
        .await;
        match result {
            Ok(inserted) => Ok(ImportReport {
                lines,
                read,
                inserted,
                sessions,
            }),
            Err(e) => {
                for key in written {
                    if let Err(cleanup) = self.files.delete(&key).await {
                        // A document without a row is never read; the owner's erase removes it.
                        tracing::warn!(key, error = %cleanup, "could not remove a document of a failed import");
                    }
                }
                Err(e)
            }
        }
    }
}

/// A document as text: they are written as UTF-8 Markdown; anything else is replaced, not lost
/// silently in a panic.
fn document_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Sets every row's owner to `tenant`.
fn own(rows: &mut OwnerRows, tenant: &Tenant) {
    for turn in &mut rows.turns {
        turn.tenant = tenant.clone();
    }
    for m in &mut rows.memories {
        m.tenant = tenant.clone();
    }
    for r in &mut rows.memory_provenance {
        r.tenant = tenant.clone();
    }
    for s in &mut rows.scenes {
        s.tenant = tenant.clone();
    }
    for r in &mut rows.artifact_provenance {
        r.tenant = tenant.clone();
    }
}

/// Whether a JSON text escapes a NUL character (`\u0000`). A backslash before the escape
/// makes it text instead (`\\u0000` is a backslash and `u0000`, which a turn about code may
/// well hold), so the backslashes before each match are counted: an odd run escapes.
fn escapes_nul(text: &str) -> bool {
    let bytes = text.as_bytes();
    text.match_indices("\\u0000").any(|(at, _)| {
        let run = bytes[..=at].iter().rev().take_while(|b| **b == b'\\').count();
        run % 2 == 1
    })
}

/// A checked stream, ready to import.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    pub rows: OwnerRows,
    documents: HashMap<Uuid, String>,
    persona_document: Option<String>,
    /// Lines of each kind, the header and end not counted.
    pub read: BTreeMap<String, u64>,
    pub lines: usize,
}

/// Reads a stream line by line and checks it: [`Parser::line`] for each line, then
/// [`Parser::finish`].
#[derive(Default)]
pub struct Parser {
    parsed: Parsed,
    header: Option<Header>,
    ended: bool,
    sessions: HashMap<String, i64>,
    turn_keys: HashSet<(String, i64)>,
    ids: HashSet<Uuid>,
    owner: Option<Tenant>,
}

impl Parser {
    pub fn new() -> Self {
        Self::default()
    }

    /// The owner the header names, once it is read.
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// Checks one line (without its newline). Blank lines are skipped.
    pub fn line(&mut self, text: &str) -> Result<(), ImportError> {
        self.parsed.lines += 1;
        let n = self.parsed.lines;
        let text = text.trim_end_matches('\r');
        if text.trim().is_empty() {
            return Ok(());
        }
        if self.ended {
            return Err(ImportError::invalid(n, "a line after the end line"));
        }
        if escapes_nul(text) {
            // Postgres text and jsonb cannot hold it; refused here so both deployments agree.
            return Err(ImportError::invalid(
                n,
                "a NUL character (\\u0000), which no store keeps",
            ));
        }
        if self.header.is_none() {
            return self.first(n, text);
        }
        let line: Line = serde_json::from_str(text).map_err(|e| ImportError::invalid(n, e.to_string()))?;
        let kind = line.kind();
        self.check(n, line)?;
        if kind != "end" {
            *self.parsed.read.entry(kind.to_owned()).or_default() += 1;
        }
        Ok(())
    }

    /// Ends the stream: refused as truncated without its end line.
    pub fn finish(self) -> Result<Parsed, ImportError> {
        if self.header.is_none() {
            return Err(ImportError::invalid(
                self.parsed.lines.max(1),
                "the stream is empty: no header line",
            ));
        }
        if !self.ended {
            return Err(ImportError::Truncated {
                lines: self.parsed.lines,
            });
        }
        Ok(self.parsed)
    }

    fn first(&mut self, n: usize, text: &str) -> Result<(), ImportError> {
        // The version is read before the rest, so a newer stream is refused for its version,
        // not for a field this build does not know.
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ImportError::invalid(n, format!("not JSON: {e}")))?;
        if value.get("kind").and_then(|k| k.as_str()) != Some("header") {
            return Err(ImportError::invalid(
                n,
                "the first line must be the header (kind \"header\")",
            ));
        }
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(ImportError::invalid(
                n,
                format!("not a {FORMAT} stream (its format field)"),
            ));
        }
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(VERSION) => {}
            Some(found) => return Err(ImportError::UnsupportedVersion { found }),
            None => return Err(ImportError::invalid(n, "the header has no version number")),
        }
        let Line::Header(header) = serde_json::from_value(value).map_err(|e| ImportError::invalid(n, e.to_string()))?
        else {
            unreachable!("the kind was checked");
        };
        let owner = Tenant::new(
            Some(header.owner.team.as_str()),
            Some(header.owner.agent.as_str()),
            Some(header.owner.user.as_str()),
        )
        .map_err(|e| ImportError::invalid(n, format!("owner: {e}")))?;
        self.owner = Some(owner);
        self.header = Some(header);
        Ok(())
    }

    fn unique(&mut self, n: usize, id: Uuid) -> Result<(), ImportError> {
        if self.ids.insert(id) {
            Ok(())
        } else {
            Err(ImportError::invalid(n, format!("id {id} appears twice")))
        }
    }

    fn check(&mut self, n: usize, line: Line) -> Result<(), ImportError> {
        let owner = self.owner.clone().expect("the header was read");
        let bad = |message: String| ImportError::invalid(n, message);
        match line {
            Line::Header(_) => return Err(bad("a second header line".to_owned())),
            Line::Session(s) => {
                SessionId::parse(&s.id).map_err(|e| bad(format!("session id: {e}")))?;
                if s.last_seq < 0 || s.extracted_through < 0 || s.extracted_through > s.last_seq {
                    return Err(bad(format!(
                        "session {}: last_seq {} and extracted_through {} are out of range",
                        s.id, s.last_seq, s.extracted_through
                    )));
                }
                if self.sessions.insert(s.id.clone(), s.last_seq).is_some() {
                    return Err(bad(format!("session {} appears twice", s.id)));
                }
                self.parsed.rows.sessions.push(SessionRecord {
                    id: s.id,
                    created_at: s.created_at,
                    last_seq: s.last_seq,
                    reset_at: s.reset_at,
                    extracted_through: s.extracted_through,
                });
            }
            Line::Turn(t) => {
                let Some(&last_seq) = self.sessions.get(&t.session_id) else {
                    return Err(bad(format!(
                        "turn {} names session {}, which no session line declared",
                        t.id, t.session_id
                    )));
                };
                if t.seq < 1 || t.seq > last_seq {
                    return Err(bad(format!(
                        "turn {}: seq {} is outside its session (1..={last_seq})",
                        t.id, t.seq
                    )));
                }
                if !self.turn_keys.insert((t.session_id.clone(), t.seq)) {
                    return Err(bad(format!("session {} has seq {} twice", t.session_id, t.seq)));
                }
                if let Some(task) = &t.task {
                    TaskId::parse(task).map_err(|e| bad(format!("turn {}: task: {e}", t.id)))?;
                }
                self.unique(n, t.id)?;
                self.parsed.rows.turns.push(StoredTurn {
                    id: t.id,
                    tenant: owner,
                    session_id: t.session_id,
                    seq: t.seq,
                    role: t.role,
                    content: t.content,
                    metadata: t.metadata,
                    client_id: t.client_id,
                    created_at: t.created_at,
                    task: t.task,
                });
            }
            Line::Memory(m) => {
                if m.priority > 100 {
                    return Err(bad(format!("memory {}: priority {} is above 100", m.id, m.priority)));
                }
                self.unique(n, m.id)?;
                self.parsed.rows.memories.push(Memory {
                    id: m.id,
                    tenant: owner,
                    session_id: m.session_id,
                    content: m.content,
                    category: m.category,
                    priority: m.priority,
                    scene: m.scene,
                    occurred_at: m.occurred_at,
                    source_message_ids: m.source_message_ids,
                    status: m.status,
                    superseded_by: m.superseded_by,
                    task: m.task,
                    created_at: m.created_at,
                    updated_at: m.updated_at,
                });
            }
            Line::MemoryProvenance(r) => {
                if r.layer != LAYER_L1 {
                    return Err(bad(format!(
                        "memory provenance {}: layer {:?} is not L1",
                        r.id, r.layer
                    )));
                }
                self.unique(n, r.id)?;
                self.parsed.rows.memory_provenance.push(ProvenanceRecord {
                    id: r.id,
                    memory_id: r.memory_id,
                    tenant: owner,
                    session_id: r.session_id,
                    layer: r.layer,
                    event: r.event,
                    template: r.template,
                    model: r.model,
                    input_message_ids: r.input_message_ids,
                    sibling_ids: r.sibling_ids,
                    detail: r.detail,
                    started_at: r.started_at,
                    duration_ms: r.duration_ms,
                });
            }
            Line::Scene(s) => {
                if s.version < 1 {
                    return Err(bad(format!("scene {}: version {} is below 1", s.id, s.version)));
                }
                self.unique(n, s.id)?;
                if let Some(document) = s.document {
                    self.parsed.documents.insert(s.id, document);
                }
                self.parsed.rows.scenes.push(SceneRow {
                    id: s.id,
                    tenant: owner,
                    name: s.name,
                    overview: s.overview,
                    tags: s.tags,
                    object_key: String::new(),
                    version: s.version,
                    status: s.status,
                    created_at: s.created_at,
                    updated_at: s.updated_at,
                });
            }
            Line::Persona(p) => {
                if self.parsed.rows.persona.is_some() {
                    return Err(bad("a second persona line".to_owned()));
                }
                if p.version < 1 {
                    return Err(bad(format!("persona version {} is below 1", p.version)));
                }
                self.parsed.persona_document = p.document;
                self.parsed.rows.persona = Some(PersonaRecord {
                    version: p.version,
                    built_at: p.built_at,
                    memories_at_build: p.memories_at_build,
                    scenes_at_build: p.scenes_at_build,
                    scene_watermark: p.scene_watermark,
                    object_key: None,
                });
            }
            Line::ArtifactProvenance(r) => {
                if r.layer != LAYER_L2 && r.layer != LAYER_L3 {
                    return Err(bad(format!(
                        "artifact provenance {}: layer {:?} is not L2 or L3",
                        r.id, r.layer
                    )));
                }
                self.unique(n, r.id)?;
                self.parsed.rows.artifact_provenance.push(ArtifactProvenance {
                    id: r.id,
                    tenant: owner,
                    layer: r.layer,
                    scene_id: r.scene_id,
                    event: r.event,
                    template: r.template,
                    model: r.model,
                    input_refs: r.input_refs,
                    output_refs: r.output_refs,
                    detail: r.detail,
                    started_at: r.started_at,
                    duration_ms: r.duration_ms,
                });
            }
            Line::End(end) => {
                let mut declared = end.counts;
                declared.retain(|_, v| *v > 0);
                if declared != self.parsed.read {
                    return Err(bad(format!(
                        "the end line counts {declared:?} but the stream held {:?}: lines are missing",
                        self.parsed.read
                    )));
                }
                self.ended = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: u32) -> String {
        format!(
            r#"{{"kind":"header","format":"sediment-export","version":{version},"owner":{{"team":"t","agent":"a","user":"u"}},"exported_at":"2026-01-01T00:00:00Z","source":"test"}}"#
        )
    }

    const SESSION: &str = r#"{"kind":"session","id":"s1","created_at":"2026-01-01T00:00:00Z","last_seq":1,"reset_at":null,"extracted_through":0}"#;
    const TURN: &str = r#"{"kind":"turn","id":"0190f7a4-0000-7000-8000-000000000001","session_id":"s1","seq":1,"role":"user","content":"hi","metadata":{},"client_id":null,"created_at":"2026-01-01T00:00:00Z","task":null}"#;
    const END: &str = r#"{"kind":"end","counts":{"session":1,"turn":1}}"#;

    fn parse(lines: &[&str]) -> Result<Parsed, ImportError> {
        let mut parser = Parser::new();
        for line in lines {
            parser.line(line)?;
        }
        parser.finish()
    }

    #[test]
    fn a_whole_stream_parses() {
        let h = header(1);
        let parsed = parse(&[&h, SESSION, TURN, END]).expect("parses");
        assert_eq!(parsed.rows.turns.len(), 1);
        assert_eq!(parsed.read["turn"], 1);
        assert_eq!(parsed.lines, 4);
    }

    #[test]
    fn a_stream_without_its_end_is_truncated() {
        let h = header(1);
        let err = parse(&[&h, SESSION, TURN]).unwrap_err();
        assert!(matches!(err, ImportError::Truncated { lines: 3 }), "{err}");
        // An end line that counts more than came is the same cut, earlier.
        let err = parse(&[&h, SESSION, END]).unwrap_err();
        assert!(matches!(err, ImportError::Invalid { line: 3, .. }), "{err}");
    }

    #[test]
    fn an_unknown_version_is_refused_for_its_version() {
        let h = header(2);
        let err = parse(&[&h, r#"{"kind":"hologram"}"#]).unwrap_err();
        assert!(matches!(err, ImportError::UnsupportedVersion { found: 2 }), "{err}");
    }

    #[test]
    fn errors_name_the_line() {
        let h = header(1);
        let broken = &TURN[..TURN.len() - 10];
        let err = parse(&[&h, SESSION, broken, END]).unwrap_err();
        assert!(err.to_string().starts_with("line 3: "), "{err}");
        let orphan = TURN.replace("\"s1\"", "\"s2\"");
        let err = parse(&[&h, SESSION, &orphan, END]).unwrap_err();
        assert!(
            err.to_string().contains("line 3: ") && err.to_string().contains("no session line"),
            "{err}"
        );
        let unknown = SESSION.replace("\"reset_at\"", "\"surprise\":1,\"reset_at\"");
        let err = parse(&[&h, &unknown]).unwrap_err();
        assert!(
            err.to_string().contains("line 2: ") && err.to_string().contains("surprise"),
            "{err}"
        );
        let err = parse(&[SESSION]).unwrap_err();
        assert!(err.to_string().starts_with("line 1: "), "{err}");
        let nul = TURN.replace("\"hi\"", "\"h\\u0000i\"");
        let err = parse(&[&h, SESSION, &nul, END]).unwrap_err();
        assert!(
            err.to_string().contains("line 3: ") && err.to_string().contains("NUL"),
            "{err}"
        );
        // The text `\u0000` (an escaped backslash, then `u0000`) is no NUL and imports.
        let text = TURN.replace("\"hi\"", "\"h\\\\u0000i\"");
        let parsed = parse(&[&h, SESSION, &text, END]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.rows.turns[0].content, "h\\u0000i");
        let err = parse(&[&h, SESSION, TURN, TURN, END]).unwrap_err();
        assert!(
            err.to_string().contains("line 4: ") && err.to_string().contains("seq 1 twice"),
            "{err}"
        );
    }
}
