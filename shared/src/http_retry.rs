//! JSON POSTs to OpenAI-compatible endpoints with retries, shared by the embeddings client
//! (`embed::openai`) and the chat client (`llm`), so that both classify failures and back off
//! the same way.
//!
//! - A connect error, a timeout, a body cut short, 429 and 5xx are transient: the request is
//!   sent again after a jittered exponential backoff, or after the provider's `Retry-After`.
//! - Any other status is permanent: asking again would get the same answer.
//! - Once the retries are spent, the last transient error comes back as
//!   [`RetryError::Unavailable`], and the caller decides what "unavailable" means for it.
//!
//! Every attempt is reported to the caller (outcome and latency), which owns its metrics: this
//! module records none, so the two clients keep their own metric names and labels.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use reqwest::header::{self, HeaderMap};
use reqwest::{Client, StatusCode, Url};
use serde::Serialize;

use crate::config::Secret;

/// A provider asking for a longer pause than this is waited for this long only: callers (the
/// workers) have their own, coarser retry loops and should get the failure back soon.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Upper bound of the exponential backoff, for the same reason.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Provider error bodies are quoted in errors up to this many characters.
pub(crate) const MAX_ERROR_BODY_CHARS: usize = 500;

/// How often and how patiently one request is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt, on transient failures only.
    pub max_retries: u32,
    /// Backoff before the first retry; it doubles with every further retry.
    pub base_delay: Duration,
}

/// Why one HTTP request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("POST {url} failed ({kind})")]
    Transport {
        url: Url,
        kind: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("POST {url} answered {status}: {message}")]
    Status {
        url: Url,
        status: StatusCode,
        message: String,
    },
}

impl HttpError {
    fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(status.as_u16()),
            Self::Transport { .. } => None,
        }
    }
}

/// A failure worth another attempt, and how soon the provider wants it.
#[derive(Debug)]
pub(crate) struct Transient {
    pub error: HttpError,
    pub retry_after: Option<Duration>,
}

/// The outcome of one failed attempt. Only HTTP failures are ever transient; `E` is whatever
/// else the caller's attempt can fail with (an answer of the wrong shape, say).
#[derive(Debug)]
pub(crate) enum Failure<E> {
    Transient(Transient),
    Permanent(E),
}

impl<E> Failure<E> {
    pub fn map_permanent<F>(self, f: impl FnOnce(E) -> F) -> Failure<F> {
        match self {
            Self::Transient(t) => Failure::Transient(t),
            Self::Permanent(e) => Failure::Permanent(f(e)),
        }
    }
}

/// What became of one attempt, as reported to the caller's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// Failed transiently; another attempt follows.
    Retry,
    /// Failed transiently, and it was the last attempt.
    GaveUp,
    /// Failed permanently; no attempt follows.
    Permanent,
}

/// One finished attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Report {
    /// 0 for the first attempt.
    pub attempt: u32,
    pub outcome: Outcome,
    pub elapsed: Duration,
}

/// Why a request failed for good.
#[derive(Debug)]
pub(crate) enum RetryError<E> {
    /// The attempt failed in a way a retry will not fix.
    Permanent(E),
    /// Every attempt failed transiently; this is the last failure.
    Unavailable(HttpError),
}

/// Runs `attempt` until it succeeds, fails permanently, or has failed transiently
/// `policy.max_retries + 1` times, sleeping between attempts. `what` names the provider in logs
/// (`embedding`, `chat`). Transient failures are logged at WARN because the caller only sees
/// the last one.
pub(crate) async fn with_retries<T, E, F, Fut>(
    policy: RetryPolicy,
    what: &'static str,
    mut attempt: F,
    mut report: impl FnMut(Report),
) -> Result<T, RetryError<E>>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, Failure<E>>>,
{
    let mut number: u32 = 0;
    loop {
        let started = Instant::now();
        let result = attempt(number).await;
        let elapsed = started.elapsed();
        let finished = |outcome| Report {
            attempt: number,
            outcome,
            elapsed,
        };
        let Transient { error, retry_after } = match result {
            Ok(value) => {
                report(finished(Outcome::Ok));
                return Ok(value);
            }
            Err(Failure::Permanent(error)) => {
                report(finished(Outcome::Permanent));
                return Err(RetryError::Permanent(error));
            }
            Err(Failure::Transient(transient)) => transient,
        };
        if number >= policy.max_retries {
            report(finished(Outcome::GaveUp));
            tracing::warn!(
                provider = what,
                attempts = number + 1,
                status = error.status(),
                error = %crate::runtime::error_chain(&error),
                "{what} provider still failing; giving up"
            );
            return Err(RetryError::Unavailable(error));
        }
        report(finished(Outcome::Retry));
        let delay = retry_after.unwrap_or_else(|| backoff(policy.base_delay, number, jitter()));
        tracing::warn!(
            provider = what,
            attempt = number + 1,
            max_retries = policy.max_retries,
            status = error.status(),
            retry_in_ms = delay.as_millis() as u64,
            error = %crate::runtime::error_chain(&error),
            "{what} request failed; retrying"
        );
        tokio::time::sleep(delay).await;
        number += 1;
    }
}

