//! The L0 index worker's algorithm: move every stored turn into the search index, once.
//!
//! # Durability contract
//! The store is the record and the cursor is the truth. For one session: read the turns past
//! the `index` cursor, upsert them (point id = turn id, so a repeat overwrites rather than
//! duplicates), and only once the index has them durably, advance the cursor. A crash between
//! the two steps re-indexes the same turns on the next run and changes nothing, and so does an
//! advance that a crash of Postgres itself loses (it is committed without waiting for the WAL
//! flush, see `TranscriptStore::advance_cursors`). An event only says which session to look
//! at; the sweep finds sessions whose event was lost.
//!
//! # Syncs: durability for many rounds at once
//! Where the index makes writes durable by a flush that costs about the same however much it
//! covers (Qdrant Edge, see `SearchIndex::defers_sync`), a round writes its turns unsynced:
//! they are searchable at once, and the round moves on. Their cursor advances wait for the
//! next sync, which makes every write before it durable and then advances every waiting
//! cursor in one statement; syncs are at least the sync interval apart, so under load one
//! covers many rounds. Until then the indexer keeps, in memory, how far each session is
//! indexed, and reads past that rather than the cursor. A crash before the sync leaves the
//! cursors behind, and the turns are indexed again (the start-up sweep finds them), as after
//! a crash between upsert and advance. A call returns only after the sync that covers its
//! rounds, so a delivery is still acked only once its turns are durable.
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
//! arrive meanwhile join the next. A round reads one batch (up to `batch_size` turns) of each
//! of its sessions, up to `SESSIONS_PER_BATCH` sessions per query, writes them to the index in
//! one upsert and advances their cursors in one statement. A session that filled its batch may
//! have more: it is carried into the next round, so a session with a long backlog never holds
//! up sessions woken after it.
//!
//! A call returns once a round has read less than a full batch of each of its sessions, that
//! is, once each is caught up with every turn stored before that round's read; so when it
//! returns `Ok` every turn stored before the call is indexed, and its delivery may be acked.
//! If a round fails, every call waiting on it fails and its delivery is retried (the cursors
//! have not moved past what was not indexed). If the task running a round is cancelled, a
//! caller waiting on that round runs it instead. Across processes the worst case stays
//! indexing a batch twice.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::domain::{SessionId, SessionKey, StoredTurn};
use crate::embed::{EmbedError, Embedder};
use crate::index::{IndexError, IndexPoint, PointKind, SearchIndex};
use crate::metrics;
use crate::retrieval::{self, TurnFields};
use crate::store::{Backlog, StoreError, TranscriptStore, INDEX_CONSUMER};
// Poison is ignored: each change to the rounds is one insertion or assignment, and a runner
// that panics frees its round through `Runner`'s drop.
use crate::sync::lock;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum IndexerError {
    #[error("failed to read turns")]
    Store(#[from] StoreError),
    #[error("failed to index turns")]
    Index(#[from] IndexError),
    #[error("failed to embed turns")]
    Embed(#[from] EmbedError),
    /// A round or a sync this call waited on failed; every call waiting on it gets the error.
    #[error(transparent)]
    Shared(Arc<IndexerError>),
}

impl IndexerError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::Index(e) => e.is_retryable(),
            Self::Embed(e) => e.is_retryable(),
            Self::Shared(e) => e.is_retryable(),
        }
    }
}

/// How long an indexer lets its unsynced writes gather before one sync makes them durable
/// (see the module docs), unless told otherwise. A flush costs more the more it covers, but
/// less than the flushes it replaces: at 5,000 turns/s on 2 cores, 250 ms took the flushes
/// from about 450 a minute to 180. The calls waiting for a sync hold their deliveries
/// unacked, so the interval must stay well below what the prefetch lasts (32 deliveries at
/// about 50 wake-up events a second): at 1 s, commit-to-searchable p50 went from 0.10 s to
/// 0.59 s.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(250);

/// Sessions read per sweep query.
const SWEEP_PAGE: u32 = 100;
/// Most sessions whose turns one batch of a round reads, indexes and advances together; with
/// `batch_size` turns each, this bounds the turns (and vectors) a worker holds at once.
const SESSIONS_PER_BATCH: usize = 32;
/// What a turn is indexed under, per channel; see `retrieval::text` for why.
fn fields(turn: &StoredTurn) -> TurnFields<'_> {
    TurnFields {
        role: turn.role,
        content: &turn.content,
        created_at: turn.created_at,
        caption: None,
        speaker: None,
    }
    .with_metadata(&turn.metadata)
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
    unsynced: Arc<Mutex<Unsynced>>,
    /// Bumped whenever a sync attempt ends (done, failed or cancelled), to wake the callers
    /// waiting on one.
    sync_ended: Arc<tokio::sync::watch::Sender<u64>>,
    sync_interval: Duration,
}

