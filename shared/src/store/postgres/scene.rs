//! [`SceneStore`] on Postgres: the tables of `migrations/V006__scenes.sql`.
//!
//! Every read-modify-write of an owner — a schedule update, a claim, a run's commit — creates
//! the owner's row if absent and locks it (`SELECT ... FOR UPDATE`) for its transaction, so they
//! serialize per owner: no update is lost, and of concurrent claims the later ones see the
//! winner's live lease and take nothing. (A claim reads the displaced token before replacing
//! it, which one conditional upsert could not return.) A persona commit is one fenced `UPDATE`.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use tokio_postgres::Row;
use tracing::instrument;
use uuid::Uuid;

use super::{get, pg_error, tenant_of, PostgresStore};
use crate::domain::Tenant;
use crate::memory::TemplateRef;
use crate::store::compaction::lease_end;
use crate::store::scene::{
    check_owner, schedule_after_run, signal_time, truncate_schedule, ArtifactProvenance, Lease, PersonaCommit,
    PersonaRow, SceneRow, SceneRunCommit, SceneSchedule, SceneStatus, SceneStore,
};
use crate::store::{truncate_to_micros, StoreError, StoreResult};

mod sql {
    pub const SCENE_LIST: &str = include_str!("queries/scene_list.sql");
    pub const SCENE_GET: &str = include_str!("queries/scene_get.sql");
    pub const SCENE_UPSERT: &str = include_str!("queries/scene_upsert.sql");
    pub const SCHEDULE_GET: &str = include_str!("queries/scene_schedule_get.sql");
    pub const SCHEDULE_ENSURE: &str = include_str!("queries/scene_schedule_ensure.sql");
    pub const SCHEDULE_LOCK: &str = include_str!("queries/scene_schedule_lock.sql");
    pub const SCHEDULE_SET: &str = include_str!("queries/scene_schedule_set.sql");
    pub const RUN_FINISH: &str = include_str!("queries/scene_run_finish.sql");
    pub const DUE: &str = include_str!("queries/scene_due.sql");
    pub const UNSCHEDULED: &str = include_str!("queries/scene_unscheduled.sql");
    pub const SCENE_TAKE_LEASE: &str = include_str!("queries/scene_take_lease.sql");
    pub const SCENE_RELEASE: &str = include_str!("queries/scene_release.sql");
    pub const SCENE_RENEW: &str = include_str!("queries/scene_renew.sql");
    pub const PERSONA_GET: &str = include_str!("queries/persona_get.sql");
    pub const PERSONA_SIGNAL: &str = include_str!("queries/persona_signal.sql");
    pub const PERSONA_ENSURE: &str = include_str!("queries/persona_ensure.sql");
    pub const PERSONA_LOCK: &str = include_str!("queries/persona_lock.sql");
    pub const PERSONA_TAKE_LEASE: &str = include_str!("queries/persona_take_lease.sql");
    pub const PERSONA_RELEASE: &str = include_str!("queries/persona_release.sql");
    pub const PERSONA_RENEW: &str = include_str!("queries/persona_renew.sql");
    pub const PERSONA_COMMIT: &str = include_str!("queries/persona_commit.sql");
    pub const PROVENANCE_INSERT: &str = include_str!("queries/artifact_provenance_insert.sql");
    pub const PROVENANCE_LIST: &str = include_str!("queries/artifact_provenance_list.sql");
    pub const OWNERS_FIRST: &str = include_str!("queries/layer_owners_first.sql");
    pub const OWNERS_AFTER: &str = include_str!("queries/layer_owners_after.sql");
}

