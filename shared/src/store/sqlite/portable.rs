//! [`PortableStore`] on SQLite.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use chrono::Utc;
use rusqlite::{params, Connection, TransactionBehavior};
use tracing::instrument;
use uuid::Uuid;

use super::memory::{insert_provenance as insert_memory_provenance, provenance_of};
use super::scene::{insert_provenance as insert_artifact_provenance, provenance_of as artifact_provenance_of};
use super::{json_array, time_of, Failure, Outcome, SqliteStore};
use crate::domain::Tenant;
use crate::memory::MemoryStatus;
use crate::store::memory::{ProvenanceRecord, EXTRACT_CONSUMER};
use crate::store::portable::{first_missing, ImportOutcome, OwnerRows, PortableStore, ProvenanceCursor, SessionRecord};
use crate::store::scene::ArtifactProvenance;
use crate::store::StoreResult;

mod sql {
    pub const SESSIONS: &str = "SELECT s.session_id, s.created_at, s.last_seq, s.reset_at, \
         COALESCE(c.seq, 0) AS extracted FROM sessions s \
         LEFT JOIN cursors c ON c.consumer = ?4 \
         AND c.team_id = s.team_id AND c.agent_id = s.agent_id AND c.user_id = s.user_id \
         AND c.session_id = s.session_id \
         WHERE s.team_id = ?1 AND s.agent_id = ?2 AND s.user_id = ?3 ORDER BY s.session_id";
    pub const MEMORY_PROVENANCE: &str = "SELECT id, memory_id, team_id, agent_id, user_id, session_id, layer, \
         event, template, model, input_message_ids, sibling_ids, detail, started_at, duration_ms \
         FROM memory_provenance WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 \
         AND (?4 IS NULL OR started_at > ?4 OR (started_at = ?4 AND id > ?5)) \
         ORDER BY started_at, id LIMIT ?6";
    pub const ARTIFACT_PROVENANCE: &str = "SELECT id, team_id, agent_id, user_id, layer, scene_id, event, \
         template, model, input_refs, output_refs, detail, started_at, duration_ms \
         FROM artifact_provenance WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 \
         AND (?4 IS NULL OR started_at > ?4 OR (started_at = ?4 AND id > ?5)) \
         ORDER BY started_at, id LIMIT ?6";
    pub const INSERT_SESSION: &str = "INSERT INTO sessions \
         (session_id, team_id, agent_id, user_id, last_seq, reset_at, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (team_id, agent_id, user_id, session_id) DO NOTHING";
    pub const RAISE_LAST_SEQ: &str = "UPDATE sessions SET last_seq = ?5, updated_at = ?6 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 AND last_seq < ?5";
    pub const INSERT_TURN: &str = "INSERT INTO messages \
         (id, session_id, team_id, agent_id, user_id, seq, role, content, metadata, client_id, created_at, task) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT DO NOTHING";
    pub const TURNS_HELD: &str = "SELECT id, session_id, seq FROM messages \
         WHERE id IN (SELECT value FROM json_each(?1)) AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const INSERT_MEMORY: &str = "INSERT INTO memories (id, team_id, agent_id, user_id, session_id, content, \
         category, priority, scene, occurred_at, source_message_ids, status, superseded_by, created_at, updated_at, \
         task) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) \
         ON CONFLICT (id) DO NOTHING";
    pub const ENQUEUE: &str = "INSERT INTO memory_index_outbox (memory_id, team_id, agent_id, user_id, enqueued_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)";
    pub const MEMORIES_HELD: &str = "SELECT id FROM memories \
         WHERE id IN (SELECT value FROM json_each(?1)) AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const MEMORY_PROVENANCE_HELD: &str = "SELECT id FROM memory_provenance \
         WHERE id IN (SELECT value FROM json_each(?1)) AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const INSERT_SCENE: &str = "INSERT INTO scenes (id, team_id, agent_id, user_id, name, overview, tags, \
         object_key, version, status, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT (id) DO NOTHING";
    pub const SCENES_HELD: &str = "SELECT id FROM scenes \
         WHERE id IN (SELECT value FROM json_each(?1)) AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const ARTIFACT_PROVENANCE_HELD: &str = "SELECT id FROM artifact_provenance \
         WHERE id IN (SELECT value FROM json_each(?1)) AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    // A persona the target built (version > 0) is kept; one only signalled or claimed there
    // takes the imported build state, and its lease and signal stay as they are.
    pub const UPSERT_PERSONA: &str = "INSERT INTO personas AS p (team_id, agent_id, user_id, version, object_key, \
         built_at, memories_at_build, scenes_at_build, scene_watermark, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
         ON CONFLICT (team_id, agent_id, user_id) DO UPDATE SET version = excluded.version, \
         object_key = excluded.object_key, built_at = excluded.built_at, \
         memories_at_build = excluded.memories_at_build, scenes_at_build = excluded.scenes_at_build, \
         scene_watermark = excluded.scene_watermark, updated_at = excluded.updated_at \
         WHERE p.version = 0";
    pub const ADVANCE_CURSOR: &str = "INSERT INTO cursors \
         (consumer, session_id, team_id, agent_id, user_id, seq, updated_at) \
         VALUES (?5, ?1, ?2, ?3, ?4, ?6, ?7) \
         ON CONFLICT (consumer, team_id, agent_id, user_id, session_id) DO UPDATE \
         SET seq = MAX(cursors.seq, excluded.seq), updated_at = excluded.updated_at";
}

