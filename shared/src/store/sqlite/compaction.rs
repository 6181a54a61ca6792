//! [`CompactionStore`] on SQLite: the `session_compactions` table of `sqlite/compaction.sql`
//! (one of the schema parts `SqliteStore::open` applies).
//!
//! The statements mirror the Postgres ones (the same conditional upsert and updates). Calls are
//! serialized by the store's one connection, and each transition is one statement, so no two
//! requests or claims can both succeed.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension as _};
use tracing::instrument;
use uuid::Uuid;

use super::{stored_turns, tenant_of, time_of, Failure, Outcome, SqliteStore};
use crate::domain::{SessionId, StoredTurn, Tenant};
use crate::store::compaction::{
    lease_end, Claim, CompactionRecord, CompactionRequest, CompactionStatus, CompactionStore, DueCompaction,
    RequestOutcome, StoredSummary, WindowQuery,
};
use crate::store::{truncate_to_micros, StoreResult};

mod sql {
    pub const GET: &str = "SELECT session_id, team_id, agent_id, user_id, status, attempts, \
         requested_at, claim_token IS NOT NULL AS claimed, lease_until, retry_at, error, summary, \
         summary_text, token_count, source_tokens, message_count, first_seq, last_seq, \
         summary_reset_at, summarizer, prompt_version, input_hash, started_at, duration_ms, \
         compressed_at FROM session_compactions \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    // The WHERE on the SELECT is also what lets SQLite parse the ON CONFLICT clause after it.
    pub const REQUEST: &str = "INSERT INTO session_compactions AS c \
         (session_id, team_id, agent_id, user_id, status, attempts, requested_at, lease_until, updated_at) \
         SELECT s.session_id, s.team_id, s.agent_id, s.user_id, 'pending', 0, ?5, ?6, ?5 FROM sessions s \
         WHERE s.session_id = ?1 AND s.team_id = ?2 AND s.agent_id = ?3 AND s.user_id = ?4 \
         ON CONFLICT (team_id, agent_id, user_id, session_id) DO UPDATE SET status = 'pending', \
         attempts = CASE WHEN ?7 THEN 0 ELSE c.attempts END, requested_at = excluded.requested_at, \
         claim_token = NULL, claimed_at = NULL, lease_until = excluded.lease_until, retry_at = NULL, \
         updated_at = excluded.updated_at \
         WHERE (c.status = 'success' \
              OR (c.status = 'pending' AND c.lease_until <= excluded.requested_at) \
              OR (c.status = 'failed' AND (?7 OR c.retry_at <= excluded.requested_at))) \
         AND (?7 OR c.last_seq IS ?8) \
         RETURNING status";
    pub const STATUS: &str = "SELECT status FROM session_compactions \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4";
    pub const CLAIM: &str = "UPDATE session_compactions SET status = 'pending', claim_token = ?7, \
         claimed_at = ?5, lease_until = ?6, attempts = attempts + 1, retry_at = NULL, updated_at = ?5 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 \
         AND ((status = 'pending' AND (claim_token IS NULL OR lease_until <= ?5)) \
              OR (status = 'failed' AND retry_at <= ?5 AND attempts < ?8)) \
         RETURNING attempts, lease_until";
    pub const COMPLETE: &str = "UPDATE session_compactions SET status = 'success', claim_token = NULL, \
         claimed_at = NULL, lease_until = NULL, retry_at = NULL, error = NULL, attempts = 0, updated_at = ?6 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 \
         AND status = 'pending' AND claim_token = ?5";
    pub const COMPLETE_SUMMARY: &str = "UPDATE session_compactions SET status = 'success', \
         claim_token = NULL, claimed_at = NULL, lease_until = NULL, retry_at = NULL, error = NULL, \
         attempts = 0, updated_at = ?6, summary = ?7, summary_text = ?8, token_count = ?9, \
         source_tokens = ?10, message_count = ?11, first_seq = ?12, last_seq = ?13, \
         summary_reset_at = ?14, summarizer = ?15, prompt_version = ?16, input_hash = ?17, \
         started_at = ?18, duration_ms = ?19, compressed_at = ?20 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 \
         AND status = 'pending' AND claim_token = ?5";
    pub const FAIL: &str = "UPDATE session_compactions SET status = 'failed', claim_token = NULL, \
         claimed_at = NULL, lease_until = NULL, error = ?6, retry_at = ?7, updated_at = ?8 \
         WHERE session_id = ?1 AND team_id = ?2 AND agent_id = ?3 AND user_id = ?4 \
         AND status = 'pending' AND claim_token = ?5";
    pub const DUE: &str = "SELECT session_id, team_id, agent_id, user_id FROM session_compactions \
         WHERE status <> 'success' \
         AND ((status = 'pending' AND (claim_token IS NULL OR lease_until <= ?1)) \
              OR (status = 'failed' AND retry_at <= ?1 AND attempts < ?2)) \
         ORDER BY requested_at LIMIT ?3";
    pub const WINDOW_TURNS: &str = "SELECT id, session_id, team_id, agent_id, user_id, seq, role, \
         content, metadata, client_id, created_at, task FROM messages \
         WHERE team_id = ?2 AND agent_id = ?3 AND user_id = ?4 AND session_id = ?1 \
         AND seq > ?5 AND seq < ?6 AND (?7 IS NULL OR created_at > ?7) \
         ORDER BY seq DESC LIMIT ?8";
}

