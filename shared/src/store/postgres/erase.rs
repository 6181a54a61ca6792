//! [`EraseStore`] on Postgres: the job table of `migrations/V009__erasures.sql`, and the
//! deletion of an owner's rows in every table.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::Json;
use tokio_postgres::Row;
use tracing::instrument;
use uuid::Uuid;

use super::{get, pg_error, PostgresStore};
use crate::domain::Tenant;
use crate::store::erase::{EraseStore, Erasure, ErasureStep};
use crate::store::{StoreError, StoreResult};

// Every statement is a constant with `$n` parameters: no SQL text is built at run time.
#[cfg(test)]
const COLUMNS: &str = "id, team_id, agent_id, user_id, requested_by, requested_at, step, attempts, deleted, \
     residue, error, finished_at, updated_at";
const INSERT: &str = "INSERT INTO erasures (id, team_id, agent_id, user_id, requested_by, requested_at, step, \
     attempts, deleted, residue, error, finished_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
     ON CONFLICT (team_id, agent_id, user_id) WHERE step <> 'done' DO NOTHING \
     RETURNING id, team_id, agent_id, user_id, requested_by, requested_at, step, attempts, deleted, \
     residue, error, finished_at, updated_at";
const UNFINISHED_OF_OWNER: &str = "SELECT id, team_id, agent_id, user_id, requested_by, requested_at, step, \
     attempts, deleted, residue, error, finished_at, updated_at \
     FROM erasures WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 AND step <> 'done'";
const BY_ID: &str = "SELECT id, team_id, agent_id, user_id, requested_by, requested_at, step, attempts, deleted, \
     residue, error, finished_at, updated_at FROM erasures WHERE id = $1";
const CLAIM: &str = "UPDATE erasures SET lease_token = $2, lease_until = $4, attempts = attempts + 1, updated_at = $3 \
     WHERE id = $1 AND step <> 'done' AND (lease_until IS NULL OR lease_until <= $3) \
     RETURNING id, team_id, agent_id, user_id, requested_by, requested_at, step, attempts, deleted, \
     residue, error, finished_at, updated_at";
const STALLED: &str = "SELECT id FROM erasures WHERE step <> 'done' AND (lease_until IS NULL OR lease_until <= $1) \
     ORDER BY requested_at LIMIT $2";
const SAVE: &str = "UPDATE erasures SET step = $3, deleted = $4, residue = $5, error = $6, finished_at = $7, \
     updated_at = $8, lease_until = $9, lease_token = CASE WHEN $9::timestamptz IS NULL THEN NULL ELSE lease_token END \
     WHERE id = $1 AND lease_token = $2";

/// The owner's sessions, locked: an append or an L1 commit to one of them waits for the
/// erasure's transaction, then finds the session gone.
const LOCK_SESSIONS: &str =
    "SELECT session_id FROM sessions WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 FOR UPDATE";
const OWNERS: &str = "SELECT team_id, agent_id, user_id FROM sessions WHERE team_id = $1 AND ($2::text IS NULL OR agent_id = $2) \
     UNION SELECT team_id, agent_id, user_id FROM memories WHERE team_id = $1 AND ($2::text IS NULL OR agent_id = $2) \
     UNION SELECT team_id, agent_id, user_id FROM scene_schedule WHERE team_id = $1 AND ($2::text IS NULL OR agent_id = $2) \
     UNION SELECT team_id, agent_id, user_id FROM scenes WHERE team_id = $1 AND ($2::text IS NULL OR agent_id = $2) \
     UNION SELECT team_id, agent_id, user_id FROM personas WHERE team_id = $1 AND ($2::text IS NULL OR agent_id = $2) \
     ORDER BY agent_id, user_id";

/// A store's name, how to delete the owner's rows of it, and how to count them, each by the
/// owner's ids (`$1..$3`). In deletion order: rows that reference a session go before the
/// session.
struct Table {
    store: &'static str,
    delete: &'static str,
    count: &'static str,
}

