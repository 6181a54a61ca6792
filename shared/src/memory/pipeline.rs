//! The L1 pipeline: one batch of turns in, deduplicated memories out (issue 4, steps 1–7).
//!
//! 1. Junk filter (acknowledgements, symbols, payloads, prompt injection), counted by reason.
//! 2. Secret redaction, before any engine sees a turn and again on every card.
//! 3. The batch: up to `batch_turns` unprocessed turns plus `context_turns` earlier ones.
//! 4. Extraction by the configured engine (rules or LLM).
//! 5. (Alias normalization happens inside the LLM engine.)
//! 6. Conflict detection: candidates per card from the index (semantic top-k; keyword when
//!    the embedder is down; none when the index is down, and then every card is stored), then
//!    one judge call for the batch. If the judge fails every card is added and the provenance
//!    says so. A card is never judged against a memory of another task (see `card_task`).
//! 7. One transaction writes the memories, archives what they supersede, writes provenance,
//!    queues index work and moves the cursor, only if the cursor has not moved (see
//!    `store::memory`). The index then follows from the outbox.
//!
//! A batch whose extraction fails is recorded (metric, log, provenance record with the error)
//! and returned as an error: its turns stay past the cursor and the batch is retried later.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{junk, redact, Batch, BatchTurn, Candidate, Card, CardExtractor, ConflictJudge, Decision, EngineError};
use super::{EngineRun, Memory, MemoryStatus};
use crate::domain::{SessionKey, StoredTurn, Tenant};
use crate::embed::Embedder;
use crate::index::{Fusion, IndexPoint, IndexQuery, PointKind, SearchIndex, Strategy};
use crate::metrics;
use crate::store::memory::{BatchCommit, CommitOutcome, MemoryStore, ProvenanceRecord, EXTRACT_CONSUMER, LAYER_L1};
use crate::store::{StoreError, TranscriptStore};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("store failed")]
    Store(#[from] StoreError),
    #[error("{mode} extraction failed")]
    Extract {
        mode: &'static str,
        #[source]
        source: EngineError,
    },
    #[error("index failed")]
    Index(#[from] crate::index::IndexError),
    #[error("embedding failed")]
    Embed(#[from] crate::embed::EmbedError),
}

impl PipelineError {
    /// Every failure is worth retrying later: a malformed LLM answer may come out right the
    /// next time, and a turn must never be given up on (it is only ever delayed).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::Index(e) => e.is_retryable(),
            Self::Embed(e) => e.is_retryable(),
            Self::Extract { source, .. } => match source {
                EngineError::Unavailable(_) | EngineError::Malformed(_) => true,
                EngineError::Rejected(_) => false,
            },
        }
    }
}

/// Sizes of the pipeline (issue 4 defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineSettings {
    /// Most new turns per batch.
    pub batch_turns: u32,
    /// Earlier turns given as context.
    pub context_turns: u32,
    /// Candidates looked up per card.
    pub candidates: usize,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        Self {
            batch_turns: 10,
            context_turns: 5,
            candidates: 5,
        }
    }
}

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Turns the batch covered (junk included).
    pub turns: usize,
    pub junk: usize,
    pub cards: usize,
    pub added: usize,
    pub updated: usize,
    pub merged: usize,
    pub discarded: usize,
    /// Another run committed the same batch first; nothing was written.
    pub raced: bool,
}

#[derive(Clone)]
pub struct Pipeline {
    turns: Arc<dyn TranscriptStore>,
    memories: Arc<dyn MemoryStore>,
    index: Arc<dyn SearchIndex>,
    embedder: Option<Arc<dyn Embedder>>,
    extractor: Arc<dyn CardExtractor>,
    judge: Arc<dyn ConflictJudge>,
    settings: PipelineSettings,
}

impl Pipeline {
    pub fn new(
        turns: Arc<dyn TranscriptStore>,
        memories: Arc<dyn MemoryStore>,
        index: Arc<dyn SearchIndex>,
        embedder: Option<Arc<dyn Embedder>>,
        extractor: Arc<dyn CardExtractor>,
        judge: Arc<dyn ConflictJudge>,
        settings: PipelineSettings,
    ) -> Self {
        Self {
            turns,
            memories,
            index,
            embedder,
            extractor,
            judge,
            settings,
        }
    }

