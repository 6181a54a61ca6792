//! The cluster backend of the transcript store: Postgres through a deadpool-postgres pool.
//!
//! The schema is `migrations/*.sql` at the workspace root, embedded here and applied by
//! [`PostgresStore::migrate`]; the queries are the `.sql` files in `postgres/queries/`, each
//! prepared with `prepare_cached` and exercised by the conformance suite.
//!
//! # Concurrency
//! `append` locks the session row for the length of its transaction, so appends to one session
//! run one after another and seqs stay gapless; appends to other sessions proceed in parallel.
//! Reads take no locks. Turns with client ids take a transaction (`SELECT ... FOR UPDATE`, then
//! the stored client ids, then the insert); turns without take one statement, whose upsert of
//! the session row takes the lock (`append_new_turns.sql`): one round trip instead of six
//! (`bench cluster ingest` without an index worker, 2 cores: 1.6 → 0.9 ms per 10-turn append
//! from one client, 15k → 20k turns/s from 64).

use std::collections::HashMap;
use std::str::FromStr as _;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::types::Json;
use tokio_postgres::{NoTls, Row};
use tracing::instrument;
use uuid::Uuid;

use super::{
    plan_append, truncate_to_micros, turn_id, Backlog, Lag, SessionInfo, StoreError, StoreResult, TranscriptStore,
};
use crate::domain::{AppendedTurn, NewTurn, Role, SessionId, SessionKey, StoredTurn, TaskId, Tenant};

/// One forward-only schema change, applied at most once per database.
struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

/// Every migration, in version order. Add new files here; never edit an applied one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../../../migrations/V001__init.sql"),
    },
    Migration {
        version: 2,
        name: "memories",
        sql: include_str!("../../../migrations/V002__memories.sql"),
    },
    Migration {
        version: 3,
        name: "session_compactions",
        sql: include_str!("../../../migrations/V003__session_compactions.sql"),
    },
    Migration {
        version: 4,
        name: "prompt_templates",
        sql: include_str!("../../../migrations/V004__prompt_templates.sql"),
    },
    Migration {
        version: 5,
        name: "audit_log",
        sql: include_str!("../../../migrations/V005__audit_log.sql"),
    },
    Migration {
        version: 6,
        name: "scenes",
        sql: include_str!("../../../migrations/V006__scenes.sql"),
    },
    Migration {
        version: 7,
        name: "append_write_volume",
        sql: include_str!("../../../migrations/V007__append_write_volume.sql"),
    },
    Migration {
        version: 8,
        name: "api_keys",
        sql: include_str!("../../../migrations/V008__api_keys.sql"),
    },
    Migration {
        version: 9,
        name: "erasures",
        sql: include_str!("../../../migrations/V009__erasures.sql"),
    },
    Migration {
        version: 10,
        name: "tasks",
        sql: include_str!("../../../migrations/V010__tasks.sql"),
    },
    Migration {
        version: 11,
        name: "operator_log",
        sql: include_str!("../../../migrations/V011__operator_log.sql"),
    },
    Migration {
        version: 12,
        name: "owner_scoped_sessions",
        sql: include_str!("../../../migrations/V012__owner_scoped_sessions.sql"),
    },
];

/// The advisory lock key that serializes `migrate` across replicas ("SEDIMENT" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x5345_4449_4d45_4e54;

/// How long to wait for a TCP connection, and for a pooled connection, before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const POOL_TIMEOUT: Duration = Duration::from_secs(10);

/// The server ends a session that sits in an open transaction this long waiting for its
/// client, rolling the transaction back: every transaction here runs its statements back to
/// back, so only a stalled process (paused, starved of CPU) waits that long, and the row locks
/// it holds (an owner's schedule row, a session's) would otherwise stop every writer of that
/// row, API appends among them, until the process moves again, however long its lease. The
/// chaos scenario worker-pause measured 11-13 s with 31 waiters before this. A URL's own
/// `options` setting it wins.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "idle_in_transaction_session_timeout=5s";

mod audit;
mod compaction;
mod erase;
mod keys;
mod memory;
mod portable;
mod prompts;
mod scene;

