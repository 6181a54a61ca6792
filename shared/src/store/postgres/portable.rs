//! [`PortableStore`] on Postgres.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use futures::future::try_join_all;
use tokio_postgres::types::{Json, ToSql};
use tracing::instrument;
use uuid::Uuid;

use super::memory::{insert_provenance as insert_memory_provenance, provenance_of};
use super::scene::{insert_provenance as insert_artifact_provenance, provenance_of as artifact_provenance_of};
use super::{get, pg_error, PostgresStore};
use crate::domain::Tenant;
use crate::memory::MemoryStatus;
use crate::store::memory::{ProvenanceRecord, EXTRACT_CONSUMER};
use crate::store::portable::{first_missing, ImportOutcome, OwnerRows, PortableStore, ProvenanceCursor, SessionRecord};
use crate::store::scene::ArtifactProvenance;
use crate::store::StoreResult;

mod sql {
    // Byte order, as SQLite sorts text: the same owner's stream is the same from either backend.
    pub const SESSIONS: &str = "SELECT s.session_id, s.created_at, s.last_seq, s.reset_at, \
         COALESCE(c.seq, 0) AS extracted FROM sessions s \
         LEFT JOIN cursors c ON c.consumer = $4 AND c.team_id = s.team_id AND c.agent_id = s.agent_id \
         AND c.user_id = s.user_id AND c.session_id = s.session_id \
         WHERE s.team_id = $1 AND s.agent_id = $2 AND s.user_id = $3 ORDER BY s.session_id COLLATE \"C\"";
    pub const MEMORY_PROVENANCE: &str = "SELECT id, memory_id, team_id, agent_id, user_id, session_id, layer, \
         event, template, model, input_message_ids, sibling_ids, detail, started_at, duration_ms \
         FROM memory_provenance WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 \
         AND ($4::timestamptz IS NULL OR (started_at, id) > ($4, $5::uuid)) \
         ORDER BY started_at, id LIMIT $6";
    pub const ARTIFACT_PROVENANCE: &str = "SELECT id, team_id, agent_id, user_id, layer, scene_id, event, \
         template, model, input_refs, output_refs, detail, started_at, duration_ms \
         FROM artifact_provenance WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 \
         AND ($4::timestamptz IS NULL OR (started_at, id) > ($4, $5::uuid)) \
         ORDER BY started_at, id LIMIT $6";
    pub const INSERT_SESSION: &str = "INSERT INTO sessions \
         (session_id, team_id, agent_id, user_id, last_seq, reset_at, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, now()) \
         ON CONFLICT (team_id, agent_id, user_id, session_id) DO NOTHING";
    /// Locks the session, so no append interleaves with the import's turns.
    pub const LOCK_SESSION: &str = "SELECT last_seq FROM sessions \
         WHERE session_id = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4 FOR UPDATE";
    pub const RAISE_LAST_SEQ: &str = "UPDATE sessions SET last_seq = $5, updated_at = now() \
         WHERE session_id = $1 AND team_id = $2 AND agent_id = $3 AND user_id = $4 AND last_seq < $5";
    pub const ADVANCE_CURSOR: &str = "INSERT INTO cursors (consumer, session_id, team_id, agent_id, user_id, seq, \
         updated_at) VALUES ($1, $2, $3, $4, $5, $6, now()) \
         ON CONFLICT (consumer, team_id, agent_id, user_id, session_id) DO UPDATE \
         SET seq = GREATEST(cursors.seq, EXCLUDED.seq), updated_at = now()";
    pub const INSERT_TURNS: &str = "INSERT INTO messages \
         (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at, task) \
         SELECT t.id, t.session_id, $1, $2, $3, t.seq, t.role, t.content, t.metadata, t.client_id, t.created_at, t.task \
         FROM UNNEST($4::uuid[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::jsonb[], $10::text[], \
         $11::timestamptz[], $12::text[]) \
         AS t(id, session_id, seq, role, content, metadata, client_id, created_at, task) \
         ON CONFLICT DO NOTHING";
    pub const TURNS_HELD: &str = "SELECT id, session_id, seq FROM messages \
         WHERE id = ANY($1) AND team_id = $2 AND agent_id = $3 AND user_id = $4";
    pub const INSERT_MEMORY: &str = "INSERT INTO memories (id, team_id, agent_id, user_id, session_id, content, \
         category, priority, scene, occurred_at, source_message_ids, status, superseded_by, created_at, updated_at, \
         task) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
         ON CONFLICT (id) DO NOTHING";
    pub const ENQUEUE: &str = "INSERT INTO memory_index_outbox (memory_id, team_id, agent_id, user_id) \
         SELECT UNNEST($1::uuid[]), $2, $3, $4";
    pub const MEMORIES_HELD: &str = "SELECT id FROM memories \
         WHERE id = ANY($1) AND team_id = $2 AND agent_id = $3 AND user_id = $4";
    pub const MEMORY_PROVENANCE_HELD: &str = "SELECT id FROM memory_provenance \
         WHERE id = ANY($1) AND team_id = $2 AND agent_id = $3 AND user_id = $4";
    pub const INSERT_SCENE: &str = "INSERT INTO scenes (id, team_id, agent_id, user_id, name, overview, tags, \
         object_key, version, status, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (id) DO NOTHING";
    pub const SCENES_HELD: &str = "SELECT id FROM scenes \
         WHERE id = ANY($1) AND team_id = $2 AND agent_id = $3 AND user_id = $4";
    pub const ARTIFACT_PROVENANCE_HELD: &str = "SELECT id FROM artifact_provenance \
         WHERE id = ANY($1) AND team_id = $2 AND agent_id = $3 AND user_id = $4";
    // A persona the target built (version > 0) is kept (see the SQLite twin).
    pub const UPSERT_PERSONA: &str = "INSERT INTO personas AS p (team_id, agent_id, user_id, version, object_key, \
         built_at, memories_at_build, scenes_at_build, scene_watermark, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now()) \
         ON CONFLICT (team_id, agent_id, user_id) DO UPDATE SET version = EXCLUDED.version, \
         object_key = EXCLUDED.object_key, built_at = EXCLUDED.built_at, \
         memories_at_build = EXCLUDED.memories_at_build, scenes_at_build = EXCLUDED.scenes_at_build, \
         scene_watermark = EXCLUDED.scene_watermark, updated_at = now() \
         WHERE p.version = 0";
}

