//! [`SceneStore`] on SQLite: the tables of `sqlite/scene.sql` (one of the schema parts
//! `SqliteStore::open` applies).
//!
//! The statements mirror the Postgres ones. Every call holds the store's one connection, and the
//! read-modify-writes (a claim, a run's or a build's commit) run in immediate (write-locking)
//! transactions, so they are atomic against other processes on the file too.
//!
//! `update_scene_schedule` cannot run its caller's closure on the blocking pool (the closure is
//! borrowed, not `'static`), so it is a compare-and-swap: read, apply the closure, then write in
//! an immediate transaction only if the schedule is still what was read, else retry with what
//! is there now. No update is lost; the closure may run more than once under contention.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension as _, TransactionBehavior};
use tracing::instrument;
use uuid::Uuid;

use super::{collect_rows, tenant_of, time_of, uuid_of, Failure, Outcome, SqliteStore};
use crate::domain::Tenant;
use crate::store::compaction::lease_end;
use crate::store::scene::{
    check_owner, schedule_after_run, signal_time, truncate_schedule, ArtifactProvenance, Lease, PersonaCommit,
    PersonaRow, SceneRow, SceneRunCommit, SceneSchedule, SceneStatus, SceneStore,
};
use crate::store::{truncate_to_micros, StoreError, StoreResult};