mod sql {
    pub const MIGRATE_LOCK: &str = include_str!("postgres/queries/migrate_lock.sql");
    pub const MIGRATE_CREATE_TABLE: &str = include_str!("postgres/queries/migrate_create_table.sql");
    pub const MIGRATE_APPLIED: &str = include_str!("postgres/queries/migrate_applied.sql");
    pub const MIGRATE_RECORD: &str = include_str!("postgres/queries/migrate_record.sql");
    pub const APPEND_CLAIM_SESSION: &str = include_str!("postgres/queries/append_claim_session.sql");
    pub const APPEND_LOCK_SESSION: &str = include_str!("postgres/queries/append_lock_session.sql");
    pub const APPEND_STORED_CLIENT_IDS: &str = include_str!("postgres/queries/append_stored_client_ids.sql");
    pub const APPEND_INSERT_TURNS: &str = include_str!("postgres/queries/append_insert_turns.sql");
    pub const APPEND_UPDATE_SESSION: &str = include_str!("postgres/queries/append_update_session.sql");
    pub const APPEND_NEW_TURNS: &str = include_str!("postgres/queries/append_new_turns.sql");
    pub const LIST_TURNS: &str = include_str!("postgres/queries/list_turns.sql");
    pub const SESSION_INFO: &str = include_str!("postgres/queries/session_info.sql");
    pub const RESET_SESSION: &str = include_str!("postgres/queries/reset_session.sql");
    pub const TURNS_BY_ID: &str = include_str!("postgres/queries/turns_by_id.sql");
    pub const BACKLOG: &str = include_str!("postgres/queries/backlog.sql");
    pub const PENDING_TURNS: &str = include_str!("postgres/queries/pending_turns.sql");
    pub const PENDING_TURNS_MANY: &str = include_str!("postgres/queries/pending_turns_many.sql");
    pub const ADVANCE_CURSORS: &str = include_str!("postgres/queries/advance_cursors.sql");
    pub const LAG: &str = include_str!("postgres/queries/lag.sql");
    pub const RESET_CURSORS: &str = include_str!("postgres/queries/reset_cursors.sql");
    pub const TEAM_TURNS: &str = include_str!("postgres/queries/team_turns.sql");
}

/// The transcript store on Postgres. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .finish()
    }
}

