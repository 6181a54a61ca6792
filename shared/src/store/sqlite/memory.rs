//! [`MemoryStore`] on SQLite: the tables of `memory.sql`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension as _, TransactionBehavior};
use tracing::instrument;
use uuid::Uuid;

use super::{collect_rows, json_array, tenant_of, time_of, uuid_of, Failure, Outcome, SqliteStore};
use crate::domain::{SessionKey, Tenant};
use crate::memory::{Category, Memory, MemoryStatus};
use crate::store::memory::{
    BatchCommit, CommitOutcome, MemoryCursor, MemoryFilter, MemoryPatch, MemoryStore, OutboxEntry, ProvenanceRecord,
    ScheduleState, EXTRACT_CONSUMER,
};
use crate::store::StoreResult;

mod sql {
    // Like the statements of sqlite.rs, those that name a session bind it as `?1..?4`, the
    // session id and then its team, agent and user.
    pub const MEMORY_COLUMNS: &str = "id, team_id, agent_id, user_id, session_id, content, category, priority, \
         scene, occurred_at, source_message_ids, status, superseded_by, created_at, updated_at, task";
    /// The listing's filters: each a parameter that may be NULL, so one statement serves all.
    /// The task is not among them (see `list_memories`).
    pub const LIST_FILTERS: &str = "team_id = ?1 AND agent_id = ?2 AND user_id = ?3 \
         AND (?4 IS NULL OR category = ?4) AND (?5 IS NULL OR scene = ?5) \
         AND (?6 IS NULL OR status = ?6) AND (?7 IS NULL OR session_id = ?7) \
         AND (?8 IS NULL OR created_at >= ?8) AND (?9 IS NULL OR created_at < ?9) \
         AND (?10 IS NULL OR created_at < ?10 OR (created_at = ?10 AND id < ?11))";
    pub const CURSOR: &str = "SELECT seq FROM cursors WHERE consumer = ?5 \
         AND session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    /// A batch's session and source turns must still be there (an erasure may have deleted
    /// them); the immediate transaction keeps them until the batch commits.
    pub const SESSION_OF_OWNER: &str = "SELECT 1 FROM sessions \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const COUNT_TURNS: &str = "SELECT count(*) FROM messages WHERE id IN (SELECT value FROM json_each(?1))";
    pub const MOVE_CURSOR: &str = "INSERT INTO cursors \
         (consumer, session_id, team_id, agent_id, user_id, seq, updated_at) \
         VALUES (?5, ?1, ?2, ?3, ?4, ?6, ?7) \
         ON CONFLICT (consumer, team_id, agent_id, user_id, session_id) DO UPDATE \
         SET seq = excluded.seq, updated_at = excluded.updated_at";
    pub const INSERT_MEMORY: &str = "INSERT INTO memories (id, team_id, agent_id, user_id, session_id, content, \
         category, priority, scene, occurred_at, source_message_ids, status, superseded_by, created_at, updated_at, \
         task) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";
    pub const ARCHIVE: &str = "UPDATE memories SET status = 'archived', superseded_by = ?5, updated_at = ?6 \
         WHERE id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 AND status = 'active'";
    pub const INSERT_PROVENANCE: &str = "INSERT INTO memory_provenance (id, memory_id, team_id, agent_id, \
         user_id, session_id, layer, event, template, model, input_message_ids, sibling_ids, detail, started_at, \
         duration_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
         ON CONFLICT (id) DO NOTHING";
    pub const ENQUEUE: &str = "INSERT INTO memory_index_outbox (memory_id, team_id, agent_id, user_id, enqueued_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)";
    /// The owner's scene timer learns of the batch in the batch's own transaction, so the
    /// scene sweep finds the owner even if moving the timer afterwards fails.
    pub const MARK_L1: &str = "INSERT INTO scene_schedule (team_id, agent_id, user_id, last_l1_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (team_id, agent_id, user_id) DO UPDATE \
         SET last_l1_at = MAX(COALESCE(scene_schedule.last_l1_at, excluded.last_l1_at), excluded.last_l1_at), \
         updated_at = excluded.updated_at";
    pub const BUMP_SCHEDULE: &str = "INSERT INTO extract_schedule \
         (session_id, team_id, agent_id, user_id, runs, idle_due_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 1, NULL, ?5) \
         ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE \
         SET runs = extract_schedule.runs + 1, idle_due_at = NULL, updated_at = excluded.updated_at";
    pub const SCHEDULE: &str = "SELECT runs, idle_due_at FROM extract_schedule \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const SET_IDLE_DUE: &str = "INSERT INTO extract_schedule \
         (session_id, team_id, agent_id, user_id, runs, idle_due_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6) \
         ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE \
         SET idle_due_at = excluded.idle_due_at, updated_at = excluded.updated_at";
    // The WHERE of DO UPDATE makes a held lease return no row: not claimed.
    pub const CLAIM: &str = "INSERT INTO extract_schedule \
         (session_id, team_id, agent_id, user_id, runs, lease_owner, lease_until, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7) \
         ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE \
         SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, updated_at = excluded.updated_at \
         WHERE extract_schedule.lease_owner IS NULL OR extract_schedule.lease_owner = excluded.lease_owner \
         OR extract_schedule.lease_until < ?7 RETURNING session_id";
    pub const RELEASE: &str = "UPDATE extract_schedule SET lease_owner = NULL, lease_until = NULL, updated_at = ?6 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 AND lease_owner = ?5";
    pub const RELEASE_ALL: &str =
        "UPDATE extract_schedule SET lease_owner = NULL, lease_until = NULL, updated_at = ?1 \
         WHERE lease_owner IS NOT NULL";
    pub const DUE_SESSIONS: &str = "SELECT session_id, team_id, agent_id, user_id FROM extract_schedule \
         WHERE idle_due_at IS NOT NULL AND idle_due_at <= ?1 ORDER BY idle_due_at LIMIT ?2";
    pub const OUTBOX: &str = "SELECT seq, memory_id, team_id, agent_id, user_id FROM memory_index_outbox \
         ORDER BY seq LIMIT ?1";
    pub const REQUEUE_ALL: &str = "INSERT INTO memory_index_outbox (memory_id, team_id, agent_id, user_id, \
         enqueued_at) SELECT id, team_id, agent_id, user_id, ?1 FROM memories WHERE status = 'active' \
         ORDER BY created_at";
    pub const CLEAR_OUTBOX: &str = "DELETE FROM memory_index_outbox WHERE seq IN (SELECT value FROM json_each(?1))";
    pub const DELETE_MEMORY: &str = "DELETE FROM memories \
         WHERE id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const PROVENANCE: &str = "SELECT id, memory_id, team_id, agent_id, user_id, session_id, layer, event, \
         template, model, input_message_ids, sibling_ids, detail, started_at, duration_ms FROM memory_provenance \
         WHERE memory_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 ORDER BY started_at, id";
    pub const RECENT_FAILURES: &str = "SELECT id, memory_id, team_id, agent_id, user_id, session_id, layer, event, \
         template, model, input_message_ids, sibling_ids, detail, started_at, duration_ms FROM memory_provenance \
         WHERE event = 'failed' ORDER BY started_at DESC, id LIMIT ?1";
    pub const COUNT: &str = "SELECT count(*) AS n FROM memories \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND status = ?4";
}

