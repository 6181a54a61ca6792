//! The embedded backend of the transcript store: one SQLite file (rusqlite, bundled).
//!
//! The schema is `sqlite/schema.sql` and its siblings, applied idempotently by
//! [`SqliteStore::open`] (see `apply_schema`). The file
//! runs in WAL mode with foreign keys on and `synchronous = FULL`, so a call returns only after
//! its commit is durable.
//!
//! # Concurrency
//! rusqlite is synchronous: every call runs on `tokio::task::spawn_blocking` and takes the one
//! connection behind a `std::sync::Mutex`. Calls are therefore serialized within the process,
//! and `append` also opens an immediate (write-locking) transaction, which keeps seqs gapless
//! even if another process writes the same file. A lock held too long by another process
//! surfaces as `StoreError::Unavailable` once the busy timeout expires.
//!
//! # Group commit
//! Each commit waits for an fsync, and appends take the connection one at a time: when the
//! disk is slow (another writer flushing), every append queued behind one slow fsync waited for
//! its own as well. So appends queue up, and whichever append's blocking call gets the
//! connection commits all queued ones in one transaction, each in its own savepoint: one fsync
//! for the group, and an append that fails (one that breaks a constraint, say) is rolled back
//! to its savepoint alone. If the group's commit itself fails, nothing of it was written,
//! and each append is retried in a transaction of its own, so each gets its own outcome.
//!
//! The connection syncs nothing but those commits: it never checkpoints the WAL (a thread with
//! a connection of its own does, see `checkpoint`), and cursor advances commit unsynced.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension as _, TransactionBehavior};
use tracing::instrument;
use uuid::Uuid;

use super::{plan_append, truncate_to_micros, Backlog, Lag, SessionInfo, StoreError, StoreResult, TranscriptStore};
use crate::domain::{AppendedTurn, NewTurn, Role, SessionId, SessionKey, StoredTurn, Tenant};
// Poison is ignored: a panic mid-call rolled its transaction back when the guard unwound, so
// the connection is still sound, and the append queue is only pushed to or taken whole.
use crate::sync::lock;

/// The schema, in parts applied in order on every open; each part is idempotent.
const SCHEMA: &[&str] = &[
    include_str!("sqlite/schema.sql"),
    include_str!("sqlite/memory.sql"),
    include_str!("sqlite/compaction.sql"),
    include_str!("sqlite/prompts.sql"),
    include_str!("sqlite/audit.sql"),
    include_str!("sqlite/scene.sql"),
    include_str!("sqlite/keys.sql"),
    include_str!("sqlite/erase.sql"),
];
/// Columns added to a table after its first release, each as (table, column, the statement that
/// adds it). `CREATE TABLE IF NOT EXISTS` leaves the table of an older file as it was, so
/// `apply_schema` adds each column the table lacks.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("messages", "task", "ALTER TABLE messages ADD COLUMN task TEXT NULL"),
    ("memories", "task", "ALTER TABLE memories ADD COLUMN task TEXT NULL"),
];
/// The parts of the schema that need [`ADDED_COLUMNS`], applied after them; idempotent.
const AFTER_COLUMNS: &[&str] = &[include_str!("sqlite/tasks.sql")];
/// Recorded in `PRAGMA user_version`; a file written by a newer schema is refused. Bumped when
/// a part adds tables (4: scenes and persona; 5: API keys; 6: erasures; 7: the operator log):
/// every part is `IF NOT EXISTS`, so an older file is upgraded in place on open, and an older
/// build then refuses the file it cannot serve. 8 keyed sessions by their owner as well, which
/// `IF NOT EXISTS` cannot do: [`rekey::rekey_sessions`] rebuilds the tables of an older file.
/// The `task` columns did not bump it: an older build reads and writes such a file correctly
/// (its turns and memories simply have no task).
const SCHEMA_VERSION: i64 = 8;
/// How long a call waits for another process's lock before it gives up as `Unavailable`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

mod audit;
mod checkpoint;
mod compaction;
mod erase;
mod keys;
mod memory;
mod portable;
mod prompts;
mod rekey;
mod scene;

mod sql {
    // A session is its owner's: a statement that names one binds it as `?1..?4`, the session
    // id and then its team, agent and user.
    pub const CLAIM_SESSION: &str = "INSERT INTO sessions \
         (session_id, team_id, agent_id, user_id, last_seq, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?5) \
         ON CONFLICT (team_id, agent_id, user_id, session_id) DO NOTHING";
    pub const LAST_SEQ: &str = "SELECT last_seq FROM sessions \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const STORED_CLIENT_IDS: &str = "SELECT client_id, id, seq, created_at FROM messages \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 \
         AND client_id IN (SELECT value FROM json_each(?5))";
    pub const INSERT_TURN: &str = "INSERT INTO messages \
         (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at, task) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
    pub const UPDATE_SESSION: &str = "UPDATE sessions SET last_seq = ?5, updated_at = ?6 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const SESSION_INFO: &str = "SELECT last_seq, reset_at FROM sessions \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const LIST_TURNS: &str = "SELECT id, session_id, team_id, agent_id, user_id, seq, role, \
         content, metadata, client_id, created_at, task FROM messages \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 AND seq > ?5 \
         ORDER BY seq LIMIT ?6";
    pub const RESET_SESSION: &str = "UPDATE sessions SET reset_at = ?5, updated_at = ?5 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const TURNS_BY_ID: &str = "SELECT id, session_id, team_id, agent_id, user_id, seq, role, \
         content, metadata, client_id, created_at, task FROM messages \
         WHERE id IN (SELECT value FROM json_each(?1)) \
         AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const BACKLOG: &str = "SELECT s.session_id, s.team_id, s.agent_id, s.user_id, s.last_seq, \
         COALESCE(c.seq, 0) AS cursor_seq FROM sessions s \
         LEFT JOIN cursors c ON c.consumer = ?1 \
         AND c.team_id = s.team_id AND c.agent_id = s.agent_id AND c.user_id = s.user_id \
         AND c.session_id = s.session_id \
         WHERE s.last_seq > COALESCE(c.seq, 0) ORDER BY s.updated_at, s.session_id LIMIT ?2";
    pub const CURSOR: &str = "SELECT seq FROM cursors WHERE consumer = ?5 \
         AND session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const PENDING_TURNS: &str = "SELECT id, session_id, team_id, agent_id, user_id, seq, role, \
         content, metadata, client_id, created_at, task FROM messages \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 AND seq > ?5 \
         ORDER BY seq LIMIT ?6";
    pub const RESET_CURSORS: &str = "DELETE FROM cursors WHERE consumer = ?1";
    pub const ADVANCE_CURSOR: &str = "INSERT INTO cursors \
         (consumer, session_id, team_id, agent_id, user_id, seq, updated_at) \
         VALUES (?5, ?1, ?2, ?3, ?4, ?6, ?7) \
         ON CONFLICT (consumer, team_id, agent_id, user_id, session_id) DO UPDATE \
         SET seq = MAX(cursors.seq, excluded.seq), updated_at = excluded.updated_at";
    pub const LAG: &str = "SELECT COALESCE(SUM(s.last_seq - COALESCE(c.seq, 0)), 0) AS turns, \
         COUNT(*) AS sessions FROM sessions s \
         LEFT JOIN cursors c ON c.consumer = ?1 \
         AND c.team_id = s.team_id AND c.agent_id = s.agent_id AND c.user_id = s.user_id \
         AND c.session_id = s.session_id \
         WHERE s.last_seq > COALESCE(c.seq, 0)";
}