impl PostgresStore {
    /// Builds a pool of up to `max_connections` connections to `database_url` (a URL or a
    /// key=value connection string) and checks that one connection opens. Does not touch the
    /// schema. An unreachable server is `Unavailable`; a malformed URL is `Backend`.
    #[instrument(skip_all, fields(max_connections = max_connections))]
    pub async fn connect(database_url: &str, max_connections: usize) -> StoreResult<Self> {
        let mut config =
            tokio_postgres::Config::from_str(database_url).map_err(|e| StoreError::Backend(Box::new(e)))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let options = config.get_options().unwrap_or_default();
        if !options.contains("idle_in_transaction_session_timeout") {
            let options = format!("{options} -c {IDLE_IN_TRANSACTION_TIMEOUT}");
            config.options(options.trim_start());
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_TIMEOUT))
            .create_timeout(Some(POOL_TIMEOUT))
            .recycle_timeout(Some(POOL_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        let store = Self { pool };
        store.ping().await?;
        Ok(store)
    }

    /// Applies the embedded migrations that this database lacks, in version order, and records
    /// each in `schema_migrations`. Runs in one transaction holding an advisory lock, so
    /// replicas that start at once apply each migration exactly once. Idempotent.
    #[instrument(skip_all)]
    pub async fn migrate(&self) -> StoreResult<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let lock = tx.prepare_cached(sql::MIGRATE_LOCK).await.map_err(pg_error)?;
        tx.execute(&lock, &[&MIGRATION_LOCK_KEY]).await.map_err(pg_error)?;
        tx.batch_execute(sql::MIGRATE_CREATE_TABLE).await.map_err(pg_error)?;
        let select = tx.prepare_cached(sql::MIGRATE_APPLIED).await.map_err(pg_error)?;
        let applied: Vec<i64> = tx
            .query(&select, &[])
            .await
            .map_err(pg_error)?
            .iter()
            .map(|row| get(row, "version"))
            .collect::<StoreResult<_>>()?;
        let record = tx.prepare_cached(sql::MIGRATE_RECORD).await.map_err(pg_error)?;
        for migration in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
            tx.batch_execute(migration.sql).await.map_err(pg_error)?;
            tx.execute(&record, &[&migration.version, &migration.name])
                .await
                .map_err(pg_error)?;
            tracing::info!(version = migration.version, name = migration.name, "applied migration");
        }
        tx.commit().await.map_err(pg_error)
    }

    /// The value of a server setting as one of the pool's connections sees it (with a pool of
    /// one, the connection every call uses): lets tests check that a statement's own settings
    /// do not outlive it.
    #[cfg(feature = "testing")]
    pub async fn setting(&self, name: &str) -> StoreResult<String> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT current_setting($1)", &[&name])
            .await
            .map_err(pg_error)?;
        get(&row, "current_setting")
    }

    async fn client(&self) -> StoreResult<deadpool_postgres::Client> {
        self.pool.get().await.map_err(pool_error)
    }

    /// `append` for turns without client ids (no retry to recognise): one statement, one round
    /// trip, where the general path needs a transaction of five or six. Same outcome: gapless
    /// seqs in request order, all turns or none.
    async fn append_new(&self, tenant: &Tenant, session_id: &str, turns: &[NewTurn]) -> StoreResult<Vec<AppendedTurn>> {
        let now = Utc::now();
        let ids: Vec<Uuid> = turns.iter().map(|_| turn_id(now)).collect();
        let roles: Vec<&str> = turns.iter().map(|t| t.role.as_str()).collect();
        let contents: Vec<&str> = turns.iter().map(|t| t.content.as_str()).collect();
        let metadata: Vec<_> = turns.iter().map(|t| Json(&t.metadata)).collect();
        // Absent: the statement's transaction time, as in the general path.
        let created_ats: Vec<Option<DateTime<Utc>>> =
            turns.iter().map(|t| t.created_at.map(truncate_to_micros)).collect();
        let tasks: Vec<Option<&str>> = turns.iter().map(|t| t.task.as_ref().map(TaskId::as_str)).collect();
        let client = self.client().await?;
        let insert = client.prepare_cached(sql::APPEND_NEW_TURNS).await.map_err(pg_error)?;
        let rows = client
            .query(
                &insert,
                &[
                    &session_id,
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &ids,
                    &roles,
                    &contents,
                    &metadata,
                    &created_ats,
                    &tasks,
                ],
            )
            .await
            .map_err(pg_error)?;
        let mut appended = HashMap::with_capacity(rows.len());
        for row in &rows {
            let turn = appended_turn(row)?;
            appended.insert(turn.id, turn);
        }
        ids.iter()
            .map(|id| {
                appended
                    .remove(id)
                    .ok_or_else(|| StoreError::Backend(format!("turn {id} was not returned by its insert").into()))
            })
            .collect()
    }
}

/// `(session, value)` pairs as the column arrays a statement unnests.
struct KeyColumns<'a> {
    teams: Vec<&'a str>,
    agents: Vec<&'a str>,
    users: Vec<&'a str>,
    sessions: Vec<&'a str>,
    values: Vec<i64>,
}

impl<'a> KeyColumns<'a> {
    fn of(pairs: &'a [(SessionKey, i64)]) -> Self {
        let mut columns = Self {
            teams: Vec::with_capacity(pairs.len()),
            agents: Vec::with_capacity(pairs.len()),
            users: Vec::with_capacity(pairs.len()),
            sessions: Vec::with_capacity(pairs.len()),
            values: Vec::with_capacity(pairs.len()),
        };
        for (key, value) in pairs {
            columns.teams.push(&key.tenant.team);
            columns.agents.push(&key.tenant.agent);
            columns.users.push(&key.tenant.user);
            columns.sessions.push(&key.session_id);
            columns.values.push(*value);
        }
        columns
    }
}

