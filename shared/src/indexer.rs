//! The L0 index worker's algorithm: move every stored turn into the search index, once.
//!
//! # Durability contract
//! The store is the record and the cursor is the truth. For one session: read the turns past
//! the `index` cursor, upsert them (point id = turn id, so a repeat overwrites rather than
//! duplicates), and only once the index has them durably, advance the cursor. A crash between
//! the two steps re-indexes the same turns on the next run and changes nothing. An event only
//! says which session to look at; the sweep finds sessions whose event was lost.
//!
//! # Embeddings
//! With an embedder, each turn's point also carries a dense vector, computed here, off the
//! ingest path. Both channels' texts are shaped by `retrieval::text` (date tags for BM25, the
//! previous turn before a terse user answer for the vector). If the provider is unavailable
//! the batch fails and is retried (the turns wait, rather than being indexed without a vector
//! they would never get). If it refuses a batch
//! for good, the turns are indexed for keyword search alone and
//! `sediment_embedding_skipped_turns_total` counts them: a poison batch must not stop the
//! session's indexing forever.

use std::sync::Arc;

use chrono::Utc;

use crate::domain::{SessionId, StoredTurn};
use crate::embed::{EmbedError, Embedder};
use crate::index::{IndexError, IndexPoint, PointKind, SearchIndex};
use crate::metrics;
use crate::retrieval::{self, TurnFields};
use crate::store::{StoreError, TranscriptStore, INDEX_CONSUMER};

#[derive(Debug, thiserror::Error)]
pub enum IndexerError {
    #[error("failed to read turns")]
    Store(#[from] StoreError),
    #[error("failed to index turns")]
    Index(#[from] IndexError),
    #[error("failed to embed turns")]
    Embed(#[from] EmbedError),
}

impl IndexerError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::Index(e) => e.is_retryable(),
            Self::Embed(e) => e.is_retryable(),
        }
    }
}

/// Sessions read per sweep query.
const SWEEP_PAGE: u32 = 100;
/// What a turn is indexed under, per channel; see `retrieval::text` for why.
fn fields(turn: &StoredTurn) -> TurnFields<'_> {
    TurnFields {
        role: turn.role,
        content: &turn.content,
        created_at: turn.created_at,
    }
}

/// The text a turn's dense vector is computed from, given the content of the turn before it.
pub fn embedding_text(turn: &StoredTurn, previous: Option<&str>) -> String {
    retrieval::dense_text(fields(turn), previous)
}

#[derive(Clone)]
pub struct Indexer {
    store: Arc<dyn TranscriptStore>,
    index: Arc<dyn SearchIndex>,
    embedder: Option<Arc<dyn Embedder>>,
    batch_size: u32,
}

impl Indexer {
    pub fn new(
        store: Arc<dyn TranscriptStore>,
        index: Arc<dyn SearchIndex>,
        embedder: Option<Arc<dyn Embedder>>,
        batch_size: u32,
    ) -> Self {
        Self {
            store,
            index,
            embedder,
            batch_size: batch_size.max(1),
        }
    }