/// Rows per statement or per pipelined round.
const PAGE: usize = 1_000;

type Params<'a> = Vec<&'a (dyn ToSql + Sync)>;

#[async_trait]
impl PortableStore for PostgresStore {
    #[instrument(skip_all)]
    async fn owner_sessions(&self, tenant: &Tenant) -> StoreResult<Vec<SessionRecord>> {
        let client = self.client().await?;
        let rows = client
            .query(
                sql::SESSIONS,
                &[&tenant.team, &tenant.agent, &tenant.user, &EXTRACT_CONSUMER],
            )
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(SessionRecord {
                    id: get(row, "session_id")?,
                    created_at: get(row, "created_at")?,
                    last_seq: get(row, "last_seq")?,
                    reset_at: get(row, "reset_at")?,
                    extracted_through: get(row, "extracted")?,
                })
            })
            .collect()
    }

    #[instrument(skip_all)]
    async fn owner_memory_provenance(
        &self,
        tenant: &Tenant,
        after: Option<ProvenanceCursor>,
        limit: u32,
    ) -> StoreResult<Vec<ProvenanceRecord>> {
        let client = self.client().await?;
        let (at, id): (Option<DateTime<Utc>>, Option<Uuid>) = (after.map(|a| a.0), after.map(|a| a.1));
        let rows = client
            .query(
                sql::MEMORY_PROVENANCE,
                &[&tenant.team, &tenant.agent, &tenant.user, &at, &id, &i64::from(limit)],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(provenance_of).collect()
    }

    #[instrument(skip_all)]
    async fn owner_artifact_provenance(
        &self,
        tenant: &Tenant,
        after: Option<ProvenanceCursor>,
        limit: u32,
    ) -> StoreResult<Vec<ArtifactProvenance>> {
        let client = self.client().await?;
        let (at, id): (Option<DateTime<Utc>>, Option<Uuid>) = (after.map(|a| a.0), after.map(|a| a.1));
        let rows = client
            .query(
                sql::ARTIFACT_PROVENANCE,
                &[&tenant.team, &tenant.agent, &tenant.user, &at, &id, &i64::from(limit)],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(artifact_provenance_of).collect()
    }

    #[instrument(skip_all, fields(turns = rows.turns.len(), memories = rows.memories.len()))]
    async fn import_owner(&self, tenant: &Tenant, rows: OwnerRows) -> StoreResult<ImportOutcome> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let outcome = import(&tx, tenant, &rows).await?;
        if matches!(outcome, ImportOutcome::Imported(_)) {
            tx.commit().await.map_err(pg_error)?;
        }
        // A conflict drops `tx`, which rolls it back.
        Ok(outcome)
    }
}