/// The transcript store in one SQLite file. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    /// Appends waiting for the next group commit (see the module docs).
    appends: Arc<Mutex<Vec<QueuedAppend>>>,
    _checkpointer: checkpoint::Checkpointer,
    #[cfg(test)]
    fail_next_group_commit: Arc<std::sync::atomic::AtomicBool>,
    /// The size of each group committed, in order.
    #[cfg(test)]
    group_sizes: Arc<Mutex<Vec<usize>>>,
}

/// An append waiting in the queue, and where its outcome goes.
struct QueuedAppend {
    tenant: Tenant,
    session_id: String,
    turns: Vec<NewTurn>,
    reply: tokio::sync::oneshot::Sender<Outcome<Vec<AppendedTurn>>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

/// What can go wrong inside a blocking call; turned into a `StoreError` at the boundary.
#[derive(Debug)]
enum Failure {
    SessionNotFound,
    Sqlite(rusqlite::Error),
    Corrupt(Box<dyn std::error::Error + Send + Sync>),
}

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Self {
        Self::Sqlite(error)
    }
}

type Outcome<T> = Result<T, Failure>;

/// Maps every row of a query with `row_of`, stopping at the first error.
fn collect_rows<T, E>(
    mut rows: rusqlite::Rows<'_>,
    mut row_of: impl FnMut(&rusqlite::Row<'_>) -> Result<T, E>,
) -> Outcome<Vec<T>>
where
    Failure: From<E>,
{
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(row_of(row)?);
    }
    Ok(out)
}

impl SqliteStore {
    /// Opens the database file at `path`, creating it (and its parent directory) if needed,
    /// switches it to WAL mode, and creates the schema unless it is there. Idempotent. The
    /// file I/O runs on the blocking pool.
    #[instrument(skip_all, fields(path = %path.display()))]
    pub async fn open(path: &Path) -> StoreResult<Self> {
        let path = path.to_owned();
        let (conn, checkpointer) = tokio::task::spawn_blocking(move || {
            let conn = open_connection(&path)?;
            Ok((conn, checkpoint::Checkpointer::start(&path, checkpoint::INTERVAL)?))
        })
        .await
        .map_err(|e| StoreError::Backend(Box::new(e)))?
        .map_err(store_error)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            appends: Arc::default(),
            _checkpointer: checkpointer,
            #[cfg(test)]
            fail_next_group_commit: Arc::default(),
            #[cfg(test)]
            group_sizes: Arc::default(),
        })
    }

    /// Runs `call` with the connection on the blocking pool.
    async fn run<T, F>(&self, call: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Outcome<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || call(&mut lock(&conn)))
            .await
            .map_err(|e| StoreError::Backend(Box::new(e)))?
            .map_err(store_error)
    }
}

fn open_connection(path: &Path) -> Outcome<Connection> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Failure::Corrupt(Box::new(e)))?;
    }
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(journal_mode = %mode, "sqlite store is not in WAL mode");
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    checkpoint::disable_automatic(&conn)?;
    conn.set_prepared_statement_cache_capacity(64);

    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(Failure::Corrupt(
            format!("schema version {version} is newer than this build ({SCHEMA_VERSION})").into(),
        ));
    }
    if version < rekey::OWNER_KEYED_SESSIONS && rekey::sessions_keyed_by_id(&tx)? {
        rekey::rekey_sessions(&tx)?;
    } else {
        apply_schema(&tx)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(conn)
}