mod sql {
    pub const SCENE_COLUMNS: &str = "id, team_id, agent_id, user_id, name, overview, tags, object_key, version, \
         status, created_at, updated_at";
    pub const PERSONA_COLUMNS: &str = "team_id, agent_id, user_id, version, object_key, built_at, \
         memories_at_build, scenes_at_build, scene_watermark, signal_at, updated_at";
    pub const PROVENANCE_COLUMNS: &str = "id, team_id, agent_id, user_id, layer, scene_id, event, template, model, \
         input_refs, output_refs, detail, started_at, duration_ms";
    // Another owner's scene is never overwritten: the statement then changes no row, and the
    // caller fails the commit.
    pub const SCENE_UPSERT: &str = "INSERT INTO scenes AS s (id, team_id, agent_id, user_id, name, overview, tags, \
         object_key, version, status, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, overview = excluded.overview, tags = excluded.tags, \
         object_key = excluded.object_key, version = excluded.version, status = excluded.status, \
         created_at = excluded.created_at, updated_at = excluded.updated_at \
         WHERE s.team_id = excluded.team_id AND s.agent_id = excluded.agent_id AND s.user_id = excluded.user_id";
    pub const SCHEDULE_GET: &str = "SELECT due_at, last_run_at, last_l1_at, memory_watermark FROM scene_schedule \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3";
    pub const SCHEDULE_SET: &str = "INSERT INTO scene_schedule (team_id, agent_id, user_id, due_at, last_run_at, \
         last_l1_at, memory_watermark, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (team_id, agent_id, user_id) DO UPDATE SET due_at = excluded.due_at, \
         last_run_at = excluded.last_run_at, last_l1_at = excluded.last_l1_at, \
         memory_watermark = excluded.memory_watermark, updated_at = excluded.updated_at";
    pub const RUN_LEASE: &str = "SELECT lease_token, lease_claimed_at, last_l1_at FROM scene_schedule \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3";
    pub const RUN_FINISH: &str = "UPDATE scene_schedule SET due_at = ?4, last_run_at = ?5, last_l1_at = ?6, \
         memory_watermark = ?7, lease_token = NULL, lease_claimed_at = NULL, lease_until = NULL, updated_at = ?9 \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND lease_token = ?8";
    pub const DUE: &str = "SELECT team_id, agent_id, user_id FROM scene_schedule \
         WHERE due_at IS NOT NULL AND due_at <= ?1 AND (lease_until IS NULL OR lease_until <= ?1) \
         ORDER BY due_at, team_id, agent_id, user_id LIMIT ?2";
    pub const UNSCHEDULED: &str = "SELECT team_id, agent_id, user_id FROM scene_schedule \
         WHERE due_at IS NULL AND last_l1_at IS NOT NULL \
         AND (last_run_at IS NULL OR last_l1_at > last_run_at) \
         AND (lease_until IS NULL OR lease_until <= ?1) \
         ORDER BY last_l1_at, team_id, agent_id, user_id LIMIT ?2";
    pub const SCENE_LEASE: &str = "SELECT lease_token, lease_until FROM scene_schedule \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3";
    pub const PERSONA_LEASE: &str = "SELECT lease_token, lease_until FROM personas \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3";
    // The caller checked in its transaction that the lease is free; the WHERE of DO UPDATE
    // says so again, and a held lease returns no row.
    pub const SCENE_CLAIM: &str = "INSERT INTO scene_schedule AS s (team_id, agent_id, user_id, lease_token, \
         lease_claimed_at, lease_until, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         ON CONFLICT (team_id, agent_id, user_id) DO UPDATE SET lease_token = excluded.lease_token, \
         lease_claimed_at = excluded.lease_claimed_at, lease_until = excluded.lease_until, \
         updated_at = excluded.updated_at \
         WHERE s.lease_until IS NULL OR s.lease_until <= excluded.lease_claimed_at RETURNING lease_token";
    pub const SCENE_RELEASE: &str = "UPDATE scene_schedule SET lease_token = NULL, lease_claimed_at = NULL, \
         lease_until = NULL, updated_at = ?5 \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND lease_token = ?4";
    pub const SCENE_RENEW: &str = "UPDATE scene_schedule SET lease_until = ?5, updated_at = ?6 \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND lease_token = ?4";
    pub const PERSONA_CLAIM: &str = "INSERT INTO personas AS p (team_id, agent_id, user_id, lease_token, \
         lease_claimed_at, lease_until, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
         ON CONFLICT (team_id, agent_id, user_id) DO UPDATE SET lease_token = excluded.lease_token, \
         lease_claimed_at = excluded.lease_claimed_at, lease_until = excluded.lease_until, \
         updated_at = excluded.updated_at \
         WHERE p.lease_until IS NULL OR p.lease_until <= excluded.lease_claimed_at RETURNING lease_token";
    pub const PERSONA_RELEASE: &str = "UPDATE personas SET lease_token = NULL, lease_claimed_at = NULL, \
         lease_until = NULL, updated_at = ?5 \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND lease_token = ?4";
    pub const PERSONA_RENEW: &str = "UPDATE personas SET lease_until = ?5, updated_at = ?6 \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND lease_token = ?4";
    // The later of two pending signals is kept (SQLite's max() would return NULL for a NULL).
    pub const PERSONA_SIGNAL: &str = "INSERT INTO personas AS p (team_id, agent_id, user_id, signal_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (team_id, agent_id, user_id) DO UPDATE \
         SET signal_at = CASE WHEN p.signal_at IS NULL OR p.signal_at < excluded.signal_at \
         THEN excluded.signal_at ELSE p.signal_at END, updated_at = excluded.updated_at";
    pub const PROVENANCE_INSERT: &str = "INSERT INTO artifact_provenance (id, team_id, agent_id, user_id, layer, \
         scene_id, event, template, model, input_refs, output_refs, detail, started_at, duration_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT (id) DO NOTHING";
    pub const OWNERS_FIRST: &str = "SELECT team_id, agent_id, user_id FROM ( \
         SELECT * FROM (SELECT team_id, agent_id, user_id FROM scene_schedule \
             ORDER BY team_id, agent_id, user_id LIMIT ?1) \
         UNION \
         SELECT * FROM (SELECT team_id, agent_id, user_id FROM personas \
             ORDER BY team_id, agent_id, user_id LIMIT ?1)) \
         ORDER BY team_id, agent_id, user_id LIMIT ?1";
    pub const OWNERS_AFTER: &str = "SELECT team_id, agent_id, user_id FROM ( \
         SELECT * FROM (SELECT team_id, agent_id, user_id FROM scene_schedule \
             WHERE (team_id, agent_id, user_id) > (?1, ?2, ?3) ORDER BY team_id, agent_id, user_id LIMIT ?4) \
         UNION \
         SELECT * FROM (SELECT team_id, agent_id, user_id FROM personas \
             WHERE (team_id, agent_id, user_id) > (?1, ?2, ?3) ORDER BY team_id, agent_id, user_id LIMIT ?4)) \
         ORDER BY team_id, agent_id, user_id LIMIT ?4";
}

