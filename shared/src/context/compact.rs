//! The compaction job (L3) and the compact worker's handler.
//!
//! A job runs claim → read → summarize → store, and each step is safe to die in:
//! - nothing is written before the claim, and the claim is one atomic store call;
//! - after the claim, a crash leaves the job `pending` under a lease; once the lease runs out,
//!   the sweep (or the next context call past 75 %) claims it again with a new token;
//! - the result is stored only under the claim's token, so a worker that stalled past its lease
//!   and wakes up after another claimed the job stores nothing;
//! - a redelivered event finds the job finished (or held) and does nothing.
//!
//! A summarizer failure (or a timeout) is recorded on the job (`failed`, with the error and a
//! retry time), and the event is acked: the database holds the retry, not the broker. Only a
//! store that cannot be reached makes the handler fail the delivery, so the bus retries it.
//!
//! Compaction is incremental: the last summary (if made since the last reset) is folded
//! together with the turns after it, so a job costs what was said since the last one.
//!
//! Secrets are masked (`memory::redact`) on both sides of the summarizer, whichever it is:
//! in the turns it is given, so none reaches a model, and in the summary it returns, so none
//! is stored even if a model makes one up or repeats one from elsewhere. The stored turns
//! themselves (L0) stay verbatim.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use chrono::Utc;
use sha2::{Digest as _, Sha256};

use super::service::window_turn;
use super::summary::{Dimension, Summarizer, Summary, SummaryRequest, SummaryTurn, PROMPT_VERSION};
use super::tokens::estimate_message;
use super::ContextSettings;
use crate::bus::{Event, WorkerKind};
use crate::domain::{SessionId, StoredTurn, Tenant};
use crate::memory::redact::{count_masked, redact};
use crate::metrics;
use crate::runtime::{error_chain, Handler, HandlerError};
use crate::store::compaction::{Claim, CompactionRequest, CompactionStore, RequestOutcome, StoredSummary, WindowQuery};
use crate::store::{StoreError, TranscriptStore};
use tokio_util::sync::CancellationToken;

/// Jobs one sweep runs at most; the next sweep takes the rest.
const SWEEP_BATCH: u32 = 100;
/// Turns read per page when loading a session for compaction.
const READ_PAGE: u32 = 1_000;
/// The redaction metric's label for compaction.
const STAGE: &str = "compaction";

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// No job to claim: finished, held by a live worker, or its retry not due.
    Skipped,
    /// A new summary is stored, covering this many more turns.
    Compacted { turns: usize },
    /// Marked `success`, but no more than `keep_last` new turns existed: the summary stays.
    NothingNew,
    /// The summarizer failed; the job is `failed` with a retry time.
    Failed,
    /// The claim's lease was lost to another worker; nothing was stored.
    LeaseLost,
}