    /// One dense vector per turn, or `None` for all when there is no embedder or it refused
    /// the batch for good (see the module docs).
    async fn embed(&self, turns: &[StoredTurn]) -> Result<Vec<Option<Vec<f32>>>, IndexerError> {
        let Some(embedder) = &self.embedder else {
            return Ok(vec![None; turns.len()]);
        };
        let before_batch = match turns.first() {
            Some(first) => self.turn_before(first).await?,
            None => None,
        };
        let texts: Vec<String> = turns
            .iter()
            .enumerate()
            .map(|(i, turn)| {
                let previous = match i.checked_sub(1) {
                    Some(p) => Some(turns[p].content.as_str()),
                    None => before_batch.as_ref().map(|t| t.content.as_str()),
                };
                embedding_text(turn, previous)
            })
            .collect();
        match embedder.embed(&texts).await {
            Ok(vectors) => Ok(vectors.into_iter().map(Some).collect()),
            Err(e) if !e.is_retryable() => {
                tracing::warn!(
                    error = %crate::runtime::error_chain(&e),
                    turns = turns.len(),
                    "embedder refused a batch: indexing it for keyword search only"
                );
                ::metrics::counter!(metrics::EMBEDDING_SKIPPED).increment(turns.len() as u64);
                Ok(vec![None; turns.len()])
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The turn before `first` in its session, when `first` needs it for its dense text (the
    /// turns of a batch bring their own predecessors, except the first).
    async fn turn_before(&self, first: &StoredTurn) -> Result<Option<StoredTurn>, IndexerError> {
        if first.seq <= 1 || !retrieval::text::needs_previous(fields(first)) {
            return Ok(None);
        }
        // Ids in the store were validated on append; one that no longer parses has no
        // predecessor worth failing the batch for.
        let Ok(session) = SessionId::parse(&first.session_id) else {
            return Ok(None);
        };
        let mut before = self.store.list(&first.tenant, &session, first.seq - 2, 1).await?;
        Ok(before.pop().filter(|t| t.seq == first.seq - 1))
    }

    /// Indexes every turn of the session past the cursor and returns how many it indexed.
    /// Safe to run concurrently with itself: the worst case is indexing a batch twice.
    #[tracing::instrument(skip(self), fields(turns = tracing::field::Empty))]
    pub async fn index_session(&self, session_id: &str) -> Result<usize, IndexerError> {
        let mut total = 0;
        loop {
            let (_cursor, turns) = self
                .store
                .pending_turns(INDEX_CONSUMER, session_id, self.batch_size)
                .await?;
            let Some(last) = turns.last() else { break };
            let last_seq = last.seq;
            let vectors = self.embed(&turns).await?;
            let points: Vec<IndexPoint> = turns
                .iter()
                .zip(vectors)
                .map(|(turn, dense)| IndexPoint {
                    id: turn.id,
                    kind: PointKind::Turn,
                    tenant: turn.tenant.clone(),
                    session_id: turn.session_id.clone(),
                    text: retrieval::keyword_text(fields(turn)),
                    dense,
                })
                .collect();
            self.index.upsert(&points).await?;
            self.store.advance_cursor(INDEX_CONSUMER, session_id, last_seq).await?;

            let now = Utc::now();
            for turn in &turns {
                let delay = (now - turn.created_at).num_milliseconds().max(0) as f64 / 1000.0;
                ::metrics::histogram!(metrics::INDEX_DELAY).record(delay);
            }
            ::metrics::counter!(metrics::TURNS_INDEXED).increment(turns.len() as u64);
            total += turns.len();
            if turns.len() < self.batch_size as usize {
                break;
            }
        }
        tracing::Span::current().record("turns", total);
        Ok(total)
    }

    /// Indexes every session with a backlog; returns how many turns it indexed. Run at start
    /// and periodically, so a lost event only delays indexing.
    pub async fn sweep(&self) -> Result<usize, IndexerError> {
        let mut total = 0;
        loop {
            let backlog = self.store.backlog(INDEX_CONSUMER, SWEEP_PAGE).await?;
            if backlog.is_empty() {
                break;
            }
            let mut progressed = 0;
            for session in &backlog {
                progressed += self.index_session(&session.session_id).await?;
            }
            total += progressed;
            // A page where nothing moved means others hold the work (or it keeps failing in
            // a way that returned Ok); looping again would spin.
            if progressed == 0 || backlog.len() < SWEEP_PAGE as usize {
                break;
            }
        }
        self.record_lag().await;
        if total > 0 {
            ::metrics::counter!(metrics::SWEEP_RECOVERED).increment(total as u64);
        }
        Ok(total)
    }

    /// Publishes the current lag as gauges; a failure only logs, it never fails the sweep.
    pub async fn record_lag(&self) {
        match self.store.lag(INDEX_CONSUMER).await {
            Ok(lag) => {
                ::metrics::gauge!(metrics::INDEX_LAG_TURNS).set(lag.turns as f64);
                ::metrics::gauge!(metrics::INDEX_LAG_SESSIONS).set(lag.sessions as f64);
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "failed to read index lag"),
        }
    }
}