#[async_trait]
impl SceneStore for SqliteStore {
    #[instrument(skip_all, fields(include_deleted = include_deleted))]
    async fn scenes(&self, tenant: &Tenant, include_deleted: bool) -> StoreResult<Vec<SceneRow>> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            let query = format!(
                "SELECT {} FROM scenes WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 \
                 AND (?4 OR status = 'active') ORDER BY updated_at DESC, id DESC",
                sql::SCENE_COLUMNS
            );
            let mut stmt = conn.prepare_cached(&query)?;
            let rows = stmt.query(params![tenant.team, tenant.agent, tenant.user, include_deleted])?;
            collect_rows(rows, scene_of)
        })
        .await
    }

    #[instrument(skip_all, fields(scene_id = %id))]
    async fn scene(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Option<SceneRow>> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            let query = format!(
                "SELECT {} FROM scenes WHERE id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4",
                sql::SCENE_COLUMNS
            );
            let mut stmt = conn.prepare_cached(&query)?;
            let mut rows = stmt.query(params![id.to_string(), tenant.team, tenant.agent, tenant.user])?;
            rows.next()?.map(scene_of).transpose()
        })
        .await
    }

    #[instrument(skip_all)]
    async fn scene_schedule(&self, tenant: &Tenant) -> StoreResult<SceneSchedule> {
        let tenant = tenant.clone();
        self.run(move |conn| read_schedule(conn, &tenant)).await
    }

    #[instrument(skip_all)]
    async fn update_scene_schedule(
        &self,
        tenant: &Tenant,
        update: &(dyn Fn(SceneSchedule) -> SceneSchedule + Send + Sync),
    ) -> StoreResult<SceneSchedule> {
        let mut seen = self.scene_schedule(tenant).await?;
        loop {
            let next = truncate_schedule(&update(seen.clone()));
            let (owner, expected, write) = (tenant.clone(), seen, next.clone());
            let swapped = self
                .run(move |conn| swap_schedule(conn, &owner, &expected, &write))
                .await?;
            match swapped {
                None => return Ok(next),
                // Another call wrote in between: apply the update to what it left.
                Some(current) => seen = current,
            }
        }
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn due_scene_owners(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Tenant>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::DUE)?;
            let rows = stmt.query(params![micros(now), i64::from(limit)])?;
            collect_rows(rows, tenant_of)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn unscheduled_scene_owners(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Tenant>> {
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::UNSCHEDULED)?;
            let rows = stmt.query(params![micros(now), i64::from(limit)])?;
            collect_rows(rows, tenant_of)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn claim_scene_run(
        &self,
        tenant: &Tenant,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> StoreResult<Option<Lease>> {
        self.claim(sql::SCENE_LEASE, sql::SCENE_CLAIM, tenant, now, lease).await
    }

    #[instrument(skip_all)]
    async fn release_scene_run(&self, tenant: &Tenant, token: Uuid) -> StoreResult<()> {
        self.release(sql::SCENE_RELEASE, tenant, token).await
    }

    #[instrument(skip_all)]
    async fn renew_scene_run(&self, tenant: &Tenant, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool> {
        self.renew(sql::SCENE_RENEW, tenant, token, until).await
    }

    #[instrument(skip_all, fields(scenes = commit.scenes.len(), persona_signal = commit.persona_signal))]
    async fn commit_scene_run(&self, tenant: &Tenant, lease: &Lease, commit: &SceneRunCommit) -> StoreResult<bool> {
        check_owner(tenant, &commit.scenes, &commit.provenance).map_err(|e| StoreError::Backend(e.into()))?;
        let (tenant, token, commit) = (tenant.clone(), lease.token, commit.clone());
        self.run(move |conn| commit_scene_run(conn, &tenant, token, &commit))
            .await
    }

    #[instrument(skip_all, fields(records = records.len()))]
    async fn record_artifact_provenance(&self, records: &[ArtifactProvenance]) -> StoreResult<()> {
        if records.is_empty() {
            return Ok(());
        }
        let records = records.to_vec();
        self.run(move |conn| {
            let tx = conn.transaction()?;
            insert_provenance(&tx, &records)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    #[instrument(skip_all, fields(layer = layer, limit = limit))]
    async fn artifact_provenance(
        &self,
        tenant: &Tenant,
        layer: &str,
        scene_id: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<ArtifactProvenance>> {
        let tenant = tenant.clone();
        let layer = layer.to_owned();
        self.run(move |conn| {
            let query = format!(
                "SELECT {} FROM artifact_provenance WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 \
                 AND layer = ?4 AND (?5 IS NULL OR scene_id = ?5) ORDER BY started_at DESC, id DESC LIMIT ?6",
                sql::PROVENANCE_COLUMNS
            );
            let mut stmt = conn.prepare_cached(&query)?;
            let rows = stmt.query(params![
                tenant.team,
                tenant.agent,
                tenant.user,
                layer,
                scene_id.map(|id| id.to_string()),
                i64::from(limit)
            ])?;
            collect_rows(rows, provenance_of)
        })
        .await
    }

    #[instrument(skip_all)]
    async fn persona(&self, tenant: &Tenant) -> StoreResult<Option<PersonaRow>> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            // A row made only by a claim (never built nor signalled) reads as absent.
            let query = format!(
                "SELECT {} FROM personas WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 \
                 AND (version > 0 OR signal_at IS NOT NULL)",
                sql::PERSONA_COLUMNS
            );
            let mut stmt = conn.prepare_cached(&query)?;
            let mut rows = stmt.query(params![tenant.team, tenant.agent, tenant.user])?;
            rows.next()?.map(persona_of).transpose()
        })
        .await
    }

    #[instrument(skip_all)]
    async fn claim_persona(&self, tenant: &Tenant, now: DateTime<Utc>, lease: Duration) -> StoreResult<Option<Lease>> {
        self.claim(sql::PERSONA_LEASE, sql::PERSONA_CLAIM, tenant, now, lease)
            .await
    }

    #[instrument(skip_all)]
    async fn release_persona(&self, tenant: &Tenant, token: Uuid) -> StoreResult<()> {
        self.release(sql::PERSONA_RELEASE, tenant, token).await
    }

    #[instrument(skip_all)]
    async fn renew_persona(&self, tenant: &Tenant, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool> {
        self.renew(sql::PERSONA_RENEW, tenant, token, until).await
    }

    #[instrument(skip_all)]
    async fn commit_persona(
        &self,
        tenant: &Tenant,
        lease: &Lease,
        commit: &PersonaCommit,
    ) -> StoreResult<Option<PersonaRow>> {
        check_owner(tenant, &[], [&commit.provenance]).map_err(|e| StoreError::Backend(e.into()))?;
        let (tenant, token, commit) = (tenant.clone(), lease.token, commit.clone());
        self.run(move |conn| commit_persona(conn, &tenant, token, &commit))
            .await
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn layer_owners(&self, after: Option<&Tenant>, limit: u32) -> StoreResult<Vec<Tenant>> {
        let after = after.cloned();
        self.run(move |conn| {
            let limit = i64::from(limit);
            let mut stmt;
            let rows = match &after {
                None => {
                    stmt = conn.prepare_cached(sql::OWNERS_FIRST)?;
                    stmt.query(params![limit])?
                }
                Some(after) => {
                    stmt = conn.prepare_cached(sql::OWNERS_AFTER)?;
                    stmt.query(params![after.team, after.agent, after.user, limit])?
                }
            };
            collect_rows(rows, tenant_of)
        })
        .await
    }
}

impl SqliteStore {
    /// Claims one of the two leases in an immediate transaction: read the current lease, and
    /// take it if it is free at `now`, reporting the token it displaces.
    async fn claim(
        &self,
        current: &'static str,
        take: &'static str,
        tenant: &Tenant,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> StoreResult<Option<Lease>> {
        let tenant = tenant.clone();
        let now = truncate_to_micros(now);
        let until = truncate_to_micros(lease_end(now, lease));
        let token = Uuid::new_v4();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let held = tx
                .prepare_cached(current)?
                .query_row(params![tenant.team, tenant.agent, tenant.user], |row| {
                    Ok((
                        row.get::<_, Option<String>>("lease_token")?,
                        row.get::<_, Option<i64>>("lease_until")?,
                    ))
                })
                .optional()?;
            let (abandoned, held_until) = held.unwrap_or_default();
            if held_until.is_some_and(|until_micros| until_micros > micros(now)) {
                return Ok(None);
            }
            let abandoned = abandoned.map(|t| Uuid::parse_str(&t).map_err(corrupt)).transpose()?;
            let claimed = tx
                .prepare_cached(take)?
                .query_row(
                    params![
                        tenant.team,
                        tenant.agent,
                        tenant.user,
                        token.to_string(),
                        micros(now),
                        micros(until),
                        micros(Utc::now())
                    ],
                    |_| Ok(()),
                )
                .optional()?;
            tx.commit()?;
            Ok(claimed.map(|()| Lease {
                token,
                claimed_at: now,
                until,
                abandoned,
            }))
        })
        .await
    }

    /// Runs one of the two lease releases (`SCENE_RELEASE`, `PERSONA_RELEASE`).
    async fn release(&self, query: &'static str, tenant: &Tenant, token: Uuid) -> StoreResult<()> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            conn.prepare_cached(query)?.execute(params![
                tenant.team,
                tenant.agent,
                tenant.user,
                token.to_string(),
                micros(Utc::now())
            ])?;
            Ok(())
        })
        .await
    }

    /// Runs one of the two lease renewals (`SCENE_RENEW`, `PERSONA_RENEW`).
    async fn renew(
        &self,
        query: &'static str,
        tenant: &Tenant,
        token: Uuid,
        until: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let tenant = tenant.clone();
        self.run(move |conn| {
            let renewed = conn.prepare_cached(query)?.execute(params![
                tenant.team,
                tenant.agent,
                tenant.user,
                token.to_string(),
                micros(until),
                micros(Utc::now())
            ])?;
            Ok(renewed == 1)
        })
        .await
    }
}

fn read_schedule(conn: &Connection, tenant: &Tenant) -> Outcome<SceneSchedule> {
    let mut stmt = conn.prepare_cached(sql::SCHEDULE_GET)?;
    let mut rows = stmt.query(params![tenant.team, tenant.agent, tenant.user])?;
    match rows.next()? {
        None => Ok(SceneSchedule::default()),
        Some(row) => Ok(SceneSchedule {
            due_at: optional_time(row, "due_at")?,
            last_run_at: optional_time(row, "last_run_at")?,
            last_l1_at: optional_time(row, "last_l1_at")?,
            memory_watermark: optional_time(row, "memory_watermark")?,
        }),
    }
}

/// Writes `next` if the stored schedule is still `expected`; otherwise writes nothing and
/// returns what is stored.
fn swap_schedule(
    conn: &mut Connection,
    tenant: &Tenant,
    expected: &SceneSchedule,
    next: &SceneSchedule,
) -> Outcome<Option<SceneSchedule>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current = read_schedule(&tx, tenant)?;
    if current != *expected {
        return Ok(Some(current));
    }
    tx.prepare_cached(sql::SCHEDULE_SET)?.execute(params![
        tenant.team,
        tenant.agent,
        tenant.user,
        next.due_at.map(micros),
        next.last_run_at.map(micros),
        next.last_l1_at.map(micros),
        next.memory_watermark.map(micros),
        micros(Utc::now())
    ])?;
    tx.commit()?;
    Ok(None)
}