/// Brings the schema of `conn` to this build's: creates what is missing ([`SCHEMA`]), adds
/// the columns an older file's tables lack ([`ADDED_COLUMNS`]), then what needs them
/// ([`AFTER_COLUMNS`]). Idempotent; the caller decides the transaction.
fn apply_schema(conn: &Connection) -> rusqlite::Result<()> {
    for part in SCHEMA {
        conn.execute_batch(part)?;
    }
    for (table, column, add) in ADDED_COLUMNS {
        let present = conn
            .prepare_cached("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
            .exists(params![table, column])?;
        if !present {
            conn.execute_batch(add)?;
        }
    }
    for part in AFTER_COLUMNS {
        conn.execute_batch(part)?;
    }
    Ok(())
}

#[async_trait]
impl TranscriptStore for SqliteStore {
    #[instrument(skip_all, fields(session_id = %session, turns = turns.len()))]
    async fn append(&self, tenant: &Tenant, session: &SessionId, turns: &[NewTurn]) -> StoreResult<Vec<AppendedTurn>> {
        let tenant = tenant.clone();
        let session_id = session.as_str().to_owned();
        let (reply, outcome) = tokio::sync::oneshot::channel();
        lock(&self.appends).push(QueuedAppend {
            tenant,
            session_id,
            turns: turns.to_vec(),
            reply,
        });
        let (conn, queue) = (Arc::clone(&self.conn), Arc::clone(&self.appends));
        #[cfg(test)]
        let (fail_commit, group_sizes) = (Arc::clone(&self.fail_next_group_commit), Arc::clone(&self.group_sizes));
        // This append's own call commits the queue when it gets the connection, unless a call
        // before it took this append along; either way the outcome arrives on `reply`. The
        // call is not awaited: a caller that goes away leaves the append to be committed.
        tokio::task::spawn_blocking(move || {
            let mut conn = lock(&conn);
            let group = std::mem::take(&mut *lock(&queue));
            if group.is_empty() {
                return;
            }
            #[cfg(test)]
            {
                lock(&group_sizes).push(group.len());
                if fail_commit.swap(false, std::sync::atomic::Ordering::AcqRel) {
                    return commit_appends(&mut conn, group, true);
                }
            }
            commit_appends(&mut conn, group, false);
        });
        match outcome.await {
            Ok(outcome) => outcome.map_err(store_error),
            // Dropped without an answer: the call committing it panicked, before the commit.
            Err(e) => Err(StoreError::Backend(Box::new(e))),
        }
    }

    #[instrument(skip_all, fields(session_id = %session, after_seq = after_seq, limit = limit))]
    async fn list(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<StoredTurn>> {
        let tenant = tenant.clone();
        let session_id = session.as_str().to_owned();
        self.run(move |conn| {
            let tx = conn.transaction()?;
            session_info(&tx, &tenant, &session_id)?;
            let mut stmt = tx.prepare_cached(sql::LIST_TURNS)?;
            let rows = stmt.query(params![
                session_id,
                tenant.team,
                tenant.agent,
                tenant.user,
                after_seq,
                i64::from(limit)
            ])?;
            stored_turns(rows)
        })
        .await
    }

    #[instrument(skip_all, fields(session_id = %session))]
    async fn session(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<SessionInfo> {
        let tenant = tenant.clone();
        let session_id = session.as_str().to_owned();
        self.run(move |conn| session_info(conn, &tenant, &session_id)).await
    }

    #[instrument(skip_all, fields(session_id = %session))]
    async fn reset(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<DateTime<Utc>> {
        let tenant = tenant.clone();
        let session_id = session.as_str().to_owned();
        self.run(move |conn| {
            let now = truncate_to_micros(Utc::now());
            let updated = conn.prepare_cached(sql::RESET_SESSION)?.execute(params![
                session_id,
                tenant.team,
                tenant.agent,
                tenant.user,
                now.timestamp_micros()
            ])?;
            if updated == 0 {
                return Err(Failure::SessionNotFound);
            }
            Ok(now)
        })
        .await
    }

    #[instrument(skip_all, fields(ids = ids.len()))]
    async fn turns_by_id(&self, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<Vec<StoredTurn>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let tenant = tenant.clone();
        let ids = json_array(ids.iter().map(Uuid::to_string)).map_err(StoreError::Backend)?;
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::TURNS_BY_ID)?;
            let rows = stmt.query(params![ids, tenant.team, tenant.agent, tenant.user])?;
            stored_turns(rows)
        })
        .await
    }

    #[instrument(skip_all, fields(consumer = consumer, limit = limit))]
    async fn backlog(&self, consumer: &str, limit: u32) -> StoreResult<Vec<Backlog>> {
        let consumer = consumer.to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::BACKLOG)?;
            let mut rows = stmt.query(params![consumer, i64::from(limit)])?;
            let mut backlog = Vec::new();
            while let Some(row) = rows.next()? {
                backlog.push(Backlog {
                    session_id: row.get("session_id")?,
                    tenant: tenant_of(row)?,
                    cursor: row.get("cursor_seq")?,
                    last_seq: row.get("last_seq")?,
                });
            }
            Ok(backlog)
        })
        .await
    }

    #[instrument(skip_all, fields(consumer = consumer, session_id = %session.session_id, limit = limit))]
    async fn pending_turns(
        &self,
        consumer: &str,
        session: &SessionKey,
        limit: u32,
    ) -> StoreResult<(i64, Vec<StoredTurn>)> {
        let consumer = consumer.to_owned();
        let session = session.clone();
        self.run(move |conn| pending_of(&conn.transaction()?, &consumer, &session, 0, limit))
            .await
    }

    #[instrument(skip_all, fields(consumer = consumer, sessions = sessions.len(), limit = limit))]
    async fn pending_turns_many(
        &self,
        consumer: &str,
        sessions: &[(SessionKey, i64)],
        limit: u32,
    ) -> StoreResult<Vec<StoredTurn>> {
        let consumer = consumer.to_owned();
        // Grouped in (team, agent, user, session) order, as on Postgres; a session listed
        // twice reads past its larger `after`.
        let mut floors: BTreeMap<SessionKey, i64> = BTreeMap::new();
        for (session, after) in sessions {
            let floor = floors.entry(session.clone()).or_insert(*after);
            *floor = (*floor).max(*after);
        }
        self.run(move |conn| {
            let tx = conn.transaction()?;
            let mut turns = Vec::new();
            for (session, after) in &floors {
                turns.extend(pending_of(&tx, &consumer, session, *after, limit)?.1);
            }
            Ok(turns)
        })
        .await
    }

    #[instrument(skip_all, fields(consumer = consumer, sessions = cursors.len()))]
    async fn advance_cursors(&self, consumer: &str, cursors: &[(SessionKey, i64)]) -> StoreResult<()> {
        if cursors.is_empty() {
            return Ok(());
        }
        let consumer = consumer.to_owned();
        let cursors = cursors.to_vec();
        self.run(move |conn| {
            // The trait lets a crash lose an advance, so this commit does not wait for the
            // disk: at `synchronous = NORMAL` a WAL commit is not synced, and the next append's
            // (FULL) sync covers its frames too. Appends queue behind this connection, and an
            // fsync per index round was one more wait in their way.
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            let advanced = advance_cursors(conn, &consumer, &cursors);
            conn.pragma_update(None, "synchronous", "FULL")?;
            advanced
        })
        .await
    }

    #[instrument(skip_all, fields(consumer = consumer))]
    async fn reset_cursors(&self, consumer: &str) -> StoreResult<u64> {
        let consumer = consumer.to_owned();
        self.run(move |conn| {
            let removed = conn.prepare_cached(sql::RESET_CURSORS)?.execute(params![consumer])?;
            Ok(removed as u64)
        })
        .await
    }

    #[instrument(skip_all, fields(consumer = consumer))]
    async fn lag(&self, consumer: &str) -> StoreResult<Lag> {
        let consumer = consumer.to_owned();
        self.run(move |conn| {
            let lag = conn.prepare_cached(sql::LAG)?.query_row(params![consumer], |row| {
                Ok(Lag {
                    turns: row.get("turns")?,
                    sessions: row.get("sessions")?,
                })
            })?;
            Ok(lag)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn team_turns(&self, team: &str) -> StoreResult<u64> {
        let team = team.to_owned();
        self.run(move |conn| {
            // Seqs are gapless from 1: a session's last_seq is its turn count.
            let n: i64 = conn
                .prepare_cached("SELECT coalesce(sum(last_seq), 0) FROM sessions WHERE team_id = ?1")?
                .query_row(params![team], |row| row.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.run(|conn| {
            conn.prepare_cached("SELECT 1")?
                .query_row([], |row| row.get::<_, i64>(0))?;
            Ok(())
        })
        .await
    }
}

/// `TranscriptStore::advance_cursors` in one transaction.
fn advance_cursors(conn: &mut Connection, consumer: &str, cursors: &[(SessionKey, i64)]) -> Outcome<()> {
    let tx = conn.transaction()?;
    let now = Utc::now().timestamp_micros();
    {
        let mut stmt = tx.prepare_cached(sql::ADVANCE_CURSOR)?;
        for (session, seq) in cursors {
            let t = &session.tenant;
            stmt.execute(params![session.session_id, t.team, t.agent, t.user, consumer, seq, now])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Commits a group of queued appends in one transaction and answers each (see the module docs).
/// `fail_commit` makes the group's commit fail, for the tests of what follows.
fn commit_appends(conn: &mut Connection, group: Vec<QueuedAppend>, fail_commit: bool) {
    let outcomes = append_group(conn, &group, fail_commit);
    for (queued, outcome) in group.into_iter().zip(outcomes) {
        // A caller that went away no longer wants the answer; the append stands.
        let _ = queued.reply.send(outcome);
    }
}

/// The outcome of each append of `group`, in order.
fn append_group(conn: &mut Connection, group: &[QueuedAppend], fail_commit: bool) -> Vec<Outcome<Vec<AppendedTurn>>> {
    if let [single] = group {
        // Alone, the append needs no savepoint: its failure rolls back all there is.
        ::metrics::histogram!(crate::metrics::STORE_GROUP_COMMIT_APPENDS).record(1.0);
        return vec![alone_one(conn, single)];
    }
    let together = (|| -> Outcome<Vec<Outcome<Vec<AppendedTurn>>>> {
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut outcomes = Vec::with_capacity(group.len());
        for q in group {
            // Dropped without `commit`, a savepoint rolls back what was done under it.
            let savepoint = tx.savepoint()?;
            let appended = append(&savepoint, &q.tenant, &q.session_id, &q.turns);
            if appended.is_ok() {
                savepoint.commit()?;
            }
            outcomes.push(appended);
        }
        if fail_commit {
            return Err(Failure::Corrupt("the group's commit failed (test)".into()));
        }
        tx.commit()?;
        Ok(outcomes)
    })();
    match together {
        Ok(outcomes) => {
            ::metrics::histogram!(crate::metrics::STORE_GROUP_COMMIT_APPENDS).record(group.len() as f64);
            outcomes
        }
        // Another process holds the write lock past the busy timeout: one at a time, each
        // append would wait that long again. Each gets the same retryable answer instead.
        Err(Failure::Sqlite(error)) if is_busy(&error) => {
            let code = error
                .sqlite_error()
                .map_or(rusqlite::ffi::SQLITE_BUSY, |e| e.extended_code);
            let busy = || rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
            group.iter().map(|_| Err(Failure::Sqlite(busy()))).collect()
        }
        Err(error) => {
            tracing::warn!(
                appends = group.len(),
                error = %store_error(error),
                "group commit failed; committing its appends one by one"
            );
            group.iter().map(|q| alone_one(conn, q)).collect()
        }
    }
}

/// One queued append in a transaction of its own.
fn alone_one(conn: &mut Connection, queued: &QueuedAppend) -> Outcome<Vec<AppendedTurn>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let appended = append(&tx, &queued.tenant, &queued.session_id, &queued.turns)?;
    tx.commit()?;
    Ok(appended)
}

/// One append, inside the caller's transaction (or savepoint). The session is the tenant's own,
/// created if new: another tenant's session of the same id is another row, and never in the
/// way.
fn append(tx: &Connection, tenant: &Tenant, session_id: &str, turns: &[NewTurn]) -> Outcome<Vec<AppendedTurn>> {
    let now = truncate_to_micros(Utc::now());
    tx.prepare_cached(sql::CLAIM_SESSION)?.execute(params![
        session_id,
        tenant.team,
        tenant.agent,
        tenant.user,
        now.timestamp_micros()
    ])?;
    let last_seq: i64 = tx
        .prepare_cached(sql::LAST_SEQ)?
        .query_row(params![session_id, tenant.team, tenant.agent, tenant.user], |row| {
            row.get("last_seq")
        })?;

    let client_ids: Vec<&str> = turns.iter().filter_map(|t| t.client_id.as_deref()).collect();
    let mut stored = HashMap::new();
    if !client_ids.is_empty() {
        let mut stmt = tx.prepare_cached(sql::STORED_CLIENT_IDS)?;
        let mut rows = stmt.query(params![
            session_id,
            tenant.team,
            tenant.agent,
            tenant.user,
            json_array(client_ids).map_err(Failure::Corrupt)?
        ])?;
        while let Some(row) = rows.next()? {
            let turn = AppendedTurn {
                id: uuid_of(row, "id")?,
                seq: row.get("seq")?,
                created_at: time_of(row.get("created_at")?)?,
            };
            stored.insert(row.get::<_, String>("client_id")?, turn);
        }
    }

    let plan = plan_append(turns, last_seq, now, stored);
    if !plan.new_turns.is_empty() {
        let mut insert = tx.prepare_cached(sql::INSERT_TURN)?;
        for (index, appended) in &plan.new_turns {
            let turn = &turns[*index];
            let metadata = serde_json::to_string(&turn.metadata).map_err(|e| Failure::Corrupt(Box::new(e)))?;
            insert.execute(params![
                appended.id.to_string(),
                session_id,
                tenant.team,
                tenant.agent,
                tenant.user,
                appended.seq,
                turn.role.as_str(),
                turn.content,
                metadata,
                turn.client_id,
                appended.created_at.timestamp_micros(),
                turn.task.as_ref().map(crate::domain::TaskId::as_str)
            ])?;
        }
        drop(insert);
        tx.prepare_cached(sql::UPDATE_SESSION)?.execute(params![
            session_id,
            tenant.team,
            tenant.agent,
            tenant.user,
            plan.last_seq,
            now.timestamp_micros()
        ])?;
    }
    Ok(plan.results)
}

fn session_info(conn: &Connection, tenant: &Tenant, session_id: &str) -> Outcome<SessionInfo> {
    let row = conn
        .prepare_cached(sql::SESSION_INFO)?
        .query_row(params![session_id, tenant.team, tenant.agent, tenant.user], |row| {
            Ok((row.get::<_, i64>("last_seq")?, row.get::<_, Option<i64>>("reset_at")?))
        })
        .optional()?;
    let (last_seq, reset_at) = row.ok_or(Failure::SessionNotFound)?;
    Ok(SessionInfo {
        last_seq,
        reset_at: reset_at.map(time_of).transpose()?,
    })
}

fn tenant_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Tenant> {
    Ok(Tenant {
        team: row.get("team_id")?,
        agent: row.get("agent_id")?,
        user: row.get("user_id")?,
    })
}

/// A session's cursor for `consumer` and up to `limit` turns past both it and `after`, read in
/// `tx` so that both are of one moment.
fn pending_of(
    tx: &rusqlite::Transaction<'_>,
    consumer: &str,
    session: &SessionKey,
    after: i64,
    limit: u32,
) -> Outcome<(i64, Vec<StoredTurn>)> {
    let (id, t) = (&session.session_id, &session.tenant);
    let cursor: i64 = tx
        .prepare_cached(sql::CURSOR)?
        .query_row(params![id, t.team, t.agent, t.user, consumer], |row| row.get("seq"))
        .optional()?
        .unwrap_or(0);
    let mut stmt = tx.prepare_cached(sql::PENDING_TURNS)?;
    let rows = stmt.query(params![
        id,
        t.team,
        t.agent,
        t.user,
        cursor.max(after),
        i64::from(limit)
    ])?;
    Ok((cursor, stored_turns(rows)?))
}

fn stored_turns(mut rows: rusqlite::Rows<'_>) -> Outcome<Vec<StoredTurn>> {
    let mut turns = Vec::new();
    while let Some(row) = rows.next()? {
        let role: String = row.get("role")?;
        let metadata: String = row.get("metadata")?;
        turns.push(StoredTurn {
            id: uuid_of(row, "id")?,
            tenant: tenant_of(row)?,
            session_id: row.get("session_id")?,
            seq: row.get("seq")?,
            role: Role::parse(&role).map_err(|e| Failure::Corrupt(Box::new(e)))?,
            content: row.get("content")?,
            metadata: serde_json::from_str(&metadata).map_err(|e| Failure::Corrupt(Box::new(e)))?,
            client_id: row.get("client_id")?,
            created_at: time_of(row.get("created_at")?)?,
            task: row.get("task")?,
        });
    }
    Ok(turns)
}

fn uuid_of(row: &rusqlite::Row<'_>, column: &str) -> Outcome<Uuid> {
    let text: String = row.get(column)?;
    Uuid::parse_str(&text).map_err(|e| Failure::Corrupt(Box::new(e)))
}

fn time_of(micros: i64) -> Outcome<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros)
        .ok_or_else(|| Failure::Corrupt(format!("timestamp {micros} out of range").into()))
}

/// Encodes values as a JSON array, the one way to pass a list to SQLite (`json_each`).
fn json_array<I, S>(values: I) -> Result<String, Box<dyn std::error::Error + Send + Sync>>
where
    I: IntoIterator<Item = S>,
    S: serde::Serialize,
{
    Ok(serde_json::to_string(&values.into_iter().collect::<Vec<_>>())?)
}

fn store_error(failure: Failure) -> StoreError {
    match failure {
        Failure::SessionNotFound => StoreError::SessionNotFound,
        Failure::Sqlite(error) if is_busy(&error) || is_full(&error) => StoreError::Unavailable(Box::new(error)),
        Failure::Sqlite(error) => StoreError::Backend(Box::new(error)),
        Failure::Corrupt(error) => StoreError::Backend(error),
    }
}

/// Another connection holds the lock past the busy timeout: a retry may succeed.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(e, _)
            if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The volume is full: nothing was written, and a retry succeeds once space is freed (as
/// Postgres's `53100 disk_full`, an insufficient-resources error, is retryable).
fn is_full(error: &rusqlite::Error) -> bool {
    matches!(error, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::DiskFull)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection to a fresh in-memory database with the schema applied.
    fn in_memory_schema() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        apply_schema(&conn).unwrap();
        conn
    }

    fn turn(content: &str, client_id: Option<&str>) -> NewTurn {
        NewTurn {
            role: Role::User,
            content: content.into(),
            metadata: serde_json::Map::new(),
            client_id: client_id.map(Into::into),
            created_at: None,
            task: None,
        }
    }

    fn tenant(user: &str) -> Tenant {
        Tenant {
            team: "t".into(),
            agent: "a".into(),
            user: user.into(),
        }
    }

    /// Queues `appends` while the test holds the connection, so that they are committed as one
    /// group once it lets go; returns each append's outcome, in order.
    #[expect(
        clippy::await_holding_lock,
        reason = "the appends must queue while the connection is held; only the blocking calls wait for it"
    )]
    async fn appended_together(
        store: &SqliteStore,
        appends: Vec<(Tenant, &str, Vec<NewTurn>)>,
    ) -> Vec<StoreResult<Vec<AppendedTurn>>> {
        let held = lock(&store.conn);
        let count = appends.len();
        let mut tasks = Vec::new();
        for (tenant, session, turns) in appends {
            let (cloned, session) = (store.clone(), SessionId::parse(session).unwrap());
            tasks.push(tokio::spawn(
                async move { cloned.append(&tenant, &session, &turns).await },
            ));
            // Queued in this order: each task pushes before its first await.
            while lock(&store.appends).len() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(lock(&store.appends).len(), count);
        drop(held);
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    }

    fn seqs(outcome: &StoreResult<Vec<AppendedTurn>>) -> Vec<i64> {
        outcome.as_ref().expect("appended").iter().map(|t| t.seq).collect()
    }

    async fn stored_seqs(store: &SqliteStore, tenant: &Tenant, session: &str) -> Vec<(i64, String)> {
        let session = SessionId::parse(session).unwrap();
        let turns = store.list(tenant, &session, 0, 100).await.unwrap();
        turns.into_iter().map(|t| (t.seq, t.content)).collect()
    }

    async fn stored_seq_numbers(store: &SqliteStore, tenant: &Tenant, session: &str) -> Vec<i64> {
        let stored = stored_seqs(store, tenant, session).await;
        stored.into_iter().map(|(seq, _)| seq).collect()
    }

    #[tokio::test]
    async fn queued_appends_commit_as_one_group_and_a_failing_one_alone_is_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("sediment.db")).await.unwrap();
        let (a, b) = (tenant("a"), tenant("b"));
        let session = SessionId::parse("s").unwrap();
        store.append(&a, &session, &[turn("first", None)]).await.unwrap();

        let outcomes = appended_together(
            &store,
            vec![
                (a.clone(), "s", vec![turn("two", None), turn("three", None)]),
                // Its second turn breaks a constraint: it fails after writing its first, and
                // takes nothing of the others with it.
                (a.clone(), "s", vec![turn("half", None), turn("bad\0", None)]),
                (a.clone(), "s", vec![turn("four", Some("c1"))]),
                (a.clone(), "other", vec![turn("elsewhere", None)]),
                // A retry inside the same group finds the first one's turn.
                (a.clone(), "s", vec![turn("four", Some("c1"))]),
                // Another tenant's session of the same id is a session of its own.
                (b.clone(), "s", vec![turn("theirs", None)]),
            ],
        )
        .await;
        assert_eq!(*lock(&store.group_sizes), vec![1, 6]);
        assert_eq!(seqs(&outcomes[0]), vec![2, 3]);
        assert!(matches!(outcomes[1], Err(StoreError::Backend(_))), "{:?}", outcomes[1]);
        assert_eq!(seqs(&outcomes[2]), vec![4]);
        assert_eq!(seqs(&outcomes[3]), vec![1]);
        assert_eq!(outcomes[4].as_ref().unwrap(), outcomes[2].as_ref().unwrap());
        assert_eq!(seqs(&outcomes[5]), vec![1]);

        let stored = stored_seqs(&store, &a, "s").await;
        let expected: Vec<(i64, String)> = [(1, "first"), (2, "two"), (3, "three"), (4, "four")]
            .into_iter()
            .map(|(seq, content)| (seq, content.to_string()))
            .collect();
        assert_eq!(stored, expected);
        assert_eq!(stored_seqs(&store, &b, "s").await, vec![(1, "theirs".to_owned())]);
        assert!(matches!(
            store.list(&tenant("c"), &session, 0, 10).await,
            Err(StoreError::SessionNotFound)
        ));
        // Committed for good: a new connection to the file sees the same turns.
        drop(store);
        let reopened = SqliteStore::open(&dir.path().join("sediment.db")).await.unwrap();
        assert_eq!(stored_seqs(&reopened, &a, "s").await, expected);
    }

    fn pragma(store: &SqliteStore, name: &str) -> i64 {
        lock(&store.conn)
            .pragma_query_value(None, name, |row| row.get(0))
            .expect("pragma")
    }

    /// Cursor advances commit at `synchronous = NORMAL`; the connection must be back at FULL
    /// (2) for the appends after them, even when an advance fails.
    #[tokio::test]
    async fn appends_stay_synced_after_a_cursor_advance_even_a_failed_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sediment.db");
        let store = SqliteStore::open(&path).await.unwrap();
        assert_eq!(pragma(&store, "synchronous"), 2);
        // Checkpoints are the checkpointer's (`checkpoint`), never an append's.
        assert_eq!(pragma(&store, "wal_autocheckpoint"), 0);
        let (a, session) = (tenant("a"), SessionId::parse("s").unwrap());
        store.append(&a, &session, &[turn("one", None)]).await.unwrap();

        let key = SessionKey::new(a.clone(), "s");
        store.advance_cursors("index", &[(key.clone(), 1)]).await.unwrap();
        assert_eq!(store.lag("index").await.unwrap().turns, 0);
        assert_eq!(pragma(&store, "synchronous"), 2);

        Connection::open(&path)
            .unwrap()
            .execute_batch("DROP TABLE cursors")
            .unwrap();
        store
            .advance_cursors("index", &[(key, 1)])
            .await
            .expect_err("no cursors table");
        assert_eq!(pragma(&store, "synchronous"), 2);
        store.append(&a, &session, &[turn("two", None)]).await.unwrap();
        assert_eq!(stored_seq_numbers(&store, &a, "s").await, vec![1, 2]);
    }

    #[tokio::test]
    async fn when_a_group_commit_fails_each_append_is_committed_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("sediment.db")).await.unwrap();
        let (a, b) = (tenant("a"), tenant("b"));
        store
            .append(&a, &SessionId::parse("s").unwrap(), &[turn("first", None)])
            .await
            .unwrap();
        store
            .fail_next_group_commit
            .store(true, std::sync::atomic::Ordering::Release);

        let outcomes = appended_together(
            &store,
            vec![
                (a.clone(), "s", vec![turn("two", None)]),
                (a.clone(), "s", vec![turn("bad\0", None)]),
                (b.clone(), "s", vec![turn("theirs", None)]),
                (a.clone(), "s", vec![turn("three", None), turn("four", None)]),
            ],
        )
        .await;
        assert_eq!(*lock(&store.group_sizes), vec![1, 4]);
        // Nothing of the failed group was written, so the retries start from seq 2 again.
        assert_eq!(seqs(&outcomes[0]), vec![2]);
        assert!(matches!(outcomes[1], Err(StoreError::Backend(_))), "{:?}", outcomes[1]);
        assert_eq!(seqs(&outcomes[2]), vec![1]);
        assert_eq!(seqs(&outcomes[3]), vec![3, 4]);
        let stored = stored_seq_numbers(&store, &a, "s").await;
        assert_eq!(stored, vec![1, 2, 3, 4]);
        assert_eq!(stored_seq_numbers(&store, &b, "s").await, vec![1]);
    }

    #[tokio::test]
    async fn a_group_that_cannot_get_the_write_lock_is_told_to_retry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sediment.db");
        let store = SqliteStore::open(&path).await.unwrap();
        let a = tenant("a");
        store
            .append(&a, &SessionId::parse("s").unwrap(), &[turn("first", None)])
            .await
            .unwrap();
        // Another process's writer, holding the lock past the busy timeout.
        let mut other = Connection::open(&path).unwrap();
        let writing = other.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        let started = std::time::Instant::now();
        let outcomes = appended_together(
            &store,
            vec![
                (a.clone(), "s", vec![turn("two", None)]),
                (a.clone(), "s", vec![turn("three", None)]),
            ],
        )
        .await;
        // One busy timeout for the group, not one per append.
        assert!(started.elapsed() < BUSY_TIMEOUT * 2, "{:?}", started.elapsed());
        for outcome in &outcomes {
            assert!(matches!(outcome, Err(e) if e.is_retryable()), "{outcome:?}");
        }
        drop(writing);
        let stored = stored_seq_numbers(&store, &a, "s").await;
        assert_eq!(stored, vec![1]);
    }

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn busy_is_retryable_and_constraints_are_not() {
        assert!(store_error(Failure::Sqlite(failure(rusqlite::ffi::SQLITE_BUSY))).is_retryable());
        assert!(store_error(Failure::Sqlite(failure(rusqlite::ffi::SQLITE_LOCKED))).is_retryable());
        let constraint = store_error(Failure::Sqlite(failure(rusqlite::ffi::SQLITE_CONSTRAINT)));
        assert!(matches!(constraint, StoreError::Backend(_)));
    }

    /// A file made by the previous schema (version 3, no scene tables) is upgraded in place on
    /// open and keeps its data.
    #[test]
    fn a_version_3_file_is_upgraded() {
        let dir = std::env::temp_dir().join(format!("sediment-upgrade-{}", Uuid::new_v4().simple()));
        let path = dir.join("sediment.db");
        std::fs::create_dir_all(&dir).unwrap();
        {
            let conn = Connection::open(&path).unwrap();
            for part in SCHEMA
                .iter()
                .filter(|part| !part.contains("CREATE TABLE IF NOT EXISTS scenes"))
            {
                conn.execute_batch(part).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.execute(
                "INSERT INTO sessions (session_id, team_id, agent_id, user_id, created_at, updated_at) \
                 VALUES ('s', 't', 'a', 'u', 0, 0)",
                [],
            )
            .unwrap();
        }
        let result = open_connection(&path).map(|conn| {
            let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).unwrap();
            let scenes: i64 = conn
                .query_row("SELECT count(*) FROM scenes", [], |row| row.get(0))
                .unwrap();
            let sessions: i64 = conn
                .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
                .unwrap();
            (version, scenes, sessions)
        });
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(result, Ok((SCHEMA_VERSION, 0, 1))), "upgrade failed");
    }

    /// SQLite's plan for `query` with every parameter unbound: one `detail` line per step.
    fn query_plan(conn: &Connection, query: &str) -> Vec<String> {
        let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {query}")).unwrap();
        let unbound = vec![rusqlite::types::Null; plan.parameter_count()];
        plan.query_map(rusqlite::params_from_iter(unbound), |row| {
            row.get::<_, String>("detail")
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    /// Every read of turns finds them through an index (the schema keeps few, to keep appends
    /// cheap; see `schema.sql`), never by scanning the table.
    #[test]
    fn reads_of_turns_search_an_index() {
        let conn = in_memory_schema();
        for query in [
            sql::STORED_CLIENT_IDS,
            sql::LIST_TURNS,
            sql::TURNS_BY_ID,
            sql::PENDING_TURNS,
        ] {
            let steps = query_plan(&conn, query);
            assert!(
                steps.iter().any(|step| step.starts_with("SEARCH messages USING")),
                "{query}: {steps:?}"
            );
            assert!(
                !steps.iter().any(|step| step.starts_with("SCAN messages")),
                "{query}: {steps:?}"
            );
        }
    }

    /// A file from before tasks (its tables without the `task` columns) gets them on open,
    /// keeps its rows (without a task), and then stores tasks; opening it again changes
    /// nothing.
    #[test]
    fn a_file_from_before_tasks_gets_the_task_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sediment.db");
        {
            let conn = Connection::open(&path).unwrap();
            for part in SCHEMA {
                conn.execute_batch(part).unwrap();
            }
            conn.execute_batch(
                "ALTER TABLE messages DROP COLUMN task;
                 ALTER TABLE memories DROP COLUMN task;
                 INSERT INTO sessions (session_id, team_id, agent_id, user_id, created_at, updated_at)
                 VALUES ('s', 't', 'a', 'u', 0, 0);
                 INSERT INTO messages (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, created_at)
                 VALUES ('00000000-0000-0000-0000-000000000001', 's', 't', 'a', 'u', 1, 'user', 'old', '{}', 0);",
            )
            .unwrap();
            conn.pragma_update(None, "user_version", 6).unwrap();
        }
        let columns = |conn: &Connection, table: &str| -> Vec<String> {
            conn.prepare("SELECT name FROM pragma_table_info(?1)")
                .unwrap()
                .query_map([table], |row| row.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        for _ in 0..2 {
            let conn = open_connection(&path).unwrap();
            for table in ["messages", "memories"] {
                let columns = columns(&conn, table);
                assert_eq!(columns.last().map(String::as_str), Some("task"), "{table}: {columns:?}");
                assert_eq!(columns.iter().filter(|c| *c == "task").count(), 1, "{table}");
            }
            let fresh = in_memory_schema();
            assert_eq!(columns(&conn, "messages"), columns(&fresh, "messages"));
            assert_eq!(columns(&conn, "memories"), columns(&fresh, "memories"));
            let old: (String, Option<String>) = conn
                .query_row("SELECT content, task FROM messages", [], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .unwrap();
            assert_eq!(old, ("old".to_owned(), None));
            let index: i64 = conn
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'memories_tenant_task_created_idx'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(index, 1);
        }
    }

    /// The memory listing narrowed to a task walks the task index, never the whole tenant.
    #[test]
    fn the_task_listing_searches_the_task_index() {
        let conn = in_memory_schema();
        let query = memory::list_statement(true);
        let steps = query_plan(&conn, &query);
        assert!(
            steps
                .iter()
                .any(|step| step.contains("USING INDEX memories_tenant_task_created_idx")),
            "{steps:?}"
        );
    }

    /// A file from before V007 loses the indexes that every append rewrote, and keeps its data.
    #[test]
    fn an_older_file_drops_the_indexes_that_appends_rewrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sediment.db");
        let dropped = [
            "sessions_tenant_idx",
            "sessions_updated_at_idx",
            "messages_tenant_session_seq_idx",
        ];
        {
            let conn = open_connection(&path).unwrap();
            conn.execute_batch(
                "CREATE INDEX sessions_tenant_idx ON sessions (team_id, agent_id, user_id, updated_at);
                 CREATE INDEX sessions_updated_at_idx ON sessions (updated_at, session_id);
                 CREATE INDEX messages_tenant_session_seq_idx ON messages (team_id, agent_id, user_id, session_id, seq);
                 INSERT INTO sessions (session_id, team_id, agent_id, user_id, created_at, updated_at)
                 VALUES ('s', 't', 'a', 'u', 0, 0);",
            )
            .unwrap();
        }
        let conn = open_connection(&path).unwrap();
        let left: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name IN (?1, ?2, ?3)")
            .unwrap()
            .query_map(dropped, |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(left.is_empty(), "still there: {left:?}");
        let sessions: i64 = conn
            .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
            .unwrap();
        assert_eq!(sessions, 1);
    }

    /// The tables keyed by a session as schema version 7 made them.
    const V7_SESSION_TABLES: &str = include_str!("sqlite/v7_sessions.sql");

    /// The rows of the tables that version 8 rebuilt, in the columns they had at version 7
    /// (but `task`, which a file from before tasks lacks).
    const V7_ROWS: &[&str] = &[
        "SELECT session_id, team_id, agent_id, user_id, last_seq, reset_at, created_at, updated_at \
         FROM sessions ORDER BY session_id",
        "SELECT id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at \
         FROM messages ORDER BY id",
        "SELECT consumer, session_id, seq, updated_at FROM cursors ORDER BY consumer, session_id",
        "SELECT session_id, runs, idle_due_at, lease_owner, lease_until, updated_at FROM extract_schedule \
         ORDER BY session_id",
        // Its columns are in the same order in both versions.
        "SELECT * FROM session_compactions ORDER BY session_id",
    ];

    fn rows_of(conn: &Connection, query: &str) -> Vec<Vec<rusqlite::types::Value>> {
        let mut stmt = conn.prepare(query).unwrap();
        let width = stmt.column_count();
        let rows = stmt
            .query_map([], |row| {
                (0..width).map(|i| row.get(i)).collect::<rusqlite::Result<Vec<_>>>()
            })
            .unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    }

    /// The definitions of the tables that version 8 rebuilt, and of their indexes.
    fn session_schema(conn: &Connection) -> Vec<(String, String, Option<String>)> {
        conn.prepare(
            "SELECT type, name, sql FROM sqlite_master WHERE tbl_name IN \
             ('sessions', 'messages', 'cursors', 'extract_schedule', 'session_compactions') ORDER BY type, name",
        )
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    /// A file of schema version 7, whose sessions were keyed by their id alone, is rebuilt on
    /// open with every row, its cursors and schedules taking their owner from their session;
    /// another owner can then have a session of the same id. A file from before tasks too.
    #[tokio::test]
    async fn a_version_7_file_is_rekeyed_by_owner() {
        use crate::store::compaction::CompactionStore as _;
        use crate::store::memory::MemoryStore as _;

        for with_tasks in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sediment.db");
            let before: Vec<Vec<Vec<rusqlite::types::Value>>> = {
                let conn = Connection::open(&path).unwrap();
                conn.pragma_update(None, "foreign_keys", true).unwrap();
                conn.execute_batch(V7_SESSION_TABLES).unwrap();
                // The rest of the schema is as version 7 left it.
                for part in SCHEMA.iter().chain(AFTER_COLUMNS) {
                    conn.execute_batch(part).unwrap();
                }
                if !with_tasks {
                    conn.execute_batch("ALTER TABLE messages DROP COLUMN task").unwrap();
                }
                assert!(rekey::sessions_keyed_by_id(&conn).unwrap());
                conn.execute_batch(
                    "INSERT INTO sessions (session_id, team_id, agent_id, user_id, last_seq, reset_at, created_at, updated_at)
                     VALUES ('s1', 't', 'a', 'u1', 2, NULL, 10, 20), ('s2', 't', 'a', 'u2', 1, 15, 11, 21);
                     INSERT INTO messages (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at)
                     VALUES ('00000000-0000-0000-0000-000000000001', 's1', 't', 'a', 'u1', 1, 'user', 'one', '{}', 'c1', 12),
                            ('00000000-0000-0000-0000-000000000002', 's1', 't', 'a', 'u1', 2, 'assistant', 'two', '{\"k\":1}', NULL, 13),
                            ('00000000-0000-0000-0000-000000000003', 's2', 't', 'a', 'u2', 1, 'user', 'three', '{}', NULL, 14);
                     INSERT INTO cursors (consumer, session_id, seq, updated_at)
                     VALUES ('index', 's1', 2, 30), ('extract', 's1', 1, 31), ('index', 's2', 1, 32);
                     INSERT INTO extract_schedule (session_id, runs, idle_due_at, lease_owner, lease_until, updated_at)
                     VALUES ('s1', 1, 40, 'owner', 50, 41);
                     INSERT INTO session_compactions (session_id, team_id, agent_id, user_id, status, attempts, requested_at, lease_until, updated_at)
                     VALUES ('s2', 't', 'a', 'u2', 'pending', 1, 60, 70, 61);",
                )
                .unwrap();
                if with_tasks {
                    conn.execute_batch("UPDATE messages SET task = 'k' WHERE seq = 1")
                        .unwrap();
                }
                conn.pragma_update(None, "user_version", 7).unwrap();
                let before = V7_ROWS.iter().map(|query| rows_of(&conn, query)).collect();
                // The cursor of a session that has no row (its owner was erased) names no
                // owner, and goes.
                conn.execute_batch(
                    "INSERT INTO cursors (consumer, session_id, seq, updated_at) VALUES ('index', 'gone', 5, 33)",
                )
                .unwrap();
                before
            };

            {
                let conn = open_connection(&path).unwrap();
                let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).unwrap();
                assert_eq!(version, SCHEMA_VERSION);
                assert!(!rekey::sessions_keyed_by_id(&conn).unwrap());
                for (query, rows) in V7_ROWS.iter().zip(&before) {
                    assert_eq!(rows_of(&conn, query), *rows, "{query}");
                }
                let owners = |query: &str| -> Vec<(String, String)> {
                    let rows = rows_of(&conn, query);
                    rows.into_iter()
                        .map(|row| match &row[..] {
                            [rusqlite::types::Value::Text(s), rusqlite::types::Value::Text(u)] => {
                                (s.clone(), u.clone())
                            }
                            other => panic!("{other:?}"),
                        })
                        .collect()
                };
                let expected = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
                    pairs.iter().map(|(s, u)| ((*s).to_owned(), (*u).to_owned())).collect()
                };
                assert_eq!(
                    owners("SELECT session_id, user_id FROM cursors ORDER BY 1, 2"),
                    expected(&[("s1", "u1"), ("s1", "u1"), ("s2", "u2")])
                );
                assert_eq!(
                    owners("SELECT session_id, user_id FROM extract_schedule"),
                    expected(&[("s1", "u1")])
                );
                // Rebuilt to the letter of a new file, indexes included, with nothing left aside.
                assert_eq!(session_schema(&conn), session_schema(&in_memory_schema()));
                let aside: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM sqlite_master WHERE name GLOB '*_old*'",
                        [],
                        |row| row.get(0),
                    )
                    .unwrap();
                assert_eq!(aside, 0);
                let violations: i64 = conn
                    .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |row| row.get(0))
                    .unwrap();
                assert_eq!(violations, 0);
            }

            let store = SqliteStore::open(&path).await.unwrap();
            let (u1, u2) = (tenant("u1"), tenant("u2"));
            let s1 = SessionId::parse("s1").unwrap();
            let turns = store.list(&u1, &s1, 0, 10).await.unwrap();
            assert_eq!(turns.len(), 2);
            assert_eq!(turns[0].client_id.as_deref(), Some("c1"));
            assert_eq!(turns[0].task.as_deref(), with_tasks.then_some("k"));
            let key = SessionKey::new(u1.clone(), "s1");
            assert_eq!(store.pending_turns("index", &key, 10).await.unwrap(), (2, Vec::new()));
            assert_eq!(store.pending_turns("extract", &key, 10).await.unwrap().0, 1);
            assert_eq!(store.lag("index").await.unwrap().sessions, 0);
            assert_eq!(store.schedule(&key).await.unwrap().runs, 1);
            let compaction = store.compaction(&u2, &SessionId::parse("s2").unwrap()).await.unwrap();
            assert_eq!(compaction.map(|c| c.attempts), Some(1));

            // Another owner's "s1" is a session of its own, from seq 1; the first owner's goes on.
            let other = tenant("u3");
            let appended = store.append(&other, &s1, &[turn("mine", None)]).await;
            assert_eq!(seqs(&appended), vec![1]);
            let appended = store.append(&u1, &s1, &[turn("three", None)]).await;
            assert_eq!(seqs(&appended), vec![3]);
            assert_eq!(stored_seq_numbers(&store, &u1, "s1").await, vec![1, 2, 3]);
            assert_eq!(stored_seq_numbers(&store, &other, "s1").await, vec![1]);
            assert!(matches!(
                store.list(&u2, &s1, 0, 10).await,
                Err(StoreError::SessionNotFound)
            ));
        }
    }

    /// The backlog sweep and the lag read every session (the schema keeps no index on
    /// `updated_at`, see `schema.sql`), and each one's cursor by its key; the per-session reads
    /// search their keys.
    #[test]
    fn session_reads_search_their_keys() {
        let conn = in_memory_schema();
        for query in [sql::BACKLOG, sql::LAG] {
            let steps = query_plan(&conn, query);
            assert!(
                steps.iter().any(|step| step.starts_with("SEARCH c USING INDEX sqlite_autoindex_cursors_1 (consumer=? AND team_id=? AND agent_id=? AND user_id=? AND session_id=?)")),
                "{query}: {steps:?}"
            );
        }
        for query in [
            sql::LAST_SEQ,
            sql::UPDATE_SESSION,
            sql::SESSION_INFO,
            sql::RESET_SESSION,
            sql::CURSOR,
        ] {
            let steps = query_plan(&conn, query);
            assert!(
                steps.iter().all(|step| step.starts_with("SEARCH")),
                "{query}: {steps:?}"
            );
        }
    }

    #[test]
    fn schema_refuses_nul_in_content() {
        let conn = in_memory_schema();
        conn.execute(
            "INSERT INTO sessions (session_id, team_id, agent_id, user_id, created_at, updated_at) \
             VALUES ('s', 't', 'a', 'u', 0, 0)",
            [],
        )
        .unwrap();
        let insert = |content: &str| {
            conn.execute(
                sql::INSERT_TURN,
                params![
                    Uuid::new_v4().to_string(),
                    "s",
                    "t",
                    "a",
                    "u",
                    1,
                    "user",
                    content,
                    "{}",
                    None::<String>,
                    0,
                    None::<String>
                ],
            )
        };
        assert!(insert("a\0b").is_err());
        assert!(insert("ab").is_ok());
    }
}