#[async_trait]
impl SceneStore for PostgresStore {
    #[instrument(skip_all, fields(include_deleted = include_deleted))]
    async fn scenes(&self, tenant: &Tenant, include_deleted: bool) -> StoreResult<Vec<SceneRow>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::SCENE_LIST).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&tenant.team, &tenant.agent, &tenant.user, &include_deleted])
            .await
            .map_err(pg_error)?;
        rows.iter().map(scene_of).collect()
    }

    #[instrument(skip_all, fields(scene_id = %id))]
    async fn scene(&self, tenant: &Tenant, id: Uuid) -> StoreResult<Option<SceneRow>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::SCENE_GET).await.map_err(pg_error)?;
        let row = client
            .query_opt(&stmt, &[&id, &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
        row.as_ref().map(scene_of).transpose()
    }

    #[instrument(skip_all)]
    async fn scene_schedule(&self, tenant: &Tenant) -> StoreResult<SceneSchedule> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::SCHEDULE_GET).await.map_err(pg_error)?;
        let row = client
            .query_opt(&stmt, &[&tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
        row.as_ref().map(schedule_of).transpose().map(Option::unwrap_or_default)
    }

    #[instrument(skip_all)]
    async fn update_scene_schedule(
        &self,
        tenant: &Tenant,
        update: &(dyn Fn(SceneSchedule) -> SceneSchedule + Send + Sync),
    ) -> StoreResult<SceneSchedule> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let current = lock_schedule(&tx, tenant).await?;
        let next = truncate_schedule(&update(schedule_of(&current)?));
        let set = tx.prepare_cached(sql::SCHEDULE_SET).await.map_err(pg_error)?;
        tx.execute(
            &set,
            &[
                &tenant.team,
                &tenant.agent,
                &tenant.user,
                &next.due_at,
                &next.last_run_at,
                &next.last_l1_at,
                &next.memory_watermark,
            ],
        )
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(next)
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn due_scene_owners(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Tenant>> {
        let now = truncate_to_micros(now);
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::DUE).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&now, &i64::from(limit)])
            .await
            .map_err(pg_error)?;
        rows.iter().map(tenant_of).collect()
    }

    #[instrument(skip_all)]
    async fn unscheduled_scene_owners(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<Tenant>> {
        let now = truncate_to_micros(now);
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::UNSCHEDULED).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&now, &i64::from(limit)])
            .await
            .map_err(pg_error)?;
        rows.iter().map(tenant_of).collect()
    }

    #[instrument(skip_all)]
    async fn claim_scene_run(
        &self,
        tenant: &Tenant,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> StoreResult<Option<Lease>> {
        self.claim(&SCENE_LEASE, tenant, now, lease).await
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
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        // Locking the schedule row also waits out a concurrent claim or schedule update, so the
        // token and `last_l1_at` read here stay true until the commit.
        let current = lock_schedule(&tx, tenant).await?;
        if get::<Option<Uuid>>(&current, "lease_token")? != Some(lease.token) {
            // Dropping the transaction rolls back the (harmless) row creation of the lock.
            return Ok(false);
        }
        let claimed_at: DateTime<Utc> = get::<Option<_>>(&current, "lease_claimed_at")?
            .ok_or_else(|| StoreError::Backend("a held scene lease has no claim time".into()))?;
        let stored_l1: Option<DateTime<Utc>> = get(&current, "last_l1_at")?;

        let upsert = tx.prepare_cached(sql::SCENE_UPSERT).await.map_err(pg_error)?;
        for row in &commit.scenes {
            let written = tx
                .execute(
                    &upsert,
                    &[
                        &row.id,
                        &row.tenant.team,
                        &row.tenant.agent,
                        &row.tenant.user,
                        &row.name,
                        &row.overview,
                        &Json(&row.tags),
                        &row.object_key,
                        &row.version,
                        &row.status.as_str(),
                        &truncate_to_micros(row.created_at),
                        &truncate_to_micros(row.updated_at),
                    ],
                )
                .await
                .map_err(pg_error)?;
            if written != 1 {
                return Err(StoreError::Backend(
                    format!("scene id {} belongs to another owner", row.id).into(),
                ));
            }
        }
        insert_provenance(&tx, &commit.provenance).await?;

        let schedule = schedule_after_run(commit, stored_l1, claimed_at);
        let finish = tx.prepare_cached(sql::RUN_FINISH).await.map_err(pg_error)?;
        tx.execute(
            &finish,
            &[
                &tenant.team,
                &tenant.agent,
                &tenant.user,
                &schedule.due_at,
                &schedule.last_run_at,
                &schedule.last_l1_at,
                &schedule.memory_watermark,
                &lease.token,
            ],
        )
        .await
        .map_err(pg_error)?;
        if commit.persona_signal {
            let signal = tx.prepare_cached(sql::PERSONA_SIGNAL).await.map_err(pg_error)?;
            tx.execute(
                &signal,
                &[&tenant.team, &tenant.agent, &tenant.user, &signal_time(commit)],
            )
            .await
            .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(true)
    }

    #[instrument(skip_all, fields(records = records.len()))]
    async fn record_artifact_provenance(&self, records: &[ArtifactProvenance]) -> StoreResult<()> {
        if records.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        insert_provenance(&tx, records).await?;
        tx.commit().await.map_err(pg_error)
    }

    #[instrument(skip_all, fields(layer = layer, limit = limit))]
    async fn artifact_provenance(
        &self,
        tenant: &Tenant,
        layer: &str,
        scene_id: Option<Uuid>,
        limit: u32,
    ) -> StoreResult<Vec<ArtifactProvenance>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::PROVENANCE_LIST).await.map_err(pg_error)?;
        let rows = client
            .query(
                &stmt,
                &[
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &layer,
                    &scene_id,
                    &i64::from(limit),
                ],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(provenance_of).collect()
    }

    #[instrument(skip_all)]
    async fn persona(&self, tenant: &Tenant) -> StoreResult<Option<PersonaRow>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::PERSONA_GET).await.map_err(pg_error)?;
        let row = client
            .query_opt(&stmt, &[&tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
        row.as_ref().map(persona_of).transpose()
    }

    #[instrument(skip_all)]
    async fn claim_persona(&self, tenant: &Tenant, now: DateTime<Utc>, lease: Duration) -> StoreResult<Option<Lease>> {
        self.claim(&PERSONA_LEASE, tenant, now, lease).await
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
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let stmt = tx.prepare_cached(sql::PERSONA_COMMIT).await.map_err(pg_error)?;
        let row = tx
            .query_opt(
                &stmt,
                &[
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &lease.token,
                    &commit.object_key,
                    &truncate_to_micros(commit.built_at),
                    &commit.memories_at_build,
                    &commit.scenes_at_build,
                    &commit.scene_watermark.map(truncate_to_micros),
                ],
            )
            .await
            .map_err(pg_error)?;
        let Some(row) = row else { return Ok(None) };
        let persona = persona_of(&row)?;
        insert_provenance(&tx, std::slice::from_ref(&commit.provenance)).await?;
        tx.commit().await.map_err(pg_error)?;
        Ok(Some(persona))
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn layer_owners(&self, after: Option<&Tenant>, limit: u32) -> StoreResult<Vec<Tenant>> {
        let client = self.client().await?;
        let limit = i64::from(limit);
        let rows = match after {
            None => {
                let stmt = client.prepare_cached(sql::OWNERS_FIRST).await.map_err(pg_error)?;
                client.query(&stmt, &[&limit]).await
            }
            Some(after) => {
                let stmt = client.prepare_cached(sql::OWNERS_AFTER).await.map_err(pg_error)?;
                client
                    .query(&stmt, &[&after.team, &after.agent, &after.user, &limit])
                    .await
            }
        }
        .map_err(pg_error)?;
        rows.iter().map(tenant_of).collect()
    }
}

/// The statements of one of the two leases.
struct LeaseQueries {
    /// Creates the owner's row if absent.
    ensure: &'static str,
    /// Locks the row; returns at least `lease_token` and `lease_until`.
    lock: &'static str,
    /// Stamps the new lease.
    take: &'static str,
}

const SCENE_LEASE: LeaseQueries = LeaseQueries {
    ensure: sql::SCHEDULE_ENSURE,
    lock: sql::SCHEDULE_LOCK,
    take: sql::SCENE_TAKE_LEASE,
};

const PERSONA_LEASE: LeaseQueries = LeaseQueries {
    ensure: sql::PERSONA_ENSURE,
    lock: sql::PERSONA_LOCK,
    take: sql::PERSONA_TAKE_LEASE,
};

impl PostgresStore {
    /// Claims one of the two leases: lock the owner's row, and take the lease if it is free
    /// at `now`, reporting the token it displaces.
    async fn claim(
        &self,
        queries: &LeaseQueries,
        tenant: &Tenant,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> StoreResult<Option<Lease>> {
        let now = truncate_to_micros(now);
        let until = truncate_to_micros(lease_end(now, lease));
        let token = Uuid::new_v4();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let owner: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&tenant.team, &tenant.agent, &tenant.user];
        let ensure = tx.prepare_cached(queries.ensure).await.map_err(pg_error)?;
        tx.execute(&ensure, &owner).await.map_err(pg_error)?;
        let lock = tx.prepare_cached(queries.lock).await.map_err(pg_error)?;
        let current = tx.query_one(&lock, &owner).await.map_err(pg_error)?;
        let held_until: Option<DateTime<Utc>> = get(&current, "lease_until")?;
        if held_until.is_some_and(|until| until > now) {
            // Dropping the transaction rolls it back; the row existed (it holds a lease).
            return Ok(None);
        }
        let abandoned: Option<Uuid> = get(&current, "lease_token")?;
        let take = tx.prepare_cached(queries.take).await.map_err(pg_error)?;
        tx.execute(
            &take,
            &[&tenant.team, &tenant.agent, &tenant.user, &token, &now, &until],
        )
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(Some(Lease {
            token,
            claimed_at: now,
            until,
            abandoned,
        }))
    }

    /// Runs one of the two lease releases (`scene_release.sql`, `persona_release.sql`).
    async fn release(&self, query: &str, tenant: &Tenant, token: Uuid) -> StoreResult<()> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(query).await.map_err(pg_error)?;
        client
            .execute(&stmt, &[&tenant.team, &tenant.agent, &tenant.user, &token])
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    /// Runs one of the two lease renewals (`scene_renew.sql`, `persona_renew.sql`).
    async fn renew(&self, query: &str, tenant: &Tenant, token: Uuid, until: DateTime<Utc>) -> StoreResult<bool> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(query).await.map_err(pg_error)?;
        let until = truncate_to_micros(until);
        let renewed = client
            .execute(&stmt, &[&tenant.team, &tenant.agent, &tenant.user, &token, &until])
            .await
            .map_err(pg_error)?;
        Ok(renewed == 1)
    }
}