/// The job could not be run or its outcome could not be recorded.
#[derive(Debug, thiserror::Error)]
#[error("compaction job failed")]
pub struct CompactError(#[from] StoreError);

impl CompactError {
    pub fn is_retryable(&self) -> bool {
        self.0.is_retryable()
    }
}

impl From<CompactError> for HandlerError {
    fn from(e: CompactError) -> Self {
        Self {
            retryable: e.is_retryable(),
            swept: false,
            source: Box::new(e),
        }
    }
}

/// Runs compaction jobs. Cheap to clone.
#[derive(Clone)]
pub struct Compactor {
    store: Arc<dyn TranscriptStore>,
    compactions: Arc<dyn CompactionStore>,
    summarizer: Arc<dyn Summarizer>,
    settings: ContextSettings,
}

/// What one job folded in.
struct Part {
    summary: StoredSummary,
    turns: usize,
    /// Whether summarizable turns remain past this part.
    more: bool,
}

/// Why a claimed job did not produce a summary.
enum JobFailure {
    Store(StoreError),
    Summarizer(String),
}

impl Compactor {
    pub fn new(
        store: Arc<dyn TranscriptStore>,
        compactions: Arc<dyn CompactionStore>,
        summarizer: Arc<dyn Summarizer>,
        settings: ContextSettings,
    ) -> Self {
        Self {
            store,
            compactions,
            summarizer,
            settings,
        }
    }

    /// Claims and runs the session's job, if there is one to claim. When the summarizer takes
    /// less than the whole stretch per call (an LLM's input limit), each part is a job of its
    /// own, stored before the next is queued and claimed, so a crash loses one part at most.
    #[tracing::instrument(skip_all, fields(session_id = session_id))]
    pub async fn run(&self, tenant: &Tenant, session_id: &str) -> Result<JobOutcome, CompactError> {
        let Some(mut claim) = self.claim(tenant, session_id).await? else {
            return Ok(JobOutcome::Skipped);
        };
        let mut total = 0;
        loop {
            let (outcome, more) = self.run_part(tenant, session_id, claim).await?;
            let JobOutcome::Compacted { turns } = outcome else {
                return Ok(outcome);
            };
            total += turns;
            let Some(last_seq) = more else {
                return Ok(JobOutcome::Compacted { turns: total });
            };
            // Queue and take the next part; if another caller queued or took it, it carries on.
            let session = SessionId::parse(session_id).map_err(|e| StoreError::Backend(Box::new(e)))?;
            let request = CompactionRequest {
                force: false,
                seen_last_seq: Some(last_seq),
                now: Utc::now(),
                lease: self.settings.lease,
            };
            if self.compactions.request_compaction(tenant, &session, request).await? != RequestOutcome::Queued {
                return Ok(JobOutcome::Compacted { turns: total });
            }
            match self.claim(tenant, session_id).await? {
                Some(next) => claim = next,
                None => return Ok(JobOutcome::Compacted { turns: total }),
            }
        }
    }

    async fn claim(&self, tenant: &Tenant, session_id: &str) -> Result<Option<Claim>, CompactError> {
        let claim = self
            .compactions
            .claim_compaction(
                tenant,
                session_id,
                Utc::now(),
                self.settings.lease,
                self.settings.max_attempts,
            )
            .await?;
        Ok(claim)
    }

    /// Runs a job already claimed with `claim`: the rest of [`run`](Self::run), one part at
    /// most. Public so tests can stop a worker between the steps.
    pub async fn run_claimed(
        &self,
        tenant: &Tenant,
        session_id: &str,
        claim: Claim,
    ) -> Result<JobOutcome, CompactError> {
        Ok(self.run_part(tenant, session_id, claim).await?.0)
    }

    /// One job; with `Some(last_seq)` when it stored a part and more turns wait.
    async fn run_part(
        &self,
        tenant: &Tenant,
        session_id: &str,
        claim: Claim,
    ) -> Result<(JobOutcome, Option<i64>), CompactError> {
        tracing::debug!(attempt = claim.attempt, "compaction claimed");
        let mut more = None;
        let (outcome, stored) = match self.summarize(tenant, session_id).await {
            Ok(Some(part)) => {
                let stored = self
                    .compactions
                    .complete_compaction(tenant, session_id, claim.token, Some(&part.summary))
                    .await?;
                tracing::info!(
                    turns = part.turns,
                    tokens = part.summary.token_count,
                    last_seq = part.summary.last_seq,
                    more = part.more,
                    "session compacted"
                );
                more = part.more.then_some(part.summary.last_seq);
                (JobOutcome::Compacted { turns: part.turns }, stored)
            }
            Ok(None) => {
                let stored = self
                    .compactions
                    .complete_compaction(tenant, session_id, claim.token, None)
                    .await?;
                (JobOutcome::NothingNew, stored)
            }
            Err(JobFailure::Store(e)) if e.is_retryable() => {
                // The store is down: recording the failure would fail too. The lease brings the
                // job back once the store is.
                return Err(e.into());
            }
            Err(JobFailure::Store(e)) => {
                let error = error_chain(&e);
                (JobOutcome::Failed, self.fail(tenant, session_id, &claim, &error).await?)
            }
            Err(JobFailure::Summarizer(error)) => {
                (JobOutcome::Failed, self.fail(tenant, session_id, &claim, &error).await?)
            }
        };
        if !stored {
            tracing::warn!("compaction lease lost to another worker; its result was dropped");
            ::metrics::counter!(metrics::COMPACTIONS, "result" => "lease_lost").increment(1);
            return Ok((JobOutcome::LeaseLost, None));
        }
        let result = match outcome {
            JobOutcome::Failed => "failed",
            JobOutcome::Compacted { .. } | JobOutcome::NothingNew => "success",
            JobOutcome::Skipped | JobOutcome::LeaseLost => return Ok((outcome, None)),
        };
        ::metrics::counter!(metrics::COMPACTIONS, "result" => result).increment(1);
        Ok((outcome, more))
    }

    /// Runs every job that is due (lost events, expired leases, failed jobs due for retry);
    /// returns how many it ran.
    ///
    /// Takes no further job once `stop` is cancelled: the jobs left stay unclaimed,
    /// for the next process to take at once rather than after a lease.
    pub async fn sweep(&self, stop: &CancellationToken) -> Result<usize, CompactError> {
        let due = self
            .compactions
            .due_compactions(Utc::now(), self.settings.max_attempts, SWEEP_BATCH)
            .await?;
        let mut ran = 0;
        for job in due {
            if stop.is_cancelled() {
                break;
            }
            match self.run(&job.tenant, &job.session_id).await? {
                JobOutcome::Skipped => {}
                JobOutcome::Compacted { .. } | JobOutcome::NothingNew | JobOutcome::Failed | JobOutcome::LeaseLost => {
                    ran += 1
                }
            }
        }
        Ok(ran)
    }

    async fn fail(&self, tenant: &Tenant, session_id: &str, claim: &Claim, error: &str) -> Result<bool, CompactError> {
        let retry_in = self.settings.retry_backoff(claim.attempt);
        let retry_at = Utc::now() + chrono::Duration::from_std(retry_in).unwrap_or(chrono::Duration::hours(1));
        tracing::warn!(attempt = claim.attempt, error, retry_at = %retry_at, "compaction failed");
        Ok(self
            .compactions
            .fail_compaction(tenant, session_id, claim.token, error, retry_at)
            .await?)
    }

    /// The new summary; `None` when there is nothing to fold in.
    async fn summarize(&self, tenant: &Tenant, session_id: &str) -> Result<Option<Part>, JobFailure> {
        let session = SessionId::parse(session_id).map_err(|e| JobFailure::Store(StoreError::Backend(Box::new(e))))?;
        let info = self.store.session(tenant, &session).await.map_err(JobFailure::Store)?;
        let record = self
            .compactions
            .compaction(tenant, &session)
            .await
            .map_err(JobFailure::Store)?;
        // Fold into the last summary only if it describes this window (made since the reset)
        // and can still be read; otherwise start over from the reset.
        let previous = record
            .and_then(|r| r.summary)
            .filter(|s| s.reset_at == info.reset_at)
            .and_then(|s| match serde_json::from_value::<Summary>(s.summary.clone()) {
                Ok(mut summary) => {
                    // A summary stored before a redaction pattern existed goes to the model too.
                    count_masked(STAGE, "input", redact_summary(&mut summary));
                    Some((s, summary))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "stored summary is unreadable; compacting from the reset");
                    None
                }
            });
        let after = previous.as_ref().map_or(0, |(s, _)| s.last_seq);
        let turns = self
            .read_all(tenant, &session, info.reset_at, after)
            .await
            .map_err(JobFailure::Store)?;
        if turns.len() <= self.settings.keep_last {
            return Ok(None);
        }
        let summarizable = &turns[..turns.len() - self.settings.keep_last];
        // The oldest turns first, up to what the summarizer takes per call (at least one).
        let limit = self.summarizer.max_input_tokens().unwrap_or(u64::MAX);
        let mut taken_tokens = 0u64;
        let mut inputs: Vec<SummaryTurn> = Vec::new();
        let mut masked = 0;
        for t in summarizable {
            // Masked before L1 cuts the turn: the cut keeps a head and a tail, and the tail of a
            // private key, without its BEGIN line, is no longer recognizable as one.
            let mut turn = t.clone();
            let redacted = redact(&t.content);
            masked += redacted.count;
            turn.content = redacted.text.into_owned();
            let window = window_turn(turn, &self.settings);
            taken_tokens += window.tokens;
            if taken_tokens > limit && !inputs.is_empty() {
                break;
            }
            inputs.push(SummaryTurn {
                seq: t.seq,
                role: t.role,
                content: window.content,
                tool: is_tool_turn(t),
            });
        }
        let more = inputs.len() < summarizable.len();
        count_masked(STAGE, "input", masked);

        let started_at = Utc::now();
        let started = Instant::now();
        let request = SummaryRequest {
            tenant,
            session_id,
            previous: previous.as_ref().map(|(_, s)| s),
            turns: &inputs,
            max_tokens: self.settings.summary_max_tokens,
        };
        let mut summary =
            match tokio::time::timeout(self.settings.summarize_timeout, self.summarizer.summarize(request)).await {
                Ok(Ok(summary)) => summary,
                Ok(Err(e)) => return Err(JobFailure::Summarizer(error_chain(&e))),
                Err(_) => {
                    return Err(JobFailure::Summarizer(format!(
                        "summarizer timed out after {} ms",
                        self.settings.summarize_timeout.as_millis()
                    )))
                }
            };

        count_masked(STAGE, "output", redact_summary(&mut summary));
        summary.trim_to(self.settings.summary_max_tokens);

        let previous = previous.map(|(stored, _)| stored);
        let first_seq = previous.as_ref().map_or(inputs[0].seq, |p| p.first_seq);
        let last_seq = inputs.last().map_or(after, |t| t.seq);
        let message_count = previous.as_ref().map_or(0, |p| p.message_count) + inputs.len() as i64;
        let source_tokens = previous.as_ref().map_or(0, |p| p.source_tokens)
            + inputs.iter().map(|t| estimate_message(&t.content) as i64).sum::<i64>();
        let mut hash = Sha256::new();
        if let Some(p) = &previous {
            hash.update(p.input_hash.as_bytes());
        }
        for turn in &inputs {
            hash.update(turn.seq.to_be_bytes());
            hash.update(turn.content.as_bytes());
        }
        let content = summary.render(first_seq, last_seq, message_count);
        let stored = StoredSummary {
            summary: serde_json::to_value(&summary).map_err(|e| JobFailure::Summarizer(e.to_string()))?,
            token_count: estimate_message(&content) as i64,
            content,
            source_tokens,
            message_count,
            first_seq,
            last_seq,
            reset_at: info.reset_at,
            summarizer: self.summarizer.name(),
            prompt_version: PROMPT_VERSION.to_owned(),
            input_hash: format!("{:x}", hash.finalize()),
            started_at,
            duration_ms: started.elapsed().as_millis() as i64,
            compressed_at: Utc::now(),
        };
        Ok(Some(Part {
            summary: stored,
            turns: inputs.len(),
            more,
        }))
    }

    /// Every turn after `after` created after `since`, in seq order.
    async fn read_all(
        &self,
        tenant: &Tenant,
        session: &SessionId,
        since: Option<chrono::DateTime<Utc>>,
        after: i64,
    ) -> Result<Vec<StoredTurn>, StoreError> {
        let mut turns = Vec::new();
        let mut before = None;
        loop {
            let query = WindowQuery {
                after_seq: after,
                before_seq: before,
                since,
                limit: READ_PAGE,
            };
            let batch = self.compactions.window_turns(tenant, session, query).await?;
            let exhausted = batch.len() < READ_PAGE as usize;
            before = batch.last().map(|t| t.seq).or(before);
            turns.extend(batch);
            if exhausted {
                turns.reverse();
                return Ok(turns);
            }
        }
    }
}

