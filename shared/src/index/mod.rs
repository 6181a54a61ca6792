//! The search index port: points with a BM25 sparse vector (IDF modifier), an optional dense
//! vector, and tenant payload; queries by keyword, by meaning, or both fused by RRF.
//!
//! Backends: `edge` (Qdrant Edge, in-process) and `qdrant` (a Qdrant server, over gRPC), used
//! when configured. One project-owned point and query model; each backend is a thin adapter.
//! Both run `testsuite::search_index_suite`.
//!
//! Sparse vectors are computed here, client side, by one BM25 model (`Bm25`) for both
//! backends, so a query scores the same wherever it runs, and one [`Plan`] says which
//! channels a query runs, so it ranks the same wherever it runs.

mod bm25;
mod edge;
mod qdrant;
#[cfg(feature = "testing")]
pub mod testsuite;

use async_trait::async_trait;
use uuid::Uuid;

use crate::domain::Tenant;

pub use bm25::{Bm25, SparseVector, TEXT_VERSION};
pub use edge::{
    index_build_threads, EdgeIndex, DEFAULT_BACKGROUND_NICE, DEFAULT_MAX_SEGMENT_KB, DEFAULT_MIN_FREE_MB,
    KEYWORD_MAX_SEGMENT_KB,
};
pub use qdrant::QdrantIndex;

/// Name of the BM25 sparse vector, in an edge shard and in a server collection alike.
pub const BM25_VECTOR: &str = "bm25";
/// Name of the dense vector (cosine distance), in both backends.
pub const DENSE_VECTOR: &str = "dense";

/// Checks a dense vector against the index's dimension: a vector of the wrong length would be
/// rejected by the engine with a less helpful message, and one without a configured dimension
/// means the caller embeds with a model the index was not built for.
fn check_dense(dense: &[f32], dimension: Option<usize>) -> IndexResult<()> {
    match dimension {
        Some(d) if d == dense.len() => Ok(()),
        Some(d) => Err(IndexError::Backend(
            format!("dense vector has {} dimensions, the index {d}", dense.len()).into(),
        )),
        None => Err(IndexError::Backend(
            "the index was opened without dense vectors (no embedder configured)".into(),
        )),
    }
}

// The payload of every point, the same in both backends, each field with a keyword index:
// - `scope`: tenant and kind in one value ([`scope_value`]). One field instead of four keeps
//   writes cheaper (measured with `bench_index stream`: 20 % less CPU per point, since every
//   field index is updated on each write and rebuilt by the optimizer), and a query's filter
//   is one lookup.
// - `session_id`, for queries within one session.
// - `tags`, the point's [`IndexPoint::tags`], an array; absent when there are none.
// - `task`, the point's [`IndexPoint::task`]; absent when it has none.
const SCOPE: &str = "scope";
const SESSION_ID: &str = "session_id";
const TAGS: &str = "tags";
const TASK: &str = "task";
const KEYWORD_FIELDS: [&str; 4] = [SCOPE, SESSION_ID, TAGS, TASK];

/// The version of the payload layout above; bump it with any change to the fields that makes
/// existing points wrong for this build's queries. "2": one `scope` field instead of
/// `team_id`, `agent_id`, `user_id` and `kind`; "3": `tags`. Adding `task` did not bump it:
/// points written before it have no task, which is what their turns and memories have, so no
/// query reads them wrongly, and both backends create the new field's index on every open.
const PAYLOAD_VERSION: &str = "3";

/// What an index records of how its points were made: the text analysis ([`TEXT_VERSION`]) and
/// the payload layout. An index that records anything else is rebuilt (Edge) or refused (a
/// server collection): its keyword vectors or its filters would not match this build's queries.
fn index_version() -> String {
    format!("text {TEXT_VERSION}, payload {PAYLOAD_VERSION}")
}

/// The `scope` value of a tenant's points of a kind: a JSON array of team, agent, user and
/// kind, so no two tenants share one whatever their ids contain.
fn scope_value(tenant: &Tenant, kind: PointKind) -> String {
    serde_json::json!([tenant.team, tenant.agent, tenant.user, kind.as_str()]).to_string()
}

/// The payload of a point as (field, value) pairs; each backend writes exactly these. A point
/// without tags has no `tags` field, which costs its keyword index nothing.
fn payload_terms(point: &IndexPoint) -> Vec<(&'static str, PayloadValue)> {
    let mut terms = vec![
        (SCOPE, PayloadValue::One(scope_value(&point.tenant, point.kind))),
        (SESSION_ID, PayloadValue::One(point.session_id.clone())),
    ];
    if !point.tags.is_empty() {
        terms.push((TAGS, PayloadValue::Many(point.tags.clone())));
    }
    terms.extend(point.task.clone().map(|task| (TASK, PayloadValue::One(task))));
    terms
}