async fn import<C: GenericClient>(tx: &C, t: &Tenant, rows: &OwnerRows) -> StoreResult<ImportOutcome> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let owner: [&(dyn ToSql + Sync); 3] = [&t.team, &t.agent, &t.user];

    let insert_session = tx.prepare_cached(sql::INSERT_SESSION).await.map_err(pg_error)?;
    let lock_session = tx.prepare_cached(sql::LOCK_SESSION).await.map_err(pg_error)?;
    let raise = tx.prepare_cached(sql::RAISE_LAST_SEQ).await.map_err(pg_error)?;
    let advance = tx.prepare_cached(sql::ADVANCE_CURSOR).await.map_err(pg_error)?;
    let mut new_sessions = 0;
    for s in &rows.sessions {
        new_sessions += tx
            .execute(
                &insert_session,
                &[
                    &s.id,
                    &t.team,
                    &t.agent,
                    &t.user,
                    &s.last_seq,
                    &s.reset_at,
                    &s.created_at,
                ],
            )
            .await
            .map_err(pg_error)?;
        tx.query_one(&lock_session, &[&s.id, &t.team, &t.agent, &t.user])
            .await
            .map_err(pg_error)?;
        tx.execute(&raise, &[&s.id, &t.team, &t.agent, &t.user, &s.last_seq])
            .await
            .map_err(pg_error)?;
        tx.execute(
            &advance,
            &[
                &EXTRACT_CONSUMER,
                &s.id,
                &t.team,
                &t.agent,
                &t.user,
                &s.extracted_through,
            ],
        )
        .await
        .map_err(pg_error)?;
    }
    counts.insert("session".to_owned(), new_sessions);

    let insert_turns = tx.prepare_cached(sql::INSERT_TURNS).await.map_err(pg_error)?;
    let mut new_turns = 0;
    for page in rows.turns.chunks(PAGE) {
        let ids: Vec<Uuid> = page.iter().map(|turn| turn.id).collect();
        let sessions: Vec<&str> = page.iter().map(|turn| turn.session_id.as_str()).collect();
        let seqs: Vec<i64> = page.iter().map(|turn| turn.seq).collect();
        let roles: Vec<&str> = page.iter().map(|turn| turn.role.as_str()).collect();
        let contents: Vec<&str> = page.iter().map(|turn| turn.content.as_str()).collect();
        let metadata: Vec<Json<&serde_json::Map<String, serde_json::Value>>> =
            page.iter().map(|turn| Json(&turn.metadata)).collect();
        let client_ids: Vec<Option<&str>> = page.iter().map(|turn| turn.client_id.as_deref()).collect();
        let created: Vec<DateTime<Utc>> = page.iter().map(|turn| turn.created_at).collect();
        let tasks: Vec<Option<&str>> = page.iter().map(|turn| turn.task.as_deref()).collect();
        new_turns += tx
            .execute(
                &insert_turns,
                &[
                    &t.team,
                    &t.agent,
                    &t.user,
                    &ids,
                    &sessions,
                    &seqs,
                    &roles,
                    &contents,
                    &metadata,
                    &client_ids,
                    &created,
                    &tasks,
                ],
            )
            .await
            .map_err(pg_error)?;
    }
    counts.insert("turn".to_owned(), new_turns);
    if (new_turns as usize) < rows.turns.len() {
        // Some were there already: each must be this owner's turn at the same place.
        let held_stmt = tx.prepare_cached(sql::TURNS_HELD).await.map_err(pg_error)?;
        let mut held = BTreeSet::new();
        for page in rows.turns.chunks(10 * PAGE) {
            let ids: Vec<Uuid> = page.iter().map(|turn| turn.id).collect();
            for row in tx
                .query(&held_stmt, &[&ids, owner[0], owner[1], owner[2]])
                .await
                .map_err(pg_error)?
            {
                held.insert((
                    get::<Uuid>(&row, "id")?,
                    get::<String>(&row, "session_id")?,
                    get::<i64>(&row, "seq")?,
                ));
            }
        }
        let expected: Vec<_> = rows
            .turns
            .iter()
            .map(|turn| (turn.id, turn.session_id.clone(), turn.seq))
            .collect();
        if let Some((id, session, seq)) = first_missing(&expected, &held) {
            return Ok(ImportOutcome::Conflict(format!(
                "turn {id} (session {session}, seq {seq}) clashes with another turn or owner"
            )));
        }
    }

    // Memories go out pipelined, a page at a time: one round trip per page instead of per row.
    let insert_memory = tx.prepare_cached(sql::INSERT_MEMORY).await.map_err(pg_error)?;
    let mut new_memories = 0;
    let mut to_index = Vec::new();
    for page in rows.memories.chunks(PAGE) {
        let values: Vec<_> = page
            .iter()
            .map(|m| {
                (
                    i16::from(m.priority),
                    Json(&m.source_message_ids),
                    m.category.as_str(),
                    m.status.as_str(),
                )
            })
            .collect();
        let inserted = try_join_all(
            page.iter()
                .zip(&values)
                .map(|(m, (priority, sources, category, status))| {
                    let params: Params<'_> = vec![
                        &m.id,
                        &t.team,
                        &t.agent,
                        &t.user,
                        &m.session_id,
                        &m.content,
                        category,
                        priority,
                        &m.scene,
                        &m.occurred_at,
                        sources,
                        status,
                        &m.superseded_by,
                        &m.created_at,
                        &m.updated_at,
                        &m.task,
                    ];
                    let stmt = &insert_memory;
                    async move { tx.execute(stmt, &params).await }
                }),
        )
        .await
        .map_err(pg_error)?;
        for (m, n) in page.iter().zip(inserted) {
            new_memories += n;
            if n == 1 && m.status == MemoryStatus::Active {
                to_index.push(m.id);
            }
        }
    }
    if !to_index.is_empty() {
        tx.execute(sql::ENQUEUE, &[&to_index, owner[0], owner[1], owner[2]])
            .await
            .map_err(pg_error)?;
    }
    counts.insert("memory".to_owned(), new_memories);
    if let Some(conflict) = check_held(tx, sql::MEMORIES_HELD, t, "memory", rows.memories.iter().map(|m| m.id)).await? {
        return Ok(conflict);
    }

    counts.insert(
        "memory_provenance".to_owned(),
        insert_memory_provenance(tx, &rows.memory_provenance).await?,
    );
    if let Some(conflict) = check_held(
        tx,
        sql::MEMORY_PROVENANCE_HELD,
        t,
        "memory provenance record",
        rows.memory_provenance.iter().map(|r| r.id),
    )
    .await?
    {
        return Ok(conflict);
    }

    let insert_scene = tx.prepare_cached(sql::INSERT_SCENE).await.map_err(pg_error)?;
    let mut new_scenes = 0;
    for s in &rows.scenes {
        new_scenes += tx
            .execute(
                &insert_scene,
                &[
                    &s.id,
                    &t.team,
                    &t.agent,
                    &t.user,
                    &s.name,
                    &s.overview,
                    &Json(&s.tags),
                    &s.object_key,
                    &s.version,
                    &s.status.as_str(),
                    &s.created_at,
                    &s.updated_at,
                ],
            )
            .await
            .map_err(pg_error)?;
    }
    counts.insert("scene".to_owned(), new_scenes);
    if let Some(conflict) = check_held(tx, sql::SCENES_HELD, t, "scene", rows.scenes.iter().map(|s| s.id)).await? {
        return Ok(conflict);
    }

    if let Some(p) = &rows.persona {
        let written = tx
            .execute(
                sql::UPSERT_PERSONA,
                &[
                    &t.team,
                    &t.agent,
                    &t.user,
                    &p.version,
                    &p.object_key,
                    &p.built_at,
                    &p.memories_at_build,
                    &p.scenes_at_build,
                    &p.scene_watermark,
                ],
            )
            .await
            .map_err(pg_error)?;
        counts.insert("persona".to_owned(), written);
    }

    counts.insert(
        "artifact_provenance".to_owned(),
        insert_artifact_provenance(tx, &rows.artifact_provenance).await?,
    );
    if let Some(conflict) = check_held(
        tx,
        sql::ARTIFACT_PROVENANCE_HELD,
        t,
        "scene or persona provenance record",
        rows.artifact_provenance.iter().map(|r| r.id),
    )
    .await?
    {
        return Ok(conflict);
    }
    Ok(ImportOutcome::Imported(counts))
}

/// A conflict naming the first of `ids` that the owner does not hold after the inserts: its id
/// is another owner's.
async fn check_held<C: GenericClient>(
    tx: &C,
    statement: &str,
    t: &Tenant,
    what: &str,
    ids: impl Iterator<Item = Uuid>,
) -> StoreResult<Option<ImportOutcome>> {
    let ids: Vec<Uuid> = ids.collect();
    if ids.is_empty() {
        return Ok(None);
    }
    let stmt = tx.prepare_cached(statement).await.map_err(pg_error)?;
    let mut held = BTreeSet::new();
    for page in ids.chunks(10 * PAGE) {
        let page = page.to_vec();
        for row in tx
            .query(&stmt, &[&page, &t.team, &t.agent, &t.user])
            .await
            .map_err(pg_error)?
        {
            held.insert(get::<Uuid>(&row, "id")?);
        }
    }
    Ok(first_missing(&ids, &held).map(|id| ImportOutcome::Conflict(format!("{what} {id} belongs to another owner"))))
}