const TABLES: &[Table] = &[
    Table {
        store: "turns",
        delete: "DELETE FROM messages WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM messages WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "cursors",
        delete: "DELETE FROM cursors WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM cursors WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "extract_schedules",
        delete: "DELETE FROM extract_schedule WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM extract_schedule WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "compactions",
        delete: "DELETE FROM session_compactions WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM session_compactions WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "memory_outbox",
        delete: "DELETE FROM memory_index_outbox WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM memory_index_outbox WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "memory_provenance",
        delete: "DELETE FROM memory_provenance WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM memory_provenance WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "memories",
        delete: "DELETE FROM memories WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM memories WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "scenes",
        delete: "DELETE FROM scenes WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM scenes WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "scene_schedules",
        delete: "DELETE FROM scene_schedule WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM scene_schedule WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "personas",
        delete: "DELETE FROM personas WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM personas WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "artifact_provenance",
        delete: "DELETE FROM artifact_provenance WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM artifact_provenance WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
    Table {
        store: "sessions",
        delete: "DELETE FROM sessions WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
        count: "SELECT count(*) AS n FROM sessions WHERE team_id = $1 AND agent_id = $2 AND user_id = $3",
    },
];

#[async_trait]
impl EraseStore for PostgresStore {
    #[instrument(skip_all)]
    async fn start_erasure(&self, new: &Erasure) -> StoreResult<Erasure> {
        let client = self.client().await?;
        let insert = client.prepare_cached(INSERT).await.map_err(pg_error)?;
        let running = client.prepare_cached(UNFINISHED_OF_OWNER).await.map_err(pg_error)?;
        let t = &new.tenant;
        // The running job may finish between a conflicting insert and the read: try again.
        for _ in 0..3 {
            let inserted = client
                .query_opt(
                    &insert,
                    &[
                        &new.id,
                        &t.team,
                        &t.agent,
                        &t.user,
                        &new.requested_by,
                        &new.requested_at,
                        &new.step.as_str(),
                        &new.attempts,
                        &Json(&new.deleted),
                        &Json(&new.residue),
                        &new.error,
                        &new.finished_at,
                        &new.updated_at,
                    ],
                )
                .await
                .map_err(pg_error)?;
            if let Some(row) = inserted {
                return erasure(&row);
            }
            let existing = client
                .query_opt(&running, &[&t.team, &t.agent, &t.user])
                .await
                .map_err(pg_error)?;
            if let Some(row) = existing {
                return erasure(&row);
            }
        }
        Err(StoreError::Backend("erasure jobs of this owner keep changing".into()))
    }

    #[instrument(skip_all)]
    async fn erasure(&self, id: Uuid) -> StoreResult<Option<Erasure>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(BY_ID).await.map_err(pg_error)?;
        let row = client.query_opt(&stmt, &[&id]).await.map_err(pg_error)?;
        row.as_ref().map(erasure).transpose()
    }

    #[instrument(skip_all)]
    async fn claim_erasure(
        &self,
        id: Uuid,
        token: Uuid,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<Option<Erasure>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(CLAIM).await.map_err(pg_error)?;
        let row = client
            .query_opt(&stmt, &[&id, &token, &now, &until])
            .await
            .map_err(pg_error)?;
        row.as_ref().map(erasure).transpose()
    }

    #[instrument(skip_all)]
    async fn stalled_erasures(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Uuid>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(STALLED).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&now, &i64::from(limit)])
            .await
            .map_err(pg_error)?;
        rows.iter().map(|row| get(row, "id")).collect()
    }

    #[instrument(skip_all)]
    async fn save_erasure(&self, e: &Erasure, token: Uuid, lease_until: Option<DateTime<Utc>>) -> StoreResult<bool> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(SAVE).await.map_err(pg_error)?;
        let saved = client
            .execute(
                &stmt,
                &[
                    &e.id,
                    &token,
                    &e.step.as_str(),
                    &Json(&e.deleted),
                    &Json(&e.residue),
                    &e.error,
                    &e.finished_at,
                    &e.updated_at,
                    &lease_until,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(saved == 1)
    }

    #[instrument(skip_all)]
    async fn erase_owner_rows(&self, tenant: &Tenant) -> StoreResult<BTreeMap<String, u64>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let owner: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&tenant.team, &tenant.agent, &tenant.user];
        let lock = tx.prepare_cached(LOCK_SESSIONS).await.map_err(pg_error)?;
        tx.query(&lock, &owner).await.map_err(pg_error)?;
        let mut deleted = BTreeMap::new();
        for table in TABLES {
            let stmt = tx.prepare_cached(table.delete).await.map_err(pg_error)?;
            let n = tx.execute(&stmt, &owner).await.map_err(pg_error)?;
            deleted.insert(table.store.to_owned(), n);
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(deleted)
    }

    #[instrument(skip_all)]
    async fn owner_rows(&self, tenant: &Tenant) -> StoreResult<BTreeMap<String, u64>> {
        let client = self.client().await?;
        let owner: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&tenant.team, &tenant.agent, &tenant.user];
        let mut counts = BTreeMap::new();
        for table in TABLES {
            let stmt = client.prepare_cached(table.count).await.map_err(pg_error)?;
            let row = client.query_one(&stmt, &owner).await.map_err(pg_error)?;
            let n: i64 = get(&row, "n")?;
            counts.insert(table.store.to_owned(), u64::try_from(n).unwrap_or(0));
        }
        Ok(counts)
    }

    #[instrument(skip_all)]
    async fn owners_of(&self, team: &str, agent: Option<&str>) -> StoreResult<Vec<Tenant>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(OWNERS).await.map_err(pg_error)?;
        let rows = client.query(&stmt, &[&team, &agent]).await.map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(Tenant {
                    team: get(row, "team_id")?,
                    agent: get(row, "agent_id")?,
                    user: get(row, "user_id")?,
                })
            })
            .collect()
    }
}

fn erasure(row: &Row) -> StoreResult<Erasure> {
    let step: String = get(row, "step")?;
    let Json(deleted): Json<BTreeMap<String, u64>> = get(row, "deleted")?;
    let Json(residue): Json<BTreeMap<String, u64>> = get(row, "residue")?;
    Ok(Erasure {
        id: get(row, "id")?,
        tenant: Tenant {
            team: get(row, "team_id")?,
            agent: get(row, "agent_id")?,
            user: get(row, "user_id")?,
        },
        requested_by: get(row, "requested_by")?,
        requested_at: get(row, "requested_at")?,
        step: ErasureStep::parse(&step)
            .ok_or_else(|| StoreError::Backend(format!("unknown erasure step {step:?}").into()))?,
        attempts: get(row, "attempts")?,
        deleted,
        residue,
        error: get(row, "error")?,
        finished_at: get(row, "finished_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

// The column list above is spelled out in each statement; this keeps them in step.
#[cfg(test)]
#[test]
fn statements_read_every_column() {
    for stmt in [INSERT, UNFINISHED_OF_OWNER, BY_ID, CLAIM] {
        assert!(stmt.contains(COLUMNS), "{stmt}");
    }
}