/// A keyword payload value: one string, or an array of them (matched if any element is).
#[derive(Debug, Clone, PartialEq)]
enum PayloadValue {
    One(String),
    Many(Vec<String>),
}

/// The exact keyword matches that scope a query: tenant and kind and, if given, session and
/// task. Both backends translate these and nothing else, so tenant isolation has one
/// definition. Without a task every point of the scope matches, with a task or without.
fn scope_terms(
    tenant: &Tenant,
    kind: PointKind,
    session_id: Option<&str>,
    task: Option<&str>,
) -> Vec<(&'static str, String)> {
    let mut terms = vec![(SCOPE, scope_value(tenant, kind))];
    terms.extend(session_id.map(|s| (SESSION_ID, s.to_owned())));
    terms.extend(task.map(|t| (TASK, t.to_owned())));
    terms
}

pub type IndexResult<T> = Result<T, IndexError>;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("search index unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("search index failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl IndexError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::Backend(_) => false,
        }
    }
}

/// What kind of item a point stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    /// An L0 turn.
    Turn,
    /// An L1 memory (active ones only: archived and deleted memories leave the index).
    Memory,
}

impl PointKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Turn => "turn",
            Self::Memory => "memory",
        }
    }
}

/// One indexed item. `id` is deterministic (the item's own id), so indexing twice overwrites.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexPoint {
    pub id: Uuid,
    pub kind: PointKind,
    pub tenant: Tenant,
    pub session_id: String,
    /// The text the BM25 vector is computed from.
    pub text: String,
    /// Exact-match labels a query can narrow a channel to ([`IndexQuery::tags`]); for turns,
    /// the days and month they are about and their speaker (`retrieval::turn_tags`). Kept out of `text` on
    /// purpose: a label that most recent points share would be a BM25 token with a posting list
    /// as long as the appendable segment, and edge walks the whole list on every append.
    pub tags: Vec<String>,
    /// The task of the turn or memory; a query with a task finds only the points of it.
    pub task: Option<String>,
    /// The dense vector (of the index's dimension), or `None` when no embedder is configured:
    /// such a point is found by keyword queries only.
    pub dense: Option<Vec<f32>>,
}

/// How a query ranks its hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// BM25 over the sparse vector.
    Keyword,
    /// Nearest dense vectors (cosine).
    Semantic,
    /// Both, fused by reciprocal rank fusion in one query to the index.
    #[default]
    Hybrid,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keyword => "keyword",
            Self::Semantic => "semantic",
            Self::Hybrid => "hybrid",
        }
    }
}

/// Parameters of the hybrid query: each channel prefetches its own candidates, then RRF fuses
/// them. The index computes a candidate at 0-based position `p` of a channel with weight `w`
/// as `1 / ((p + 1) / w + k - 1)`, i.e. the textbook `1 / (k + rank)` for `w = 1`
/// ([`rrf_score`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    pub keyword_prefetch: usize,
    pub semantic_prefetch: usize,
    pub rrf_k: usize,
    /// Weights of the keyword and semantic channels; `None` weighs both 1.
    pub weights: Option<(f32, f32)>,
}

impl Default for Fusion {
    fn default() -> Self {
        Self {
            keyword_prefetch: 50,
            semantic_prefetch: 50,
            rrf_k: 60,
            weights: None,
        }
    }
}

/// The fused score the index gives a candidate at 0-based `position` of one channel; a
/// candidate found by both channels gets the sum. Mirrors Qdrant's formula, so callers and
/// tests can reason about fused scores.
pub fn rrf_score(position: usize, k: usize, weight: f32) -> f32 {
    if weight <= 0.0 {
        return 0.0;
    }
    1.0 / ((position + 1) as f32 / weight + k as f32 - 1.0)
}

/// A tenant-scoped query.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexQuery {
    pub tenant: Tenant,
    pub kind: PointKind,
    pub session_id: Option<String>,
    /// Only the points of this task; `None`: every point, with a task or without.
    pub task: Option<String>,
    /// The text the BM25 query vector is computed from.
    pub text: String,
    /// Labels the query is about (the dates and people it mentions, `retrieval::QueryText::tags`). When
    /// there are any, each channel that runs also runs once more over only the points that
    /// carry one of them, and all are fused by RRF (so a keyword query is then fused too): a
    /// point about the right date that matches the words gets two votes instead of one.
    pub tags: Vec<String>,
    /// The query's dense vector. `Semantic` needs it; `Hybrid` without it ranks by keyword
    /// alone; `Keyword` ignores it.
    pub dense: Option<Vec<f32>>,
    pub strategy: Strategy,
    pub fusion: Fusion,
    pub limit: usize,
}