#[async_trait]
impl CompactionStore for SqliteStore {
    #[instrument(skip_all, fields(session_id = %session))]
    async fn compaction(&self, tenant: &Tenant, session: &SessionId) -> StoreResult<Option<CompactionRecord>> {
        let tenant = tenant.clone();
        let session_id = session.as_str().to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::GET)?;
            let mut rows = stmt.query(params![session_id, tenant.team, tenant.agent, tenant.user])?;
            rows.next()?.map(record).transpose()
        })
        .await
    }

    #[instrument(skip_all, fields(session_id = %session, force = request.force))]
    async fn request_compaction(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        request: CompactionRequest,
    ) -> StoreResult<RequestOutcome> {
        let tenant = tenant.clone();
        let session_id = session.as_str().to_owned();
        let (force, seen) = (request.force, request.seen_last_seq);
        let now = truncate_to_micros(request.now);
        let lease_until = micros(lease_end(now, request.lease));
        let now = micros(now);
        self.run(move |conn| {
            let tx = conn.transaction()?;
            let key = params![session_id, tenant.team, tenant.agent, tenant.user];
            let queued = tx
                .prepare_cached(sql::REQUEST)?
                .query_row(
                    params![
                        session_id,
                        tenant.team,
                        tenant.agent,
                        tenant.user,
                        now,
                        lease_until,
                        force,
                        seen
                    ],
                    |_| Ok(()),
                )
                .optional()?;
            let outcome = if queued.is_some() {
                RequestOutcome::Queued
            } else {
                let status: Option<String> = tx
                    .prepare_cached(sql::STATUS)?
                    .query_row(key, |row| row.get(0))
                    .optional()?;
                match status.as_deref().map(parse_status).transpose()? {
                    None => return Err(Failure::SessionNotFound),
                    Some(CompactionStatus::Failed) => RequestOutcome::NotDue,
                    Some(CompactionStatus::Pending | CompactionStatus::Success) => RequestOutcome::AlreadyPending,
                }
            };
            tx.commit()?;
            Ok(outcome)
        })
        .await
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
        let tenant = tenant.clone();
        let session_id = session_id.to_owned();
        let now = truncate_to_micros(now);
        let lease_until = micros(lease_end(now, lease));
        let now = micros(now);
        let token = Uuid::new_v4();
        self.run(move |conn| {
            let claimed = conn
                .prepare_cached(sql::CLAIM)?
                .query_row(
                    params![
                        session_id,
                        tenant.team,
                        tenant.agent,
                        tenant.user,
                        now,
                        lease_until,
                        token.to_string(),
                        max_attempts
                    ],
                    |row| Ok((row.get::<_, i32>("attempts")?, row.get::<_, i64>("lease_until")?)),
                )
                .optional()?;
            claimed
                .map(|(attempt, lease_until)| {
                    Ok(Claim {
                        token,
                        attempt,
                        lease_until: time_of(lease_until)?,
                    })
                })
                .transpose()
        })
        .await
    }

    #[instrument(skip_all, fields(session_id = session_id, with_summary = summary.is_some()))]
    async fn complete_compaction(
        &self,
        tenant: &Tenant,
        session_id: &str,
        token: Uuid,
        summary: Option<&StoredSummary>,
    ) -> StoreResult<bool> {
        let tenant = tenant.clone();
        let session_id = session_id.to_owned();
        let summary = summary.cloned();
        self.run(move |conn| {
            let now = micros(Utc::now());
            let token = token.to_string();
            let updated = match summary {
                None => conn.prepare_cached(sql::COMPLETE)?.execute(params![
                    session_id,
                    tenant.team,
                    tenant.agent,
                    tenant.user,
                    token,
                    now
                ])?,
                Some(s) => {
                    let json = serde_json::to_string(&s.summary).map_err(|e| Failure::Corrupt(Box::new(e)))?;
                    conn.prepare_cached(sql::COMPLETE_SUMMARY)?.execute(params![
                        session_id,
                        tenant.team,
                        tenant.agent,
                        tenant.user,
                        token,
                        now,
                        json,
                        s.content,
                        s.token_count,
                        s.source_tokens,
                        s.message_count,
                        s.first_seq,
                        s.last_seq,
                        s.reset_at.map(micros),
                        s.summarizer,
                        s.prompt_version,
                        s.input_hash,
                        micros(s.started_at),
                        s.duration_ms,
                        micros(s.compressed_at)
                    ])?
                }
            };
            Ok(updated == 1)
        })
        .await
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
        let tenant = tenant.clone();
        let session_id = session_id.to_owned();
        let error = error.to_owned();
        self.run(move |conn| {
            let updated = conn.prepare_cached(sql::FAIL)?.execute(params![
                session_id,
                tenant.team,
                tenant.agent,
                tenant.user,
                token.to_string(),
                error,
                micros(retry_at),
                micros(Utc::now())
            ])?;
            Ok(updated == 1)
        })
        .await
    }

    #[instrument(skip_all, fields(limit = limit))]
    async fn due_compactions(
        &self,
        now: DateTime<Utc>,
        max_attempts: i32,
        limit: u32,
    ) -> StoreResult<Vec<DueCompaction>> {
        let now = micros(now);
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::DUE)?;
            let mut rows = stmt.query(params![now, max_attempts, i64::from(limit)])?;
            let mut due = Vec::new();
            while let Some(row) = rows.next()? {
                due.push(DueCompaction {
                    tenant: tenant_of(row)?,
                    session_id: row.get("session_id")?,
                });
            }
            Ok(due)
        })
        .await
    }

    #[instrument(skip_all, fields(session_id = %session, after_seq = query.after_seq, limit = query.limit))]
    async fn window_turns(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        query: WindowQuery,
    ) -> StoreResult<Vec<StoredTurn>> {
        let tenant = tenant.clone();
        let session_id = session.as_str().to_owned();
        self.run(move |conn| {
            let mut stmt = conn.prepare_cached(sql::WINDOW_TURNS)?;
            let rows = stmt.query(params![
                session_id,
                tenant.team,
                tenant.agent,
                tenant.user,
                query.after_seq,
                query.before_seq.unwrap_or(i64::MAX),
                query.since.map(micros),
                i64::from(query.limit)
            ])?;
            stored_turns(rows)
        })
        .await
    }
}

