//! Recall: what an agent calls before every LLM call (DESIGN.md, "Recall contract").
//!
//! The answer has two parts, to keep the provider's prompt cache warm: a **stable** part
//! (persona, scene navigation, memory-tool guide) that changes rarely, for the end of the system
//! prompt, and a **dynamic** part (the items hit for this message), for the user-message prefix.
//! The dynamic items are L1 memories (tenant-wide: what was learned in any session) and L0
//! turns in one ranking (`fuse`): each list votes by rank, a memory stands in for its source
//! turns (it takes their votes and they are left out), and a memory's own vote is weighed by
//! `SEDIMENT_RECALL_MEMORY_WEIGHT`. The stable part comes from L2/L3 (`stable`): empty persona and navigation until the
//! owner has them, the tool guide always.
//!
//! # Never silent, never late
//! A recall has a deadline (`timeout`). The query embedding may use half of it; if it fails or
//! runs late, the recall goes on by keyword and says so (`embedding_unavailable`). If the index
//! or the store fails or the deadline passes, the response carries what was found so far and
//! an error code. Codes: `recall_timeout`, `index_unavailable`, `embedding_unavailable`,
//! `store_unavailable`.
//!
//! # Ranking signals (off by default)
//! With `recency` on, items are re-ranked by the score of seed 000: relevance (the fused score
//! scaled so the best hit is 100) + time decay `100·(1 − days/180)` (never below 0) + 30 for an
//! item from the last 30 minutes + the item's priority (0–100; L0 turns have none).

pub mod budget;
pub mod fuse;
pub mod stable;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use std::sync::Arc;

use crate::domain::{SessionId, TaskId, Tenant, MEMORY_BLOCK_END, MEMORY_BLOCK_START};
use crate::index::{IndexError, PointKind, Strategy};
use crate::memory::{Category, Memory, MemoryStatus};
use crate::metrics;
use crate::search::{ConversationHit, ConversationQuery, ConversationSearch, QueryVector, SearchError};
use crate::store::memory::MemoryStore;
pub use budget::Budget;

/// The deadline passed before the index or the store answered.
pub const RECALL_TIMEOUT: &str = "recall_timeout";
/// The search index failed.
pub const INDEX_UNAVAILABLE: &str = "index_unavailable";
/// The query could not be embedded (provider down, slow, or none configured): keyword only.
pub const EMBEDDING_UNAVAILABLE: &str = "embedding_unavailable";
/// The store failed while reading the hits.
pub const STORE_UNAVAILABLE: &str = "store_unavailable";

#[derive(Debug, Clone)]
pub struct RecallRequest {
    pub query: String,
    pub session: Option<SessionId>,
    /// Narrows the dynamic part, memories and turns, to this task; the stable part is the
    /// owner's whatever the task.
    pub task: Option<TaskId>,
    pub strategy: Strategy,
    pub limit: usize,
    pub budget: Budget,
    pub timeout: Duration,
    /// Re-rank by time decay, the 30-minute boost and priority (see the module docs).
    pub recency: bool,
}

