//! The transcript store port: L0 turns, sessions and per-consumer cursors.
//!
//! Backends: `postgres` (cluster) and `sqlite` (embedded). Both pass the same conformance
//! suite (`testsuite::transcript_store_suite`).
//!
//! # Durability
//! Every method returns only after its writes are committed. `append` is all or nothing.
//!
//! # Concurrency
//! Appends to one session are serialized by the backend (Postgres: a row lock on the session;
//! SQLite: one connection, immediate transactions), which is what keeps seqs gapless. Appends
//! to different sessions do not wait for each other in Postgres.
//!
//! # Timestamps
//! Both backends keep microseconds: a client-supplied `created_at` is truncated to whole
//! microseconds before it is stored, and what `append` returns is exactly what reads return.

pub mod audit;
pub mod compaction;
#[cfg(feature = "testing")]
pub mod compaction_testsuite;
pub mod erase;
#[cfg(feature = "testing")]
pub mod erase_testsuite;
pub mod keys;
pub mod memory;
#[cfg(feature = "testing")]
pub mod memory_testsuite;
pub mod portable;
mod postgres;
pub mod prompts;
pub mod scene;
#[cfg(feature = "testing")]
pub mod scene_testsuite;
mod sqlite;
#[cfg(feature = "testing")]
pub mod testsuite;

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound as _, Utc};
use uuid::Uuid;

use crate::domain::{AppendedTurn, NewTurn, SessionId, SessionKey, StoredTurn, Tenant};

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The cursor name of the L0 index worker.
pub const INDEX_CONSUMER: &str = "index";

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The session does not exist for this tenant (it may exist for another one).
    #[error("session not found")]
    SessionNotFound,
    /// The backend could not be reached or timed out; the call may succeed later.
    #[error("transcript store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The backend rejected the call in a way a retry will not fix.
    #[error("transcript store failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::SessionNotFound | Self::Backend(_) => false,
        }
    }
}

/// A session with turns past a consumer's cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    pub session_id: String,
    pub tenant: Tenant,
    pub cursor: i64,
    pub last_seq: i64,
}

impl Backlog {
    pub fn key(&self) -> SessionKey {
        SessionKey::new(self.tenant.clone(), self.session_id.clone())
    }
}

/// What a consumer has not processed yet, across all sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    /// Turns past the consumer's cursors.
    pub turns: i64,
    /// Sessions with at least one such turn.
    pub sessions: i64,
}