/// One `POST url` with a JSON body: the body of a 2xx answer, or the classified failure.
pub(crate) async fn post_json(
    client: &Client,
    url: &Url,
    api_key: Option<&Secret>,
    headers: HeaderMap,
    body: &impl Serialize,
) -> Result<Vec<u8>, Failure<HttpError>> {
    let mut request = client.post(url.clone()).headers(headers).json(body);
    if let Some(key) = api_key {
        request = request.bearer_auth(key.expose());
    }
    let transport = |source: reqwest::Error| {
        Failure::Transient(Transient {
            error: HttpError::Transport {
                url: url.clone(),
                kind: transport_kind(&source),
                source,
            },
            retry_after: None,
        })
    };
    let response = request.send().await.map_err(transport)?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    // A body cut short (reset, timeout while reading) is as transient as a failed connect.
    let body = response.bytes().await.map_err(transport)?;
    if status.is_success() {
        return Ok(body.to_vec());
    }
    let error = HttpError::Status {
        url: url.clone(),
        status,
        message: provider_message(&body),
    };
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        Err(Failure::Transient(Transient { error, retry_after }))
    } else {
        Err(Failure::Permanent(error))
    }
}

/// `{base_url}/{path}`, whether or not `base_url` ends in a slash. (`Url::join` would drop the
/// last segment of a base without a trailing slash, turning `.../v1` into `.../{path}`.)
pub(crate) fn endpoint_url(base_url: &str, path: &str) -> Result<Url, String> {
    let base = base_url.trim().trim_end_matches('/');
    let url = Url::parse(&format!("{base}/{path}")).map_err(|e| e.to_string())?;
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(format!("scheme {other:?} is not http or https")),
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".into());
    }
    Ok(url)
}

/// The provider's own explanation of an error answer: OpenAI's `{"error": {"message": ..}}`,
/// TEI's `{"error": ".."}`, a bare `{"message": ..}`, or else the body itself (shortened).
pub(crate) fn provider_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) {
        let message = json
            .pointer("/error/message")
            .or_else(|| json.get("error"))
            .or_else(|| json.get("message"))
            .and_then(serde_json::Value::as_str);
        if let Some(message) = message {
            return shorten(message, MAX_ERROR_BODY_CHARS);
        }
    }
    let text = text.trim();
    if text.is_empty() {
        "(empty body)".into()
    } else {
        shorten(text, MAX_ERROR_BODY_CHARS)
    }
}

/// `text` cut after `max_chars` characters, with `...` when cut.
pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A `Retry-After` in seconds (integer or decimal), capped at [`MAX_RETRY_AFTER`]. The HTTP-date
/// form is not understood and falls back to the normal backoff.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(seconds.min(MAX_RETRY_AFTER.as_secs_f64())))
}