    pub fn settings(&self) -> &PipelineSettings {
        &self.settings
    }

    pub fn memories(&self) -> &Arc<dyn MemoryStore> {
        &self.memories
    }

    /// Extracts the next batch of the session: the turns past the extraction cursor, at most
    /// `batch_turns`. `None` when nothing is pending.
    #[tracing::instrument(skip(self, session), fields(session_id = %session.session_id, mode = self.extractor.mode()))]
    pub async fn run_batch(&self, session: &SessionKey) -> Result<Option<BatchReport>, PipelineError> {
        let (cursor, pending) = self
            .turns
            .pending_turns(EXTRACT_CONSUMER, session, self.settings.batch_turns)
            .await?;
        let Some(last) = pending.last() else { return Ok(None) };
        let new_cursor = last.seq;
        let (tenant, session_id) = (session.tenant.clone(), session.session_id.as_str());
        let started_at = Utc::now();
        let started = Instant::now();
        let mut report = BatchReport {
            turns: pending.len(),
            ..BatchReport::default()
        };
        ::metrics::counter!(metrics::EXTRACT_INPUT_TURNS).increment(pending.len() as u64);

        let context = self.context(&tenant, session_id, cursor).await?;
        let turns = clean(&pending, Some(&mut report.junk));
        let batch = Batch {
            tenant: tenant.clone(),
            session_id: session_id.to_owned(),
            context: clean(&context, None),
            turns,
        };

        let mut commit = BatchCommit {
            tenant: tenant.clone(),
            session_id: session_id.to_owned(),
            expected_cursor: cursor,
            new_cursor,
            memories: Vec::new(),
            archive: Vec::new(),
            provenance: Vec::new(),
            now: started_at,
        };
        if !batch.turns.is_empty() {
            let extraction = match self.extractor.extract(&batch).await {
                Ok(extraction) => extraction,
                Err(source) => return Err(self.extraction_failed(&batch, source, started_at, started).await),
            };
            stage_done("extract", started);
            let cards = sanitize_cards(extraction.cards, &batch);
            report.cards = cards.len();
            ::metrics::counter!(metrics::EXTRACT_CARDS, "mode" => self.extractor.mode()).increment(cards.len() as u64);
            let tasks: Vec<Option<String>> = cards.iter().map(|card| card_task(card, &pending)).collect();
            let judged = Instant::now();
            let (candidates, candidate_warnings) = self.candidates(&tenant, &cards, &tasks).await;
            let (decisions, judge_run, judge_warning) = match self.judge.decide(&batch, &cards, &candidates).await {
                Ok((decisions, run)) => (decisions, Some(run), None),
                Err(e) => {
                    let warning = format!(
                        "{} judge failed, every card added: {}",
                        self.judge.mode(),
                        crate::runtime::error_chain(&e)
                    );
                    tracing::warn!(session_id, warning, "conflict detection failed");
                    ::metrics::counter!(metrics::EXTRACT_JUDGE_FAILURES).increment(1);
                    (Vec::new(), None, Some(warning))
                }
            };
            stage_done("dedup", judged);
            let mut warnings = candidate_warnings;
            warnings.extend(judge_warning);
            plan(
                &mut commit,
                &mut report,
                &batch,
                cards.into_iter().zip(tasks).collect(),
                &candidates,
                &decisions,
                Planned {
                    run: &extraction.run,
                    judge: judge_run.as_ref(),
                    warnings: &warnings,
                    started_at,
                    duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
                },
            );
        }

        let committed = Instant::now();
        match self.memories.commit_batch(&commit).await? {
            CommitOutcome::Committed => {}
            CommitOutcome::CursorMoved => {
                tracing::info!(session_id, cursor, "another run extracted this batch first");
                ::metrics::counter!(metrics::EXTRACT_BATCHES, "result" => "raced").increment(1);
                return Ok(Some(BatchReport { raced: true, ..report }));
            }
            CommitOutcome::SourcesGone => {
                tracing::info!(
                    session_id,
                    cursor,
                    "the session's owner was erased; the batch is dropped"
                );
                ::metrics::counter!(metrics::EXTRACT_BATCHES, "result" => "erased").increment(1);
                return Ok(Some(BatchReport { raced: true, ..report }));
            }
        }
        stage_done("commit", committed);
        let result = if batch.turns.is_empty() { "empty" } else { "ok" };
        ::metrics::counter!(metrics::EXTRACT_BATCHES, "result" => result).increment(1);
        for (decision, n) in [
            ("add", report.added),
            ("update", report.updated),
            ("merge", report.merged),
            ("discard", report.discarded),
        ] {
            if n > 0 {
                ::metrics::counter!(metrics::EXTRACT_DECISIONS, "decision" => decision).increment(n as u64);
            }
        }
        tracing::info!(
            session_id,
            turns = report.turns,
            junk = report.junk,
            cards = report.cards,
            added = report.added,
            updated = report.updated,
            merged = report.merged,
            discarded = report.discarded,
            "extracted batch"
        );
        Ok(Some(report))
    }

