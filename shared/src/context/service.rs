//! The API side of session context: build a window, queue a compaction, read the job's state.
//!
//! A context call reads the session, its compaction row and the turns it needs, newest first
//! and in growing pages, stopping once they are over the window: its cost follows the window,
//! not the session's length. Queuing a compaction is one atomic store call, so concurrent
//! context calls that all cross 75 % queue one job; the event that wakes the worker is
//! published only by the call that queued it, and is a hint (a lost one is found by the
//! worker's sweep).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::tokens::estimate_message;
use super::truncate::truncate;
use super::window::{assemble, reuse_summary, Assembled, WindowSummary, WindowTurn};
use super::{ContextSettings, MIN_WINDOW_TOKENS};
use crate::bus::{Event, EventBus};
use crate::domain::{SessionId, StoredTurn, Tenant};
use crate::metrics;
use crate::runtime::error_chain;
use crate::store::compaction::{CompactionRecord, CompactionRequest, CompactionStore, RequestOutcome, WindowQuery};
use crate::store::{StoreError, TranscriptStore};

/// How long a call waits for the broker to confirm the wake-up event; the job is already
/// stored, so a late or failed publish only delays it until the worker's next sweep.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);
/// The first page of a newest-first read; each next page doubles, up to [`MAX_PAGE`].
const FIRST_PAGE: u32 = 64;
const MAX_PAGE: u32 = 1_024;

#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The request breaks a rule (a window out of range); the caller's fault.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A context call's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextView {
    pub window_tokens: u64,
    pub assembled: Assembled,
    /// What happened to the compaction this call found due; `None` when none was due.
    pub compaction: Option<RequestOutcome>,
}

/// Session context for the API. Cheap to clone.
#[derive(Clone)]
pub struct ContextService {
    store: Arc<dyn TranscriptStore>,
    compactions: Arc<dyn CompactionStore>,
    bus: Arc<dyn EventBus>,
    settings: ContextSettings,
}

impl ContextService {
    pub fn new(
        store: Arc<dyn TranscriptStore>,
        compactions: Arc<dyn CompactionStore>,
        bus: Arc<dyn EventBus>,
        settings: ContextSettings,
    ) -> Self {
        Self {
            store,
            compactions,
            bus,
            settings,
        }
    }

    pub fn settings(&self) -> &ContextSettings {
        &self.settings
    }

    /// Builds the window of `window_tokens` for a session and queues a compaction when one is
    /// due. `Invalid` for a window outside `MIN_WINDOW_TOKENS..=max_window_tokens`;
    /// `SessionNotFound` when the tenant has no such session.
    pub async fn context(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        window_tokens: u64,
    ) -> Result<ContextView, ContextError> {
        let max = self.settings.max_window_tokens;
        if !(MIN_WINDOW_TOKENS..=max).contains(&window_tokens) {
            return Err(ContextError::Invalid(format!(
                "window_tokens must be between {MIN_WINDOW_TOKENS} and {max}"
            )));
        }
        let info = self.store.session(tenant, session).await?;
        let record = self.compactions.compaction(tenant, session).await?;
        let seen_last_seq = record.as_ref().and_then(|r| r.summary.as_ref()).map(|s| s.last_seq);
        // A summary made before the last reset describes turns the window no longer holds.
        let summary = record.and_then(|r| r.summary).filter(|s| s.reset_at == info.reset_at);
        let boundary = summary.as_ref().map_or(0, |s| s.last_seq);
        let tail = self
            .read_back(tenant, session, info.reset_at, boundary, None, window_tokens)
            .await?;
        let tail_tokens: u64 = tail.turns.iter().map(|t| t.tokens).sum();

        let (summary, turns, complete) = match summary {
            Some(s) if reuse_summary(u64::try_from(s.source_tokens).unwrap_or(0), tail_tokens, window_tokens) => {
                let message = WindowSummary {
                    tokens: estimate_message(&s.content),
                    content: s.content,
                    last_seq: s.last_seq,
                };
                (Some(message), tail.turns, tail.complete)
            }
            Some(_) => {
                // The whole history is under half the window: send it, summary unused.
                let budget = window_tokens.saturating_sub(tail_tokens);
                let mut older = self
                    .read_back(tenant, session, info.reset_at, 0, Some(boundary + 1), budget)
                    .await?;
                older.turns.extend(tail.turns);
                (None, older.turns, older.complete && tail.complete)
            }
            None => (None, tail.turns, tail.complete),
        };
        let assembled = assemble(summary, turns, complete, window_tokens, self.settings.keep_last);
        if assembled.truncated_turns > 0 {
            ::metrics::counter!(metrics::CONTEXT_TRUNCATIONS).increment(assembled.truncated_turns as u64);
        }
        if assembled.summary_used {
            ::metrics::counter!(metrics::CONTEXT_SUMMARY_REUSE).increment(1);
        }
        let compaction = if assembled.compaction_due {
            Some(self.queue(tenant, session, false, seen_last_seq).await?)
        } else {
            None
        };
        Ok(ContextView {
            window_tokens,
            assembled,
            compaction,
        })
    }

