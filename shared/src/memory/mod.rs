//! L1 atomic memories: the card model, the two engines that produce and judge cards (rules and
//! LLM), and the pipeline that turns a batch of L0 turns into stored, deduplicated memories.
//!
//! # The engines
//! Extraction and conflict decisions are two ports, [`CardExtractor`] and [`ConflictJudge`],
//! each with a rules implementation (deterministic, no network; the embedded default) and an
//! LLM implementation (any OpenAI-compatible chat endpoint). The pipeline sees only the traits,
//! so both modes run the very same batching, filtering, redaction, dedup and write path.
//!
//! # Never invent, never lose
//! A card's `content` comes from the turns (rules mode copies a sentence; LLM mode paraphrases
//! under a prompt that forbids invention). A batch that cannot be extracted is not skipped: its
//! turns stay past the cursor and the batch is retried later.

pub mod pipeline;
pub mod schedule;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{Role, Tenant};

pub mod alias;
pub mod junk;
pub mod llm;
pub mod redact;
pub mod rules;

/// What kind of knowledge a memory holds (seed 001, 第二层).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Who the user is: identity, role, background.
    Persona,
    /// Something that happened, at a time.
    Episodic,
    /// How the user wants things done: preferences, standing instructions, rules.
    Instruction,
    /// A fact about the user's work or environment.
    WorkFact,
    /// Something to do: a plan, a TODO, a commitment.
    WorkTask,
    /// How a piece of work is done: a procedure, a decision about method.
    WorkMethod,
    /// A thing that was made or changed: a file, a table, a document, a link.
    WorkArtifact,
}

impl Category {
    pub const ALL: &'static [Category] = &[
        Self::Persona,
        Self::Episodic,
        Self::Instruction,
        Self::WorkFact,
        Self::WorkTask,
        Self::WorkMethod,
        Self::WorkArtifact,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Persona => "persona",
            Self::Episodic => "episodic",
            Self::Instruction => "instruction",
            Self::WorkFact => "work_fact",
            Self::WorkTask => "work_task",
            Self::WorkMethod => "work_method",
            Self::WorkArtifact => "work_artifact",
        }
    }

    /// The category with this exact name (no aliases); see `alias` for LLM output.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == name)
    }
}

/// Highest priority a card may carry.
pub const MAX_PRIORITY: u8 = 100;

/// One extracted piece of knowledge, before it is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Card {
    /// One self-contained statement.
    pub content: String,
    pub category: Category,
    /// 0–100; higher is recalled first.
    pub priority: u8,
    /// The topic (scene) the card belongs to, if the engine named one.
    pub scene: Option<String>,
    /// When it happened or holds: a time point or period as the engine gave it (free text,
    /// e.g. `2026-11-30` or `2026-11 to 2026-12`).
    pub occurred_at: Option<String>,
    /// The turns the card was taken from; never empty for a stored memory.
    pub source_message_ids: Vec<Uuid>,
}

/// A stored memory's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryStatus {
    /// Current; recalled and indexed.
    Active,
    /// Superseded by an update or merge; kept for history, not recalled.
    Archived,
}

impl MemoryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Archived => "archived",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "active" => Some(Self::Active),
            "archived" => Some(Self::Archived),
            _ => None,
        }
    }
}

/// A stored L1 memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub id: Uuid,
    pub tenant: Tenant,
    /// The session the memory was extracted from.
    pub session_id: String,
    pub content: String,
    pub category: Category,
    pub priority: u8,
    pub scene: Option<String>,
    pub occurred_at: Option<String>,
    pub source_message_ids: Vec<Uuid>,
    pub status: MemoryStatus,
    /// The memory that replaced this one, once archived.
    pub superseded_by: Option<Uuid>,
    /// The task of its source turns (see `pipeline::card_task`), if any.
    pub task: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One turn as an engine sees it: already junk-filtered and redacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchTurn {
    pub id: Uuid,
    pub seq: i64,
    pub role: Role,
    pub content: String,
    pub created_at: DateTime<Utc>,
}

/// What one extraction call works on.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub tenant: Tenant,
    pub session_id: String,
    /// Up to 5 turns before `turns`, for context only: cards must not come from them alone.
    pub context: Vec<BatchTurn>,
    /// The turns to extract from, in seq order.
    pub turns: Vec<BatchTurn>,
}

/// The prompt template (or rules version) an output came from, for provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRef {
    /// Stable template id, e.g. `l1-extract`.
    pub id: String,
    pub version: String,
    /// Where the effective template came from: `builtin`, `instance`, `team`, `agent`, or
    /// `rules` for the rules engine.
    pub source: String,
    /// Hex SHA-256 of the effective template text.
    pub hash: String,
}

/// What an engine did, for the provenance record of every memory it produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineRun {
    pub template: TemplateRef,
    /// The LLM model, or `rules`.
    pub model: String,
}

/// The cards of one batch and how they were made.
#[derive(Debug, Clone, PartialEq)]
pub struct Extraction {
    pub cards: Vec<Card>,
    pub run: EngineRun,
}

/// An existing memory that a new card may repeat, refine or contradict.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub memory: Memory,
    /// Cosine similarity of the two dense vectors, when embeddings are available.
    pub similarity: Option<f32>,
}

/// What to do with a new card, given its candidates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Decision {
    /// Store the card as a new memory.
    Add,
    /// The card replaces `target`: archive it, store the card (with `content` instead of the
    /// card's own, when given).
    Update { target: Uuid, content: Option<String> },
    /// The card and two or more old memories become one: archive all `targets`, store one
    /// memory with `content` (the card's own when `None`).
    Merge {
        targets: Vec<Uuid>,
        content: Option<String>,
    },
    /// The card adds nothing (a repeat of `duplicate_of`, when known): store nothing.
    Discard { duplicate_of: Option<Uuid> },
}

impl Decision {
    /// The label used in metrics and provenance.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Update { .. } => "update",
            Self::Merge { .. } => "merge",
            Self::Discard { .. } => "discard",
        }
    }
}

/// Why an engine call failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The LLM could not be reached, timed out or kept answering 429/5xx; retry the batch later.
    #[error("LLM unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The LLM answered, but not with output that fits the schema, even after the repair
    /// attempt; the batch fails visibly and is retried later.
    #[error("LLM output invalid: {0}")]
    Malformed(String),
    /// The LLM refused the request in a way a retry will not fix (400, 401, 404).
    #[error("LLM call rejected")]
    Rejected(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Turns a batch into cards.
#[async_trait::async_trait]
pub trait CardExtractor: Send + Sync + 'static {
    /// `rules` or `llm`.
    fn mode(&self) -> &'static str;
    /// Extracts the cards of `batch.turns`. Every card's `source_message_ids` are ids of
    /// `batch.turns` (never of `batch.context` alone). An empty result is a valid answer.
    async fn extract(&self, batch: &Batch) -> Result<Extraction, EngineError>;
}

/// Decides, for each new card, whether it repeats, refines or contradicts a stored memory.
#[async_trait::async_trait]
pub trait ConflictJudge: Send + Sync + 'static {
    fn mode(&self) -> &'static str;
    /// One decision per card, in order. `candidates[i]` are the stored memories closest to
    /// `cards[i]` (possibly none). Targets of `Update`, `Merge` and `Discard` must be ids from
    /// that card's own candidates; the pipeline treats any other id as `Add`.
    async fn decide(
        &self,
        batch: &Batch,
        cards: &[Card],
        candidates: &[Vec<Candidate>],
    ) -> Result<(Vec<Decision>, EngineRun), EngineError>;
}
