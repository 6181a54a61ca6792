//! [`EraseStore`] on SQLite: the job table of `erase.sql`, and the deletion of an owner's rows
//! in every table.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension as _, TransactionBehavior};
use tracing::instrument;
use uuid::Uuid;

use super::{time_of, uuid_of, Failure, Outcome, SqliteStore};
use crate::domain::Tenant;
use crate::store::erase::{EraseStore, Erasure, ErasureStep};
use crate::store::StoreResult;

// Every statement is a constant with `?n` parameters: no SQL text is built at run time.
const INSERT: &str = "INSERT INTO erasures (id, team_id, agent_id, user_id, requested_by, requested_at, step, \
     attempts, deleted, residue, error, finished_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
const UNFINISHED_OF_OWNER: &str = "SELECT id, team_id, agent_id, user_id, requested_by, requested_at, step, \
     attempts, deleted, residue, error, finished_at, updated_at \
     FROM erasures WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND step <> 'done'";
const BY_ID: &str = "SELECT id, team_id, agent_id, user_id, requested_by, requested_at, step, attempts, deleted, \
     residue, error, finished_at, updated_at FROM erasures WHERE id = ?1";
const CLAIM: &str = "UPDATE erasures SET lease_token = ?2, lease_until = ?4, attempts = attempts + 1, updated_at = ?3 \
     WHERE id = ?1 AND step <> 'done' AND (lease_until IS NULL OR lease_until <= ?3) \
     RETURNING id, team_id, agent_id, user_id, requested_by, requested_at, step, attempts, deleted, \
     residue, error, finished_at, updated_at";
const STALLED: &str = "SELECT id FROM erasures WHERE step <> 'done' AND (lease_until IS NULL OR lease_until <= ?1) \
     ORDER BY requested_at LIMIT ?2";
const SAVE: &str = "UPDATE erasures SET step = ?3, deleted = ?4, residue = ?5, error = ?6, finished_at = ?7, \
     updated_at = ?8, lease_until = ?9, lease_token = CASE WHEN ?9 IS NULL THEN NULL ELSE lease_token END \
     WHERE id = ?1 AND lease_token = ?2";

const OWNERS: &str =
    "SELECT team_id, agent_id, user_id FROM sessions WHERE team_id = ?1 AND (?2 IS NULL OR agent_id = ?2) \
     UNION SELECT team_id, agent_id, user_id FROM memories WHERE team_id = ?1 AND (?2 IS NULL OR agent_id = ?2) \
     UNION SELECT team_id, agent_id, user_id FROM scene_schedule WHERE team_id = ?1 AND (?2 IS NULL OR agent_id = ?2) \
     UNION SELECT team_id, agent_id, user_id FROM scenes WHERE team_id = ?1 AND (?2 IS NULL OR agent_id = ?2) \
     UNION SELECT team_id, agent_id, user_id FROM personas WHERE team_id = ?1 AND (?2 IS NULL OR agent_id = ?2) \
     ORDER BY agent_id, user_id";