#[async_trait]
impl TranscriptStore for PostgresStore {
    #[instrument(skip_all, fields(session_id = %session, turns = turns.len()))]
    async fn append(&self, tenant: &Tenant, session: &SessionId, turns: &[NewTurn]) -> StoreResult<Vec<AppendedTurn>> {
        let session_id = session.as_str();
        if !turns.is_empty() && turns.iter().all(|t| t.client_id.is_none()) {
            return self.append_new(tenant, session_id, turns).await;
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;

        let claim = tx.prepare_cached(sql::APPEND_CLAIM_SESSION).await.map_err(pg_error)?;
        tx.execute(&claim, &[&session_id, &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
        let lock = tx.prepare_cached(sql::APPEND_LOCK_SESSION).await.map_err(pg_error)?;
        let row = tx
            .query_one(&lock, &[&session_id, &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
        let last_seq: i64 = get(&row, "last_seq")?;
        let now: DateTime<Utc> = get(&row, "now")?;

        let client_ids: Vec<&str> = turns.iter().filter_map(|t| t.client_id.as_deref()).collect();
        let mut stored = HashMap::new();
        if !client_ids.is_empty() {
            let select = tx
                .prepare_cached(sql::APPEND_STORED_CLIENT_IDS)
                .await
                .map_err(pg_error)?;
            let rows = tx
                .query(
                    &select,
                    &[&session_id, &tenant.team, &tenant.agent, &tenant.user, &client_ids],
                )
                .await
                .map_err(pg_error)?;
            for row in &rows {
                stored.insert(get::<String>(row, "client_id")?, appended_turn(row)?);
            }
        }

        let plan = plan_append(turns, last_seq, now, stored);
        if !plan.new_turns.is_empty() {
            let mut ids = Vec::with_capacity(plan.new_turns.len());
            let mut seqs = Vec::with_capacity(plan.new_turns.len());
            let mut roles = Vec::with_capacity(plan.new_turns.len());
            let mut contents = Vec::with_capacity(plan.new_turns.len());
            let mut metadata = Vec::with_capacity(plan.new_turns.len());
            let mut turn_client_ids = Vec::with_capacity(plan.new_turns.len());
            let mut created_ats = Vec::with_capacity(plan.new_turns.len());
            let mut tasks = Vec::with_capacity(plan.new_turns.len());
            for (index, appended) in &plan.new_turns {
                let turn = &turns[*index];
                ids.push(appended.id);
                seqs.push(appended.seq);
                roles.push(turn.role.as_str());
                contents.push(turn.content.as_str());
                metadata.push(Json(&turn.metadata));
                turn_client_ids.push(turn.client_id.as_deref());
                created_ats.push(appended.created_at);
                tasks.push(turn.task.as_ref().map(TaskId::as_str));
            }
            let insert = tx.prepare_cached(sql::APPEND_INSERT_TURNS).await.map_err(pg_error)?;
            tx.execute(
                &insert,
                &[
                    &session_id,
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &ids,
                    &seqs,
                    &roles,
                    &contents,
                    &metadata,
                    &turn_client_ids,
                    &created_ats,
                    &tasks,
                ],
            )
            .await
            .map_err(pg_error)?;
            let update = tx.prepare_cached(sql::APPEND_UPDATE_SESSION).await.map_err(pg_error)?;
            tx.execute(
                &update,
                &[&session_id, &plan.last_seq, &tenant.team, &tenant.agent, &tenant.user],
            )
            .await
            .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(plan.results)
    }

    #[instrument(skip_all, fields(session_id = %session, after_seq = after_seq, limit = limit))]
    async fn list(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        after_seq: i64,
        limit: u32,
    ) -> StoreResult<Vec<StoredTurn>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::LIST_TURNS).await.map_err(pg_error)?;
        let rows = client
            .query(
                &stmt,
                &[
                    &session.as_str(),
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &after_seq,
                    &i64::from(limit),
                ],
            )
            .await
            .map_err(pg_error)?;
        if rows.is_empty() {
            return Err(StoreError::SessionNotFound);
        }
        optional_turns(&rows)
    }

    #[instrument(skip_all, fields(session_id = %session))]
    async fn session(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<SessionInfo> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::SESSION_INFO).await.map_err(pg_error)?;
        let row = client
            .query_opt(&stmt, &[&session.as_str(), &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?
            .ok_or(StoreError::SessionNotFound)?;
        Ok(SessionInfo {
            last_seq: get(&row, "last_seq")?,
            reset_at: get(&row, "reset_at")?,
        })
    }

    #[instrument(skip_all, fields(session_id = %session))]
    async fn reset(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<DateTime<Utc>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::RESET_SESSION).await.map_err(pg_error)?;
        let row = client
            .query_opt(&stmt, &[&session.as_str(), &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?
            .ok_or(StoreError::SessionNotFound)?;
        get(&row, "reset_at")
    }

    #[instrument(skip_all, fields(ids = ids.len()))]
    async fn turns_by_id(&self, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<Vec<StoredTurn>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::TURNS_BY_ID).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&ids, &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
        rows.iter().map(stored_turn).collect()
    }

    #[instrument(skip_all, fields(consumer = consumer, limit = limit))]
    async fn backlog(&self, consumer: &str, limit: u32) -> StoreResult<Vec<Backlog>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::BACKLOG).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&consumer, &i64::from(limit)])
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(Backlog {
                    session_id: get(row, "session_id")?,
                    tenant: tenant_of(row)?,
                    cursor: get(row, "cursor_seq")?,
                    last_seq: get(row, "last_seq")?,
                })
            })
            .collect()
    }

    #[instrument(skip_all, fields(consumer = consumer, session_id = %session.session_id, limit = limit))]
    async fn pending_turns(
        &self,
        consumer: &str,
        session: &SessionKey,
        limit: u32,
    ) -> StoreResult<(i64, Vec<StoredTurn>)> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::PENDING_TURNS).await.map_err(pg_error)?;
        let t = &session.tenant;
        let rows = client
            .query(
                &stmt,
                &[
                    &consumer,
                    &session.session_id,
                    &i64::from(limit),
                    &t.team,
                    &t.agent,
                    &t.user,
                ],
            )
            .await
            .map_err(pg_error)?;
        let Some(first) = rows.first() else {
            return Err(StoreError::Backend("pending turns query returned no cursor row".into()));
        };
        Ok((get(first, "cursor_seq")?, optional_turns(&rows)?))
    }

    #[instrument(skip_all, fields(consumer = consumer, sessions = sessions.len(), limit = limit))]
    async fn pending_turns_many(
        &self,
        consumer: &str,
        sessions: &[(SessionKey, i64)],
        limit: u32,
    ) -> StoreResult<Vec<StoredTurn>> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let keys = KeyColumns::of(sessions);
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::PENDING_TURNS_MANY).await.map_err(pg_error)?;
        let rows = client
            .query(
                &stmt,
                &[
                    &consumer,
                    &keys.sessions,
                    &i64::from(limit),
                    &keys.values,
                    &keys.teams,
                    &keys.agents,
                    &keys.users,
                ],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(stored_turn).collect()
    }

    #[instrument(skip_all, fields(consumer = consumer, sessions = cursors.len()))]
    async fn advance_cursors(&self, consumer: &str, cursors: &[(SessionKey, i64)]) -> StoreResult<()> {
        if cursors.is_empty() {
            return Ok(());
        }
        let keys = KeyColumns::of(cursors);
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::ADVANCE_CURSORS).await.map_err(pg_error)?;
        client
            .execute(
                &stmt,
                &[
                    &consumer,
                    &keys.teams,
                    &keys.agents,
                    &keys.users,
                    &keys.sessions,
                    &keys.values,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    #[instrument(skip_all, fields(consumer = consumer))]
    async fn reset_cursors(&self, consumer: &str) -> StoreResult<u64> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::RESET_CURSORS).await.map_err(pg_error)?;
        client.execute(&stmt, &[&consumer]).await.map_err(pg_error)
    }

    #[instrument(skip_all, fields(consumer = consumer))]
    async fn lag(&self, consumer: &str) -> StoreResult<Lag> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::LAG).await.map_err(pg_error)?;
        let row = client.query_one(&stmt, &[&consumer]).await.map_err(pg_error)?;
        Ok(Lag {
            turns: get(&row, "turns")?,
            sessions: get(&row, "sessions")?,
        })
    }

    #[instrument(skip_all)]
    async fn team_turns(&self, team: &str) -> StoreResult<u64> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::TEAM_TURNS).await.map_err(pg_error)?;
        let row = client.query_one(&stmt, &[&team]).await.map_err(pg_error)?;
        let n: i64 = get(&row, "n")?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn ping(&self) -> StoreResult<()> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.map_err(pg_error)?;
        Ok(())
    }
}

