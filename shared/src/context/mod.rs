//! Session context: the history an agent should send with its next LLM call, kept inside the
//! model's window by seed 000's three layers (DBridge 三层压缩机制).
//!
//! - **L1, truncation** ([`truncate`]): a turn over 2,000 code points is sent as its first and
//!   last 1,000 around a marker.
//! - **L2, summary reuse** ([`window`]): above half the window, the session's last summary
//!   stands in for the turns it covers.
//! - **L3, compaction** ([`compact`]): above three quarters, a job is queued for the compact
//!   worker, which folds all but the last 5 turns into a ten-dimension summary
//!   ([`summary`]) with a [`Summarizer`] — the rules one ([`rules`]) or an LLM.
//!
//! Token counts are estimates ([`tokens`]), never a tokenizer: cheap, deterministic, and
//! documented with their measured error.
//!
//! # Layering
//! `tokens`, `truncate`, `window`, `summary` and `rules` are pure. `service` (the API's calls)
//! and `compact` (the worker's job) do the I/O, through the `TranscriptStore`,
//! `CompactionStore` and `EventBus` ports only. The job's mutual exclusion and crash safety
//! live in the store's lease (see `store::compaction`), never in memory.

pub mod compact;
pub mod llm;
pub mod rules;
pub mod service;
pub mod summary;
pub mod tokens;
pub mod truncate;
pub mod window;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::backends::Backends;
use crate::config::{ConfigError, Settings, ENV_PREFIX};
use crate::llm::{ChatClient, ChatSettings, InvalidSettings};

pub use compact::{CompactError, CompactHandler, Compactor, JobOutcome};
pub use llm::LlmSummarizer;
pub use rules::RulesSummarizer;
pub use service::{ContextError, ContextService, ContextView};
pub use summary::{Summarizer, Summary};
pub use truncate::Truncation;

impl ContextService {
    /// The service over a process's backends.
    pub fn from_backends(backends: &Backends, settings: ContextSettings) -> Self {
        Self::new(
            backends.store.clone(),
            backends.compactions.clone(),
            backends.bus.clone(),
            settings,
        )
    }
}

impl Compactor {
    /// The compactor over a process's backends, with the configured summarizer.
    pub fn from_backends(backends: &Backends, settings: &Settings) -> Result<Self, InvalidSettings> {
        Ok(Self::new(
            backends.store.clone(),
            backends.compactions.clone(),
            summarizer(settings)?,
            settings.context.clone(),
        ))
    }
}

/// The summarizer compaction uses: the LLM one when an LLM endpoint is configured, the rules
/// one otherwise. Fails only on LLM settings the chat client refuses.
pub fn summarizer(settings: &Settings) -> Result<Arc<dyn Summarizer>, InvalidSettings> {
    Ok(match &settings.llm {
        Some(llm) => {
            let chat = ChatClient::new(ChatSettings::from_config(llm))?;
            tracing::info!(model = %llm.model, "session compaction uses the LLM summarizer");
            Arc::new(LlmSummarizer::new(Arc::new(chat), settings.context.llm_input_tokens))
        }
        None => Arc::new(RulesSummarizer),
    })
}

/// Smallest window a context call accepts: room for a cut turn and its marker.
pub const MIN_WINDOW_TOKENS: u64 = 128;

/// The knobs of session context, from `SEDIMENT_CONTEXT_*` and `SEDIMENT_COMPACTION_*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextSettings {
    /// L1.
    pub truncation: Truncation,
    /// Turns compaction leaves out of the summary (the newest ones).
    pub keep_last: usize,
    /// Largest `window_tokens` a context call accepts.
    pub max_window_tokens: u64,
    /// Budget of a rendered summary, in estimated tokens.
    pub summary_max_tokens: u64,
    /// How long a worker holds a job before it counts as abandoned.
    pub lease: Duration,
    /// Longest a summarizer may take; below the lease, so a slow one fails before its lease
    /// runs out.
    pub summarize_timeout: Duration,
    /// Claims of a failing job before the sweep stops retrying it (a context call past 75 %,
    /// or `POST /compact`, queues it again).
    pub max_attempts: i32,
    /// Backoff before the sweep retries a failed job; doubles per attempt, capped at an hour.
    pub retry_delay: Duration,
    /// Turn tokens (estimated) one LLM summarizer call takes; a longer stretch is folded in
    /// several jobs.
    pub llm_input_tokens: u64,
}

impl Default for ContextSettings {
    fn default() -> Self {
        Self {
            truncation: Truncation::default(),
            keep_last: 5,
            max_window_tokens: 2_000_000,
            summary_max_tokens: 1_500,
            lease: Duration::from_secs(120),
            summarize_timeout: Duration::from_secs(90),
            max_attempts: 3,
            retry_delay: Duration::from_secs(30),
            llm_input_tokens: 24_000,
        }
    }
}