#[async_trait]
impl PortableStore for SqliteStore {
    #[instrument(skip_all)]
    async fn owner_sessions(&self, tenant: &Tenant) -> StoreResult<Vec<SessionRecord>> {
        let t = tenant.clone();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::SESSIONS)?;
            let mut rows = stmt.query(params![t.team, t.agent, t.user, EXTRACT_CONSUMER])?;
            let mut sessions = Vec::new();
            while let Some(row) = rows.next()? {
                sessions.push(SessionRecord {
                    id: row.get("session_id")?,
                    created_at: time_of(row.get("created_at")?)?,
                    last_seq: row.get("last_seq")?,
                    reset_at: row.get::<_, Option<i64>>("reset_at")?.map(time_of).transpose()?,
                    extracted_through: row.get("extracted")?,
                });
            }
            Ok(sessions)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn owner_memory_provenance(
        &self,
        tenant: &Tenant,
        after: Option<ProvenanceCursor>,
        limit: u32,
    ) -> StoreResult<Vec<ProvenanceRecord>> {
        let t = tenant.clone();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::MEMORY_PROVENANCE)?;
            let rows = stmt.query(params![
                t.team,
                t.agent,
                t.user,
                after.map(|(at, _)| at.timestamp_micros()),
                after.map(|(_, id)| id.to_string()),
                i64::from(limit)
            ])?;
            super::collect_rows(rows, provenance_of)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn owner_artifact_provenance(
        &self,
        tenant: &Tenant,
        after: Option<ProvenanceCursor>,
        limit: u32,
    ) -> StoreResult<Vec<ArtifactProvenance>> {
        let t = tenant.clone();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::ARTIFACT_PROVENANCE)?;
            let rows = stmt.query(params![
                t.team,
                t.agent,
                t.user,
                after.map(|(at, _)| at.timestamp_micros()),
                after.map(|(_, id)| id.to_string()),
                i64::from(limit)
            ])?;
            super::collect_rows(rows, artifact_provenance_of)
        })
        .await
    }

    #[instrument(skip_all, fields(turns = rows.turns.len(), memories = rows.memories.len()))]
    async fn import_owner(&self, tenant: &Tenant, rows: OwnerRows) -> StoreResult<ImportOutcome> {
        let t = tenant.clone();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let outcome = import(&tx, &t, &rows)?;
            if matches!(outcome, ImportOutcome::Imported(_)) {
                tx.commit()?;
            }
            Ok(outcome)
        })
        .await
    }
}

/// The owner's ids among `ids`, read with `statement` (`?1` a JSON array of ids, then the
/// owner), one page of ids at a time.
fn held_ids(conn: &Connection, statement: &str, tenant: &Tenant, ids: &[Uuid]) -> Outcome<BTreeSet<Uuid>> {
    let mut held = BTreeSet::new();
    let mut stmt = conn.prepare_cached(statement)?;
    for page in ids.chunks(10_000) {
        let json = json_array(page.iter().map(Uuid::to_string)).map_err(Failure::Corrupt)?;
        let mut rows = stmt.query(params![json, tenant.team, tenant.agent, tenant.user])?;
        while let Some(row) = rows.next()? {
            held.insert(super::uuid_of(row, "id")?);
        }
    }
    Ok(held)
}