/// Reads one column by name; a missing column or a type mismatch is a `Backend` error.
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, column: &str) -> StoreResult<T> {
    row.try_get(column).map_err(pg_error)
}

fn appended_turn(row: &Row) -> StoreResult<AppendedTurn> {
    Ok(AppendedTurn {
        id: get(row, "id")?,
        seq: get(row, "seq")?,
        created_at: get(row, "created_at")?,
    })
}

fn tenant_of(row: &Row) -> StoreResult<Tenant> {
    Ok(Tenant {
        team: get(row, "team_id")?,
        agent: get(row, "agent_id")?,
        user: get(row, "user_id")?,
    })
}

fn stored_turn(row: &Row) -> StoreResult<StoredTurn> {
    let role: &str = get(row, "role")?;
    let Json(metadata) = get(row, "metadata")?;
    Ok(StoredTurn {
        id: get(row, "id")?,
        tenant: tenant_of(row)?,
        session_id: get(row, "session_id")?,
        seq: get(row, "seq")?,
        role: Role::parse(role).map_err(|e| StoreError::Backend(Box::new(e)))?,
        content: get(row, "content")?,
        metadata,
        client_id: get(row, "client_id")?,
        created_at: get(row, "created_at")?,
        task: get(row, "task")?,
    })
}