/// The whole commit of a scene run, in one immediate transaction; dropping `tx` on any early
/// return rolls it back.
fn commit_scene_run(conn: &mut Connection, tenant: &Tenant, token: Uuid, commit: &SceneRunCommit) -> Outcome<bool> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let held = tx
        .prepare_cached(sql::RUN_LEASE)?
        .query_row(params![tenant.team, tenant.agent, tenant.user], |row| {
            Ok((
                row.get::<_, Option<String>>("lease_token")?,
                row.get::<_, Option<i64>>("lease_claimed_at")?,
                row.get::<_, Option<i64>>("last_l1_at")?,
            ))
        })
        .optional()?;
    let token_text = token.to_string();
    let Some((Some(held_token), claimed_at, stored_l1)) = held else {
        return Ok(false);
    };
    if held_token != token_text {
        return Ok(false);
    }
    let claimed_at = claimed_at
        .map(time_of)
        .transpose()?
        .ok_or_else(|| corrupt("a held scene lease has no claim time"))?;
    let stored_l1 = stored_l1.map(time_of).transpose()?;

    {
        let mut upsert = tx.prepare_cached(sql::SCENE_UPSERT)?;
        for row in &commit.scenes {
            let written = upsert.execute(params![
                row.id.to_string(),
                row.tenant.team,
                row.tenant.agent,
                row.tenant.user,
                row.name,
                row.overview,
                to_json(&row.tags)?,
                row.object_key,
                row.version,
                row.status.as_str(),
                micros(row.created_at),
                micros(row.updated_at)
            ])?;
            if written != 1 {
                return Err(corrupt(format!("scene id {} belongs to another owner", row.id)));
            }
        }
    }
    insert_provenance(&tx, &commit.provenance)?;

    let schedule = schedule_after_run(commit, stored_l1, claimed_at);
    let now = micros(Utc::now());
    tx.prepare_cached(sql::RUN_FINISH)?.execute(params![
        tenant.team,
        tenant.agent,
        tenant.user,
        schedule.due_at.map(micros),
        schedule.last_run_at.map(micros),
        schedule.last_l1_at.map(micros),
        schedule.memory_watermark.map(micros),
        token_text,
        now
    ])?;
    if commit.persona_signal {
        tx.prepare_cached(sql::PERSONA_SIGNAL)?.execute(params![
            tenant.team,
            tenant.agent,
            tenant.user,
            micros(signal_time(commit)),
            now
        ])?;
    }
    tx.commit()?;
    Ok(true)
}