    /// The `context_turns` turns up to and including the cursor.
    async fn context(&self, tenant: &Tenant, session_id: &str, cursor: i64) -> Result<Vec<StoredTurn>, PipelineError> {
        let want = i64::from(self.settings.context_turns);
        if cursor == 0 || want == 0 {
            return Ok(Vec::new());
        }
        let session = crate::domain::SessionId::parse(session_id)
            .map_err(|e| StoreError::Backend(format!("stored session id is invalid: {e}").into()))?;
        let from = (cursor - want).max(0);
        let turns = self
            .turns
            .list(tenant, &session, from, self.settings.context_turns)
            .await?;
        Ok(turns.into_iter().filter(|t| t.seq <= cursor).collect())
    }

    /// Records a failed extraction so that it is visible, and turns it into the error that
    /// makes the batch retry.
    async fn extraction_failed(
        &self,
        batch: &Batch,
        source: EngineError,
        started_at: DateTime<Utc>,
        started: Instant,
    ) -> PipelineError {
        let mode = self.extractor.mode();
        let reason = crate::runtime::error_chain(&source);
        let kind = match &source {
            EngineError::Unavailable(_) => "unavailable",
            EngineError::Malformed(_) => "malformed",
            EngineError::Rejected(_) => "rejected",
        };
        tracing::error!(session_id = %batch.session_id, mode, kind, error = %reason, "extraction failed; the batch will be retried");
        ::metrics::counter!(metrics::EXTRACT_BATCHES, "result" => "failed").increment(1);
        ::metrics::counter!(metrics::EXTRACT_FAILURES, "kind" => kind).increment(1);
        let record = ProvenanceRecord {
            id: Uuid::new_v4(),
            memory_id: None,
            tenant: batch.tenant.clone(),
            session_id: batch.session_id.clone(),
            layer: LAYER_L1.to_owned(),
            event: "failed".to_owned(),
            template: None,
            model: None,
            input_message_ids: batch.turns.iter().map(|t| t.id).collect(),
            sibling_ids: Vec::new(),
            detail: serde_json::json!({ "mode": mode, "kind": kind, "error": reason }),
            started_at,
            duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
        };
        if let Err(e) = self.memories.record_provenance(&[record]).await {
            tracing::warn!(error = %crate::runtime::error_chain(&e), "failed to record the failed extraction");
        }
        PipelineError::Extract { mode, source }
    }