/// Masks the secrets in every item of `summary`; returns how many were masked.
fn redact_summary(summary: &mut Summary) -> usize {
    let mut masked = 0;
    for dimension in Dimension::ALL {
        for item in summary.items_mut(dimension) {
            let redacted = redact(item);
            masked += redacted.count;
            if redacted.count > 0 {
                *item = redacted.text.into_owned();
            }
        }
    }
    masked
}

/// A tool call or result, by role or by the metadata keys chat APIs use for them.
fn is_tool_turn(turn: &StoredTurn) -> bool {
    turn.role == crate::domain::Role::Tool
        || ["tool_calls", "tool_call_id", "tool_name", "tool"]
            .iter()
            .any(|key| turn.metadata.contains_key(*key))
}

/// The compact worker's handler: runs the job named by `compaction.requested`, and sweeps for
/// jobs whose event was lost, whose lease expired, or whose retry is due.
pub struct CompactHandler(pub Compactor);

#[async_trait]
impl Handler for CompactHandler {
    fn kind(&self) -> WorkerKind {
        WorkerKind::Compact
    }

    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        match event {
            Event::CompactionRequested { tenant, session_id } => {
                self.0.run(tenant, session_id).await?;
                Ok(())
            }
            // Not routed to the compact queue.
            Event::TurnAppended { .. }
            | Event::TurnsAppended { .. }
            | Event::ExtractDue { .. }
            | Event::SceneDue { .. }
            | Event::PersonaDue { .. } => Ok(()),
        }
    }

    async fn sweep(&self, stop: &CancellationToken) -> Result<usize, HandlerError> {
        Ok(self.0.sweep(stop).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dimension_of_a_summary_is_masked() {
        let mut summary = Summary {
            decisions: vec!["use redis://:Zq9x8w7v6u5t@cache:6379 for sessions".into()],
            todos: vec!["rotate AKIAIOSFODNN7EXAMPLE".into(), "archive 2023 orders".into()],
            ..Summary::default()
        };
        assert_eq!(redact_summary(&mut summary), 2);
        assert_eq!(
            summary.decisions,
            ["use redis://:[REDACTED:url_credentials]@cache:6379 for sessions"]
        );
        assert_eq!(
            summary.todos,
            ["rotate [REDACTED:aws_access_key]", "archive 2023 orders"]
        );
    }
}