/// A store's name, how to delete the owner's rows of it (`?1..?3`: team, agent, user), and how
/// to count them; in deletion order, rows that reference a session before the session.
const TABLES: &[(&str, &str, &str)] = &[
    (
        "turns",
        "DELETE FROM messages WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM messages WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "cursors",
        "DELETE FROM cursors WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM cursors WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "extract_schedules",
        "DELETE FROM extract_schedule WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM extract_schedule WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "compactions",
        "DELETE FROM session_compactions WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM session_compactions WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "memory_outbox",
        "DELETE FROM memory_index_outbox WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM memory_index_outbox WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "memory_provenance",
        "DELETE FROM memory_provenance WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM memory_provenance WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "memories",
        "DELETE FROM memories WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM memories WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "scenes",
        "DELETE FROM scenes WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM scenes WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "scene_schedules",
        "DELETE FROM scene_schedule WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM scene_schedule WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "personas",
        "DELETE FROM personas WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM personas WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "artifact_provenance",
        "DELETE FROM artifact_provenance WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM artifact_provenance WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
    (
        "sessions",
        "DELETE FROM sessions WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
        "SELECT count(*) FROM sessions WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3",
    ),
];

#[async_trait]
impl EraseStore for SqliteStore {
    #[instrument(skip_all)]
    async fn start_erasure(&self, new: &Erasure) -> StoreResult<Erasure> {
        let new = new.clone();
        self.run(move |conn| {
            // One writer: the check and the insert cannot interleave with another request's.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let t = &new.tenant;
            let running = tx
                .prepare_cached(UNFINISHED_OF_OWNER)?
                .query_row(params![t.team, t.agent, t.user], |row| Ok(erasure(row)))
                .optional()?;
            if let Some(running) = running {
                return running;
            }
            tx.prepare_cached(INSERT)?.execute(params![
                new.id.to_string(),
                t.team,
                t.agent,
                t.user,
                new.requested_by,
                new.requested_at.timestamp_micros(),
                new.step.as_str(),
                new.attempts,
                json(&new.deleted)?,
                json(&new.residue)?,
                new.error,
                new.finished_at.map(|at| at.timestamp_micros()),
                new.updated_at.timestamp_micros(),
            ])?;
            tx.commit()?;
            Ok(new)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn erasure(&self, id: Uuid) -> StoreResult<Option<Erasure>> {
        self.run(move |conn| {
            conn.prepare_cached(BY_ID)?
                .query_row(params![id.to_string()], |row| Ok(erasure(row)))
                .optional()?
                .transpose()
        })
        .await
    }

    #[instrument(skip_all)]
    async fn claim_erasure(
        &self,
        id: Uuid,
        token: Uuid,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> StoreResult<Option<Erasure>> {
        self.run(move |conn| {
            conn.prepare_cached(CLAIM)?
                .query_row(
                    params![
                        id.to_string(),
                        token.to_string(),
                        now.timestamp_micros(),
                        until.timestamp_micros()
                    ],
                    |row| Ok(erasure(row)),
                )
                .optional()?
                .transpose()
        })
        .await
    }

    #[instrument(skip_all)]
    async fn stalled_erasures(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Uuid>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(STALLED)?;
            let mut rows = stmt.query(params![now.timestamp_micros(), limit])?;
            let mut ids = Vec::new();
            while let Some(row) = rows.next()? {
                ids.push(uuid_of(row, "id")?);
            }
            Ok(ids)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn save_erasure(&self, e: &Erasure, token: Uuid, lease_until: Option<DateTime<Utc>>) -> StoreResult<bool> {
        let e = e.clone();
        self.run(move |conn| {
            let saved = conn.prepare_cached(SAVE)?.execute(params![
                e.id.to_string(),
                token.to_string(),
                e.step.as_str(),
                json(&e.deleted)?,
                json(&e.residue)?,
                e.error,
                e.finished_at.map(|at| at.timestamp_micros()),
                e.updated_at.timestamp_micros(),
                lease_until.map(|at| at.timestamp_micros()),
            ])?;
            Ok(saved == 1)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn erase_owner_rows(&self, tenant: &Tenant) -> StoreResult<BTreeMap<String, u64>> {
        let t = tenant.clone();
        self.run(move |conn| {
            // Immediate: the one writer lock for the whole deletion, so an L1 commit either
            // ran before it (and its memories are deleted here) or runs after it and finds its
            // source turns gone.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut deleted = BTreeMap::new();
            for (store, delete, _) in TABLES {
                let n = tx.prepare_cached(delete)?.execute(params![t.team, t.agent, t.user])?;
                deleted.insert((*store).to_owned(), n as u64);
            }
            tx.commit()?;
            Ok(deleted)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn owner_rows(&self, tenant: &Tenant) -> StoreResult<BTreeMap<String, u64>> {
        let t = tenant.clone();
        self.run(move |conn| {
            let mut counts = BTreeMap::new();
            for (store, _, count) in TABLES {
                let n: i64 = conn
                    .prepare_cached(count)?
                    .query_row(params![t.team, t.agent, t.user], |row| row.get(0))?;
                counts.insert((*store).to_owned(), u64::try_from(n).unwrap_or(0));
            }
            Ok(counts)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn owners_of(&self, team: &str, agent: Option<&str>) -> StoreResult<Vec<Tenant>> {
        let (team, agent) = (team.to_owned(), agent.map(str::to_owned));
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(OWNERS)?;
            let mut rows = stmt.query(params![team, agent])?;
            let mut owners = Vec::new();
            while let Some(row) = rows.next()? {
                owners.push(Tenant {
                    team: row.get("team_id")?,
                    agent: row.get("agent_id")?,
                    user: row.get("user_id")?,
                });
            }
            Ok(owners)
        })
        .await
    }
}

fn json(counts: &BTreeMap<String, u64>) -> Outcome<String> {
    serde_json::to_string(counts).map_err(|e| Failure::Corrupt(Box::new(e)))
}

fn counts_of(row: &rusqlite::Row<'_>, column: &str) -> Outcome<BTreeMap<String, u64>> {
    let text: String = row.get(column)?;
    serde_json::from_str(&text).map_err(|e| Failure::Corrupt(Box::new(e)))
}

fn erasure(row: &rusqlite::Row<'_>) -> Outcome<Erasure> {
    let step: String = row.get("step")?;
    Ok(Erasure {
        id: uuid_of(row, "id")?,
        tenant: Tenant {
            team: row.get("team_id")?,
            agent: row.get("agent_id")?,
            user: row.get("user_id")?,
        },
        requested_by: row.get("requested_by")?,
        requested_at: time_of(row.get("requested_at")?)?,
        step: ErasureStep::parse(&step)
            .ok_or_else(|| Failure::Corrupt(format!("unknown erasure step {step:?}").into()))?,
        attempts: row.get("attempts")?,
        deleted: counts_of(row, "deleted")?,
        residue: counts_of(row, "residue")?,
        error: row.get("error")?,
        finished_at: row.get::<_, Option<i64>>("finished_at")?.map(time_of).transpose()?,
        updated_at: time_of(row.get("updated_at")?)?,
    })
}