/// Creates the owner's schedule row if needed and locks it for the rest of `tx`.
async fn lock_schedule<C: GenericClient>(tx: &C, tenant: &Tenant) -> StoreResult<Row> {
    let ensure = tx.prepare_cached(sql::SCHEDULE_ENSURE).await.map_err(pg_error)?;
    tx.execute(&ensure, &[&tenant.team, &tenant.agent, &tenant.user])
        .await
        .map_err(pg_error)?;
    let lock = tx.prepare_cached(sql::SCHEDULE_LOCK).await.map_err(pg_error)?;
    tx.query_one(&lock, &[&tenant.team, &tenant.agent, &tenant.user])
        .await
        .map_err(pg_error)
}

/// Returns how many records were new.
pub(super) async fn insert_provenance<C: GenericClient>(
    client: &C,
    records: &[ArtifactProvenance],
) -> StoreResult<u64> {
    let mut inserted = 0;
    if records.is_empty() {
        return Ok(0);
    }
    let insert = client.prepare_cached(sql::PROVENANCE_INSERT).await.map_err(pg_error)?;
    for r in records {
        let template = r.template.as_ref().map(Json);
        inserted += client
            .execute(
                &insert,
                &[
                    &r.id,
                    &r.tenant.team,
                    &r.tenant.agent,
                    &r.tenant.user,
                    &r.layer,
                    &r.scene_id,
                    &r.event,
                    &template,
                    &r.model,
                    &Json(&r.input_refs),
                    &Json(&r.output_refs),
                    &Json(&r.detail),
                    &truncate_to_micros(r.started_at),
                    &r.duration_ms,
                ],
            )
            .await
            .map_err(pg_error)?;
    }
    Ok(inserted)
}