/// Delay before retry number `attempt + 1`: `base * 2^attempt`, capped, of which the upper half
/// is scaled by `jitter` (in `[0, 1]`) so that many workers failing together do not retry
/// together, while the lower half keeps the backoff from collapsing to nothing.
fn backoff(base: Duration, attempt: u32, jitter: f64) -> Duration {
    let full = base
        .saturating_mul(2u32.saturating_pow(attempt.min(16)))
        .min(MAX_BACKOFF);
    let half = full / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

/// A number in `[0, 1]` that differs from call to call. Jitter needs no real randomness, so
/// the std hasher's per-instance random keys are enough and save a dependency.
fn jitter() -> f64 {
    let bits = RandomState::new().hash_one(Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

fn transport_kind(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "transport error"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_is_joined_with_or_without_a_trailing_slash() {
        for base in [
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/",
            " https://api.openai.com/v1// ",
        ] {
            assert_eq!(
                endpoint_url(base, "embeddings").unwrap().as_str(),
                "https://api.openai.com/v1/embeddings"
            );
        }
        assert_eq!(
            endpoint_url("http://127.0.0.1:8080/v1", "chat/completions")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
        assert_eq!(
            endpoint_url("http://tei:80", "embeddings").unwrap().as_str(),
            "http://tei/embeddings"
        );
    }

    #[test]
    fn bad_base_urls_are_refused() {
        for base in ["", "api.openai.com/v1", "ftp://host/v1", "http://host/v1?x=1"] {
            assert!(endpoint_url(base, "embeddings").is_err(), "{base:?} accepted");
        }
    }

    #[test]
    fn provider_messages_are_extracted() {
        let openai =
            br#"{"error":{"message":"Invalid API key","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert_eq!(provider_message(openai), "Invalid API key");
        assert_eq!(
            provider_message(br#"{"error":"Input validation error","error_type":"Validation"}"#),
            "Input validation error"
        );
        assert_eq!(provider_message(br#"{"message":"model not found"}"#), "model not found");
        assert_eq!(provider_message(b"  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(provider_message(b""), "(empty body)");
        let long = "x".repeat(2 * MAX_ERROR_BODY_CHARS);
        assert_eq!(provider_message(long.as_bytes()).len(), MAX_ERROR_BODY_CHARS + 3);
    }

    #[test]
    fn shorten_cuts_on_character_boundaries() {
        assert_eq!(shorten("数据库迁移", 2), "数据...");
        assert_eq!(shorten("abc", 3), "abc");
    }

    #[test]
    fn retry_after_is_parsed_in_seconds_and_capped() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("3600"), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("NaN"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn backoff_doubles_within_its_jitter_band_and_is_capped() {
        let base = Duration::from_millis(200);
        assert_eq!(backoff(base, 0, 0.0), Duration::from_millis(100));
        assert_eq!(backoff(base, 0, 1.0), Duration::from_millis(200));
        assert_eq!(backoff(base, 2, 0.0), Duration::from_millis(400));
        assert_eq!(backoff(base, 2, 1.0), Duration::from_millis(800));
        assert_eq!(backoff(base, 40, 1.0), MAX_BACKOFF);
        assert_eq!(backoff(Duration::ZERO, 3, 0.5), Duration::ZERO);
        let j = jitter();
        assert!((0.0..=1.0).contains(&j), "{j}");
    }

    fn transient() -> Failure<&'static str> {
        Failure::Transient(Transient {
            error: HttpError::Status {
                url: Url::parse("http://x/v1/chat/completions").unwrap(),
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: "busy".into(),
            },
            retry_after: Some(Duration::ZERO),
        })
    }

    #[tokio::test]
    async fn loop_reports_every_attempt_and_stops_at_the_limit() {
        let policy = RetryPolicy {
            max_retries: 2,
            base_delay: Duration::ZERO,
        };
        let mut reports = Vec::new();
        let result: Result<(), _> = with_retries(
            policy,
            "test",
            |_| async { Err(transient()) },
            |r| reports.push((r.attempt, r.outcome)),
        )
        .await;
        assert!(matches!(result, Err(RetryError::Unavailable(HttpError::Status { .. }))));
        assert_eq!(
            reports,
            vec![(0, Outcome::Retry), (1, Outcome::Retry), (2, Outcome::GaveUp)]
        );

        let mut reports = Vec::new();
        let result = with_retries(
            policy,
            "test",
            |n| async move {
                match n {
                    0 => Err(transient()),
                    _ => Ok(n),
                }
            },
            |r| reports.push((r.attempt, r.outcome)),
        )
        .await;
        assert_eq!(result.unwrap(), 1);
        assert_eq!(reports, vec![(0, Outcome::Retry), (1, Outcome::Ok)]);

        let mut reports = Vec::new();
        let result: Result<(), _> = with_retries(
            policy,
            "test",
            |_| async { Err(Failure::Permanent("no")) },
            |r| reports.push((r.attempt, r.outcome)),
        )
        .await;
        assert!(matches!(result, Err(RetryError::Permanent("no"))));
        assert_eq!(reports, vec![(0, Outcome::Permanent)]);
    }
}