fn corrupt(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Failure {
    Failure::Corrupt(e.into())
}

fn to_json<T: serde::Serialize>(value: &T) -> Outcome<String> {
    serde_json::to_string(value).map_err(corrupt)
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Outcome<T> {
    serde_json::from_str(text).map_err(corrupt)
}

fn insert_memory(conn: &Connection, m: &Memory) -> Outcome<()> {
    conn.prepare_cached(sql::INSERT_MEMORY)?.execute(params![
        m.id.to_string(),
        m.tenant.team,
        m.tenant.agent,
        m.tenant.user,
        m.session_id,
        m.content,
        m.category.as_str(),
        m.priority,
        m.scene,
        m.occurred_at,
        to_json(&m.source_message_ids)?,
        m.status.as_str(),
        m.superseded_by.map(|id| id.to_string()),
        m.created_at.timestamp_micros(),
        m.updated_at.timestamp_micros(),
        m.task
    ])?;
    Ok(())
}

/// Returns how many records were new.
pub(super) fn insert_provenance(conn: &Connection, records: &[ProvenanceRecord]) -> Outcome<usize> {
    let mut inserted = 0;
    let mut stmt = conn.prepare_cached(sql::INSERT_PROVENANCE)?;
    for r in records {
        let template = r.template.as_ref().map(to_json).transpose()?;
        inserted += stmt.execute(params![
            r.id.to_string(),
            r.memory_id.map(|id| id.to_string()),
            r.tenant.team,
            r.tenant.agent,
            r.tenant.user,
            r.session_id,
            r.layer,
            r.event,
            template,
            r.model,
            to_json(&r.input_message_ids)?,
            to_json(&r.sibling_ids)?,
            to_json(&r.detail)?,
            r.started_at.timestamp_micros(),
            r.duration_ms
        ])?;
    }
    Ok(inserted)
}

fn enqueue(conn: &Connection, tenant: &Tenant, ids: &[Uuid]) -> Outcome<()> {
    let mut stmt = conn.prepare_cached(sql::ENQUEUE)?;
    let now = Utc::now().timestamp_micros();
    for id in ids {
        stmt.execute(params![id.to_string(), tenant.team, tenant.agent, tenant.user, now])?;
    }
    Ok(())
}

fn memory_of(row: &rusqlite::Row<'_>) -> Outcome<Memory> {
    let category: String = row.get("category")?;
    let status: String = row.get("status")?;
    let priority: i64 = row.get("priority")?;
    let sources: String = row.get("source_message_ids")?;
    let superseded_by: Option<String> = row.get("superseded_by")?;
    Ok(Memory {
        id: uuid_of(row, "id")?,
        tenant: tenant_of(row)?,
        session_id: row.get("session_id")?,
        content: row.get("content")?,
        category: Category::parse(&category).ok_or_else(|| corrupt(format!("unknown category {category}")))?,
        priority: u8::try_from(priority).map_err(|_| corrupt(format!("priority {priority} out of range")))?,
        scene: row.get("scene")?,
        occurred_at: row.get("occurred_at")?,
        source_message_ids: from_json(&sources)?,
        status: MemoryStatus::parse(&status).ok_or_else(|| corrupt(format!("unknown status {status}")))?,
        superseded_by: superseded_by
            .map(|s| Uuid::parse_str(&s).map_err(corrupt))
            .transpose()?,
        task: row.get("task")?,
        created_at: time_of(row.get("created_at")?)?,
        updated_at: time_of(row.get("updated_at")?)?,
    })
}

/// The memory listing; with `by_task`, narrowed to the task bound as `?13`. The task narrows in
/// a statement of its own: behind `?13 IS NULL OR`, like the other filters, the planner could
/// not take `memories_tenant_task_created_idx`, and a task's page would walk the tenant's
/// memories of every task.
pub(super) fn list_statement(by_task: bool) -> String {
    if by_task {
        format!(
            "SELECT {} FROM memories WHERE {} AND task = ?13 ORDER BY created_at DESC, id DESC LIMIT ?12",
            sql::MEMORY_COLUMNS,
            sql::LIST_FILTERS
        )
    } else {
        format!(
            "SELECT {} FROM memories WHERE {} ORDER BY created_at DESC, id DESC LIMIT ?12",
            sql::MEMORY_COLUMNS,
            sql::LIST_FILTERS
        )
    }
}

fn memories(rows: rusqlite::Rows<'_>) -> Outcome<Vec<Memory>> {
    collect_rows(rows, memory_of)
}

pub(super) fn provenance_of(row: &rusqlite::Row<'_>) -> Outcome<ProvenanceRecord> {
    let memory_id: Option<String> = row.get("memory_id")?;
    let template: Option<String> = row.get("template")?;
    Ok(ProvenanceRecord {
        id: uuid_of(row, "id")?,
        memory_id: memory_id.map(|s| Uuid::parse_str(&s).map_err(corrupt)).transpose()?,
        tenant: tenant_of(row)?,
        session_id: row.get("session_id")?,
        layer: row.get("layer")?,
        event: row.get("event")?,
        template: template.as_deref().map(from_json).transpose()?,
        model: row.get("model")?,
        input_message_ids: from_json(&row.get::<_, String>("input_message_ids")?)?,
        sibling_ids: from_json(&row.get::<_, String>("sibling_ids")?)?,
        detail: from_json(&row.get::<_, String>("detail")?)?,
        started_at: time_of(row.get("started_at")?)?,
        duration_ms: row.get("duration_ms")?,
    })
}

fn commit_batch(conn: &mut Connection, commit: &BatchCommit) -> Outcome<CommitOutcome> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let t = &commit.tenant;
    let session_there =
        tx.prepare_cached(sql::SESSION_OF_OWNER)?
            .exists(params![commit.session_id, t.team, t.agent, t.user])?;
    let sources = commit.source_turns();
    if !session_there {
        return Ok(CommitOutcome::SourcesGone);
    }
    if !sources.is_empty() {
        let ids = json_array(sources.iter().map(Uuid::to_string)).map_err(Failure::Corrupt)?;
        let found: i64 = tx
            .prepare_cached(sql::COUNT_TURNS)?
            .query_row(params![ids], |row| row.get(0))?;
        if usize::try_from(found).ok() != Some(sources.len()) {
            return Ok(CommitOutcome::SourcesGone);
        }
    }
    let cursor: i64 = tx
        .prepare_cached(sql::CURSOR)?
        .query_row(
            params![commit.session_id, t.team, t.agent, t.user, EXTRACT_CONSUMER],
            |row| row.get("seq"),
        )
        .optional()?
        .unwrap_or(0);
    if cursor != commit.expected_cursor {
        return Ok(CommitOutcome::CursorMoved);
    }
    for m in &commit.memories {
        insert_memory(&tx, m)?;
    }
    let now = commit.now.timestamp_micros();
    {
        let mut archive = tx.prepare_cached(sql::ARCHIVE)?;
        for (old, new) in &commit.archive {
            archive.execute(params![old.to_string(), t.team, t.agent, t.user, new.to_string(), now])?;
        }
    }
    insert_provenance(&tx, &commit.provenance)?;
    let touched: Vec<Uuid> = commit
        .memories
        .iter()
        .map(|m| m.id)
        .chain(commit.archive.iter().map(|(old, _)| *old))
        .collect();
    enqueue(&tx, t, &touched)?;
    tx.prepare_cached(sql::MOVE_CURSOR)?.execute(params![
        commit.session_id,
        t.team,
        t.agent,
        t.user,
        EXTRACT_CONSUMER,
        commit.new_cursor,
        now
    ])?;
    tx.prepare_cached(sql::BUMP_SCHEDULE)?
        .execute(params![commit.session_id, t.team, t.agent, t.user, now])?;
    if !commit.memories.is_empty() {
        tx.prepare_cached(sql::MARK_L1)?
            .execute(params![t.team, t.agent, t.user, now])?;
    }
    tx.commit()?;
    Ok(CommitOutcome::Committed)
}

impl SqliteStore {
    /// Releases every session's extraction lease and returns how many were held. Only for a
    /// process that knows it is the one extracting from this database: leases it finds at
    /// start were left by a process that died, and would stall their sessions' extraction
    /// until they expire (10 minutes).
    pub async fn release_extract_leases(&self) -> StoreResult<usize> {
        self.run(|conn| Ok(conn.execute(sql::RELEASE_ALL, params![Utc::now().timestamp_micros()])?))
            .await
    }
}

#[async_trait]
impl MemoryStore for SqliteStore {
    #[instrument(skip_all, fields(session_id = %commit.session_id, memories = commit.memories.len()))]
    async fn commit_batch(&self, commit: &BatchCommit) -> StoreResult<CommitOutcome> {
        let commit = commit.clone();
        self.run(move |conn| commit_batch(conn, &commit)).await
    }

    #[instrument(skip_all, fields(records = records.len()))]
    async fn record_provenance(&self, records: &[ProvenanceRecord]) -> StoreResult<()> {
        let records = records.to_vec();
        self.run(move |conn| {
            let tx = conn.transaction()?;
            insert_provenance(&tx, &records)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    #[instrument(skip_all, fields(ids = ids.len()))]
    async fn memories_by_id(&self, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let tenant = tenant.clone();
        let ids = json_array(ids.iter().map(Uuid::to_string)).map_err(crate::store::StoreError::Backend)?;
        self.run(move |conn| {
            let query = format!(
                "SELECT {} FROM memories WHERE id IN (SELECT value FROM json_each(?1)) \
                 AND +team_id = ?2 AND +agent_id = ?3 AND +user_id = ?4",
                sql::MEMORY_COLUMNS
            );
            let mut stmt = conn.prepare_cached(&query)?;
            let rows = stmt.query(params![ids, tenant.team, tenant.agent, tenant.user])?;
            memories(rows)
        })
        .await
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn list_memories(
        &self,
        tenant: &Tenant,
        filter: &MemoryFilter,
        after: Option<MemoryCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Memory>> {
        let tenant = tenant.clone();
        let filter = filter.clone();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(&list_statement(filter.task.is_some()))?;
            let category = filter.category.map(Category::as_str);
            let status = filter.status.map(MemoryStatus::as_str);
            let created_after = filter.created_after.map(|t| t.timestamp_micros());
            let created_before = filter.created_before.map(|t| t.timestamp_micros());
            let after_at = after.map(|c| c.created_at.timestamp_micros());
            let after_id = after.map(|c| c.id.to_string());
            let limit = i64::from(limit);
            let mut bound: Vec<&dyn rusqlite::ToSql> = vec![
                &tenant.team,
                &tenant.agent,
                &tenant.user,
                &category,
                &filter.scene,
                &status,
                &filter.session_id,
                &created_after,
                &created_before,
                &after_at,
                &after_id,
                &limit,
            ];
            if let Some(task) = &filter.task {
                bound.push(task);
            }
            let rows = stmt.query(bound.as_slice())?;
            memories(rows)
        })
        .await
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn memory_history(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<Memory>> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            let query = format!(
                "WITH RECURSIVE chain(id, depth) AS ( \
                     SELECT id, 1 FROM memories WHERE superseded_by = ?1 \
                         AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 \
                     UNION \
                     SELECT m.id, c.depth + 1 FROM memories m JOIN chain c ON m.superseded_by = c.id \
                     WHERE m.team_id = ?2 AND m.agent_id = ?3 AND m.user_id = ?4 AND c.depth < 100) \
                 SELECT {} FROM memories WHERE id IN (SELECT id FROM chain) ORDER BY updated_at DESC, id DESC",
                sql::MEMORY_COLUMNS
            );
            let mut stmt = conn.prepare_cached(&query)?;
            let rows = stmt.query(params![id.to_string(), tenant.team, tenant.agent, tenant.user])?;
            memories(rows)
        })
        .await
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn memory_provenance(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<ProvenanceRecord>> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::PROVENANCE)?;
            let rows = stmt.query(params![id.to_string(), tenant.team, tenant.agent, tenant.user])?;
            collect_rows(rows, provenance_of)
        })
        .await
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn patch_memory(
        &self,
        tenant: &Tenant,
        id: Uuid,
        patch: &MemoryPatch,
        record: &ProvenanceRecord,
    ) -> StoreResult<Option<Memory>> {
        let tenant = tenant.clone();
        let patch = patch.clone();
        let record = record.clone();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let query = format!(
                "UPDATE memories SET content = COALESCE(?5, content), category = COALESCE(?6, category), \
                 priority = COALESCE(?7, priority), \
                 scene = CASE WHEN ?8 THEN ?9 ELSE scene END, \
                 occurred_at = CASE WHEN ?10 THEN ?11 ELSE occurred_at END, updated_at = ?12 \
                 WHERE id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 RETURNING {}",
                sql::MEMORY_COLUMNS
            );
            let memory = {
                let mut stmt = tx.prepare_cached(&query)?;
                let mut rows = stmt.query(params![
                    id.to_string(),
                    tenant.team,
                    tenant.agent,
                    tenant.user,
                    patch.content,
                    patch.category.map(Category::as_str),
                    patch.priority,
                    patch.scene.is_some(),
                    patch.scene.clone().flatten(),
                    patch.occurred_at.is_some(),
                    patch.occurred_at.clone().flatten(),
                    record.started_at.timestamp_micros()
                ])?;
                match rows.next()? {
                    Some(row) => memory_of(row)?,
                    None => return Ok(None),
                }
            };
            insert_provenance(&tx, std::slice::from_ref(&record))?;
            enqueue(&tx, &tenant, &[id])?;
            tx.commit()?;
            Ok(Some(memory))
        })
        .await
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn delete_memory(&self, tenant: &Tenant, id: Uuid) -> StoreResult<bool> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let deleted = tx.prepare_cached(sql::DELETE_MEMORY)?.execute(params![
                id.to_string(),
                tenant.team,
                tenant.agent,
                tenant.user
            ])?;
            if deleted == 0 {
                return Ok(false);
            }
            enqueue(&tx, &tenant, &[id])?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn outbox(&self, limit: u32) -> StoreResult<Vec<OutboxEntry>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::OUTBOX)?;
            let mut rows = stmt.query(params![i64::from(limit)])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(OutboxEntry {
                    seq: row.get("seq")?,
                    memory_id: uuid_of(row, "memory_id")?,
                    tenant: tenant_of(row)?,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn requeue_all(&self) -> StoreResult<u64> {
        self.run(move |conn| {
            let queued = conn
                .prepare_cached(sql::REQUEUE_ALL)?
                .execute(params![Utc::now().timestamp_micros()])?;
            Ok(queued as u64)
        })
        .await
    }

    async fn clear_outbox(&self, seqs: &[i64]) -> StoreResult<()> {
        if seqs.is_empty() {
            return Ok(());
        }
        let seqs = json_array(seqs).map_err(crate::store::StoreError::Backend)?;
        self.run(move |conn| {
            conn.prepare_cached(sql::CLEAR_OUTBOX)?.execute(params![seqs])?;
            Ok(())
        })
        .await
    }

    async fn schedule(&self, session: &SessionKey) -> StoreResult<ScheduleState> {
        let session = session.clone();
        self.run(move |conn| {
            let (id, t) = (&session.session_id, &session.tenant);
            let row = conn
                .prepare_cached(sql::SCHEDULE)?
                .query_row(params![id, t.team, t.agent, t.user], |row| {
                    Ok((row.get::<_, i64>("runs")?, row.get::<_, Option<i64>>("idle_due_at")?))
                })
                .optional()?;
            match row {
                None => Ok(ScheduleState::default()),
                Some((runs, due)) => Ok(ScheduleState {
                    runs,
                    idle_due_at: due.map(time_of).transpose()?,
                }),
            }
        })
        .await
    }

    async fn set_idle_due(&self, session: &SessionKey, due: DateTime<Utc>) -> StoreResult<()> {
        let session = session.clone();
        self.run(move |conn| {
            let (id, t) = (&session.session_id, &session.tenant);
            conn.prepare_cached(sql::SET_IDLE_DUE)?.execute(params![
                id,
                t.team,
                t.agent,
                t.user,
                due.timestamp_micros(),
                Utc::now().timestamp_micros()
            ])?;
            Ok(())
        })
        .await
    }

    async fn claim_session(&self, session: &SessionKey, owner: Uuid, until: DateTime<Utc>) -> StoreResult<bool> {
        let session = session.clone();
        self.run(move |conn| {
            let (id, t) = (&session.session_id, &session.tenant);
            let claimed = conn
                .prepare_cached(sql::CLAIM)?
                .query_row(
                    params![
                        id,
                        t.team,
                        t.agent,
                        t.user,
                        owner.to_string(),
                        until.timestamp_micros(),
                        Utc::now().timestamp_micros()
                    ],
                    |_| Ok(()),
                )
                .optional()?;
            Ok(claimed.is_some())
        })
        .await
    }

    async fn release_session(&self, session: &SessionKey, owner: Uuid) -> StoreResult<()> {
        let session = session.clone();
        self.run(move |conn| {
            let (id, t) = (&session.session_id, &session.tenant);
            conn.prepare_cached(sql::RELEASE)?.execute(params![
                id,
                t.team,
                t.agent,
                t.user,
                owner.to_string(),
                Utc::now().timestamp_micros()
            ])?;
            Ok(())
        })
        .await
    }

    async fn due_sessions(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<SessionKey>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::DUE_SESSIONS)?;
            let mut rows = stmt.query(params![now.timestamp_micros(), i64::from(limit)])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(SessionKey::new(tenant_of(row)?, row.get::<_, String>("session_id")?));
            }
            Ok(out)
        })
        .await
    }

    async fn recent_failures(&self, limit: u32) -> StoreResult<Vec<ProvenanceRecord>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::RECENT_FAILURES)?;
            let rows = stmt.query(params![i64::from(limit)])?;
            collect_rows(rows, provenance_of)
        })
        .await
    }

    async fn count_memories(&self, tenant: &Tenant, status: MemoryStatus) -> StoreResult<i64> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            Ok(conn.prepare_cached(sql::COUNT)?.query_row(
                params![tenant.team, tenant.agent, tenant.user, status.as_str()],
                |row| row.get("n"),
            )?)
        })
        .await
    }
}