    /// Queues a compaction of the session whatever its size (`POST /compact`): a failed job
    /// is retried at once and its attempts start over. A live job is left alone.
    pub async fn force_compaction(&self, tenant: &Tenant, session: &SessionId) -> Result<RequestOutcome, ContextError> {
        Ok(self.queue(tenant, session, true, None).await?)
    }

    /// The session's compaction row; `None` when none was ever requested, `SessionNotFound`
    /// when the tenant has no such session.
    pub async fn compaction(
        &self,
        tenant: &Tenant,
        session: &SessionId,
    ) -> Result<Option<CompactionRecord>, ContextError> {
        self.store.session(tenant, session).await?;
        Ok(self.compactions.compaction(tenant, session).await?)
    }

    /// Queues a job and publishes its wake-up. `seen_last_seq` is the summary the caller's
    /// decision was based on (see `CompactionStore::request_compaction`).
    async fn queue(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        force: bool,
        seen_last_seq: Option<i64>,
    ) -> Result<RequestOutcome, StoreError> {
        let request = CompactionRequest {
            force,
            seen_last_seq,
            now: Utc::now(),
            lease: self.settings.lease,
        };
        let outcome = self.compactions.request_compaction(tenant, session, request).await?;
        if outcome != RequestOutcome::Queued {
            return Ok(outcome);
        }
        ::metrics::counter!(metrics::COMPACTIONS, "result" => "queued").increment(1);
        let event = Event::CompactionRequested {
            tenant: tenant.clone(),
            session_id: session.as_str().to_owned(),
        };
        let result = match tokio::time::timeout(PUBLISH_TIMEOUT, self.bus.publish(&event)).await {
            Ok(Ok(())) => "ok",
            Ok(Err(e)) => {
                tracing::warn!(session = %session, error = %error_chain(&e), "failed to publish compaction.requested; the sweep will run the job");
                "error"
            }
            Err(_) => {
                tracing::warn!(session = %session, "publishing compaction.requested timed out; the sweep will run the job");
                "timeout"
            }
        };
        ::metrics::counter!(metrics::EVENTS_PUBLISHED, "routing_key" => event.routing_key(), "result" => result)
            .increment(1);
        Ok(outcome)
    }

    /// Reads the turns with `after < seq < before` created after `since`, newest first, until
    /// they are over `cap` tokens or there are no more; returns them in seq order, after L1.
    async fn read_back(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        since: Option<chrono::DateTime<Utc>>,
        after: i64,
        before: Option<i64>,
        cap: u64,
    ) -> Result<ReadBack, StoreError> {
        let mut turns = Vec::new();
        let mut tokens = 0u64;
        let mut before = before;
        let mut page = FIRST_PAGE;
        loop {
            let query = WindowQuery {
                after_seq: after,
                before_seq: before,
                since,
                limit: page,
            };
            let batch = self.compactions.window_turns(tenant, session, query).await?;
            let exhausted = batch.len() < page as usize;
            before = batch.last().map(|t| t.seq).or(before);
            for turn in batch {
                let turn = window_turn(turn, &self.settings);
                tokens += turn.tokens;
                turns.push(turn);
            }
            if exhausted {
                turns.reverse();
                return Ok(ReadBack { turns, complete: true });
            }
            if tokens > cap {
                turns.reverse();
                return Ok(ReadBack { turns, complete: false });
            }
            page = (page * 2).min(MAX_PAGE);
        }
    }
}

struct ReadBack {
    /// In seq order.
    turns: Vec<WindowTurn>,
    /// Whether every turn of the range was read.
    complete: bool,
}

/// A stored turn after L1, with its estimate.
pub(crate) fn window_turn(turn: StoredTurn, settings: &ContextSettings) -> WindowTurn {
    let cut = match truncate(&turn.content, &settings.truncation) {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(cut) => Some(cut),
    };
    let truncated = cut.is_some();
    let content = cut.unwrap_or(turn.content);
    WindowTurn {
        seq: turn.seq,
        role: turn.role,
        tokens: estimate_message(&content),
        content,
        truncated,
    }
}