impl IndexQuery {
    /// A semantic query needs its vector; there is no keyword fallback for it.
    fn validate(&self) -> IndexResult<()> {
        if self.strategy == Strategy::Semantic && self.dense.is_none() {
            return Err(IndexError::Backend("a semantic query needs a dense vector".into()));
        }
        Ok(())
    }

    /// Whether the keyword channel runs (every strategy but `Semantic`).
    fn uses_keyword(&self) -> bool {
        self.strategy != Strategy::Semantic
    }

    /// The vector the semantic channel runs with, if it runs (a vector is given and the
    /// strategy is not `Keyword`), checked against the index's dimension. One definition of
    /// the channel rules for both backends.
    fn semantic_vector(&self, dimension: Option<usize>) -> IndexResult<Option<&[f32]>> {
        match &self.dense {
            Some(dense) if self.strategy != Strategy::Keyword => {
                check_dense(dense, dimension)?;
                Ok(Some(dense))
            }
            Some(_) | None => Ok(None),
        }
    }

    /// The channels this query runs, given its BM25 vector (computed by the backend; `None`
    /// or empty when the text has no token) and the index's dense dimension. Both backends
    /// translate the plan and decide nothing themselves, so a query ranks alike in each.
    fn plan<'q>(&'q self, keyword: Option<SparseVector>, dimension: Option<usize>) -> IndexResult<Plan<'q>> {
        let fusion = &self.fusion;
        let (keyword_weight, semantic_weight) = fusion.weights.unwrap_or((1.0, 1.0));
        let mut base = Vec::with_capacity(2);
        if let Some(vector) = keyword.filter(|v| self.uses_keyword() && !v.is_empty()) {
            base.push((Ranking::Keyword(vector), fusion.keyword_prefetch, keyword_weight));
        }
        if let Some(dense) = self.semantic_vector(dimension)? {
            base.push((Ranking::Semantic(dense), fusion.semantic_prefetch, semantic_weight));
        }
        let channel = |(ranking, prefetch, weight): &(Ranking<'q>, usize, f32), tags: &'q [String]| Channel {
            ranking: ranking.clone(),
            tags,
            limit: (*prefetch).max(self.limit),
            weight: *weight,
        };
        // Every channel gets a tagged copy: measured on both seeds of `recall_quality`, a copy
        // of the keyword channel alone lifted temporal R@1 from about 60 % to 88-90 %, copies of
        // both to 95-97 % (tests/QUALITY.md).
        let tagged = base.iter().filter(|_| !self.tags.is_empty());
        let mut channels: Vec<Channel<'q>> = base
            .iter()
            .map(|b| channel(b, &[]))
            .chain(tagged.map(|b| channel(b, &self.tags)))
            .collect();
        if channels.len() <= 1 {
            return Ok(channels.pop().map_or(Plan::Nothing, |c| Plan::Direct(c.ranking)));
        }
        let weights = channels
            .iter()
            .any(|c| c.weight != 1.0)
            .then(|| channels.iter().map(|c| c.weight).collect());
        Ok(Plan::Fused {
            channels,
            rrf_k: fusion.rrf_k,
            weights,
        })
    }
}

/// What a channel ranks by.
#[derive(Debug, Clone, PartialEq)]
enum Ranking<'q> {
    /// BM25 over the sparse vector.
    Keyword(SparseVector),
    /// Cosine similarity to the dense vector.
    Semantic(&'q [f32]),
}

/// One prefetch of a fused query.
#[derive(Debug, Clone, PartialEq)]
struct Channel<'q> {
    ranking: Ranking<'q>,
    /// Only points carrying one of these tags; empty: every point in the query's scope.
    tags: &'q [String],
    limit: usize,
    weight: f32,
}