/// Session state as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub last_seq: i64,
    pub reset_at: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait TranscriptStore: Send + Sync + 'static {
    /// Appends `turns` to a session in one transaction and returns one entry per turn, in
    /// order. Sequence numbers are per session, start at 1, and are gapless and unique under
    /// any concurrency. The session is created for `tenant` on first append.
    ///
    /// Idempotent on `client_id` within the session: a turn whose key was stored before gets
    /// the original id, seq and created_at back, and nothing new is written for it.
    ///
    /// A session is the tenant's own: another tenant's session of the same id is another
    /// session, and an append never tells whether one exists. A turn's `created_at` is the
    /// client's value (truncated to microseconds) or the time of the append. An empty `turns`
    /// still creates the session.
    async fn append(&self, tenant: &Tenant, session: &SessionId, turns: &[NewTurn]) -> StoreResult<Vec<AppendedTurn>>;

    /// Lists up to `limit` turns with `seq > after_seq`, in seq order. `SessionNotFound`
    /// when the tenant has no such session.
    async fn list(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<StoredTurn>>;

    /// Reads session state; `SessionNotFound` when the tenant has no such session.
    async fn session(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<SessionInfo>;

    /// Sets the session's reset_at to now and returns it. Deletes nothing.
    async fn reset(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<DateTime<Utc>>;

    /// Reads the turns with these ids that belong to `tenant`, in no particular order. Ids of
    /// other tenants' turns, or unknown ids, are silently absent.
    async fn turns_by_id(&self, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<Vec<StoredTurn>>;

    /// Lists up to `limit` sessions whose turns lie past `consumer`'s cursor, oldest first.
    async fn backlog(&self, consumer: &str, limit: u32) -> StoreResult<Vec<Backlog>>;

    /// Reads up to `limit` turns of a session past `consumer`'s cursor, in seq order, with the
    /// cursor they were read at. Not tenant-scoped: for workers only.
    async fn pending_turns(
        &self,
        consumer: &str,
        session: &SessionKey,
        limit: u32,
    ) -> StoreResult<(i64, Vec<StoredTurn>)>;

    /// Reads, for each `(session, after)`, up to `limit` turns past both `consumer`'s cursor and
    /// `after`, in one query: the index worker reads every session woken in a round at once,
    /// and passes as `after` what it has already indexed but not yet recorded in the cursor
    /// (0 for none). Turns come grouped by session and in seq order within one, each turn
    /// once; a session listed twice is read past its larger `after`; a session with nothing
    /// pending, or unknown, has none. Not tenant-scoped: for workers only.
    async fn pending_turns_many(
        &self,
        consumer: &str,
        sessions: &[(SessionKey, i64)],
        limit: u32,
    ) -> StoreResult<Vec<StoredTurn>>;

    /// Moves `consumer`'s cursor for each `(session, seq)` forward to `seq`, in one write. Never
    /// moves one back, so a late or duplicate advance is harmless; a session listed twice takes
    /// the larger seq.
    ///
    /// Once this returns the advance is visible, but it may not survive a crash of the store
    /// itself (Postgres commits it without waiting for its WAL flush, one fsync less per
    /// round): the cursor is then found at an earlier seq. A consumer must make its output
    /// durable before advancing and redo it idempotently, as the index worker does.
    async fn advance_cursors(&self, consumer: &str, cursors: &[(SessionKey, i64)]) -> StoreResult<()>;

    /// `advance_cursors` for one session.
    async fn advance_cursor(&self, consumer: &str, session: &SessionKey, seq: i64) -> StoreResult<()> {
        self.advance_cursors(consumer, &[(session.clone(), seq)]).await
    }

    /// Forgets every cursor of `consumer`, so that it processes every stored turn again;
    /// returns how many sessions had one. For when the consumer's output was lost (the index
    /// directory removed, a new collection). Not tenant-scoped: for workers only.
    async fn reset_cursors(&self, consumer: &str) -> StoreResult<u64>;

    /// Sums what `consumer` has not processed yet.
    async fn lag(&self, consumer: &str) -> StoreResult<Lag>;

    /// How many turns the team stores, over every session of every agent and user: what its
    /// quota counts. Reads every session row of the store; call it seldom.
    async fn team_turns(&self, team: &str) -> StoreResult<u64>;

    /// Checks that the backend answers.
    async fn ping(&self) -> StoreResult<()>;
}

/// Truncates a timestamp to the microsecond precision both backends store.
pub(crate) fn truncate_to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    at.trunc_subsecs(6)
}

/// What one append writes, worked out once the session is locked.
#[derive(Debug)]
pub(crate) struct AppendPlan {
    /// One entry per requested turn, in request order.
    pub results: Vec<AppendedTurn>,
    /// The turns to insert, as (index into the request, what to store).
    pub new_turns: Vec<(usize, AppendedTurn)>,
    /// The session's last seq after the append.
    pub last_seq: i64,
}

/// A new turn's id: a version 7 UUID, which leads with the time of the append, so that turns
/// appended one after another have neighbouring ids. In SQLite's primary-key B-tree a random
/// id lands each turn on a page of its own, which the commit then writes to the WAL whole: a
/// quarter of the embedded store's disk writes at 5,000 turns/s. (Postgres wrote as much WAL
/// either way.)
pub(crate) fn turn_id(now: DateTime<Utc>) -> Uuid {
    let random = Uuid::new_v4();
    let mut bytes = [0u8; 10];
    bytes.copy_from_slice(&random.as_bytes()[6..]);
    let millis = u64::try_from(now.timestamp_millis()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &bytes).into_uuid()
}

/// Assigns ids and seqs to an append. `stored` maps the client ids of the request that the
/// session already holds to their turns; a client id repeated within the request maps to the
/// turn of its first occurrence. `now` is the created_at of turns that bring none.
pub(crate) fn plan_append(
    turns: &[NewTurn],
    last_seq: i64,
    now: DateTime<Utc>,
    mut stored: HashMap<String, AppendedTurn>,
) -> AppendPlan {
    let now = truncate_to_micros(now);
    let mut results = Vec::with_capacity(turns.len());
    let mut new_turns = Vec::new();
    let mut seq = last_seq;
    for (index, turn) in turns.iter().enumerate() {
        if let Some(known) = turn.client_id.as_ref().and_then(|key| stored.get(key)) {
            results.push(known.clone());
            continue;
        }
        seq += 1;
        let appended = AppendedTurn {
            id: turn_id(now),
            seq,
            created_at: turn.created_at.map_or(now, truncate_to_micros),
        };
        if let Some(key) = &turn.client_id {
            stored.insert(key.clone(), appended.clone());
        }
        results.push(appended.clone());
        new_turns.push((index, appended));
    }
    AppendPlan {
        results,
        new_turns,
        last_seq: seq,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;
    use crate::domain::Role;

    fn turn(client_id: Option<&str>) -> NewTurn {
        NewTurn {
            role: Role::User,
            content: "hi".to_owned(),
            metadata: serde_json::Map::new(),
            client_id: client_id.map(str::to_owned),
            created_at: None,
            task: None,
        }
    }

    #[test]
    fn plan_numbers_new_turns_after_last_seq() {
        let now = Utc::now();
        let plan = plan_append(&[turn(None), turn(Some("a"))], 7, now, HashMap::new());
        let seqs: Vec<i64> = plan.results.iter().map(|t| t.seq).collect();
        assert_eq!(seqs, [8, 9]);
        assert_eq!(plan.last_seq, 9);
        assert_eq!(plan.new_turns.len(), 2);
        assert_eq!(plan.results[0].created_at, truncate_to_micros(now));
    }

    #[test]
    fn plan_reuses_stored_and_repeated_client_ids() {
        let old = AppendedTurn {
            id: Uuid::new_v4(),
            seq: 3,
            created_at: Utc::now(),
        };
        let stored = HashMap::from([("old".to_owned(), old.clone())]);
        let turns = [turn(Some("new")), turn(Some("old")), turn(Some("new")), turn(None)];
        let plan = plan_append(&turns, 5, Utc::now(), stored);
        assert_eq!(plan.results[1], old);
        assert_eq!(plan.results[0], plan.results[2]);
        assert_eq!(plan.results[0].seq, 6);
        assert_eq!(plan.results[3].seq, 7);
        let inserted: Vec<usize> = plan.new_turns.iter().map(|(i, _)| *i).collect();
        assert_eq!(inserted, [0, 3]);
        assert_eq!(plan.last_seq, 7);
    }

    /// Ids lead with the append's time, whatever time the client gave its turn, so later
    /// appends sort after earlier ones.
    #[test]
    fn turn_ids_are_ordered_by_the_time_of_the_append() {
        let earlier = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let mut dated = turn(None);
        dated.created_at = Some(Utc.timestamp_opt(1_000_000_000, 0).unwrap());
        let first = plan_append(&[turn(None), dated], 0, earlier, HashMap::new());
        let later = plan_append(
            &[turn(None)],
            2,
            earlier + chrono::Duration::milliseconds(1),
            HashMap::new(),
        );
        let ids: Vec<Uuid> = first.results.iter().chain(&later.results).map(|t| t.id).collect();
        assert!(ids.iter().all(|id| id.get_version_num() == 7), "{ids:?}");
        assert!(ids[0] < ids[2] && ids[1] < ids[2], "{ids:?}");
        // Same millisecond, still distinct.
        assert_ne!(ids[0], ids[1]);
        let millis = |id: &Uuid| id.get_timestamp().map(|t| t.to_unix()).expect("v7 timestamp");
        assert_eq!(millis(&ids[1]), (1_700_000_000, 0));
    }

    #[test]
    fn client_timestamps_are_truncated_to_micros() {
        let at = Utc.timestamp_opt(1_700_000_000, 123_456_789).unwrap();
        let mut with_time = turn(None);
        with_time.created_at = Some(at);
        let plan = plan_append(&[with_time], 0, Utc::now(), HashMap::new());
        assert_eq!(plan.results[0].created_at.timestamp_subsec_nanos(), 123_456_000);
        let before_epoch = Utc.timestamp_opt(-1, 999_999_999).unwrap();
        assert_eq!(truncate_to_micros(before_epoch).timestamp_micros(), -1);
    }
}