    /// The stored memories closest to each card (see the module docs), with warnings about
    /// what was degraded. Only memories of the card's task (`tasks[i]`, none for none) are
    /// candidates: a card must not update or merge into another task's memory, whose
    /// successor would then leave that task (or enter this one).
    async fn candidates(
        &self,
        tenant: &Tenant,
        cards: &[Card],
        tasks: &[Option<String>],
    ) -> (Vec<Vec<Candidate>>, Vec<String>) {
        let mut warnings = Vec::new();
        if cards.is_empty() || self.settings.candidates == 0 {
            return (vec![Vec::new(); cards.len()], warnings);
        }
        let vectors = match &self.embedder {
            None => None,
            Some(embedder) => {
                let texts: Vec<String> = cards.iter().map(|c| c.content.clone()).collect();
                match embedder.embed(&texts).await {
                    Ok(vectors) if vectors.len() == cards.len() => Some(vectors),
                    Ok(_) => {
                        warnings.push("embedder returned the wrong number of vectors: keyword candidates".to_owned());
                        None
                    }
                    Err(e) => {
                        warnings.push(format!(
                            "embedder failed, keyword candidates: {}",
                            crate::runtime::error_chain(&e)
                        ));
                        None
                    }
                }
            }
        };
        let mut out = Vec::with_capacity(cards.len());
        let mut index_down = false;
        for (i, card) in cards.iter().enumerate() {
            if index_down {
                out.push(Vec::new());
                continue;
            }
            let dense = vectors.as_ref().map(|v| v[i].clone());
            let task = tasks.get(i).cloned().flatten();
            let query = IndexQuery {
                tenant: tenant.clone(),
                kind: PointKind::Memory,
                session_id: None,
                // The index can narrow to a task but not to "no task": a task-less card's
                // candidates are filtered below, and may then be fewer than `candidates`.
                task: task.clone(),
                text: card.content.clone(),
                tags: Vec::new(),
                strategy: if dense.is_some() {
                    Strategy::Semantic
                } else {
                    Strategy::Keyword
                },
                dense,
                fusion: Fusion::default(),
                limit: self.settings.candidates,
            };
            let hits = match self.index.search(&query).await {
                Ok(hits) => hits,
                Err(e) => {
                    warnings.push(format!(
                        "index failed, cards stored without dedup: {}",
                        crate::runtime::error_chain(&e)
                    ));
                    index_down = true;
                    out.push(Vec::new());
                    continue;
                }
            };
            let ids: Vec<Uuid> = hits.iter().map(|h| h.id).collect();
            let found = match self.memories.memories_by_id(tenant, &ids).await {
                Ok(found) => found,
                Err(e) => {
                    warnings.push(format!(
                        "store failed reading candidates: {}",
                        crate::runtime::error_chain(&e)
                    ));
                    Vec::new()
                }
            };
            let semantic = query.strategy == Strategy::Semantic;
            let candidates = hits
                .iter()
                .filter_map(|hit| {
                    let memory = found
                        .iter()
                        .find(|m| m.id == hit.id && m.status == MemoryStatus::Active && m.task == task)?;
                    Some(Candidate {
                        memory: memory.clone(),
                        similarity: semantic.then_some(hit.score),
                    })
                })
                .collect();
            out.push(candidates);
        }
        (out, warnings)
    }
}

fn stage_done(stage: &'static str, started: Instant) {
    ::metrics::histogram!(metrics::EXTRACT_STAGE_LATENCY, "stage" => stage).record(started.elapsed().as_secs_f64());
}

/// The task a card's memory is stored under: that of its newest source turn (the highest
/// seq), or none when that turn has none. A card may cite turns of two tasks only where the
/// session moved from one to the next within the batch; the newest is the task the
/// conversation is in when the statement was made, so it is where an agent narrowed to a
/// task will look for it. "None" instead would hide the memory from both tasks' narrowed
/// recalls.
fn card_task(card: &Card, turns: &[StoredTurn]) -> Option<String> {
    turns
        .iter()
        .filter(|turn| card.source_message_ids.contains(&turn.id))
        .max_by_key(|turn| turn.seq)
        .and_then(|turn| turn.task.clone())
}

/// Drops junk turns (counting them when `junk` is given) and redacts secrets in the rest.
fn clean(turns: &[StoredTurn], mut junk: Option<&mut usize>) -> Vec<BatchTurn> {
    let mut out = Vec::with_capacity(turns.len());
    for turn in turns {
        if let Some(reason) = junk::classify(&turn.content) {
            if let Some(count) = junk.as_deref_mut() {
                *count += 1;
                ::metrics::counter!(metrics::EXTRACT_JUNK, "reason" => reason.as_str()).increment(1);
            }
            continue;
        }
        let redacted = redact::redact(&turn.content);
        if redacted.count > 0 && junk.is_some() {
            ::metrics::counter!(metrics::EXTRACT_REDACTIONS).increment(redacted.count as u64);
        }
        out.push(BatchTurn {
            id: turn.id,
            seq: turn.seq,
            role: turn.role,
            content: redacted.text.into_owned(),
            created_at: turn.created_at,
        });
    }
    out
}

