//! [`AuditLog`] on SQLite: the tables of `audit.sql`.

use async_trait::async_trait;
use rusqlite::params;
use tracing::instrument;

use super::{tenant_of, time_of, uuid_of, Failure, SqliteStore};
use crate::domain::Tenant;
use crate::store::audit::{AuditCursor, AuditEntry, AuditFilter, AuditLog, OperatorEntry, OperatorFilter};
use crate::store::StoreResult;

const INSERT: &str = "INSERT INTO audit_log (id, at, team_id, agent_id, user_id, actor, action, target, outcome, \
     duration_ms, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (id) DO NOTHING";
const LIST: &str = "SELECT id, at, team_id, agent_id, user_id, actor, action, target, outcome, duration_ms, detail \
     FROM audit_log WHERE team_id = ?1 AND agent_id = ?2 AND user_id = ?3 \
     AND (?4 IS NULL OR action = ?4) AND (?5 IS NULL OR at >= ?5) AND (?6 IS NULL OR at < ?6) \
     AND (?7 IS NULL OR at < ?7 OR (at = ?7 AND id < ?8)) \
     ORDER BY at DESC, id DESC LIMIT ?9";

const INSERT_OPERATOR: &str = "INSERT INTO operator_log (id, at, team_id, actor, action, target, outcome, \
     duration_ms, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (id) DO NOTHING";
const LIST_OPERATOR: &str = "SELECT id, at, team_id, actor, action, target, outcome, duration_ms, detail \
     FROM operator_log WHERE (?1 IS NULL OR team_id = ?1) \
     AND (?2 IS NULL OR action = ?2) AND (?3 IS NULL OR at >= ?3) AND (?4 IS NULL OR at < ?4) \
     AND (?5 IS NULL OR at < ?5 OR (at = ?5 AND id < ?6)) \
     ORDER BY at DESC, id DESC LIMIT ?7";

#[async_trait]
impl AuditLog for SqliteStore {
    #[instrument(skip_all, fields(action = %entry.action))]
    async fn record(&self, entry: &AuditEntry) -> StoreResult<()> {
        let entry = entry.clone();
        self.run(move |conn| {
            let detail = serde_json::to_string(&entry.detail).map_err(|e| Failure::Corrupt(Box::new(e)))?;
            conn.prepare_cached(INSERT)?.execute(params![
                entry.id.to_string(),
                entry.at.timestamp_micros(),
                entry.tenant.team,
                entry.tenant.agent,
                entry.tenant.user,
                entry.actor,
                entry.action,
                entry.target,
                entry.outcome,
                entry.duration_ms,
                detail
            ])?;
            Ok(())
        })
        .await
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn audit_entries(
        &self,
        tenant: &Tenant,
        filter: &AuditFilter,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> StoreResult<Vec<AuditEntry>> {
        let tenant = tenant.clone();
        let filter = filter.clone();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(LIST)?;
            let mut rows = stmt.query(params![
                tenant.team,
                tenant.agent,
                tenant.user,
                filter.action,
                filter.since.map(|t| t.timestamp_micros()),
                filter.until.map(|t| t.timestamp_micros()),
                after.map(|c| c.at.timestamp_micros()),
                after.map(|c| c.id.to_string()),
                i64::from(limit)
            ])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let detail: String = row.get("detail")?;
                out.push(AuditEntry {
                    id: uuid_of(row, "id")?,
                    at: time_of(row.get("at")?)?,
                    tenant: tenant_of(row)?,
                    actor: row.get("actor")?,
                    action: row.get("action")?,
                    target: row.get("target")?,
                    outcome: row.get("outcome")?,
                    duration_ms: row.get("duration_ms")?,
                    detail: serde_json::from_str(&detail).map_err(|e| Failure::Corrupt(Box::new(e)))?,
                });
            }
            Ok(out)
        })
        .await
    }

    #[instrument(skip_all, fields(action = %entry.action))]
    async fn record_operator(&self, entry: &OperatorEntry) -> StoreResult<()> {
        let entry = entry.clone();
        self.run(move |conn| {
            let detail = serde_json::to_string(&entry.detail).map_err(|e| Failure::Corrupt(Box::new(e)))?;
            conn.prepare_cached(INSERT_OPERATOR)?.execute(params![
                entry.id.to_string(),
                entry.at.timestamp_micros(),
                entry.team_id,
                entry.actor,
                entry.action,
                entry.target,
                entry.outcome,
                entry.duration_ms,
                detail
            ])?;
            Ok(())
        })
        .await
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn operator_entries(
        &self,
        filter: &OperatorFilter,
        after: Option<AuditCursor>,
        limit: u32,
    ) -> StoreResult<Vec<OperatorEntry>> {
        let filter = filter.clone();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(LIST_OPERATOR)?;
            let mut rows = stmt.query(params![
                filter.team_id,
                filter.action,
                filter.since.map(|t| t.timestamp_micros()),
                filter.until.map(|t| t.timestamp_micros()),
                after.map(|c| c.at.timestamp_micros()),
                after.map(|c| c.id.to_string()),
                i64::from(limit)
            ])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let detail: String = row.get("detail")?;
                out.push(OperatorEntry {
                    id: uuid_of(row, "id")?,
                    at: time_of(row.get("at")?)?,
                    team_id: row.get("team_id")?,
                    actor: row.get("actor")?,
                    action: row.get("action")?,
                    target: row.get("target")?,
                    outcome: row.get("outcome")?,
                    duration_ms: row.get("duration_ms")?,
                    detail: serde_json::from_str(&detail).map_err(|e| Failure::Corrupt(Box::new(e)))?,
                });
            }
            Ok(out)
        })
        .await
    }
}
