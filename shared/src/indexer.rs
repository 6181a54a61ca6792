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
//! # Rounds: many sessions per statement
//! Under load every append wakes its session, and a worker takes up to `prefetch` wake-ups at
//! once. Indexing each on its own would cost every wake-up a read, an index write and a cursor
//! write, and runs on one session would read the same turns and index them again. So wake-ups
//! are grouped into rounds, as a database groups commits: a wake-up joins the open round; when
//! no round is running, one of the callers waiting on the open round runs it, and wake-ups that
//! arrive meanwhile join the next. A round reads the pending turns of all its sessions in one
//! query, writes them to the index in one upsert and advances all their cursors in one
//! statement, batch after batch until no session has a full batch left.
//!
//! A call returns once the round holding its sessions has finished, so when it returns `Ok`
//! every turn stored before the call is indexed, and its delivery may be acked. If the round
//! fails, every call in it fails and its delivery is retried (the cursors have not moved past
//! what was not indexed). A caller never runs more than one round, so no delivery waits behind
//! an endless stream of others; if the task running a round is cancelled, a caller waiting on
//! that round runs it instead. Across processes the worst case stays indexing a batch twice.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

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
    /// The round this call's sessions were indexed in failed; every call in it gets the error.
    #[error(transparent)]
    Round(Arc<IndexerError>),
}

impl IndexerError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::Index(e) => e.is_retryable(),
            Self::Embed(e) => e.is_retryable(),
            Self::Round(e) => e.is_retryable(),
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
    rounds: Arc<Mutex<Rounds>>,
    /// Bumped whenever a round's runner stops (finished, failed or cancelled), to wake the
    /// callers waiting on a round.
    stopped: Arc<tokio::sync::watch::Sender<u64>>,
}

/// The sessions woken together, and what became of them (see the module docs).
#[derive(Default)]
struct Round {
    /// Grows while the round is open; fixed once it starts.
    sessions: Mutex<BTreeSet<String>>,
    /// Set when the round finished.
    outcome: OnceLock<Result<Unclaimed, Arc<IndexerError>>>,
}

/// Per session, the turns a round indexed that no caller has counted yet, so that each turn is
/// counted by one call.
type Unclaimed = Mutex<HashMap<String, usize>>;

#[derive(Default)]
struct Rounds {
    /// The round new wake-ups join.
    open: Arc<Round>,
    /// Whether some caller is running a round.
    running: bool,
}

/// Frees the indexer for the next round when the runner stops, however it stops: a runner
/// cancelled mid-round leaves its round without an outcome, and one of its waiters reruns it.
struct Runner<'a> {
    rounds: &'a Mutex<Rounds>,
    stopped: &'a tokio::sync::watch::Sender<u64>,
}

