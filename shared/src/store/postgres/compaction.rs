//! [`CompactionStore`] on Postgres: the `session_compactions` table of
//! `migrations/V003__session_compactions.sql`.
//!
//! Each transition is one conditional statement (`INSERT ... ON CONFLICT ... WHERE`, `UPDATE
//! ... WHERE`), so the row lock Postgres takes for it is all the mutual exclusion there is: of
//! concurrent requests or claims, the later ones re-check their condition against the
//! committed winner and match nothing.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::Json;
use tokio_postgres::Row;
use tracing::instrument;
use uuid::Uuid;

use super::{get, pg_error, stored_turn, tenant_of, PostgresStore};
use crate::domain::{SessionId, StoredTurn, Tenant};
use crate::store::compaction::{
    lease_end, Claim, CompactionRecord, CompactionRequest, CompactionStatus, CompactionStore, DueCompaction,
    RequestOutcome, StoredSummary, WindowQuery,
};
use crate::store::{truncate_to_micros, StoreError, StoreResult};

mod sql {
    pub const GET: &str = include_str!("queries/compaction_get.sql");
    pub const REQUEST: &str = include_str!("queries/compaction_request.sql");
    pub const CLAIM: &str = include_str!("queries/compaction_claim.sql");
    pub const COMPLETE: &str = include_str!("queries/compaction_complete.sql");
    pub const COMPLETE_SUMMARY: &str = include_str!("queries/compaction_complete_summary.sql");
    pub const FAIL: &str = include_str!("queries/compaction_fail.sql");
    pub const DUE: &str = include_str!("queries/compaction_due.sql");
    pub const WINDOW_TURNS: &str = include_str!("queries/compaction_window_turns.sql");
}

#[async_trait]
impl CompactionStore for PostgresStore {
    #[instrument(skip_all, fields(session_id = %session))]
    async fn compaction(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<Option<CompactionRecord>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::GET).await.map_err(pg_error)?;
        let row = client
            .query_opt(&stmt, &[&session.as_str(), &tenant.team, &tenant.agent, &tenant.user])
            .await
            .map_err(pg_error)?;
        row.as_ref().map(record).transpose()
    }

    #[instrument(skip_all, fields(session_id = %session, force = request.force))]
    async fn request_compaction(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        request: CompactionRequest,
    ) -> StoreResult<RequestOutcome> {
        let now = truncate_to_micros(request.now);
        let lease_until = truncate_to_micros(lease_end(now, request.lease));
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::REQUEST).await.map_err(pg_error)?;
        let queued = client
            .query_opt(
                &stmt,
                &[
                    &session.as_str(),
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &now,
                    &lease_until,
                    &request.force,
                    &request.seen_last_seq,
                ],
            )
            .await
            .map_err(pg_error)?;
        if queued.is_some() {
            return Ok(RequestOutcome::Queued);
        }
        // Nothing written: say why. The state may have moved on since; the answer is advisory.
        match self.compaction(tenant, session).await? {
            None => Err(StoreError::SessionNotFound),
            Some(existing) => Ok(refusal(existing.status)),
        }
    }

    #[instrument(skip_all, fields(session_id = session_id))]
    async fn claim_compaction(
        &self,
        tenant: &Tenant,
        session_id: &str,
        now: DateTime<Utc>,
        lease: Duration,
        max_attempts: i32,
    ) -> StoreResult<Option<Claim>> {
        let now = truncate_to_micros(now);
        let lease_until = truncate_to_micros(lease_end(now, lease));
        let token = Uuid::new_v4();
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::CLAIM).await.map_err(pg_error)?;
        let row = client
            .query_opt(
                &stmt,
                &[
                    &session_id,
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &now,
                    &lease_until,
                    &token,
                    &max_attempts,
                ],
            )
            .await
            .map_err(pg_error)?;
        row.map(|row| {
            Ok(Claim {
                token,
                attempt: get(&row, "attempts")?,
                lease_until: get(&row, "lease_until")?,
            })
        })
        .transpose()
    }

    #[instrument(skip_all, fields(session_id = session_id, with_summary = summary.is_some()))]
    async fn complete_compaction(
        &self,
        tenant: &Tenant,
        session_id: &str,
        token: Uuid,
        summary: Option<&StoredSummary>,
    ) -> StoreResult<bool> {
        let client = self.client().await?;
        let updated = match summary {
            None => {
                let stmt = client.prepare_cached(sql::COMPLETE).await.map_err(pg_error)?;
                client
                    .execute(&stmt, &[&session_id, &tenant.team, &tenant.agent, &tenant.user, &token])
                    .await
            }
            Some(s) => {
                let stmt = client.prepare_cached(sql::COMPLETE_SUMMARY).await.map_err(pg_error)?;
                let reset_at = s.reset_at.map(truncate_to_micros);
                let started_at = truncate_to_micros(s.started_at);
                let compressed_at = truncate_to_micros(s.compressed_at);
                client
                    .execute(
                        &stmt,
                        &[
                            &session_id,
                            &tenant.team,
                            &tenant.agent,
                            &tenant.user,
                            &token,
                            &Json(&s.summary),
                            &s.content,
                            &s.token_count,
                            &s.source_tokens,
                            &s.message_count,
                            &s.first_seq,
                            &s.last_seq,
                            &reset_at,
                            &s.summarizer,
                            &s.prompt_version,
                            &s.input_hash,
                            &started_at,
                            &s.duration_ms,
                            &compressed_at,
                        ],
                    )
                    .await
            }
        }
        .map_err(pg_error)?;
        Ok(updated == 1)
    }

    #[instrument(skip_all, fields(session_id = session_id))]
    async fn fail_compaction(
        &self,
        tenant: &Tenant,
        session_id: &str,
        token: Uuid,
        error: &str,
        retry_at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        let retry_at = truncate_to_micros(retry_at);
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::FAIL).await.map_err(pg_error)?;
        let updated = client
            .execute(
                &stmt,
                &[
                    &session_id,
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &token,
                    &error,
                    &retry_at,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(updated == 1)
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn due_compactions(
        &self,
        now: DateTime<Utc>,
        max_attempts: i32,
        limit: u32,
    ) -> StoreResult<Vec<DueCompaction>> {
        let now = truncate_to_micros(now);
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::DUE).await.map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[&now, &max_attempts, &i64::from(limit)])
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(DueCompaction {
                    tenant: tenant_of(row)?,
                    session_id: get(row, "session_id")?,
                })
            })
            .collect()
    }

    #[instrument(skip_all, fields(session_id = %session, after_seq = query.after_seq, limit = query.limit))]
    async fn window_turns(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        query: WindowQuery,
    ) -> StoreResult<Vec<StoredTurn>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql::WINDOW_TURNS).await.map_err(pg_error)?;
        let rows = client
            .query(
                &stmt,
                &[
                    &session.as_str(),
                    &tenant.team,
                    &tenant.agent,
                    &tenant.user,
                    &query.after_seq,
                    &query.before_seq.unwrap_or(i64::MAX),
                    &query.since,
                    &i64::from(query.limit),
                ],
            )
            .await
            .map_err(pg_error)?;
        rows.iter().map(stored_turn).collect()
    }
}