/// The whole commit of a persona build, in one immediate transaction.
fn commit_persona(
    conn: &mut Connection,
    tenant: &Tenant,
    token: Uuid,
    commit: &PersonaCommit,
) -> Outcome<Option<PersonaRow>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // A signal later than the claim came while the build ran, which may not have read its
    // scene: it stays pending for the next build.
    let query = format!(
        "UPDATE personas SET version = version + 1, object_key = ?5, built_at = ?6, memories_at_build = ?7, \
         scenes_at_build = ?8, scene_watermark = ?9, \
         signal_at = CASE WHEN signal_at <= lease_claimed_at THEN NULL ELSE signal_at END, \
         lease_token = NULL, lease_claimed_at = NULL, lease_until = NULL, updated_at = ?10 \
         WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 AND lease_token = ?4 RETURNING {}",
        sql::PERSONA_COLUMNS
    );
    let persona = {
        let mut stmt = tx.prepare_cached(&query)?;
        let mut rows = stmt.query(params![
            tenant.team,
            tenant.agent,
            tenant.user,
            token.to_string(),
            commit.object_key,
            micros(commit.built_at),
            commit.memories_at_build,
            commit.scenes_at_build,
            commit.scene_watermark.map(micros),
            micros(Utc::now())
        ])?;
        match rows.next()? {
            Some(row) => persona_of(row)?,
            None => return Ok(None),
        }
    };
    insert_provenance(&tx, std::slice::from_ref(&commit.provenance))?;
    tx.commit()?;
    Ok(Some(persona))
}