impl Drop for Runner<'_> {
    fn drop(&mut self) {
        lock(self.rounds).running = false;
        self.stopped.send_modify(|n| *n += 1);
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
            rounds: Arc::default(),
            stopped: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Dense vectors for the turns of a round, grouped by session (see the module docs), or
    /// `None` for every turn when there is no embedder.
    async fn embed(&self, groups: &[&[StoredTurn]]) -> Result<Vec<Option<Vec<f32>>>, IndexerError> {
        let total = groups.iter().map(|g| g.len()).sum();
        let Some(embedder) = &self.embedder else {
            return Ok(vec![None; total]);
        };
        let mut texts = Vec::with_capacity(total);
        for group in groups {
            texts.extend(self.embedding_texts(group).await?);
        }
        if groups.len() == 1 {
            return self.embed_or_skip(embedder, &texts).await;
        }
        match embedder.embed(&texts).await {
            Ok(vectors) => Ok(vectors.into_iter().map(Some).collect()),
            // Whatever the provider refuses may lie in one session's turns: embed each session
            // on its own, so that only that one goes without vectors.
            Err(e) if !e.is_retryable() => {
                let mut vectors = Vec::with_capacity(total);
                let mut rest = texts.as_slice();
                for group in groups {
                    let (these, others) = rest.split_at(group.len());
                    vectors.extend(self.embed_or_skip(embedder, these).await?);
                    rest = others;
                }
                Ok(vectors)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Embeds `texts`, or gives `None` for each when the embedder refuses them for good (see
    /// the module docs).
    async fn embed_or_skip(
        &self,
        embedder: &Arc<dyn Embedder>,
        texts: &[String],
    ) -> Result<Vec<Option<Vec<f32>>>, IndexerError> {
        match embedder.embed(texts).await {
            Ok(vectors) => Ok(vectors.into_iter().map(Some).collect()),
            Err(e) if !e.is_retryable() => {
                tracing::warn!(
                    error = %crate::runtime::error_chain(&e),
                    turns = texts.len(),
                    "embedder refused a batch: indexing it for keyword search only"
                );
                ::metrics::counter!(metrics::EMBEDDING_SKIPPED).increment(texts.len() as u64);
                Ok(vec![None; texts.len()])
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The dense texts of consecutive turns of one session.
    async fn embedding_texts(&self, turns: &[StoredTurn]) -> Result<Vec<String>, IndexerError> {
        let before_batch = match turns.first() {
            Some(first) => self.turn_before(first).await?,
            None => None,
        };
        Ok(turns
            .iter()
            .enumerate()
            .map(|(i, turn)| {
                let previous = match i.checked_sub(1) {
                    Some(p) => Some(turns[p].content.as_str()),
                    None => before_batch.as_ref().map(|t| t.content.as_str()),
                };
                embedding_text(turn, previous)
            })
            .collect())
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

    /// Indexes every turn of the session past the cursor; see `index_sessions`.
    pub async fn index_session(&self, session_id: &str) -> Result<usize, IndexerError> {
        self.index_sessions(&[session_id.to_owned()]).await
    }

    /// Indexes every turn of these sessions past the cursor, in a round with whatever other
    /// sessions are woken meanwhile (see the module docs). Returns how many turns of these
    /// sessions the round indexed that no other call has counted, so that concurrent calls
    /// count each turn once.
    #[tracing::instrument(skip_all, fields(sessions = session_ids.len(), turns = tracing::field::Empty))]
    pub async fn index_sessions(&self, session_ids: &[String]) -> Result<usize, IndexerError> {
        let round = {
            let rounds = lock(&self.rounds);
            lock(&rounds.open.sessions).extend(session_ids.iter().cloned());
            Arc::clone(&rounds.open)
        };
        let mut stopped = self.stopped.subscribe();
        loop {
            // Seen before the state is read, so a runner stopping after the read still wakes
            // this caller.
            stopped.borrow_and_update();
            let run = {
                let mut rounds = lock(&self.rounds);
                if round.outcome.get().is_some() {
                    break;
                }
                let run = !rounds.running;
                if run {
                    rounds.running = true;
                    if Arc::ptr_eq(&rounds.open, &round) {
                        rounds.open = Arc::default();
                    }
                }
                run
            };
            if run {
                let _runner = Runner {
                    rounds: &self.rounds,
                    stopped: &self.stopped,
                };
                let sessions: Vec<String> = lock(&round.sessions).iter().cloned().collect();
                let outcome = self.index_round(&sessions).await;
                // Only the runner sets it, and only once: a round runs again only if its runner
                // stopped before this line.
                let _ = round.outcome.set(outcome.map(Mutex::new).map_err(Arc::new));
            } else {
                // The sender lives in `self`, so this only returns on a change.
                let _ = stopped.changed().await;
            }
        }
        match round.outcome.get() {
            Some(Ok(counts)) => {
                let mut counts = lock(counts);
                let total = session_ids.iter().filter_map(|s| counts.remove(s)).sum();
                tracing::Span::current().record("turns", total);
                Ok(total)
            }
            Some(Err(e)) => Err(IndexerError::Round(Arc::clone(e))),
            None => unreachable!("the loop ends only once the round has an outcome"),
        }
    }

    /// Indexes the turns of these sessions past their cursors, batch by batch, until none has
    /// more; returns how many turns it indexed per session.
    #[tracing::instrument(skip_all, fields(sessions = sessions.len(), turns = tracing::field::Empty))]
    async fn index_round(&self, sessions: &[String]) -> Result<HashMap<String, usize>, IndexerError> {
        let mut counts: HashMap<String, usize> = HashMap::new();
        let mut sessions = sessions.to_vec();
        while !sessions.is_empty() {
            // The batch size bounds a batch, whatever the number of sessions in the round, so
            // that a sweep after an outage holds no more turns (and asks the embedder for no
            // more vectors) at once than a single session's batch.
            let per_session = (self.batch_size / sessions.len() as u32).max(1);
            let turns = self
                .store
                .pending_turns_many(INDEX_CONSUMER, &sessions, per_session)
                .await?;
            if turns.is_empty() {
                break;
            }
            let groups: Vec<&[StoredTurn]> = turns.chunk_by(|a, b| a.session_id == b.session_id).collect();
            let vectors = self.embed(&groups).await?;
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
            let cursors: Vec<(String, i64)> = groups
                .iter()
                .map(|group| (group[0].session_id.clone(), group[group.len() - 1].seq))
                .collect();
            self.store.advance_cursors(INDEX_CONSUMER, &cursors).await?;

            let now = Utc::now();
            for turn in &turns {
                let delay = (now - turn.created_at).num_milliseconds().max(0) as f64 / 1000.0;
                ::metrics::histogram!(metrics::INDEX_DELAY).record(delay);
            }
            ::metrics::counter!(metrics::TURNS_INDEXED).increment(turns.len() as u64);
            for group in &groups {
                *counts.entry(group[0].session_id.clone()).or_default() += group.len();
            }
            // A session that filled its share may have more.
            sessions = groups
                .iter()
                .filter(|group| group.len() >= per_session as usize)
                .map(|group| group[0].session_id.clone())
                .collect();
        }
        tracing::Span::current().record("turns", counts.values().sum::<usize>());
        Ok(counts)
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
            let sessions: Vec<String> = backlog.into_iter().map(|b| b.session_id).collect();
            let progressed = self.index_sessions(&sessions).await?;
            total += progressed;
            // A page where nothing moved means others hold the work (or it keeps failing in
            // a way that returned Ok); looping again would spin.
            if progressed == 0 || sessions.len() < SWEEP_PAGE as usize {
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