/// How a query runs.
#[derive(Debug, Clone, PartialEq)]
enum Plan<'q> {
    /// No channel can run (no token, no vector): no hits.
    Nothing,
    /// One channel, ranked by its own score.
    Direct(Ranking<'q>),
    /// Each channel prefetches its candidates, then RRF with `rrf_k` fuses them; `weights`
    /// (one per channel) when any channel weighs other than 1.
    Fused {
        channels: Vec<Channel<'q>>,
        rrf_k: usize,
        weights: Option<Vec<f32>>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct IndexHit {
    pub id: Uuid,
    pub score: f32,
}

#[async_trait]
pub trait SearchIndex: Send + Sync + 'static {
    /// Inserts or overwrites points (by id). Returns once they are durable (edge: flushed and
    /// fsynced; server: `wait=true`) and visible to `search` and `count`. A point whose text
    /// has no searchable token is stored too. An empty slice is a no-op.
    async fn upsert(&self, points: &[IndexPoint]) -> IndexResult<()>;

    /// `upsert`, but it may return before the points are durable: they are visible to `search`
    /// and `count` at once, and a later `sync` makes them durable; a crash before that may
    /// lose them. For a writer that records its progress elsewhere and can make one `sync`
    /// cover many writes (see `defers_sync`). By default, `upsert`.
    async fn upsert_unsynced(&self, points: &[IndexPoint]) -> IndexResult<()> {
        self.upsert(points).await
    }

    /// Makes every write that returned before this call durable. By default a no-op, for
    /// backends whose writes are durable on return.
    async fn sync(&self) -> IndexResult<()> {
        Ok(())
    }

    /// Whether `upsert_unsynced` leaves durability to `sync`. Only then is it worth a writer's
    /// while to hold back the record of its progress until a `sync`.
    fn defers_sync(&self) -> bool {
        false
    }

    /// Returns up to `limit` hits within the tenant and kind (and session and task, if given), best
    /// first, ranked by the query's strategy:
    /// - `Keyword`: BM25 score; an empty or all-stopword text returns no hits.
    /// - `Semantic`: cosine similarity to `dense` (required); points without a dense vector
    ///   are never returned.
    /// - `Hybrid`: both channels prefetch (`fusion`), then RRF; the score is the fused one.
    ///   Without `dense` it is `Keyword`; with a text that has no token, `Semantic`.
    ///
    /// `limit` 0 returns no hits.
    async fn search(&self, query: &IndexQuery) -> IndexResult<Vec<IndexHit>>;

    /// Returns the ids of up to `limit` points in the scope (tenant, kind, session and task if
    /// given), in no particular order. Used when a scope holds fewer items than a query's
    /// limit, where ranking says little and everything is returned.
    async fn scope_ids(
        &self,
        tenant: &Tenant,
        kind: PointKind,
        session_id: Option<&str>,
        task: Option<&str>,
        limit: usize,
    ) -> IndexResult<Vec<Uuid>>;

    /// The dimension of the dense vectors this index holds, or `None` for keyword only.
    fn dense_dimension(&self) -> Option<usize>;

    /// Whether opening this handle created the index (an empty shard or collection). If the
    /// store says turns were indexed before, they were lost with the old index and must be
    /// indexed again.
    fn created(&self) -> bool;

    /// Deletes points by id; unknown ids are ignored. Durable on return, like `upsert`.
    async fn delete(&self, ids: &[Uuid]) -> IndexResult<()>;

    /// Counts the tenant's points of a kind, exactly.
    async fn count(&self, tenant: &Tenant, kind: PointKind) -> IndexResult<u64>;

    /// Checks that the backend answers.
    async fn ping(&self) -> IndexResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(strategy: Strategy, tags: &[&str]) -> IndexQuery {
        IndexQuery {
            tenant: Tenant {
                team: "t".into(),
                agent: "a".into(),
                user: "u".into(),
            },
            kind: PointKind::Turn,
            session_id: None,
            task: None,
            text: "alpha".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            dense: Some(vec![1.0, 0.0]),
            strategy,
            fusion: Fusion::default(),
            limit: 80,
        }
    }

    fn words() -> Option<SparseVector> {
        Some(SparseVector {
            indices: vec![7],
            values: vec![1.0],
        })
    }

    /// (ranking, tagged, limit, weight) of each channel, or the direct ranking.
    fn channels(plan: Plan<'_>) -> Result<Vec<(&'static str, bool, usize, f32)>, &'static str> {
        let name = |r: &Ranking<'_>| match r {
            Ranking::Keyword(_) => "keyword",
            Ranking::Semantic(_) => "semantic",
        };
        match plan {
            Plan::Nothing => Err("nothing"),
            Plan::Direct(r) => Err(name(&r)),
            Plan::Fused { channels, rrf_k, .. } => {
                assert_eq!(rrf_k, 60);
                Ok(channels
                    .iter()
                    .map(|c| (name(&c.ranking), !c.tags.is_empty(), c.limit, c.weight))
                    .collect())
            }
        }
    }

    #[test]
    fn without_tags_one_channel_runs_directly() {
        let plan = |s, keyword| channels(query(s, &[]).plan(keyword, Some(2)).unwrap());
        assert_eq!(plan(Strategy::Keyword, words()), Err("keyword"));
        assert_eq!(plan(Strategy::Semantic, words()), Err("semantic"));
        assert_eq!(plan(Strategy::Hybrid, Some(SparseVector::default())), Err("semantic"));
        assert_eq!(plan(Strategy::Keyword, None), Err("nothing"));
        assert_eq!(
            plan(Strategy::Hybrid, words()),
            Ok(vec![("keyword", false, 80, 1.0), ("semantic", false, 80, 1.0)])
        );
    }

    #[test]
    fn tags_add_a_narrowed_copy_of_each_channel() {
        let plan = |s, keyword| channels(query(s, &["m202604"]).plan(keyword, Some(2)).unwrap());
        assert_eq!(
            plan(Strategy::Keyword, words()),
            Ok(vec![("keyword", false, 80, 1.0), ("keyword", true, 80, 1.0)])
        );
        assert_eq!(
            plan(Strategy::Semantic, words()),
            Ok(vec![("semantic", false, 80, 1.0), ("semantic", true, 80, 1.0)])
        );
        assert_eq!(
            plan(Strategy::Hybrid, words()),
            Ok(vec![
                ("keyword", false, 80, 1.0),
                ("semantic", false, 80, 1.0),
                ("keyword", true, 80, 1.0),
                ("semantic", true, 80, 1.0)
            ])
        );
        assert_eq!(
            plan(Strategy::Hybrid, None),
            Ok(vec![("semantic", false, 80, 1.0), ("semantic", true, 80, 1.0)]),
            "no word: the semantic channel and its copy"
        );
        assert_eq!(plan(Strategy::Keyword, None), Err("nothing"));
    }

    #[test]
    fn a_tagged_channel_weighs_as_its_kind() {
        let mut q = query(Strategy::Hybrid, &["m202604"]);
        q.fusion.weights = Some((2.0, 0.5));
        q.limit = 5;
        match q.plan(words(), Some(2)).unwrap() {
            Plan::Fused { channels, weights, .. } => {
                assert_eq!(weights, Some(vec![2.0, 0.5, 2.0, 0.5]));
                assert!(channels.iter().all(|c| c.limit == 50));
                assert_eq!(channels[2].tags, ["m202604"]);
                assert_eq!(channels[3].tags, ["m202604"]);
            }
            other @ (Plan::Nothing | Plan::Direct(_)) => panic!("{other:?}"),
        }
        q.fusion.weights = Some((1.0, 1.0));
        match q.plan(words(), Some(2)).unwrap() {
            Plan::Fused { weights, .. } => assert_eq!(weights, None, "all 1: unweighted"),
            other @ (Plan::Nothing | Plan::Direct(_)) => panic!("{other:?}"),
        }
    }

    /// A point without a task has no `task` field (its keyword index then costs nothing), and
    /// a query without one matches on tenant and kind alone: every point, with a task or not.
    #[test]
    fn the_task_is_a_payload_field_only_when_there_is_one() {
        let q = query(Strategy::Keyword, &[]);
        let mut point = IndexPoint {
            id: Uuid::new_v4(),
            kind: PointKind::Memory,
            tenant: q.tenant.clone(),
            session_id: "s".into(),
            text: "x".into(),
            tags: Vec::new(),
            task: None,
            dense: None,
        };
        let fields = |p: &IndexPoint| payload_terms(p).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(fields(&point), [SCOPE, SESSION_ID]);
        point.task = Some("t 1".into());
        assert_eq!(
            payload_terms(&point).pop(),
            Some((TASK, PayloadValue::One("t 1".into())))
        );
        assert_eq!(scope_terms(&q.tenant, PointKind::Memory, None, None).len(), 1);
        assert_eq!(
            scope_terms(&q.tenant, PointKind::Memory, None, Some("t 1")).pop(),
            Some((TASK, "t 1".to_owned()))
        );
        assert!(KEYWORD_FIELDS.contains(&TASK), "both backends index the field on open");
    }

    #[test]
    fn a_wrong_dimension_is_refused() {
        assert!(query(Strategy::Hybrid, &[]).plan(words(), Some(3)).is_err());
    }
}