/// What the rounds wrote unsynced, and the syncs that make it durable (see the module docs).
#[derive(Default)]
struct Unsynced {
    /// Per session, the seq through which its turns are in the index while its cursor may lag
    /// behind: rounds read past it, so that they do not index those turns again.
    visible: HashMap<SessionKey, i64>,
    /// Cursor advances waiting for the next sync.
    pending: HashMap<SessionKey, i64>,
    /// Rounds so far that wrote unsynced.
    written: u64,
    /// The `written` value that the last successful sync covered.
    synced: u64,
    /// Whether some caller is running a sync.
    syncing: bool,
    /// When the last sync attempt ended, however it ended.
    last_sync: Option<Instant>,
    /// Failed sync attempts so far, and the last one's error.
    failures: u64,
    last_failure: Option<Arc<IndexerError>>,
}

/// Raises `map[session]` to at least `seq`.
fn raise(map: &mut HashMap<SessionKey, i64>, session: &SessionKey, seq: i64) {
    match map.get_mut(session) {
        Some(at) => *at = (*at).max(seq),
        None => {
            map.insert(session.clone(), seq);
        }
    }
}

/// Ends a sync attempt however it ends: cursor advances it took but did not make (it failed
/// or was cancelled) go back to wait for the next one, and the waiting callers are woken.
struct Syncer<'a> {
    unsynced: &'a Mutex<Unsynced>,
    ended: &'a tokio::sync::watch::Sender<u64>,
    taken: HashMap<SessionKey, i64>,
}

impl Drop for Syncer<'_> {
    fn drop(&mut self) {
        let mut unsynced = lock(self.unsynced);
        for (session, seq) in self.taken.drain() {
            raise(&mut unsynced.pending, &session, seq);
        }
        unsynced.syncing = false;
        unsynced.last_sync = Some(Instant::now());
        drop(unsynced);
        self.ended.send_modify(|n| *n += 1);
    }
}

/// The sessions woken together, and what became of them (see the module docs).
#[derive(Default)]
struct Round {
    /// Grows while the round is open; fixed once it starts.
    sessions: Mutex<BTreeSet<SessionKey>>,
    /// Set when the round finished.
    outcome: OnceLock<Result<Finished, Arc<IndexerError>>>,
}