fn corrupt(message: String) -> StoreError {
    StoreError::Backend(message.into())
}

fn scene_of(row: &Row) -> StoreResult<SceneRow> {
    let status: &str = get(row, "status")?;
    let Json(tags): Json<Vec<String>> = get(row, "tags")?;
    Ok(SceneRow {
        id: get(row, "id")?,
        tenant: tenant_of(row)?,
        name: get(row, "name")?,
        overview: get(row, "overview")?,
        tags,
        object_key: get(row, "object_key")?,
        version: get(row, "version")?,
        status: SceneStatus::parse(status).ok_or_else(|| corrupt(format!("unknown scene status {status:?}")))?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

fn schedule_of(row: &Row) -> StoreResult<SceneSchedule> {
    Ok(SceneSchedule {
        due_at: get(row, "due_at")?,
        last_run_at: get(row, "last_run_at")?,
        last_l1_at: get(row, "last_l1_at")?,
        memory_watermark: get(row, "memory_watermark")?,
    })
}

fn persona_of(row: &Row) -> StoreResult<PersonaRow> {
    Ok(PersonaRow {
        tenant: tenant_of(row)?,
        version: get(row, "version")?,
        object_key: get(row, "object_key")?,
        built_at: get(row, "built_at")?,
        memories_at_build: get(row, "memories_at_build")?,
        scenes_at_build: get(row, "scenes_at_build")?,
        scene_watermark: get(row, "scene_watermark")?,
        signal_at: get(row, "signal_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

pub(super) fn provenance_of(row: &Row) -> StoreResult<ArtifactProvenance> {
    let template: Option<Json<TemplateRef>> = get(row, "template")?;
    let Json(input_refs): Json<Vec<String>> = get(row, "input_refs")?;
    let Json(output_refs): Json<Vec<String>> = get(row, "output_refs")?;
    let Json(detail): Json<serde_json::Value> = get(row, "detail")?;
    Ok(ArtifactProvenance {
        id: get(row, "id")?,
        tenant: tenant_of(row)?,
        layer: get(row, "layer")?,
        scene_id: get(row, "scene_id")?,
        event: get(row, "event")?,
        template: template.map(|Json(t)| t),
        model: get(row, "model")?,
        input_refs,
        output_refs,
        detail,
        started_at: get(row, "started_at")?,
        duration_ms: get(row, "duration_ms")?,
    })
}