/// Unix microseconds, as the schema stores time (sub-microseconds truncated).
fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

fn parse_status(status: &str) -> Outcome<CompactionStatus> {
    CompactionStatus::parse(status)
        .ok_or_else(|| Failure::Corrupt(format!("unknown compaction status {status:?}").into()))
}

fn record(row: &rusqlite::Row<'_>) -> Outcome<CompactionRecord> {
    let status: String = row.get("status")?;
    let optional_time = |column: &str| -> Outcome<Option<DateTime<Utc>>> {
        row.get::<_, Option<i64>>(column)?.map(time_of).transpose()
    };
    let summary = match row.get::<_, Option<String>>("summary")? {
        None => None,
        Some(json) => Some(StoredSummary {
            summary: serde_json::from_str(&json).map_err(|e| Failure::Corrupt(Box::new(e)))?,
            content: row.get("summary_text")?,
            token_count: row.get("token_count")?,
            source_tokens: row.get("source_tokens")?,
            message_count: row.get("message_count")?,
            first_seq: row.get("first_seq")?,
            last_seq: row.get("last_seq")?,
            reset_at: optional_time("summary_reset_at")?,
            summarizer: row.get("summarizer")?,
            prompt_version: row.get("prompt_version")?,
            input_hash: row.get("input_hash")?,
            started_at: time_of(row.get("started_at")?)?,
            duration_ms: row.get("duration_ms")?,
            compressed_at: time_of(row.get("compressed_at")?)?,
        }),
    };
    Ok(CompactionRecord {
        tenant: tenant_of(row)?,
        session_id: row.get("session_id")?,
        status: parse_status(&status)?,
        attempts: row.get("attempts")?,
        requested_at: time_of(row.get("requested_at")?)?,
        claimed: row.get("claimed")?,
        lease_until: optional_time("lease_until")?,
        retry_at: optional_time("retry_at")?,
        error: row.get("error")?,
        summary,
    })
}
