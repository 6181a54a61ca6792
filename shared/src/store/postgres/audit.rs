//! [`AuditLog`] on Postgres: the tables of `migrations/V005__audit_log.sql` and
//! `migrations/V011__operator_log.sql`.

use async_trait::async_trait;
use tokio_postgres::types::Json;
use tracing::instrument;

use super::{get, pg_error, tenant_of, PostgresStore};
use crate::domain::Tenant;
use crate::store::audit::{AuditCursor, AuditEntry, AuditFilter, AuditLog, OperatorEntry, OperatorFilter};
use crate::store::StoreResult;

const INSERT: &str = "INSERT INTO audit_log (id, at, team_id, agent_id, user_id, actor, action, target, outcome, \
     duration_ms, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (id) DO NOTHING";
const LIST: &str = "SELECT id, at, team_id, agent_id, user_id, actor, action, target, outcome, duration_ms, detail \
     FROM audit_log WHERE team_id = $1 AND agent_id = $2 AND user_id = $3 \
     AND ($4::text IS NULL OR action = $4) AND ($5::timestamptz IS NULL OR at >= $5) \
     AND ($6::timestamptz IS NULL OR at < $6) \
     AND ($7::timestamptz IS NULL OR (at, id) < ($7, $8::uuid)) \
     ORDER BY at DESC, id DESC LIMIT $9";

const INSERT_OPERATOR: &str = "INSERT INTO operator_log (id, at, team_id, actor, action, target, outcome, \
     duration_ms, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING";
const LIST_OPERATOR: &str = "SELECT id, at, team_id, actor, action, target, outcome, duration_ms, detail \
     FROM operator_log WHERE ($1::text IS NULL OR team_id = $1) \
     AND ($2::text IS NULL OR action = $2) AND ($3::timestamptz IS NULL OR at >= $3) \
     AND ($4::timestamptz IS NULL OR at < $4) \
     AND ($5::timestamptz IS NULL OR (at, id) < ($5, $6::uuid)) \
     ORDER BY at DESC, id DESC LIMIT $7";

#[async_trait]
impl AuditLog for PostgresStore {
    #[instrument(skip_all, fields(action = %entry.action))]
    async fn record(&self, entry: &AuditEntry) -> StoreResult<()> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(INSERT).await.map_err(pg_error)?;
        client
            .execute(
                &stmt,
                &[
                    &entry.id,
                    &entry.at,
                    &entry.tenant.team,
                    &entry.tenant.agent,
                    &entry.tenant.user,
                    &entry.actor,
                    &entry.action,
                    &entry.target,
                    &entry.outcome,
                    &entry.duration_ms,
                    &Json(&entry.detail),
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn audit_entries(
        &self,
        tenant: &Tenant,
        filter: &AuditFilter,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> StoreResult<Vec<AuditEntry>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(LIST).await.map_err(pg_error)?;
        let after_at = after.map(|c| c.at);
        let after_id = after.map(|c| c.id);
        let rows = client
            .query(
                &stmt,
                &[
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &filter.action,
                    &filter.since,
                    &filter.until,
                    &after_at,
                    &after_id,
                    &i64::from(limit),
                ],
            )
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                let Json(detail): Json<serde_json::Value> = get(row, "detail")?;
                Ok(AuditEntry {
                    id: get(row, "id")?,
                    at: get(row, "at")?,
                    tenant: tenant_of(row)?,
                    actor: get(row, "actor")?,
                    action: get(row, "action")?,
                    target: get(row, "target")?,
                    outcome: get(row, "outcome")?,
                    duration_ms: get(row, "duration_ms")?,
                    detail,
                })
            })
            .collect()
    }

    #[instrument(skip_all, fields(action = %entry.action))]
    async fn record_operator(&self, entry: &OperatorEntry) -> StoreResult<()> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(INSERT_OPERATOR).await.map_err(pg_error)?;
        client
            .execute(
                &stmt,
                &[
                    &entry.id,
                    &entry.at,
                    &entry.team_id,
                    &entry.actor,
                    &entry.action,
                    &entry.target,
                    &entry.outcome,
                    &entry.duration_ms,
                    &Json(&entry.detail),
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn operator_entries(
        &self,
        filter: &OperatorFilter,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> StoreResult<Vec<OperatorEntry>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(LIST_OPERATOR).await.map_err(pg_error)?;
        let after_at = after.map(|c| c.at);
        let after_id = after.map(|c| c.id);
        let rows = client
            .query(
                &stmt,
                &[
                    &filter.team_id,
                    &filter.action,
                    &filter.since,
                    &filter.until,
                    &after_at,
                    &after_id,
                    &i64::from(limit),
                ],
            )
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                let Json(detail): Json<serde_json::Value> = get(row, "detail")?;
                Ok(OperatorEntry {
                    id: get(row, "id")?,
                    at: get(row, "at")?,
                    team_id: get(row, "team_id")?,
                    actor: get(row, "actor")?,
                    action: get(row, "action")?,
                    target: get(row, "target")?,
                    outcome: get(row, "outcome")?,
                    duration_ms: get(row, "duration_ms")?,
                    detail,
                })
            })
            .collect()
    }
}