/// Makes engine output safe to store: non-empty, redacted, priority in range, sources among
/// the batch's own turns (all of them when the engine named none that are), no duplicates.
fn sanitize_cards(cards: Vec<Card>, batch: &Batch) -> Vec<Card> {
    let own: HashSet<Uuid> = batch.turns.iter().map(|t| t.id).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(cards.len());
    for mut card in cards {
        let content = redact::redact(card.content.trim()).text.into_owned();
        if content.is_empty() || !seen.insert(content.clone()) {
            continue;
        }
        card.content = content;
        // The scene label and the time are model output too, stored and recalled with the
        // memory and sent back to the model as candidates.
        card.scene = card.scene.map(|s| redact::redact(&s).text.into_owned());
        card.occurred_at = card.occurred_at.map(|t| redact::redact(&t).text.into_owned());
        card.priority = card.priority.min(super::MAX_PRIORITY);
        card.source_message_ids.retain(|id| own.contains(id));
        if card.source_message_ids.is_empty() {
            card.source_message_ids = batch.turns.iter().map(|t| t.id).collect();
        }
        out.push(card);
    }
    out
}

struct Planned<'a> {
    run: &'a EngineRun,
    judge: Option<&'a EngineRun>,
    warnings: &'a [String],
    started_at: DateTime<Utc>,
    duration_ms: i64,
}

/// Turns cards and decisions into what the commit writes. A decision that names a memory
/// that is not among its card's candidates, or a missing decision, counts as `Add`.
fn plan(
    commit: &mut BatchCommit,
    report: &mut BatchReport,
    batch: &Batch,
    cards: Vec<(Card, Option<String>)>,
    candidates: &[Vec<Candidate>],
    decisions: &[Decision],
    planned: Planned<'_>,
) {
    let now = commit.now;
    let mut records = Vec::new();
    for (i, (card, task)) in cards.into_iter().enumerate() {
        let own: Vec<Uuid> = candidates
            .get(i)
            .map(|c| c.iter().map(|c| c.memory.id).collect())
            .unwrap_or_default();
        let decision = checked(decisions.get(i).cloned().unwrap_or(Decision::Add), &own);
        let new_id = Uuid::new_v4();
        let mut detail = serde_json::json!({ "decision": decision.kind() });
        let (content, archived): (String, Vec<Uuid>) = match &decision {
            Decision::Add => (card.content.clone(), Vec::new()),
            Decision::Update { target, content } => {
                (content.clone().unwrap_or_else(|| card.content.clone()), vec![*target])
            }
            Decision::Merge { targets, content } => {
                (content.clone().unwrap_or_else(|| card.content.clone()), targets.clone())
            }
            Decision::Discard { duplicate_of } => {
                report.discarded += 1;
                detail["card"] = serde_json::json!(card.content);
                detail["duplicate_of"] = serde_json::json!(duplicate_of);
                records.push((None, card.source_message_ids.clone(), detail));
                continue;
            }
        };
        match &decision {
            Decision::Add => report.added += 1,
            Decision::Update { .. } => report.updated += 1,
            Decision::Merge { .. } => report.merged += 1,
            Decision::Discard { .. } => {}
        }
        let content = redact::redact(content.trim()).text.into_owned();
        let content = if content.is_empty() {
            card.content.clone()
        } else {
            content
        };
        if !archived.is_empty() {
            detail["archived"] = serde_json::json!(archived);
        }
        commit.archive.extend(archived.iter().map(|old| (*old, new_id)));
        commit.memories.push(Memory {
            id: new_id,
            tenant: batch.tenant.clone(),
            session_id: batch.session_id.clone(),
            content,
            category: card.category,
            priority: card.priority,
            scene: card.scene.clone(),
            occurred_at: card.occurred_at.clone(),
            source_message_ids: card.source_message_ids.clone(),
            status: MemoryStatus::Active,
            superseded_by: None,
            task,
            created_at: now,
            updated_at: now,
        });
        records.push((Some(new_id), card.source_message_ids.clone(), detail));
    }
    let siblings: Vec<Uuid> = commit.memories.iter().map(|m| m.id).collect();
    for (memory_id, inputs, mut detail) in records {
        detail["extractor"] = serde_json::json!(planned.run);
        if let Some(judge) = planned.judge {
            detail["judge"] = serde_json::json!(judge);
        }
        if !planned.warnings.is_empty() {
            detail["warnings"] = serde_json::json!(planned.warnings);
        }
        let event = detail["decision"].as_str().unwrap_or("add").to_owned();
        commit.provenance.push(ProvenanceRecord {
            id: Uuid::new_v4(),
            memory_id,
            tenant: batch.tenant.clone(),
            session_id: batch.session_id.clone(),
            layer: LAYER_L1.to_owned(),
            event,
            template: Some(planned.run.template.clone()),
            model: Some(planned.run.model.clone()),
            input_message_ids: inputs,
            sibling_ids: siblings.iter().copied().filter(|id| Some(*id) != memory_id).collect(),
            detail,
            started_at: planned.started_at,
            duration_ms: planned.duration_ms,
        });
    }
}