impl ContextSettings {
    /// Reads the settings from `KEY -> value` pairs without the `SEDIMENT_` prefix (as
    /// `config::Settings::from_map` gets them); absent keys keep their defaults.
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let d = Self::default();
        let max_chars = number(vars, "CONTEXT_TRUNCATE_CHARS", d.truncation.max_chars as u64)? as usize;
        let keep_chars = number(vars, "CONTEXT_TRUNCATE_KEEP_CHARS", d.truncation.head_chars as u64)? as usize;
        if keep_chars.saturating_mul(2) > max_chars {
            return Err(invalid(
                "CONTEXT_TRUNCATE_KEEP_CHARS",
                "must be at most half of SEDIMENT_CONTEXT_TRUNCATE_CHARS",
            ));
        }
        let max_window_tokens = number(vars, "CONTEXT_MAX_WINDOW_TOKENS", d.max_window_tokens)?;
        if max_window_tokens < MIN_WINDOW_TOKENS {
            return Err(invalid(
                "CONTEXT_MAX_WINDOW_TOKENS",
                format!("must be at least {MIN_WINDOW_TOKENS}"),
            ));
        }
        let lease = Duration::from_millis(number(vars, "COMPACTION_LEASE_MS", d.lease.as_millis() as u64)?);
        let summarize_timeout = Duration::from_millis(number(
            vars,
            "COMPACTION_TIMEOUT_MS",
            d.summarize_timeout.as_millis() as u64,
        )?);
        if summarize_timeout >= lease {
            return Err(invalid(
                "COMPACTION_TIMEOUT_MS",
                "must be shorter than SEDIMENT_COMPACTION_LEASE_MS",
            ));
        }
        Ok(Self {
            truncation: Truncation {
                max_chars,
                head_chars: keep_chars,
                tail_chars: keep_chars,
            },
            keep_last: number(vars, "CONTEXT_KEEP_TURNS", d.keep_last as u64)? as usize,
            max_window_tokens,
            summary_max_tokens: number(vars, "CONTEXT_SUMMARY_TOKENS", d.summary_max_tokens)?,
            lease,
            summarize_timeout,
            max_attempts: i32::try_from(number(vars, "COMPACTION_MAX_ATTEMPTS", d.max_attempts as u64)?)
                .map_err(|_| invalid("COMPACTION_MAX_ATTEMPTS", "is too large"))?,
            retry_delay: Duration::from_millis(number(
                vars,
                "COMPACTION_RETRY_DELAY_MS",
                d.retry_delay.as_millis() as u64,
            )?),
            llm_input_tokens: number(vars, "COMPACTION_LLM_INPUT_TOKENS", d.llm_input_tokens)?,
        })
    }

    /// Backoff before the retry of a job whose `attempt`-th claim failed.
    pub fn retry_backoff(&self, attempt: i32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).max(0) as u32)
            .unwrap_or(u32::MAX);
        self.retry_delay
            .saturating_mul(factor)
            .min(Duration::from_secs(3_600).max(self.retry_delay))
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: format!("{ENV_PREFIX}{key}"),
        reason: reason.into(),
    }
}

/// A positive integer setting.
fn number(vars: &HashMap<String, String>, key: &str, default: u64) -> Result<u64, ConfigError> {
    match vars.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(0) => Err(invalid(key, "must be greater than zero")),
            Ok(n) => Ok(n),
            Err(e) => Err(invalid(key, format!("{v:?} is not valid: {e}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn defaults_are_the_seeds_numbers() {
        let s = ContextSettings::from_map(&HashMap::new()).unwrap();
        assert_eq!(s, ContextSettings::default());
        assert_eq!(s.truncation.max_chars, 2_000);
        assert_eq!(s.truncation.head_chars, 1_000);
        assert_eq!(s.keep_last, 5);
        assert_eq!(s.lease, Duration::from_secs(120));
    }

    #[test]
    fn settings_are_validated_with_their_key() {
        let s = ContextSettings::from_map(&map(&[
            ("CONTEXT_TRUNCATE_CHARS", "400"),
            ("CONTEXT_TRUNCATE_KEEP_CHARS", "150"),
            ("COMPACTION_LEASE_MS", "2000"),
            ("COMPACTION_TIMEOUT_MS", "1000"),
        ]))
        .unwrap();
        assert_eq!(s.truncation.tail_chars, 150);
        let err = ContextSettings::from_map(&map(&[("CONTEXT_TRUNCATE_KEEP_CHARS", "1500")])).unwrap_err();
        assert!(
            err.to_string().starts_with("SEDIMENT_CONTEXT_TRUNCATE_KEEP_CHARS"),
            "{err}"
        );
        let err = ContextSettings::from_map(&map(&[("COMPACTION_LEASE_MS", "1000")])).unwrap_err();
        assert!(err.to_string().starts_with("SEDIMENT_COMPACTION_TIMEOUT_MS"), "{err}");
        let err = ContextSettings::from_map(&map(&[("CONTEXT_KEEP_TURNS", "0")])).unwrap_err();
        assert!(err.to_string().contains("greater than zero"), "{err}");
        let err = ContextSettings::from_map(&map(&[("CONTEXT_MAX_WINDOW_TOKENS", "lots")])).unwrap_err();
        assert!(
            err.to_string().starts_with("SEDIMENT_CONTEXT_MAX_WINDOW_TOKENS"),
            "{err}"
        );
    }

    #[test]
    fn retry_backoff_doubles_and_is_capped() {
        let s = ContextSettings::default();
        assert_eq!(s.retry_backoff(1), Duration::from_secs(30));
        assert_eq!(s.retry_backoff(3), Duration::from_secs(120));
        assert_eq!(s.retry_backoff(40), Duration::from_secs(3_600));
    }
}
