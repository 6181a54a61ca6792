//! The L0 index worker's algorithm: move every stored turn into the search index, once.
//!
//! # Durability contract
//! The store is the record and the cursor is the truth. For one session: read the turns past
//! the `index` cursor, upsert them (point id = turn id, so a repeat overwrites rather than
//! duplicates), and only once the index has them durably, advance the cursor. A crash between
//! the two steps re-indexes the same turns on the next run and changes nothing, and so does an
//! advance that a crash of Postgres itself loses (it is committed without waiting for the WAL
//! flush, see `TranscriptStore::advance_cursor`). An event only says which session to look
//! at; the sweep finds sessions whose event was lost.
//!
//! # Embeddings
//! With an embedder, each turn's point also carries a dense vector, computed here, off the
//! ingest path. Every channel's text is shaped by `retrieval::text` (the content for BM25, date
//! tags beside it, the previous turn before a terse user answer for the vector). If the
//! provider is unavailable the batch fails and is retried (the turns wait, rather than being
//! indexed without a vector they would never get). If it refuses a batch for good, the turns
//! are indexed for keyword search alone and `sediment_embedding_skipped_turns_total` counts
//! them: a poison batch must not stop the session's indexing forever.
//!
//! # One run per session per process
//! Under load a hot session gets a wake-up for almost every append, and a worker takes up to
//! `prefetch` of them at once. Runs on one session would all read the same turns and index
//! them again, so a second run arriving while one is in progress only marks the session dirty
//! and returns; the running one goes round once more before it finishes. If that run fails,
//! its own delivery is retried (or the sweep finds the turns), since the cursor has not moved.
//! Across processes the worst case stays indexing a batch twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

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
    /// Sessions being indexed by this process, each with whether more turns may have arrived
    /// since its run last read (see the module docs).
    running: Arc<Mutex<HashMap<String, bool>>>,
}

/// Removes a session from `running` if its run ends early (an error, a cancelled task); a run
/// that finishes removes it itself, in the same critical section as its last dirty check.
struct RunGuard<'a> {
    running: &'a Mutex<HashMap<String, bool>>,
    session_id: &'a str,
    armed: bool,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(self.running).remove(self.session_id);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
            running: Arc::default(),
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
    /// While another run on the session is in progress in this process, returns 0 at once and
    /// leaves the turns to that run (see the module docs).
    #[tracing::instrument(skip(self), fields(turns = tracing::field::Empty))]
    pub async fn index_session(&self, session_id: &str) -> Result<usize, IndexerError> {
        {
            let mut running = lock(&self.running);
            if let Some(dirty) = running.get_mut(session_id) {
                *dirty = true;
                return Ok(0);
            }
            running.insert(session_id.to_owned(), false);
        }
        let mut guard = RunGuard {
            running: &self.running,
            session_id,
            armed: true,
        };
        let mut total = 0;
        loop {
            total += self.index_pending(session_id).await?;
            let mut running = lock(&self.running);
            match running.get_mut(session_id) {
                Some(dirty) if *dirty => *dirty = false,
                _ => {
                    // Under the same lock as the check: a run arriving now starts afresh.
                    running.remove(session_id);
                    guard.armed = false;
                    break;
                }
            }
        }
        tracing::Span::current().record("turns", total);
        Ok(total)
    }

    /// Indexes the session's turns past the cursor, batch by batch, until none is left.
    async fn index_pending(&self, session_id: &str) -> Result<usize, IndexerError> {
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
                    tags: retrieval::turn_tags(fields(turn)),
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
