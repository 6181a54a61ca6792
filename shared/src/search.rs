//! Conversation search over L0: keyword (BM25) hits from the index, hydrated from the store.
//!
//! The store is asked again with the caller's tenant, so even an index that returned a foreign
//! id could not leak another tenant's turn.

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::{SessionId, StoredTurn, Tenant};
use crate::index::{IndexError, IndexQuery, PointKind, SearchIndex};
use crate::store::{StoreError, TranscriptStore};

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("failed to query the search index")]
    Index(#[from] IndexError),
    #[error("failed to read matching turns")]
    Store(#[from] StoreError),
}

#[derive(Debug, Clone)]
pub struct ConversationQuery {
    pub text: String,
    pub limit: usize,
    pub session: Option<SessionId>,
}

#[derive(Debug, Clone)]
pub struct ConversationHit {
    pub turn: StoredTurn,
    pub score: f32,
}

#[derive(Clone)]
pub struct ConversationSearch {
    store: Arc<dyn TranscriptStore>,
    index: Arc<dyn SearchIndex>,
}

impl ConversationSearch {
    pub fn new(store: Arc<dyn TranscriptStore>, index: Arc<dyn SearchIndex>) -> Self {
        Self { store, index }
    }

    /// Returns the tenant's best-matching turns, best first.
    pub async fn search(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery,
    ) -> Result<Vec<ConversationHit>, SearchError> {
        let hits = self
            .index
            .search(&IndexQuery {
                tenant: tenant.clone(),
                kind: PointKind::Turn,
                session_id: query.session.as_ref().map(|s| s.as_str().to_owned()),
                text: query.text.clone(),
                limit: query.limit,
            })
            .await?;
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
}