/// Maps the rows of a `LEFT JOIN LATERAL` query, skipping the all-NULL row it yields when
/// nothing matched.
fn optional_turns(rows: &[Row]) -> StoreResult<Vec<StoredTurn>> {
    let mut turns = Vec::with_capacity(rows.len());
    for row in rows {
        if get::<Option<Uuid>>(row, "id")?.is_some() {
            turns.push(stored_turn(row)?);
        }
    }
    Ok(turns)
}

/// Classifies a driver error: lost connections, I/O failures and the server's transient
/// refusals are `Unavailable`; everything else (constraint violations, bad SQL, type
/// mismatches) is `Backend`.
fn pg_error(error: tokio_postgres::Error) -> StoreError {
    if is_transient(&error) {
        StoreError::Unavailable(Box::new(error))
    } else {
        StoreError::Backend(Box::new(error))
    }
}

fn is_transient(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code() {
        return is_transient_sqlstate(code.code());
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// SQLSTATEs a retry can fix: connection exceptions (08), insufficient resources (53),
/// operator intervention (57: shutdown, cancel, statement timeout), serialization failures and
/// deadlocks (40001, 40P01), and lock timeouts (55P03).
fn is_transient_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57")
        || matches!(code, "40001" | "40P01" | "55P03")
}

fn pool_error(error: PoolError) -> StoreError {
    match error {
        PoolError::Backend(error) => pg_error(error),
        error @ (PoolError::Timeout(_) | PoolError::Closed) => StoreError::Unavailable(Box::new(error)),
        error @ (PoolError::NoRuntimeSpecified | PoolError::PostCreateHook(_)) => StoreError::Backend(Box::new(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_in_version_order() {
        let versions: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        let mut sorted = versions.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(versions, sorted);
    }

    #[test]
    fn transient_sqlstates() {
        assert!(is_transient_sqlstate("08006"));
        assert!(is_transient_sqlstate("57P01"));
        assert!(is_transient_sqlstate("40P01"));
        assert!(!is_transient_sqlstate("23505"));
        assert!(!is_transient_sqlstate("22021"));
    }
}