/// Keeps a decision only if every memory it names is one of the card's candidates.
fn checked(decision: Decision, candidates: &[Uuid]) -> Decision {
    match decision {
        Decision::Add => Decision::Add,
        Decision::Update { target, content } if candidates.contains(&target) => Decision::Update { target, content },
        Decision::Merge { targets, content } => {
            let mut targets: Vec<Uuid> = targets.into_iter().filter(|t| candidates.contains(t)).collect();
            targets.dedup();
            match targets.len() {
                0 => Decision::Add,
                1 => Decision::Update {
                    target: targets[0],
                    content,
                },
                _ => Decision::Merge { targets, content },
            }
        }
        Decision::Discard { duplicate_of } if duplicate_of.is_none_or(|d| candidates.contains(&d)) => {
            Decision::Discard { duplicate_of }
        }
        Decision::Update { .. } | Decision::Discard { .. } => Decision::Add,
    }
}

/// Keeps the memory index in step with the store, from the outbox (see `store::memory`).
#[derive(Clone)]
pub struct MemoryIndexer {
    memories: Arc<dyn MemoryStore>,
    index: Arc<dyn SearchIndex>,
    embedder: Option<Arc<dyn Embedder>>,
}

/// Outbox entries applied per round.
const OUTBOX_PAGE: u32 = 100;