/// What `Recall::search_memories` found: memories with their scores, best first.
#[derive(Debug)]
pub struct MemorySearch {
    pub items: Vec<(Memory, f32)>,
    pub errors: Vec<RecallIssue>,
    /// The strategy that ranked them (`keyword` when the embedder was unavailable).
    pub strategy: Strategy,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct StablePart {
    pub persona: String,
    pub scene_navigation: String,
    pub tools_guide: String,
}

/// Where an item came from.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Source {
    Turn {
        session_id: String,
        seq: i64,
        role: &'static str,
        created_at: DateTime<Utc>,
        /// The turn's task, `None` when it has none.
        task: Option<String>,
    },
    Memory {
        session_id: String,
        category: Category,
        priority: u8,
        scene: Option<String>,
        occurred_at: Option<String>,
        source_message_ids: Vec<Uuid>,
        created_at: DateTime<Utc>,
        /// The memory's task, `None` when it has none.
        task: Option<String>,
    },
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RecallItem {
    pub id: Uuid,
    pub kind: &'static str,
    /// The item's text, within the budget, wrapped in the injected-memory markers.
    pub content: String,
    pub score: f32,
    pub source: Source,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RecallIssue {
    pub code: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RecallResponse {
    pub stable: StablePart,
    pub dynamic: Vec<RecallItem>,
    /// Whether an item was cut or dropped to fit the budget.
    pub truncated: bool,
    pub errors: Vec<RecallIssue>,
    /// The strategy that ranked the items (`keyword` when the embedder was unavailable).
    pub strategy: Strategy,
}

/// What an item is, while it is ranked and fitted.
enum Found {
    Memory(Memory),
    Turn(ConversationHit),
}

/// An item while it is ranked and fitted; wrapped in the markers only at the end.
struct Candidate {
    found: Found,
    text: String,
    score: f32,
}

impl Candidate {
    fn created_at(&self) -> DateTime<Utc> {
        match &self.found {
            Found::Memory(m) => m.created_at,
            Found::Turn(hit) => hit.turn.created_at,
        }
    }

    fn priority(&self) -> Option<u8> {
        match &self.found {
            Found::Memory(m) => Some(m.priority),
            Found::Turn(_) => None,
        }
    }
}

impl budget::Budgeted for Candidate {
    fn text_mut(&mut self) -> &mut String {
        &mut self.text
    }
    fn score(&self) -> f32 {
        self.score
    }
}

#[derive(Clone)]
pub struct Recall {
    search: ConversationSearch,
    memories: Arc<dyn MemoryStore>,
    stable: Option<stable::StableSource>,
    /// The RRF constant of the memory and turn fusion.
    rrf_k: usize,
    /// How much a memory's own rank counts beside the turns it stands for (`fuse`).
    memory_weight: f32,
}

/// `SEDIMENT_RECALL_MEMORY_WEIGHT`'s default: memories place by the turns they stand for.
/// `recall_e2e --quick`, R@10 of recall (search hybrid alongside): chit-chat 66.2 at 0 and 66.2
/// at 1 (R@5 61.8 against 54.4; search 61.8/66.2), synthetic 74.4 at 0 and 71.3 at 1 (search
/// 74.4); before the fusion recall was 44.5 on synthetic and 21.7 on the full chit-chat set.
pub const DEFAULT_MEMORY_WEIGHT: f32 = 0.0;

impl Recall {
    pub fn new(search: ConversationSearch, memories: Arc<dyn MemoryStore>) -> Self {
        Self {
            search,
            memories,
            stable: None,
            rrf_k: 60,
            memory_weight: DEFAULT_MEMORY_WEIGHT,
        }
    }

    /// How memories and turns are fused into one ranking (see `fuse`).
    pub fn with_ranking(mut self, rrf_k: usize, memory_weight: f32) -> Self {
        self.rrf_k = rrf_k;
        self.memory_weight = memory_weight;
        self
    }

    /// Fills the stable part from the owner's persona and scenes.
    pub fn with_stable(mut self, source: stable::StableSource) -> Self {
        self.stable = Some(source);
        self
    }

    /// The stable part, under the recall's deadline; a failure is an issue, not an error.
    async fn stable(&self, tenant: &Tenant, started: Instant, timeout: Duration) -> (StablePart, Option<RecallIssue>) {
        let Some(source) = &self.stable else {
            return (StablePart::default(), None);
        };
        let deadline = tokio::time::Instant::from_std(started + timeout);
        match tokio::time::timeout_at(deadline, source.stable(tenant)).await {
            Ok(Ok((part, persona_error))) => (part, persona_error.map(|e| issue(STORE_UNAVAILABLE, &e))),
            Ok(Err(e)) => (
                StablePart {
                    tools_guide: stable::TOOLS_GUIDE.to_owned(),
                    ..StablePart::default()
                },
                Some(issue(STORE_UNAVAILABLE, &e)),
            ),
            Err(_) => (
                StablePart {
                    tools_guide: stable::TOOLS_GUIDE.to_owned(),
                    ..StablePart::default()
                },
                Some(timeout_issue(timeout, "the persona and scenes")),
            ),
        }
    }

    #[tracing::instrument(skip_all, fields(strategy = request.strategy.as_str(), limit = request.limit))]
    pub async fn recall(&self, tenant: &Tenant, request: &RecallRequest) -> RecallResponse {
        let started = Instant::now();
        let mut errors = Vec::new();
        let ((memories, hits, strategy), (stable, stable_issue)) = tokio::join!(
            self.find(tenant, request, started, &mut errors),
            self.stable(tenant, started, request.timeout)
        );
        errors.extend(stable_issue);
        let memories = memories.into_iter().map(|(memory, score)| Candidate {
            text: memory.content.clone(),
            score,
            found: Found::Memory(memory),
        });
        let turns = hits.into_iter().map(|hit| Candidate {
            text: hit.turn.content.clone(),
            score: hit.score,
            found: Found::Turn(hit),
        });
        let mut candidates: Vec<Candidate> = memories.chain(turns).collect();
        if request.recency {
            rerank_by_recency(&mut candidates, Utc::now());
        }
        let truncated = budget::apply(&mut candidates, request.budget);
        let dynamic: Vec<RecallItem> = candidates.into_iter().map(into_item).collect();

        // One issue per code: the memory and turn searches often fail for the same reason.
        let mut seen = std::collections::HashSet::new();
        errors.retain(|e| seen.insert(e.code));
        let result = errors.first().map_or("ok", |e: &RecallIssue| e.code);
        ::metrics::counter!(metrics::RECALLS, "strategy" => strategy.as_str(), "result" => result).increment(1);
        ::metrics::histogram!(metrics::RECALL_LATENCY).record(started.elapsed().as_secs_f64());
        ::metrics::histogram!(metrics::RECALL_ITEMS).record(dynamic.len() as f64);
        for error in &errors {
            ::metrics::counter!(metrics::RECALL_ERRORS, "code" => error.code).increment(1);
            tracing::warn!(code = error.code, message = %error.message, "recall degraded");
        }
        RecallResponse {
            stable,
            dynamic,
            truncated,
            errors,
            strategy,
        }
    }

    /// The query's vector, within `embed_deadline`; when it fails or runs late the query goes
    /// on by keyword (a semantic one too) and `errors` says why.
    async fn embed(
        &self,
        query: &mut ConversationQuery,
        embed_deadline: tokio::time::Instant,
        timeout: Duration,
        errors: &mut Vec<RecallIssue>,
    ) -> QueryVector {
        let vector = match tokio::time::timeout_at(
            embed_deadline,
            self.search.query_vector(&query.text, query.strategy),
        )
        .await
        {
            Ok(Ok(QueryVector::Failed(e))) | Ok(Err(SearchError::Embed(e))) => {
                errors.push(issue(EMBEDDING_UNAVAILABLE, &e));
                QueryVector::NotNeeded
            }
            Ok(Ok(vector)) => vector,
            Ok(Err(e)) => {
                errors.push(issue(EMBEDDING_UNAVAILABLE, &e));
                QueryVector::NotNeeded
            }
            Err(_) => {
                errors.push(RecallIssue {
                    code: EMBEDDING_UNAVAILABLE,
                    message: format!(
                        "the query embedding took longer than {} ms; ranked by keyword",
                        (timeout / 2).as_millis()
                    ),
                });
                QueryVector::NotNeeded
            }
        };
        if matches!(vector, QueryVector::NotNeeded) && query.strategy == Strategy::Semantic {
            // Nothing semantic can run; keyword is better than nothing, and the error says why.
            query.strategy = Strategy::Keyword;
        }
        vector
    }

    /// The tenant's active memories that match `query` (its session is ignored: memories are
    /// the user's, whatever session taught them), best first, at most `query.limit`:
    /// `POST /v1/memories/search`. Like a recall it answers with what it found when a backend
    /// fails or the deadline passes, and says so in `errors`.
    pub async fn search_memories(
        &self,
        tenant: &Tenant,
        mut query: ConversationQuery,
        timeout: Duration,
    ) -> MemorySearch {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + timeout);
        let mut errors = Vec::new();
        let vector = self
            .embed(
                &mut query,
                tokio::time::Instant::from_std(started + timeout / 2),
                timeout,
                &mut errors,
            )
            .await;
        let mut items = self
            .find_memories(tenant, &query, &vector, deadline, timeout, &mut errors)
            .await;
        items.truncate(query.limit);
        let mut seen = std::collections::HashSet::new();
        errors.retain(|e| seen.insert(e.code));
        MemorySearch {
            items,
            errors,
            strategy: effective(query.strategy, &vector),
        }
    }

    /// Runs the query under the deadline; whatever fails is recorded in `errors` and the hits
    /// found before it are kept.
    async fn find(
        &self,
        tenant: &Tenant,
        request: &RecallRequest,
        started: Instant,
        errors: &mut Vec<RecallIssue>,
    ) -> (Vec<(Memory, f32)>, Vec<ConversationHit>, Strategy) {
        let deadline = tokio::time::Instant::from_std(started + request.timeout);
        let embed_deadline = tokio::time::Instant::from_std(started + request.timeout / 2);
        let mut query = ConversationQuery {
            text: request.query.clone(),
            limit: request.limit,
            session: request.session.clone(),
            task: request.task.clone(),
            strategy: request.strategy,
        };

        let vector = self.embed(&mut query, embed_deadline, request.timeout, errors).await;

        let memories = self
            .find_memories(tenant, &query, &vector, deadline, request.timeout, errors)
            .await;
        // Enough turns to fill every slot even after those the memories stand for are left out.
        let covered: std::collections::HashSet<Uuid> = memories
            .iter()
            .flat_map(|(m, _)| m.source_message_ids.iter().copied())
            .collect();
        let ask = ConversationQuery {
            limit: query.limit + covered.len(),
            ..query.clone()
        };
        let (mut hits, strategy) =
            match tokio::time::timeout_at(deadline, self.search.index_hits(tenant, &ask, &vector)).await {
                Ok(Ok(found)) => found,
                Ok(Err(e)) => {
                    errors.push(index_issue(&e));
                    return (memories, Vec::new(), effective(query.strategy, &vector));
                }
                Err(_) => {
                    errors.push(timeout_issue(request.timeout, "the index"));
                    return (memories, Vec::new(), effective(query.strategy, &vector));
                }
            };
        match tokio::time::timeout_at(deadline, self.search.complete_small_scope(tenant, &ask, &mut hits)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(index_issue(&e)),
            Err(_) => errors.push(timeout_issue(request.timeout, "the index")),
        }
        let fused = {
            let memory_votes: Vec<fuse::MemoryVote<'_>> = memories
                .iter()
                .map(|(m, score)| fuse::MemoryVote {
                    score: *score,
                    sources: &m.source_message_ids,
                })
                .collect();
            let turn_votes: Vec<fuse::TurnVote> = hits
                .iter()
                .map(|h| fuse::TurnVote {
                    id: h.id,
                    score: h.score,
                })
                .collect();
            fuse::fuse(&memory_votes, &turn_votes, query.limit, self.rrf_k, self.memory_weight)
        };
        let mut memories: Vec<Option<Memory>> = memories.into_iter().map(|(m, _)| Some(m)).collect();
        let mut chosen_memories = Vec::new();
        let mut chosen_turns = Vec::new();
        for item in fused {
            match item {
                fuse::Fused::Memory(i, score) => chosen_memories.extend(memories[i].take().map(|m| (m, score))),
                fuse::Fused::Turn(i, score) => chosen_turns.push(crate::index::IndexHit { id: hits[i].id, score }),
            }
        }
        match tokio::time::timeout_at(deadline, self.search.hydrate(tenant, chosen_turns)).await {
            Ok(Ok(hits)) => (chosen_memories, hits, strategy),
            Ok(Err(e)) => {
                errors.push(issue(STORE_UNAVAILABLE, &e));
                (chosen_memories, Vec::new(), strategy)
            }
            Err(_) => {
                errors.push(timeout_issue(request.timeout, "the store"));
                (chosen_memories, Vec::new(), strategy)
            }
        }
    }

    /// The tenant's active L1 memories that match the query, best first, with their scores.
    async fn find_memories(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery,
        vector: &QueryVector,
        deadline: tokio::time::Instant,
        timeout: Duration,
        errors: &mut Vec<RecallIssue>,
    ) -> Vec<(Memory, f32)> {
        // Memories are the user's, whatever session taught them; the task still narrows them.
        let query = ConversationQuery {
            session: None,
            ..query.clone()
        };
        let search = async {
            let (mut hits, _) = self.search.kind_hits(PointKind::Memory, tenant, &query, vector).await?;
            self.search
                .complete_small_kind_scope(PointKind::Memory, tenant, &query, &mut hits)
                .await?;
            Ok::<_, SearchError>(hits)
        };
        let hits = match tokio::time::timeout_at(deadline, search).await {
            Ok(Ok(hits)) => hits,
            Ok(Err(e)) => {
                errors.push(index_issue(&e));
                return Vec::new();
            }
            Err(_) => {
                errors.push(timeout_issue(timeout, "the index"));
                return Vec::new();
            }
        };
        if hits.is_empty() {
            return Vec::new();
        }
        let ids: Vec<Uuid> = hits.iter().map(|h| h.id).collect();
        let found = match tokio::time::timeout_at(deadline, self.memories.memories_by_id(tenant, &ids)).await {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => {
                errors.push(issue(STORE_UNAVAILABLE, &e));
                return Vec::new();
            }
            Err(_) => {
                errors.push(timeout_issue(timeout, "the store"));
                return Vec::new();
            }
        };
        let mut by_id: std::collections::HashMap<Uuid, Memory> = found
            .into_iter()
            .filter(|m| m.status == MemoryStatus::Active)
            .map(|m| (m.id, m))
            .collect();
        // A point whose memory is gone or archived is stale until the outbox catches up.
        hits.into_iter()
            .filter_map(|hit| by_id.remove(&hit.id).map(|m| (m, hit.score)))
            .collect()
    }
}

/// The strategy a query ran with, given its vector.
fn effective(strategy: Strategy, vector: &QueryVector) -> Strategy {
    match (strategy, vector) {
        (Strategy::Hybrid, QueryVector::NotNeeded | QueryVector::Failed(_)) => Strategy::Keyword,
        (strategy, _) => strategy,
    }
}

fn issue(code: &'static str, error: &dyn std::error::Error) -> RecallIssue {
    RecallIssue {
        code,
        message: crate::runtime::error_chain(error),
    }
}

fn index_issue(error: &SearchError) -> RecallIssue {
    match error {
        SearchError::Index(IndexError::Unavailable(_) | IndexError::Backend(_)) => issue(INDEX_UNAVAILABLE, error),
        SearchError::Store(_) => issue(STORE_UNAVAILABLE, error),
        SearchError::Embed(_) | SearchError::NoEmbedder => issue(EMBEDDING_UNAVAILABLE, error),
    }
}

fn timeout_issue(timeout: Duration, waiting_for: &str) -> RecallIssue {
    RecallIssue {
        code: RECALL_TIMEOUT,
        message: format!(
            "the recall deadline of {} ms passed while waiting for {waiting_for}",
            timeout.as_millis()
        ),
    }
}

/// The seed-000 score (see the module docs), for an item with relevance `relevance` (0–100).
pub fn recency_score(relevance: f32, created_at: DateTime<Utc>, priority: Option<u8>, now: DateTime<Utc>) -> f32 {
    let age = now - created_at;
    let days = age.num_seconds().max(0) as f32 / 86_400.0;
    let decay = (100.0 * (1.0 - days / 180.0)).max(0.0);
    let boost = if age <= chrono::Duration::minutes(30) {
        30.0
    } else {
        0.0
    };
    relevance + decay + boost + f32::from(priority.unwrap_or(0).min(100))
}

fn rerank_by_recency(candidates: &mut [Candidate], now: DateTime<Utc>) {
    let best = candidates.iter().map(|c| c.score).fold(0.0_f32, f32::max);
    for candidate in candidates.iter_mut() {
        let relevance = if best > 0.0 {
            100.0 * candidate.score / best
        } else {
            0.0
        };
        candidate.score = recency_score(relevance, candidate.created_at(), candidate.priority(), now);
    }
    candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
}

fn into_item(candidate: Candidate) -> RecallItem {
    let content = format!("{MEMORY_BLOCK_START}{}{MEMORY_BLOCK_END}", candidate.text);
    match candidate.found {
        Found::Turn(hit) => {
            let turn = hit.turn;
            RecallItem {
                id: turn.id,
                kind: "turn",
                content,
                score: candidate.score,
                source: Source::Turn {
                    session_id: turn.session_id,
                    seq: turn.seq,
                    role: turn.role.as_str(),
                    created_at: turn.created_at,
                    task: turn.task,
                },
            }
        }
        Found::Memory(memory) => RecallItem {
            id: memory.id,
            kind: "memory",
            content,
            score: candidate.score,
            source: Source::Memory {
                session_id: memory.session_id,
                category: memory.category,
                priority: memory.priority,
                scene: memory.scene,
                occurred_at: memory.occurred_at,
                source_message_ids: memory.source_message_ids,
                created_at: memory.created_at,
                task: memory.task,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recency_score_follows_seed_000() {
        let now = Utc::now();
        let score = |days: i64, relevance: f32| recency_score(relevance, now - chrono::Duration::days(days), None, now);
        assert!((score(30, 50.0) - (50.0 + 100.0 * (1.0 - 30.0 / 180.0))).abs() < 0.01);
        assert_eq!(score(400, 0.0), 0.0, "decay never goes below zero");
        let fresh = recency_score(0.0, now - chrono::Duration::minutes(20), None, now);
        assert!((fresh - 130.0).abs() < 0.1, "30-minute boost: {fresh}");
        let prioritized = recency_score(0.0, now - chrono::Duration::days(180), Some(70), now);
        assert!((prioritized - 70.0).abs() < 0.01);
    }
}