/// Returns how many records were new.
pub(super) fn insert_provenance(conn: &Connection, records: &[ArtifactProvenance]) -> Outcome<usize> {
    let mut inserted = 0;
    let mut stmt = conn.prepare_cached(sql::PROVENANCE_INSERT)?;
    for r in records {
        let template = r.template.as_ref().map(to_json).transpose()?;
        inserted += stmt.execute(params![
            r.id.to_string(),
            r.tenant.team,
            r.tenant.agent,
            r.tenant.user,
            r.layer,
            r.scene_id.map(|id| id.to_string()),
            r.event,
            template,
            r.model,
            to_json(&r.input_refs)?,
            to_json(&r.output_refs)?,
            to_json(&r.detail)?,
            micros(r.started_at),
            r.duration_ms
        ])?;
    }
    Ok(inserted)
}

/// Unix microseconds, as the schema stores time (sub-microseconds truncated).
fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

fn optional_time(row: &rusqlite::Row<'_>, column: &str) -> Outcome<Option<DateTime<Utc>>> {
    row.get::<_, Option<i64>>(column)?.map(time_of).transpose()
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

fn scene_of(row: &rusqlite::Row<'_>) -> Outcome<SceneRow> {
    let status: String = row.get("status")?;
    Ok(SceneRow {
        id: uuid_of(row, "id")?,
        tenant: tenant_of(row)?,
        name: row.get("name")?,
        overview: row.get("overview")?,
        tags: from_json(&row.get::<_, String>("tags")?)?,
        object_key: row.get("object_key")?,
        version: row.get("version")?,
        status: SceneStatus::parse(&status).ok_or_else(|| corrupt(format!("unknown scene status {status:?}")))?,
        created_at: time_of(row.get("created_at")?)?,
        updated_at: time_of(row.get("updated_at")?)?,
    })
}

fn persona_of(row: &rusqlite::Row<'_>) -> Outcome<PersonaRow> {
    Ok(PersonaRow {
        tenant: tenant_of(row)?,
        version: row.get("version")?,
        object_key: row.get("object_key")?,
        built_at: optional_time(row, "built_at")?,
        memories_at_build: row.get("memories_at_build")?,
        scenes_at_build: row.get("scenes_at_build")?,
        scene_watermark: optional_time(row, "scene_watermark")?,
        signal_at: optional_time(row, "signal_at")?,
        updated_at: time_of(row.get("updated_at")?)?,
    })
}

pub(super) fn provenance_of(row: &rusqlite::Row<'_>) -> Outcome<ArtifactProvenance> {
    let scene_id: Option<String> = row.get("scene_id")?;
    let template: Option<String> = row.get("template")?;
    Ok(ArtifactProvenance {
        id: uuid_of(row, "id")?,
        tenant: tenant_of(row)?,
        layer: row.get("layer")?,
        scene_id: scene_id.map(|s| Uuid::parse_str(&s).map_err(corrupt)).transpose()?,
        event: row.get("event")?,
        template: template.as_deref().map(from_json).transpose()?,
        model: row.get("model")?,
        input_refs: from_json(&row.get::<_, String>("input_refs")?)?,
        output_refs: from_json(&row.get::<_, String>("output_refs")?)?,
        detail: from_json(&row.get::<_, String>("detail")?)?,
        started_at: time_of(row.get("started_at")?)?,
        duration_ms: row.get("duration_ms")?,
    })
}