impl MemoryIndexer {
    pub fn new(
        memories: Arc<dyn MemoryStore>,
        index: Arc<dyn SearchIndex>,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Self {
        Self {
            memories,
            index,
            embedder,
        }
    }

    /// Applies every outbox entry: upserts active memories, deletes the points of archived
    /// or deleted ones, then clears the entries. Returns how many entries it applied.
    pub async fn drain(&self) -> Result<usize, PipelineError> {
        let mut total = 0;
        loop {
            let entries = self.memories.outbox(OUTBOX_PAGE).await?;
            if entries.is_empty() {
                return Ok(total);
            }
            let mut by_tenant: Vec<(Tenant, Vec<Uuid>)> = Vec::new();
            for entry in &entries {
                match by_tenant.iter_mut().find(|(t, _)| *t == entry.tenant) {
                    Some((_, ids)) => ids.push(entry.memory_id),
                    None => by_tenant.push((entry.tenant.clone(), vec![entry.memory_id])),
                }
            }
            for (tenant, ids) in by_tenant {
                self.sync(&tenant, &ids).await?;
            }
            let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
            self.memories.clear_outbox(&seqs).await?;
            total += entries.len();
        }
    }

    /// Brings the index in line with the store for these memories of `tenant`: upserts the
    /// active ones, deletes the points of the others (archived, deleted, unknown). Leaves the
    /// outbox alone: for a caller that must see one change in the index now (a user's
    /// correction), while the worker's drain applies it again, harmlessly.
    pub async fn sync(&self, tenant: &Tenant, ids: &[Uuid]) -> Result<(), PipelineError> {
        let found = self.memories.memories_by_id(tenant, ids).await?;
        let active: Vec<&Memory> = found.iter().filter(|m| m.status == MemoryStatus::Active).collect();
        let gone: Vec<Uuid> = ids
            .iter()
            .copied()
            .filter(|id| !active.iter().any(|m| m.id == *id))
            .collect();
        if !active.is_empty() {
            let vectors = self.embed(&active).await?;
            let points: Vec<IndexPoint> = active
                .iter()
                .zip(vectors)
                .map(|(m, dense)| IndexPoint {
                    id: m.id,
                    kind: PointKind::Memory,
                    tenant: m.tenant.clone(),
                    session_id: m.session_id.clone(),
                    text: m.content.clone(),
                    tags: Vec::new(),
                    task: m.task.clone(),
                    dense,
                })
                .collect();
            self.index.upsert(&points).await?;
            ::metrics::counter!(metrics::MEMORIES_INDEXED, "op" => "upsert").increment(points.len() as u64);
        }
        if !gone.is_empty() {
            self.index.delete(&gone).await?;
            ::metrics::counter!(metrics::MEMORIES_INDEXED, "op" => "delete").increment(gone.len() as u64);
        }
        Ok(())
    }

    /// Dense vectors for the memories; keyword-only when there is no embedder or it refuses
    /// them for good (as the turn indexer does).
    async fn embed(&self, memories: &[&Memory]) -> Result<Vec<Option<Vec<f32>>>, PipelineError> {
        let Some(embedder) = &self.embedder else {
            return Ok(vec![None; memories.len()]);
        };
        let texts: Vec<String> = memories.iter().map(|m| m.content.clone()).collect();
        match embedder.embed(&texts).await {
            Ok(vectors) => Ok(vectors.into_iter().map(Some).collect()),
            Err(e) if !e.is_retryable() => {
                tracing::warn!(error = %crate::runtime::error_chain(&e), "embedder refused memories: keyword index only");
                ::metrics::counter!(metrics::EMBEDDING_SKIPPED).increment(memories.len() as u64);
                Ok(vec![None; memories.len()])
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_takes_the_task_of_its_newest_source_turn() {
        let turn = |seq: i64, task: Option<&str>| StoredTurn {
            id: Uuid::new_v4(),
            tenant: Tenant {
                team: "t".into(),
                agent: "a".into(),
                user: "u".into(),
            },
            session_id: "s".into(),
            seq,
            role: crate::domain::Role::User,
            content: format!("turn {seq}"),
            metadata: serde_json::Map::new(),
            client_id: None,
            created_at: Utc::now(),
            task: task.map(str::to_owned),
        };
        let turns = [
            turn(1, Some("a")),
            turn(2, Some("b")),
            turn(3, None),
            turn(4, Some("a")),
        ];
        let card = |sources: &[usize]| Card {
            content: "x".into(),
            category: super::super::Category::WorkFact,
            priority: 50,
            scene: None,
            occurred_at: None,
            source_message_ids: sources.iter().map(|&i| turns[i].id).collect(),
        };
        assert_eq!(card_task(&card(&[0]), &turns).as_deref(), Some("a"));
        assert_eq!(card_task(&card(&[1, 0]), &turns).as_deref(), Some("b"), "newest wins");
        assert_eq!(card_task(&card(&[0, 2]), &turns), None, "the newest has none");
        assert_eq!(card_task(&card(&[2, 3]), &turns).as_deref(), Some("a"));
        assert_eq!(card_task(&card(&[]), &turns), None);
    }

    #[test]
    fn decisions_naming_strangers_become_adds() {
        let (a, b, stranger) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let candidates = [a, b];
        let update = |target| Decision::Update { target, content: None };
        assert_eq!(checked(update(a), &candidates), update(a));
        assert_eq!(checked(update(stranger), &candidates), Decision::Add);
        let merge = |targets: Vec<Uuid>| Decision::Merge { targets, content: None };
        assert_eq!(checked(merge(vec![a, b]), &candidates), merge(vec![a, b]));
        assert_eq!(checked(merge(vec![a, stranger]), &candidates), update(a));
        assert_eq!(checked(merge(vec![stranger]), &candidates), Decision::Add);
        let discard = |d| Decision::Discard { duplicate_of: d };
        assert_eq!(checked(discard(Some(b)), &candidates), discard(Some(b)));
        assert_eq!(checked(discard(None), &candidates), discard(None));
        assert_eq!(checked(discard(Some(stranger)), &candidates), Decision::Add);
    }
}
