//! [`MemoryStore`] on Postgres: the tables of `migrations/V002__memories.sql`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use tokio_postgres::Row;
use tracing::instrument;
use uuid::Uuid;

use super::{get, pg_error, tenant_of, PostgresStore};
use crate::domain::{SessionKey, Tenant};
use crate::memory::{Category, Memory, MemoryStatus, TemplateRef};
use crate::store::memory::{
    BatchCommit, CommitOutcome, MemoryCursor, MemoryFilter, MemoryPatch, MemoryStore, OutboxEntry, ProvenanceRecord,
    ScheduleState, EXTRACT_CONSUMER,
};
use crate::store::{StoreError, StoreResult};

mod sql {
    pub const MEMORY_COLUMNS: &str = "id, team_id, agent_id, user_id, session_id, content, category, priority, \
         scene, occurred_at, source_message_ids, status, superseded_by, created_at, updated_at, task";
    /// The listing's filters: each a parameter that may be NULL, so one statement serves all.
    /// The task is not among them (see `list_memories`).
    pub const LIST_FILTERS: &str = "team_id = $1 AND agent_id = $2 AND user_id = $3 \
         AND ($4::text IS NULL OR category = $4) AND ($5::text IS NULL OR scene = $5) \
         AND ($6::text IS NULL OR status = $6) AND ($7::text IS NULL OR session_id = $7) \
         AND ($8::timestamptz IS NULL OR created_at >= $8) AND ($9::timestamptz IS NULL OR created_at < $9) \
         AND ($10::timestamptz IS NULL OR (created_at, id) < ($10, $11::uuid))";
    /// `$1` is the consumer and `$2`, `$3`, `$4`, `$5` the session's owner and id, in every
    /// statement on cursors and the schedule.
    pub const CLAIM_CURSOR: &str = "INSERT INTO cursors (consumer, team_id, agent_id, user_id, session_id, seq, \
         updated_at) VALUES ($1, $2, $3, $4, $5, 0, now()) \
         ON CONFLICT (consumer, team_id, agent_id, user_id, session_id) DO NOTHING";
    pub const LOCK_CURSOR: &str = "SELECT seq FROM cursors WHERE consumer = $1 \
         AND team_id = $2 AND agent_id = $3 AND user_id = $4 AND session_id = $5 FOR UPDATE";
    /// A batch's session and source turns, held until it commits: an erasure deletes them,
    /// so it either waits for the batch (and then deletes its memories too) or the batch finds
    /// them gone and writes nothing. KEY SHARE does not wait for appends, which only update
    /// the session row.
    pub const SHARE_SESSION: &str = "SELECT session_id FROM sessions \
         WHERE session_id = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4 FOR KEY SHARE";
    pub const SHARE_SOURCES: &str = "SELECT id FROM messages WHERE id = ANY($1) FOR KEY SHARE";
    pub const MOVE_CURSOR: &str = "UPDATE cursors SET seq = $6, updated_at = now() \
         WHERE consumer = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4 AND session_id = $5";
    pub const INSERT_MEMORY: &str = "INSERT INTO memories (id, team_id, agent_id, user_id, session_id, content, \
         category, priority, scene, occurred_at, source_message_ids, status, superseded_by, created_at, updated_at, \
         task) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";
    pub const ARCHIVE: &str = "UPDATE memories SET status = 'archived', superseded_by = $5, updated_at = $6 \
         WHERE id = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4 AND status = 'active'";
    pub const INSERT_PROVENANCE: &str = "INSERT INTO memory_provenance (id, memory_id, team_id, agent_id, user_id, \
         session_id, layer, event, template, model, input_message_ids, sibling_ids, detail, started_at, duration_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) ON CONFLICT (id) DO NOTHING";
    pub const ENQUEUE: &str = "INSERT INTO memory_index_outbox (memory_id, team_id, agent_id, user_id) \
         VALUES ($1, $2, $3, $4)";
    /// The owner's scene timer learns of the batch in the batch's own transaction, so the
    /// scene sweep finds the owner even if moving the timer afterwards fails.
    pub const MARK_L1: &str = "INSERT INTO scene_schedule (team_id, agent_id, user_id, last_l1_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (team_id, agent_id, user_id) DO UPDATE \
         SET last_l1_at = GREATEST(COALESCE(scene_schedule.last_l1_at, EXCLUDED.last_l1_at), EXCLUDED.last_l1_at), \
         updated_at = now()";
    /// The schedule's statements take the session's owner and id as `$1` to `$4`.
    pub const BUMP_SCHEDULE: &str = "INSERT INTO extract_schedule \
         (team_id, agent_id, user_id, session_id, runs, idle_due_at, updated_at) \
         VALUES ($1, $2, $3, $4, 1, NULL, now()) ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE \
         SET runs = extract_schedule.runs + 1, idle_due_at = NULL, updated_at = now()";
    pub const SCHEDULE: &str = "SELECT runs, idle_due_at FROM extract_schedule \
         WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 AND session_id = $4";
    pub const SET_IDLE_DUE: &str = "INSERT INTO extract_schedule \
         (team_id, agent_id, user_id, session_id, runs, idle_due_at, updated_at) \
         VALUES ($1, $2, $3, $4, 0, $5, now()) ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE \
         SET idle_due_at = excluded.idle_due_at, updated_at = now()";
    // The WHERE of DO UPDATE makes a held lease return no row: not claimed.
    pub const CLAIM: &str = "INSERT INTO extract_schedule \
         (team_id, agent_id, user_id, session_id, runs, lease_owner, lease_until, updated_at) \
         VALUES ($1, $2, $3, $4, 0, $5, $6, now()) ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE \
         SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, updated_at = now() \
         WHERE extract_schedule.lease_owner IS NULL OR extract_schedule.lease_owner = excluded.lease_owner \
         OR extract_schedule.lease_until < now() RETURNING session_id";
    pub const RELEASE: &str = "UPDATE extract_schedule SET lease_owner = NULL, lease_until = NULL, updated_at = now() \
         WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 AND session_id = $4 AND lease_owner = $5";
    pub const DUE_SESSIONS: &str = "SELECT session_id, team_id, agent_id, user_id FROM extract_schedule \
         WHERE idle_due_at IS NOT NULL AND idle_due_at <= $1 ORDER BY idle_due_at LIMIT $2";
    pub const OUTBOX: &str = "SELECT seq, memory_id, team_id, agent_id, user_id FROM memory_index_outbox \
         ORDER BY seq LIMIT $1";
    pub const REQUEUE_ALL: &str = "INSERT INTO memory_index_outbox (memory_id, team_id, agent_id, user_id) \
         SELECT id, team_id, agent_id, user_id FROM memories WHERE status = 'active' ORDER BY created_at";
    pub const CLEAR_OUTBOX: &str = "DELETE FROM memory_index_outbox WHERE seq = ANY($1)";
    pub const DELETE_MEMORY: &str = "DELETE FROM memories \
         WHERE id = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4";
    pub const PROVENANCE: &str = "SELECT id, memory_id, team_id, agent_id, user_id, session_id, layer, event, \
         template, model, input_message_ids, sibling_ids, detail, started_at, duration_ms FROM memory_provenance \
         WHERE memory_id = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4 ORDER BY started_at, id";
    pub const RECENT_FAILURES: &str = "SELECT id, memory_id, team_id, agent_id, user_id, session_id, layer, event, \
         template, model, input_message_ids, sibling_ids, detail, started_at, duration_ms FROM memory_provenance \
         WHERE event = 'failed' ORDER BY started_at DESC, id LIMIT $1";
    pub const COUNT: &str = "SELECT count(*) AS n FROM memories \
         WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 AND status = $4";
}

