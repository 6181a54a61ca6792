//! Conversation search over L0: hits from the index (keyword, semantic or hybrid), hydrated
//! from the store.
//!
//! The store is asked again with the caller's tenant, so even an index that returned a foreign
//! id could not leak another tenant's turn.
//!
//! Each channel gets its own rewrite of the caller's text (`retrieval::query`): the keyword
//! channel without question words and with date tags, the semantic one with dates spelled out.
//! Both L0 turns and L1 memories are searched with them.

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::{SessionId, StoredTurn, TaskId, Tenant};
use crate::embed::{EmbedError, Embedder, QueryVectorCache};
use crate::index::{Fusion, IndexError, IndexHit, IndexQuery, PointKind, SearchIndex, Strategy};
use crate::retrieval::QueryText;
use crate::store::{StoreError, TranscriptStore};

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("failed to query the search index")]
    Index(#[from] IndexError),
    #[error("failed to read matching turns")]
    Store(#[from] StoreError),
    #[error("failed to embed the query")]
    Embed(#[from] EmbedError),
    #[error("semantic search needs an embedding provider, and none is configured")]
    NoEmbedder,
}

#[derive(Debug, Clone)]
pub struct ConversationQuery {
    pub text: String,
    pub limit: usize,
    pub session: Option<SessionId>,
    /// Only the turns (or memories) of this task; `None`: all of them, with a task or without.
    pub task: Option<TaskId>,
    pub strategy: Strategy,
}

#[derive(Debug, Clone)]
pub struct ConversationHit {
    pub turn: StoredTurn,
    pub score: f32,
}

/// A query's vector, or why the query runs without one.
pub enum QueryVector {
    Dense(Vec<f32>),
    /// Keyword only: no embedder is configured, or the strategy needs none.
    NotNeeded,
    /// The embedder failed; a hybrid query falls back to keyword.
    Failed(EmbedError),
}

/// What a search found, and how.
#[derive(Debug)]
pub struct ConversationResults {
    pub hits: Vec<ConversationHit>,
    /// The strategy that ranked the hits: a hybrid search runs as keyword when there is no
    /// embedder or it failed.
    pub strategy: Strategy,
    /// Why the strategy was downgraded, when the embedder failed.
    pub degraded: Option<EmbedError>,
}

#[derive(Clone)]
pub struct ConversationSearch {
    store: Arc<dyn TranscriptStore>,
    index: Arc<dyn SearchIndex>,
    embedder: Option<Arc<dyn Embedder>>,
    fusion: Fusion,
    /// Vectors of recent query texts; `None`: every query is embedded.
    query_vectors: Option<Arc<QueryVectorCache>>,
}

impl ConversationSearch {
    pub fn new(
        store: Arc<dyn TranscriptStore>,
        index: Arc<dyn SearchIndex>,
        embedder: Option<Arc<dyn Embedder>>,
        fusion: Fusion,
    ) -> Self {
        Self {
            store,
            index,
            embedder,
            fusion,
            query_vectors: None,
        }
    }

    /// Keeps the vectors of up to `entries` recent query texts (0: none), so a question asked
    /// again skips its embedding ([`QueryVectorCache`]).
    pub fn with_query_cache(mut self, entries: usize) -> Self {
        self.query_vectors = QueryVectorCache::new(entries).map(Arc::new);
        self
    }

    /// Whether semantic and hybrid queries can run.
    pub fn has_embedder(&self) -> bool {
        self.embedder.is_some()
    }

    /// Embeds the query text if the strategy uses a vector. `Semantic` with no embedder, or
    /// with a failing one, is an error: there is nothing to fall back to.
    pub async fn query_vector(&self, text: &str, strategy: Strategy) -> Result<QueryVector, SearchError> {
        if strategy == Strategy::Keyword {
            return Ok(QueryVector::NotNeeded);
        }
        let Some(embedder) = &self.embedder else {
            return match strategy {
                Strategy::Semantic => Err(SearchError::NoEmbedder),
                Strategy::Keyword | Strategy::Hybrid => Ok(QueryVector::NotNeeded),
            };
        };
        let dense = rewrite(text).dense;
        let cache = self.query_vectors.as_deref();
        if let Some(vector) = cache.and_then(|c| c.get(embedder.model(), &dense)) {
            return Ok(QueryVector::Dense(vector.to_vec()));
        }
        match embedder.embed(std::slice::from_ref(&dense)).await {
            Ok(mut vectors) => match vectors.pop() {
                Some(vector) if vectors.is_empty() => {
                    if let Some(cache) = cache {
                        cache.insert(embedder.model(), &dense, &vector);
                    }
                    Ok(QueryVector::Dense(vector))
                }
                Some(_) | None => Err(SearchError::Embed(EmbedError::Backend(
                    "embedder returned the wrong number of vectors".into(),
                ))),
            },
            Err(e) if strategy == Strategy::Semantic => Err(e.into()),
            Err(e) => Ok(QueryVector::Failed(e)),
        }
    }

    /// Queries the index with an already computed vector; returns ranked ids and the strategy
    /// that ran.
    pub async fn index_hits(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery,
        vector: &QueryVector,
    ) -> Result<(Vec<IndexHit>, Strategy), SearchError> {
        self.kind_hits(PointKind::Turn, tenant, query, vector).await
    }

    /// [`index_hits`](Self::index_hits) over the points of `kind` (L0 turns or L1 memories).
    pub async fn kind_hits(
        &self,
        kind: PointKind,
        tenant: &Tenant,
        query: &ConversationQuery,
        vector: &QueryVector,
    ) -> Result<(Vec<IndexHit>, Strategy), SearchError> {
        let dense = match vector {
            QueryVector::Dense(v) => Some(v.clone()),
            QueryVector::NotNeeded | QueryVector::Failed(_) => None,
        };
        let strategy = match (query.strategy, &dense) {
            (Strategy::Hybrid, None) => Strategy::Keyword,
            (strategy, _) => strategy,
        };
        let QueryText { keyword, tags, .. } = rewrite(&query.text);
        let hits = self
            .index
            .search(&IndexQuery {
                tenant: tenant.clone(),
                kind,
                session_id: query.session.as_ref().map(|s| s.as_str().to_owned()),
                task: query.task.as_ref().map(|t| t.as_str().to_owned()),
                text: keyword,
                tags,
                dense,
                strategy,
                fusion: self.fusion,
                limit: query.limit,
            })
            .await?;
        Ok((hits, strategy))
    }

    /// Adds every other point of the scope (tenant, and session and task if given; score 0,
    /// after the ranked ones) when the scope holds no more than `limit` points: with so few items, ranking scores say little and a
    /// keyword query would hide the ones that share no word with it.
    pub async fn complete_small_scope(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery,
        hits: &mut Vec<IndexHit>,
    ) -> Result<(), SearchError> {
        self.complete_small_kind_scope(PointKind::Turn, tenant, query, hits)
            .await
    }

    /// [`complete_small_scope`](Self::complete_small_scope) over the points of `kind`.
    pub async fn complete_small_kind_scope(
        &self,
        kind: PointKind,
        tenant: &Tenant,
        query: &ConversationQuery,
        hits: &mut Vec<IndexHit>,
    ) -> Result<(), SearchError> {
        if hits.len() >= query.limit {
            return Ok(());
        }
        let session = query.session.as_ref().map(|s| s.as_str());
        let task = query.task.as_ref().map(TaskId::as_str);
        let ids = self
            .index
            .scope_ids(tenant, kind, session, task, query.limit + 1)
            .await?;
        if ids.len() > query.limit {
            return Ok(());
        }
        for id in ids {
            if !hits.iter().any(|hit| hit.id == id) {
                hits.push(IndexHit { id, score: 0.0 });
            }
        }
        Ok(())
    }

    /// Reads the hits' turns from the store, tenant-scoped, keeping the hits' order.
    pub async fn hydrate(&self, tenant: &Tenant, hits: Vec<IndexHit>) -> Result<Vec<ConversationHit>, SearchError> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<_> = hits.iter().map(|h| h.id).collect();
        let mut turns: HashMap<_, _> = self
            .store
            .turns_by_id(tenant, &ids)
            .await?
            .into_iter()
            .map(|t| (t.id, t))
            .collect();
        Ok(hits
            .into_iter()
            .filter_map(|hit| {
                turns
                    .remove(&hit.id)
                    .map(|turn| ConversationHit { turn, score: hit.score })
            })
            .collect())
    }

    /// Returns the tenant's best-matching turns, best first. Unlike recall, it returns only
    /// what matched, however small the scope.
    pub async fn search(&self, tenant: &Tenant, query: &ConversationQuery) -> Result<ConversationResults, SearchError> {
        let vector = self.query_vector(&query.text, query.strategy).await?;
        let (hits, strategy) = self.index_hits(tenant, query, &vector).await?;
        let hits = self.hydrate(tenant, hits).await?;
        let degraded = match vector {
            QueryVector::Failed(e) => Some(e),
            QueryVector::Dense(_) | QueryVector::NotNeeded => None,
        };
        Ok(ConversationResults {
            hits,
            strategy,
            degraded,
        })
    }
}

/// The texts the channels run for `text`, with dates resolved against today (UTC).
fn rewrite(text: &str) -> QueryText {
    QueryText::new(text, chrono::Utc::now().date_naive())
}