fn import(conn: &Connection, t: &Tenant, rows: &OwnerRows) -> Outcome<ImportOutcome> {
    let now = Utc::now().timestamp_micros();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut count = |kind: &str, n: usize| *counts.entry(kind.to_owned()).or_default() += n as u64;

    let mut new_sessions = 0;
    for s in &rows.sessions {
        new_sessions += conn.prepare_cached(sql::INSERT_SESSION)?.execute(params![
            s.id,
            t.team,
            t.agent,
            t.user,
            s.last_seq,
            s.reset_at.map(|at| at.timestamp_micros()),
            s.created_at.timestamp_micros(),
            now
        ])?;
        // Another owner's session of the same id is another session: no conflict.
        conn.prepare_cached(sql::RAISE_LAST_SEQ)?
            .execute(params![s.id, t.team, t.agent, t.user, s.last_seq, now])?;
        conn.prepare_cached(sql::ADVANCE_CURSOR)?.execute(params![
            s.id,
            t.team,
            t.agent,
            t.user,
            EXTRACT_CONSUMER,
            s.extracted_through,
            now
        ])?;
    }
    count("session", new_sessions);

    let mut new_turns = 0;
    {
        let mut insert = conn.prepare_cached(sql::INSERT_TURN)?;
        for turn in &rows.turns {
            let metadata = serde_json::to_string(&turn.metadata).map_err(|e| Failure::Corrupt(Box::new(e)))?;
            new_turns += insert.execute(params![
                turn.id.to_string(),
                turn.session_id,
                t.team,
                t.agent,
                t.user,
                turn.seq,
                turn.role.as_str(),
                turn.content,
                metadata,
                turn.client_id,
                turn.created_at.timestamp_micros(),
                turn.task
            ])?;
        }
    }
    count("turn", new_turns);
    if new_turns < rows.turns.len() {
        // Some were there already: each must be this owner's turn at the same place.
        let mut held = BTreeSet::new();
        let mut stmt = conn.prepare_cached(sql::TURNS_HELD)?;
        for page in rows.turns.chunks(10_000) {
            let json = json_array(page.iter().map(|turn| turn.id.to_string())).map_err(Failure::Corrupt)?;
            let mut found = stmt.query(params![json, t.team, t.agent, t.user])?;
            while let Some(row) = found.next()? {
                held.insert((
                    super::uuid_of(row, "id")?,
                    row.get::<_, String>("session_id")?,
                    row.get::<_, i64>("seq")?,
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

    let mut new_memories = 0;
    for m in &rows.memories {
        let inserted = conn.prepare_cached(sql::INSERT_MEMORY)?.execute(params![
            m.id.to_string(),
            t.team,
            t.agent,
            t.user,
            m.session_id,
            m.content,
            m.category.as_str(),
            m.priority,
            m.scene,
            m.occurred_at,
            serde_json::to_string(&m.source_message_ids).map_err(|e| Failure::Corrupt(Box::new(e)))?,
            m.status.as_str(),
            m.superseded_by.map(|id| id.to_string()),
            m.created_at.timestamp_micros(),
            m.updated_at.timestamp_micros(),
            m.task
        ])?;
        if inserted == 1 && m.status == MemoryStatus::Active {
            conn.prepare_cached(sql::ENQUEUE)?
                .execute(params![m.id.to_string(), t.team, t.agent, t.user, now])?;
        }
        new_memories += inserted;
    }
    count("memory", new_memories);
    if let Some(conflict) = check_held(
        conn,
        sql::MEMORIES_HELD,
        t,
        "memory",
        rows.memories.iter().map(|m| m.id),
    )? {
        return Ok(conflict);
    }

    count(
        "memory_provenance",
        insert_memory_provenance(conn, &rows.memory_provenance)?,
    );
    if let Some(conflict) = check_held(
        conn,
        sql::MEMORY_PROVENANCE_HELD,
        t,
        "memory provenance record",
        rows.memory_provenance.iter().map(|r| r.id),
    )? {
        return Ok(conflict);
    }

    let mut new_scenes = 0;
    for s in &rows.scenes {
        new_scenes += conn.prepare_cached(sql::INSERT_SCENE)?.execute(params![
            s.id.to_string(),
            t.team,
            t.agent,
            t.user,
            s.name,
            s.overview,
            serde_json::to_string(&s.tags).map_err(|e| Failure::Corrupt(Box::new(e)))?,
            s.object_key,
            s.version,
            s.status.as_str(),
            s.created_at.timestamp_micros(),
            s.updated_at.timestamp_micros()
        ])?;
    }
    count("scene", new_scenes);
    if let Some(conflict) = check_held(conn, sql::SCENES_HELD, t, "scene", rows.scenes.iter().map(|s| s.id))? {
        return Ok(conflict);
    }

    if let Some(p) = &rows.persona {
        let written = conn.prepare_cached(sql::UPSERT_PERSONA)?.execute(params![
            t.team,
            t.agent,
            t.user,
            p.version,
            p.object_key,
            p.built_at.map(|at| at.timestamp_micros()),
            p.memories_at_build,
            p.scenes_at_build,
            p.scene_watermark.map(|at| at.timestamp_micros()),
            now
        ])?;
        count("persona", written);
    }

    count(
        "artifact_provenance",
        insert_artifact_provenance(conn, &rows.artifact_provenance)?,
    );
    if let Some(conflict) = check_held(
        conn,
        sql::ARTIFACT_PROVENANCE_HELD,
        t,
        "scene or persona provenance record",
        rows.artifact_provenance.iter().map(|r| r.id),
    )? {
        return Ok(conflict);
    }
    Ok(ImportOutcome::Imported(counts))
}

/// A conflict naming the first of `ids` that the owner does not hold after the inserts: its id
/// is another owner's.
fn check_held(
    conn: &Connection,
    statement: &str,
    tenant: &Tenant,
    what: &str,
    ids: impl Iterator<Item = Uuid>,
) -> Outcome<Option<ImportOutcome>> {
    let ids: Vec<Uuid> = ids.collect();
    let held = held_ids(conn, statement, tenant, &ids)?;
    Ok(first_missing(&ids, &held).map(|id| ImportOutcome::Conflict(format!("{what} {id} belongs to another owner"))))
}