struct Finished {
    /// Per session, the turns the round indexed that no caller has counted yet, so that each
    /// turn is counted by one call.
    unclaimed: Mutex<HashMap<SessionKey, usize>>,
    /// Sessions that filled their batch, and the round they were carried into.
    carried: BTreeSet<SessionKey>,
    next: Option<Arc<Round>>,
}

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
            unsynced: Arc::default(),
            sync_ended: Arc::new(tokio::sync::watch::channel(0).0),
            sync_interval: DEFAULT_SYNC_INTERVAL,
        }
    }

    /// Sets the least time between two syncs (see the module docs). Zero syncs as soon as a
    /// round has written.
    pub fn with_sync_interval(mut self, interval: Duration) -> Self {
        self.sync_interval = interval;
        self
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
    pub async fn index_session(&self, session: &SessionKey) -> Result<usize, IndexerError> {
        self.index_sessions(std::slice::from_ref(session)).await
    }

    /// Indexes every turn of these sessions past the cursor, in a round with whatever other
    /// sessions are woken meanwhile (see the module docs). Returns how many turns of these
    /// sessions its rounds indexed that no other call has counted, so that concurrent calls
    /// count each turn once.
    #[tracing::instrument(skip_all, fields(sessions = sessions.len(), turns = tracing::field::Empty))]
    pub async fn index_sessions(&self, sessions: &[SessionKey]) -> Result<usize, IndexerError> {
        let mut round = {
            let rounds = lock(&self.rounds);
            lock(&rounds.open.sessions).extend(sessions.iter().cloned());
            Arc::clone(&rounds.open)
        };
        let mut waiting: Vec<&SessionKey> = sessions.iter().collect();
        let mut total = 0;
        loop {
            let finished = match self.finish(&round).await {
                Ok(finished) => finished,
                Err(e) => return Err(IndexerError::Shared(Arc::clone(e))),
            };
            let mut unclaimed = lock(&finished.unclaimed);
            total += waiting.iter().filter_map(|s| unclaimed.remove(*s)).sum::<usize>();
            drop(unclaimed);
            waiting.retain(|s| finished.carried.contains(*s));
            round = match &finished.next {
                Some(next) if !waiting.is_empty() => Arc::clone(next),
                _ => break,
            };
        }
        // Whichever round wrote these sessions' turns, it wrote them before this point.
        let written = lock(&self.unsynced).written;
        self.synced_through(written).await?;
        tracing::Span::current().record("turns", total);
        Ok(total)
    }

    /// Waits until a sync has covered the first `written` unsynced rounds, running it when no
    /// other caller does (see the module docs). Fails if a sync attempt that might have
    /// covered them fails meanwhile.
    #[tracing::instrument(skip_all)]
    async fn synced_through(&self, written: u64) -> Result<(), IndexerError> {
        let mut ended = self.sync_ended.subscribe();
        let failures_before = lock(&self.unsynced).failures;
        let last_sync = loop {
            // Seen before the state is read, so an attempt ending after the read still wakes
            // this caller.
            ended.borrow_and_update();
            {
                let mut unsynced = lock(&self.unsynced);
                if unsynced.synced >= written {
                    return Ok(());
                }
                if unsynced.failures > failures_before {
                    if let Some(failure) = &unsynced.last_failure {
                        return Err(IndexerError::Shared(Arc::clone(failure)));
                    }
                }
                if !unsynced.syncing {
                    unsynced.syncing = true;
                    break unsynced.last_sync;
                }
            }
            // The sender lives in `self`, so this only returns on a change.
            let _ = ended.changed().await;
        };
        let mut syncer = Syncer {
            unsynced: &self.unsynced,
            ended: &self.sync_ended,
            taken: HashMap::new(),
        };
        // Rounds that finish meanwhile join this sync.
        if let Some(last) = last_sync {
            tokio::time::sleep_until((last + self.sync_interval).into()).await;
        }
        let target = {
            let mut unsynced = lock(&self.unsynced);
            syncer.taken = std::mem::take(&mut unsynced.pending);
            unsynced.written
        };
        let cursors: Vec<(SessionKey, i64)> = syncer.taken.iter().map(|(s, seq)| (s.clone(), *seq)).collect();
        let outcome = match self.index.sync().await {
            Ok(()) => self
                .store
                .advance_cursors(INDEX_CONSUMER, &cursors)
                .await
                .map_err(IndexerError::from),
            Err(e) => Err(e.into()),
        };
        // Declared after `syncer`, so released before its drop takes the lock again.
        let mut unsynced = lock(&self.unsynced);
        match outcome {
            Ok(()) => {
                unsynced.synced = unsynced.synced.max(target);
                for (session, seq) in syncer.taken.drain() {
                    if unsynced.visible.get(&session).is_some_and(|at| *at <= seq) {
                        unsynced.visible.remove(&session);
                    }
                }
                ::metrics::histogram!(metrics::INDEX_SYNC_SESSIONS).record(cursors.len() as f64);
                Ok(())
            }
            Err(e) => {
                let failure = Arc::new(e);
                unsynced.failures += 1;
                unsynced.last_failure = Some(Arc::clone(&failure));
                Err(IndexerError::Shared(failure))
            }
        }
    }

    /// Waits for `round` to finish, running it when no other round runs (see the module docs).
    async fn finish<'r>(&self, round: &'r Arc<Round>) -> &'r Result<Finished, Arc<IndexerError>> {
        let mut stopped = self.stopped.subscribe();
        loop {
            // Seen before the state is read, so a runner stopping after the read still wakes
            // this caller.
            stopped.borrow_and_update();
            let run = {
                let mut rounds = lock(&self.rounds);
                if let Some(outcome) = round.outcome.get() {
                    return outcome;
                }
                let run = !rounds.running;
                if run {
                    rounds.running = true;
                    if Arc::ptr_eq(&rounds.open, round) {
                        rounds.open = Arc::default();
                    }
                }
                run
            };
            if !run {
                // The sender lives in `self`, so this only returns on a change.
                let _ = stopped.changed().await;
                continue;
            }
            let _runner = Runner {
                rounds: &self.rounds,
                stopped: &self.stopped,
            };
            let sessions: Vec<SessionKey> = lock(&round.sessions).iter().cloned().collect();
            let outcome = match self.index_round(&sessions).await {
                Ok((counts, carried)) => {
                    let next = (!carried.is_empty()).then(|| {
                        let rounds = lock(&self.rounds);
                        lock(&rounds.open.sessions).extend(carried.iter().cloned());
                        Arc::clone(&rounds.open)
                    });
                    Ok(Finished {
                        unclaimed: Mutex::new(counts),
                        carried,
                        next,
                    })
                }
                Err(e) => Err(Arc::new(e)),
            };
            // Only the runner sets it, and only once: a round runs again only if its runner
            // stopped before this line.
            let _ = round.outcome.set(outcome);
        }
    }

    /// Indexes one batch of each session's turns past its cursor; returns how many turns it
    /// indexed per session, and the sessions that filled their batch (they may have more).
    #[tracing::instrument(skip_all, fields(sessions = sessions.len(), turns = tracing::field::Empty))]
    async fn index_round(
        &self,
        sessions: &[SessionKey],
    ) -> Result<(HashMap<SessionKey, usize>, BTreeSet<SessionKey>), IndexerError> {
        let mut counts: HashMap<SessionKey, usize> = HashMap::new();
        let mut carried = BTreeSet::new();
        for sessions in sessions.chunks(SESSIONS_PER_BATCH) {
            let after: Vec<(SessionKey, i64)> = {
                let unsynced = lock(&self.unsynced);
                sessions
                    .iter()
                    .map(|s| (s.clone(), unsynced.visible.get(s).copied().unwrap_or(0)))
                    .collect()
            };
            let turns = self
                .store
                .pending_turns_many(INDEX_CONSUMER, &after, self.batch_size)
                .await?;
            if turns.is_empty() {
                continue;
            }
            let groups: Vec<&[StoredTurn]> = turns
                .chunk_by(|a, b| a.session_id == b.session_id && a.tenant == b.tenant)
                .collect();
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
                    task: turn.task.clone(),
                    dense,
                })
                .collect();
            let cursors: Vec<(SessionKey, i64)> = groups
                .iter()
                .map(|group| (group[0].session_key(), group[group.len() - 1].seq))
                .collect();
            if self.index.defers_sync() {
                self.index.upsert_unsynced(&points).await?;
                let mut unsynced = lock(&self.unsynced);
                for (session, seq) in &cursors {
                    raise(&mut unsynced.visible, session, *seq);
                    raise(&mut unsynced.pending, session, *seq);
                }
                unsynced.written += 1;
            } else {
                self.index.upsert(&points).await?;
                self.store.advance_cursors(INDEX_CONSUMER, &cursors).await?;
            }

            let now = Utc::now();
            for turn in &turns {
                let delay = (now - turn.created_at).num_milliseconds().max(0) as f64 / 1000.0;
                ::metrics::histogram!(metrics::INDEX_DELAY).record(delay);
            }
            ::metrics::counter!(metrics::TURNS_INDEXED).increment(turns.len() as u64);
            ::metrics::histogram!(metrics::INDEX_ROUND_SESSIONS).record(groups.len() as f64);
            for group in &groups {
                let session = group[0].session_key();
                if group.len() >= self.batch_size as usize {
                    carried.insert(session.clone());
                }
                *counts.entry(session).or_default() += group.len();
            }
        }
        tracing::Span::current().record("turns", counts.values().sum::<usize>());
        Ok((counts, carried))
    }

    /// Indexes every session with a backlog; returns how many turns it indexed. Run at start
    /// and periodically, so a lost event only delays indexing.
    ///
    /// Reads no further page once `stop` is cancelled.
    pub async fn sweep(&self, stop: &CancellationToken) -> Result<usize, IndexerError> {
        let mut total = 0;
        while !stop.is_cancelled() {
            let backlog = self.store.backlog(INDEX_CONSUMER, SWEEP_PAGE).await?;
            if backlog.is_empty() {
                break;
            }
            let sessions: Vec<SessionKey> = backlog.iter().map(Backlog::key).collect();
            let progressed = self.index_sessions(&sessions).await?;
            total += progressed;
            // A page where nothing moved means others hold the work (or it keeps failing in
            // a way that returned Ok); looping again would spin.
            if progressed == 0 || sessions.len() < SWEEP_PAGE as usize {
                break;
            }
            // Catching up on a large backlog takes minutes in this loop: the gauges follow it
            // page by page, or they would show the lag from before it began all along.
            self.record_lag().await;
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