/// Why a request that wrote nothing was refused, from the row's status.
fn refusal(status: CompactionStatus) -> RequestOutcome {
    match status {
        CompactionStatus::Failed => RequestOutcome::NotDue,
        // A success is always re-queueable, so seeing one means another request won the race
        // and its job already finished: that request's job covers this one.
        CompactionStatus::Pending | CompactionStatus::Success => RequestOutcome::AlreadyPending,
    }
}

fn record(row: &Row) -> StoreResult<CompactionRecord> {
    let status: &str = get(row, "status")?;
    let status = CompactionStatus::parse(status)
        .ok_or_else(|| StoreError::Backend(format!("unknown compaction status {status:?}").into()))?;
    let summary = match get::<Option<Json<serde_json::Value>>>(row, "summary")? {
        None => None,
        Some(Json(summary)) => Some(StoredSummary {
            summary,
            content: get(row, "summary_text")?,
            token_count: get(row, "token_count")?,
            source_tokens: get(row, "source_tokens")?,
            message_count: get(row, "message_count")?,
            first_seq: get(row, "first_seq")?,
            last_seq: get(row, "last_seq")?,
            reset_at: get(row, "summary_reset_at")?,
            summarizer: get(row, "summarizer")?,
            prompt_version: get(row, "prompt_version")?,
            input_hash: get(row, "input_hash")?,
            started_at: get(row, "started_at")?,
            duration_ms: get(row, "duration_ms")?,
            compressed_at: get(row, "compressed_at")?,
        }),
    };
    Ok(CompactionRecord {
        tenant: tenant_of(row)?,
        session_id: get(row, "session_id")?,
        status,
        attempts: get(row, "attempts")?,
        requested_at: get(row, "requested_at")?,
        claimed: get(row, "claimed")?,
        lease_until: get(row, "lease_until")?,
        retry_at: get(row, "retry_at")?,
        error: get(row, "error")?,
        summary,
    })
}