fn tenant_params(tenant: &Tenant) -> [&(dyn tokio_postgres::types::ToSql + Sync); 3] {
    [&tenant.team, &tenant.agent, &tenant.user]
}

/// Returns how many records were new.
pub(super) async fn insert_provenance<C: GenericClient>(client: &C, records: &[ProvenanceRecord]) -> StoreResult<u64> {
    let mut inserted = 0;
    let insert = client.prepare_cached(sql::INSERT_PROVENANCE).await.map_err(pg_error)?;
    for r in records {
        let template = r.template.as_ref().map(Json);
        inserted += client
            .execute(
                &insert,
                &[
                    &r.id,
                    &r.memory_id,
                    &r.tenant.team,
                    &r.tenant.agent,
                    &r.tenant.user,
                    &r.session_id,
                    &r.layer,
                    &r.event,
                    &template,
                    &r.model,
                    &Json(&r.input_message_ids),
                    &Json(&r.sibling_ids),
                    &Json(&r.detail),
                    &r.started_at,
                    &r.duration_ms,
                ],
            )
            .await
            .map_err(pg_error)?;
    }
    Ok(inserted)
}

async fn enqueue<C: GenericClient>(client: &C, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let stmt = client.prepare_cached(sql::ENQUEUE).await.map_err(pg_error)?;
    for id in ids {
        client
            .execute(&stmt, &[id, &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
    }
    Ok(())
}

fn memory_of(row: &Row) -> StoreResult<Memory> {
    let category: String = get(row, "category")?;
    let status: String = get(row, "status")?;
    let priority: i16 = get(row, "priority")?;
    let Json(source_message_ids): Json<Vec<Uuid>> = get(row, "source_message_ids")?;
    Ok(Memory {
        id: get(row, "id")?,
        tenant: tenant_of(row)?,
        session_id: get(row, "session_id")?,
        content: get(row, "content")?,
        category: Category::parse(&category).ok_or_else(|| corrupt(format!("unknown category {category}")))?,
        priority: u8::try_from(priority).map_err(|_| corrupt(format!("priority {priority} out of range")))?,
        scene: get(row, "scene")?,
        occurred_at: get(row, "occurred_at")?,
        source_message_ids,
        status: MemoryStatus::parse(&status).ok_or_else(|| corrupt(format!("unknown status {status}")))?,
        superseded_by: get(row, "superseded_by")?,
        task: get(row, "task")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

pub(super) fn provenance_of(row: &Row) -> StoreResult<ProvenanceRecord> {
    let template: Option<Json<TemplateRef>> = get(row, "template")?;
    let Json(input_message_ids): Json<Vec<Uuid>> = get(row, "input_message_ids")?;
    let Json(sibling_ids): Json<Vec<Uuid>> = get(row, "sibling_ids")?;
    let Json(detail): Json<serde_json::Value> = get(row, "detail")?;
    Ok(ProvenanceRecord {
        id: get(row, "id")?,
        memory_id: get(row, "memory_id")?,
        tenant: tenant_of(row)?,
        session_id: get(row, "session_id")?,
        layer: get(row, "layer")?,
        event: get(row, "event")?,
        template: template.map(|Json(t)| t),
        model: get(row, "model")?,
        input_message_ids,
        sibling_ids,
        detail,
        started_at: get(row, "started_at")?,
        duration_ms: get(row, "duration_ms")?,
    })
}

fn corrupt(message: String) -> StoreError {
    StoreError::Backend(message.into())
}

#[async_trait]
impl MemoryStore for PostgresStore {
    #[instrument(skip_all, fields(session_id = %commit.session_id, memories = commit.memories.len()))]
    async fn commit_batch(&self, commit: &BatchCommit) -> StoreResult<CommitOutcome> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        // The session first, before the cursor: an erasure locks sessions before it deletes
        // cursors, so taking them in the other order could deadlock with it.
        let t = &commit.tenant;
        let session = tx.prepare_cached(sql::SHARE_SESSION).await.map_err(pg_error)?;
        if tx
            .query_opt(&session, &[&commit.session_id, &t.team, &t.agent, &t.user])
            .await
            .map_err(pg_error)?
            .is_none()
        {
            return Ok(CommitOutcome::SourcesGone);
        }
        let sources = commit.source_turns();
        if !sources.is_empty() {
            let share = tx.prepare_cached(sql::SHARE_SOURCES).await.map_err(pg_error)?;
            if tx.query(&share, &[&sources]).await.map_err(pg_error)?.len() != sources.len() {
                return Ok(CommitOutcome::SourcesGone);
            }
        }
        let claim = tx.prepare_cached(sql::CLAIM_CURSOR).await.map_err(pg_error)?;
        tx.execute(
            &claim,
            &[&EXTRACT_CONSUMER, &t.team, &t.agent, &t.user, &commit.session_id],
        )
        .await
        .map_err(pg_error)?;
        // The row lock makes a concurrent commit of the same session wait, then see the
        // cursor it moved.
        let lock = tx.prepare_cached(sql::LOCK_CURSOR).await.map_err(pg_error)?;
        let row = tx
            .query_one(
                &lock,
                &[&EXTRACT_CONSUMER, &t.team, &t.agent, &t.user, &commit.session_id],
            )
            .await
            .map_err(pg_error)?;
        let cursor: i64 = get(&row, "seq")?;
        if cursor != commit.expected_cursor {
            return Ok(CommitOutcome::CursorMoved);
        }

        let insert = tx.prepare_cached(sql::INSERT_MEMORY).await.map_err(pg_error)?;
        for m in &commit.memories {
            tx.execute(
                &insert,
                &[
                    &m.id,
                    &m.tenant.team,
                    &m.tenant.agent,
                    &m.tenant.user,
                    &m.session_id,
                    &m.content,
                    &m.category.as_str(),
                    &i16::from(m.priority),
                    &m.scene,
                    &m.occurred_at,
                    &Json(&m.source_message_ids),
                    &m.status.as_str(),
                    &m.superseded_by,
                    &m.created_at,
                    &m.updated_at,
                    &m.task,
                ],
            )
            .await
            .map_err(pg_error)?;
        }
        let archive = tx.prepare_cached(sql::ARCHIVE).await.map_err(pg_error)?;
        for (old, new) in &commit.archive {
            tx.execute(&archive, &[old, &t.team, &t.agent, &t.user, new, &commit.now])
                .await
                .map_err(pg_error)?;
        }
        insert_provenance(&tx, &commit.provenance).await?;
        let touched: Vec<Uuid> = commit
            .memories
            .iter()
            .map(|m| m.id)
            .chain(commit.archive.iter().map(|(old, _)| *old))
            .collect();
        enqueue(&tx, t, &touched).await?;
        let advance = tx.prepare_cached(sql::MOVE_CURSOR).await.map_err(pg_error)?;
        tx.execute(
            &advance,
            &[
                &EXTRACT_CONSUMER,
                &t.team,
                &t.agent,
                &t.user,
                &commit.session_id,
                &commit.new_cursor,
            ],
        )
        .await
        .map_err(pg_error)?;
        let bump = tx.prepare_cached(sql::BUMP_SCHEDULE).await.map_err(pg_error)?;
        tx.execute(&bump, &[&t.team, &t.agent, &t.user, &commit.session_id])
            .await
            .map_err(pg_error)?;
        if !commit.memories.is_empty() {
            let mark = tx.prepare_cached(sql::MARK_L1).await.map_err(pg_error)?;
            tx.execute(&mark, &[&t.team, &t.agent, &t.user, &commit.now])
                .await
                .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(CommitOutcome::Committed)
    }

    #[instrument(skip_all, fields(records = records.len()))]
    async fn record_provenance(&self, records: &[ProvenanceRecord]) -> StoreResult<()> {
        let client = self.client().await?;
        insert_provenance(&client, records).await.map(drop)
    }

    #[instrument(skip_all, fields(ids = ids.len()))]
    async fn memories_by_id(&self, tenant: &Tenant, ids: &[Uuid]) -> StoreResult<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let query = format!(
            "SELECT {} FROM memories WHERE id = ANY($1) AND team_id = $2 AND agent_id = $3 AND user_id = $4",
            sql::MEMORY_COLUMNS
        );
        let stmt = client.prepare_cached(&query).await.map_err(pg_error)?;
        let [team, agent, user] = tenant_params(tenant);
        let rows = client
            .query(&stmt, &[&ids, team, agent, user])
            .await
            .map_err(pg_error)?;
        rows.iter().map(memory_of).collect()
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn list_memories(
        &self,
        tenant: &Tenant,
        filter: &MemoryFilter,
        after: Option<MemoryCursor>,
        limit: u32,
    ) -> StoreResult<Vec<Memory>> {
        let client = self.client().await?;
        // The task narrows in a statement of its own: as `$13 IS NULL OR task = $13`, like the
        // other filters, a generic plan could not walk `memories_tenant_task_created_idx`, and a
        // task's page would scan the tenant's memories of every task.
        let query = match filter.task {
            Some(_) => format!(
                "SELECT {} FROM memories WHERE {} AND task = $13 ORDER BY created_at DESC, id DESC LIMIT $12",
                sql::MEMORY_COLUMNS,
                sql::LIST_FILTERS
            ),
            None => format!(
                "SELECT {} FROM memories WHERE {} ORDER BY created_at DESC, id DESC LIMIT $12",
                sql::MEMORY_COLUMNS,
                sql::LIST_FILTERS
            ),
        };
        let stmt = client.prepare_cached(&query).await.map_err(pg_error)?;
        let category = filter.category.map(Category::as_str);
        let status = filter.status.map(MemoryStatus::as_str);
        let after_at = after.map(|c| c.created_at);
        let after_id = after.map(|c| c.id);
        let limit = i64::from(limit);
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
            &tenant.team,
            &tenant.agent,
            &tenant.user,
            &category,
            &filter.scene,
            &status,
            &filter.session_id,
            &filter.created_after,
            &filter.created_before,
            &after_at,
            &after_id,
            &limit,
        ];
        if let Some(task) = &filter.task {
            params.push(task);
        }
        let rows = client.query(&stmt, &params).await.map_err(pg_error)?;
        rows.iter().map(memory_of).collect()
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn memory_history(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<Memory>> {
        let client = self.client().await?;
        let query = format!(
            "WITH RECURSIVE chain(id, depth) AS ( \
                 SELECT id, 1 FROM memories WHERE superseded_by = $1 \
                     AND team_id = $2 AND agent_id = $3 AND user_id = $4 \
                 UNION \
                 SELECT m.id, c.depth + 1 FROM memories m JOIN chain c ON m.superseded_by = c.id \
                 WHERE m.team_id = $2 AND m.agent_id = $3 AND m.user_id = $4 AND c.depth < 100) \
             SELECT {} FROM memories WHERE id IN (SELECT id FROM chain) ORDER BY updated_at DESC, id DESC",
            sql::MEMORY_COLUMNS
        );
        let stmt = client.prepare_cached(&query).await.map_err(pg_error)?;
        let [team, agent, user] = tenant_params(tenant);
        let rows = client.query(&stmt, &[&id, team, agent, user]).await.map_err(pg_error)?;
        rows.iter().map(memory_of).collect()
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn memory_provenance(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Vec<ProvenanceRecord>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::PROVENANCE).await.map_err(pg_error)?;
        let [team, agent, user] = tenant_params(tenant);
        let rows = client.query(&stmt, &[&id, team, agent, user]).await.map_err(pg_error)?;
        rows.iter().map(provenance_of).collect()
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn patch_memory(
        &self,
        tenant: &Tenant,
        id: Uuid,
        patch: &MemoryPatch,
        record: &ProvenanceRecord,
    ) -> StoreResult<Option<Memory>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let query = format!(
            "UPDATE memories SET content = COALESCE($5, content), category = COALESCE($6, category), \
             priority = COALESCE($7, priority), \
             scene = CASE WHEN $8 THEN $9 ELSE scene END, \
             occurred_at = CASE WHEN $10 THEN $11 ELSE occurred_at END, updated_at = $12 \
             WHERE id = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4 RETURNING {}",
            sql::MEMORY_COLUMNS
        );
        let stmt = tx.prepare_cached(&query).await.map_err(pg_error)?;
        let category = patch.category.map(Category::as_str);
        let priority = patch.priority.map(i16::from);
        let scene = patch.scene.clone().flatten();
        let occurred_at = patch.occurred_at.clone().flatten();
        let row = tx
            .query_opt(
                &stmt,
                &[
                    &id,
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &patch.content,
                    &category,
                    &priority,
                    &patch.scene.is_some(),
                    &scene,
                    &patch.occurred_at.is_some(),
                    &occurred_at,
                    &record.started_at,
                ],
            )
            .await
            .map_err(pg_error)?;
        let Some(row) = row else { return Ok(None) };
        let memory = memory_of(&row)?;
        insert_provenance(&tx, std::slice::from_ref(record)).await?;
        enqueue(&tx, tenant, &[id]).await?;
        tx.commit().await.map_err(pg_error)?;
        Ok(Some(memory))
    }

    #[instrument(skip_all, fields(id = %id))]
    async fn delete_memory(&self, tenant: &Tenant, id: Uuid) -> StoreResult<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let stmt = tx.prepare_cached(sql::DELETE_MEMORY).await.map_err(pg_error)?;
        let [team, agent, user] = tenant_params(tenant);
        let deleted = tx.execute(&stmt, &[&id, team, agent, user]).await.map_err(pg_error)?;
        if deleted == 0 {
            return Ok(false);
        }
        enqueue(&tx, tenant, &[id]).await?;
        tx.commit().await.map_err(pg_error)?;
        Ok(true)
    }

    async fn outbox(&self, limit: u32) -> StoreResult<Vec<OutboxEntry>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::OUTBOX).await.map_err(pg_error)?;
        let rows = client.query(&stmt, &[&i64::from(limit)]).await.map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(OutboxEntry {
                    seq: get(row, "seq")?,
                    memory_id: get(row, "memory_id")?,
                    tenant: tenant_of(row)?,
                })
            })
            .collect()
    }

    async fn requeue_all(&self) -> StoreResult<u64> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::REQUEUE_ALL).await.map_err(pg_error)?;
        client.execute(&stmt, &[]).await.map_err(pg_error)
    }

    async fn clear_outbox(&self, seqs: &[i64]) -> StoreResult<()> {
        if seqs.is_empty() {
            return Ok(());
        }
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::CLEAR_OUTBOX).await.map_err(pg_error)?;
        client.execute(&stmt, &[&seqs]).await.map_err(pg_error)?;
        Ok(())
    }

    async fn schedule(&self, session: &SessionKey) -> StoreResult<ScheduleState> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::SCHEDULE).await.map_err(pg_error)?;
        let t = &session.tenant;
        let row = client
            .query_opt(&stmt, &[&t.team, &t.agent, &t.user, &session.session_id])
            .await
            .map_err(pg_error)?;
        match row {
            None => Ok(ScheduleState::default()),
            Some(row) => Ok(ScheduleState {
                runs: get(&row, "runs")?,
                idle_due_at: get(&row, "idle_due_at")?,
            }),
        }
    }

    async fn set_idle_due(&self, session: &SessionKey, due: DateTime<Utc>) -> StoreResult<()> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::SET_IDLE_DUE).await.map_err(pg_error)?;
        let t = &session.tenant;
        client
            .execute(&stmt, &[&t.team, &t.agent, &t.user, &session.session_id, &due])
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn claim_session(&self, session: &SessionKey, owner: Uuid, until: DateTime<Utc>) -> StoreResult<bool> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::CLAIM).await.map_err(pg_error)?;
        let t = &session.tenant;
        let row = client
            .query_opt(
                &stmt,
                &[&t.team, &t.agent, &t.user, &session.session_id, &owner, &until],
            )
            .await
            .map_err(pg_error)?;
        Ok(row.is_some())
    }

    async fn release_session(&self, session: &SessionKey, owner: Uuid) -> StoreResult<()> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::RELEASE).await.map_err(pg_error)?;
        let t = &session.tenant;
        client
            .execute(&stmt, &[&t.team, &t.agent, &t.user, &session.session_id, &owner])
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn due_sessions(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<SessionKey>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::DUE_SESSIONS).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&now, &i64::from(limit)])
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| Ok(SessionKey::new(tenant_of(row)?, get::<String>(row, "session_id")?)))
            .collect()
    }

    async fn recent_failures(&self, limit: u32) -> StoreResult<Vec<ProvenanceRecord>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::RECENT_FAILURES).await.map_err(pg_error)?;
        let rows = client.query(&stmt, &[&i64::from(limit)]).await.map_err(pg_error)?;
        rows.iter().map(provenance_of).collect()
    }

    async fn count_memories(&self, tenant: &Tenant, status: MemoryStatus) -> StoreResult<i64> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::COUNT).await.map_err(pg_error)?;
        let row = client
            .query_one(&stmt, &[&tenant.team, &tenant.agent, &tenant.user, &status.as_str()])
            .await
            .map_err(pg_error)?;
        get(&row, "n")
    }
}
