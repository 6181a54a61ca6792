//! A client for any OpenAI-compatible `POST {base_url}/embeddings` endpoint (OpenAI, vLLM, TEI,
//! Ollama).
//!
//! One `embed` call becomes one request per `batch_size` texts, sent one after the other. Each
//! request is retried on connect errors, timeouts, 429 and 5xx with exponential backoff (or the
//! provider's `Retry-After`), then gives up as [`EmbedError::Unavailable`]; anything else that
//! goes wrong (another 4xx, an answer of the wrong shape, count or dimension) is
//! [`EmbedError::Backend`] at once, because asking again would get the same answer.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::{header, Client, StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::{EmbedError, EmbedResult, Embedder};
use crate::config::Secret;
use crate::metrics;

/// The `provider` label of this backend's metrics.
const PROVIDER: &str = "openai";
/// Embedded at connect to learn the dimension and prove the endpoint works.
const PROBE_TEXT: &str = "sediment embedding probe";
/// A provider asking for a longer pause than this is waited for this long only: the caller
/// (the index worker) has its own, coarser retry loop and should get the failure back soon.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Upper bound of the exponential backoff, for the same reason.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Provider error bodies are quoted in errors up to this many characters.
const MAX_ERROR_BODY_CHARS: usize = 500;

/// Settings of an [`OpenAiEmbedder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiSettings {
    /// The API root including its version segment, e.g. `https://api.openai.com/v1` (a trailing
    /// slash is fine); requests go to `{base_url}/embeddings`.
    pub base_url: String,
    /// The `model` field of every request (e.g. `text-embedding-3-small`).
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<Secret>,
    /// The dimension the rest of the system expects; `connect` fails if the model's differs.
    /// `None` accepts whatever the model returns.
    pub dimension: Option<usize>,
    /// Most texts per request.
    pub batch_size: usize,
    /// Limit of one HTTP request, from connecting to the last byte of the answer.
    pub timeout: Duration,
    /// Retries of one request after its first attempt, on retryable failures only.
    pub max_retries: u32,
    /// Backoff before the first retry; it doubles with every further retry.
    pub retry_base_delay: Duration,
}

impl OpenAiSettings {
    /// Settings with the defaults: no key, any dimension, 64 texts per request, 10 s per request,
    /// 3 retries starting at 200 ms.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dimension: None,
            batch_size: 64,
            timeout: Duration::from_secs(10),
            max_retries: 3,
            retry_base_delay: Duration::from_millis(200),
        }
    }
}

/// An [`Embedder`] over an OpenAI-compatible HTTP endpoint. Built by [`OpenAiEmbedder::connect`],
/// which has already checked the endpoint and learned its dimension.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    client: Client,
    url: Url,
    model: String,
    api_key: Option<Secret>,
    dimension: usize,
    batch_size: usize,
    max_retries: u32,
    retry_base_delay: Duration,
}

/// Why one request failed, as carried inside [`EmbedError`].
#[derive(Debug, thiserror::Error)]
enum OpenAiError {
    #[error("invalid embedding settings: {0}")]
    Settings(String),
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
    #[error("POST {url} answered with an unusable body: {reason}")]
    InvalidResponse { url: Url, reason: String },
    #[error("model {model} returns vectors of dimension {actual}, but dimension {expected} is configured")]
    DimensionMismatch {
        model: String,
        expected: usize,
        actual: usize,
    },
}

/// The outcome of one failed attempt: whether to try again, and how soon the provider wants it.
enum Failure {
    Retryable {
        error: OpenAiError,
        retry_after: Option<Duration>,
    },
    Permanent(OpenAiError),
}

#[derive(Serialize)]
struct EmbeddingsRequest<'a> {
    model: &'a str,
    input: &'a [String],
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    /// Position of the input this vector belongs to. OpenAI always sends it; a server that
    /// leaves it out is taken to answer in input order.
    index: Option<usize>,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// Validates `settings`, then embeds one probe text to learn the model's dimension.
    ///
    /// Fails with [`EmbedError::Unavailable`] if the endpoint cannot be reached (after the
    /// configured retries), and with [`EmbedError::Backend`] for invalid settings, a refused
    /// request (bad key, unknown model) or a dimension other than `settings.dimension`.
    pub async fn connect(settings: OpenAiSettings) -> EmbedResult<Self> {
        let url = validate(&settings).map_err(|e| EmbedError::Backend(Box::new(e)))?;
        let client = Client::builder()
            .timeout(settings.timeout)
            .build()
            .map_err(|e| EmbedError::Backend(Box::new(e)))?;
        let mut embedder = Self {
            client,
            url,
            model: settings.model,
            api_key: settings.api_key,
            dimension: 0,
            batch_size: settings.batch_size,
            max_retries: settings.max_retries,
            retry_base_delay: settings.retry_base_delay,
        };
        let probe = embedder.embed_batch(&[PROBE_TEXT.to_owned()], None).await?;
        let actual = probe.first().map_or(0, Vec::len);
        if let Some(expected) = settings.dimension {
            if expected != actual {
                return Err(EmbedError::Backend(Box::new(OpenAiError::DimensionMismatch {
                    model: embedder.model,
                    expected,
                    actual,
                })));
            }
        }
        embedder.dimension = actual;
        // Debug only: the caller logs the connection with its own context.
        tracing::debug!(
            url = %embedder.url,
            model = %embedder.model,
            dimension = actual,
            "embedding endpoint ready"
        );
        Ok(embedder)
    }

    /// One batch, with retries. `dimension: None` (the probe) accepts any non-zero length that
    /// all vectors share.
    async fn embed_batch(&self, texts: &[String], dimension: Option<usize>) -> EmbedResult<Vec<Vec<f32>>> {
        let mut attempt: u32 = 0;
        loop {
            let started = Instant::now();
            let outcome = self.attempt(texts, dimension).await;
            ::metrics::histogram!(metrics::EMBEDDING_LATENCY, "provider" => PROVIDER)
                .record(started.elapsed().as_secs_f64());
            let (error, retry_after) = match outcome {
                Ok(vectors) => {
                    record(Outcome::Ok);
                    tracing::debug!(
                        texts = texts.len(),
                        attempt,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "embedded batch"
                    );
                    return Ok(vectors);
                }
                Err(Failure::Permanent(error)) => {
                    record(Outcome::Error);
                    return Err(EmbedError::Backend(Box::new(error)));
                }
                Err(Failure::Retryable { error, retry_after }) => (error, retry_after),
            };
            if attempt >= self.max_retries {
                record(Outcome::Error);
                tracing::warn!(
                    attempts = attempt + 1,
                    error = %crate::runtime::error_chain(&error),
                    "embedding provider still failing; giving up"
                );
                return Err(EmbedError::Unavailable(Box::new(error)));
            }
            record(Outcome::Retry);
            let delay = retry_after.unwrap_or_else(|| backoff(self.retry_base_delay, attempt, jitter()));
            let status = if let OpenAiError::Status { status, .. } = &error {
                Some(status.as_u16())
            } else {
                None
            };
            tracing::warn!(
                attempt = attempt + 1,
                max_retries = self.max_retries,
                status,
                retry_in_ms = delay.as_millis() as u64,
                error = %crate::runtime::error_chain(&error),
                "embedding request failed; retrying"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// One HTTP request and the validation of its answer.
    async fn attempt(&self, texts: &[String], dimension: Option<usize>) -> Result<Vec<Vec<f32>>, Failure> {
        let mut request = self.client.post(self.url.clone()).json(&EmbeddingsRequest {
            model: &self.model,
            input: texts,
        });
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key.expose());
        }
        let transport = |source: reqwest::Error| Failure::Retryable {
            error: OpenAiError::Transport {
                url: self.url.clone(),
                kind: transport_kind(&source),
                source,
            },
            retry_after: None,
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
            return parse_embeddings(&body, texts.len(), dimension).map_err(|reason| {
                Failure::Permanent(OpenAiError::InvalidResponse {
                    url: self.url.clone(),
                    reason,
                })
            });
        }
        let error = OpenAiError::Status {
            url: self.url.clone(),
            status,
            message: provider_message(&body),
        };
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            Err(Failure::Retryable { error, retry_after })
        } else {
            Err(Failure::Permanent(error))
        }
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn dimension(&self) -> usize {
        self.dimension
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.batch_size) {
            vectors.extend(self.embed_batch(batch, Some(self.dimension)).await?);
        }
        Ok(vectors)
    }
}

#[derive(Clone, Copy)]
enum Outcome {
    Ok,
    Retry,
    Error,
}

fn record(outcome: Outcome) {
    let result = match outcome {
        Outcome::Ok => "ok",
        Outcome::Retry => "retry",
        Outcome::Error => "error",
    };
    ::metrics::counter!(metrics::EMBEDDING_REQUESTS, "provider" => PROVIDER, "result" => result).increment(1);
}

fn validate(settings: &OpenAiSettings) -> Result<Url, OpenAiError> {
    let invalid = OpenAiError::Settings;
    if settings.model.trim().is_empty() {
        return Err(invalid("model is empty".into()));
    }
    if settings.batch_size == 0 {
        return Err(invalid("batch_size must be at least 1".into()));
    }
    if settings.timeout.is_zero() {
        return Err(invalid("timeout must be positive".into()));
    }
    if settings.dimension == Some(0) {
        return Err(invalid("dimension must be positive".into()));
    }
    embeddings_url(&settings.base_url).map_err(|reason| invalid(format!("base_url {:?}: {reason}", settings.base_url)))
}

/// `{base_url}/embeddings`, whether or not `base_url` ends in a slash. (`Url::join` would drop
/// the last segment of a base without a trailing slash, turning `.../v1` into `.../embeddings`.)
fn embeddings_url(base_url: &str) -> Result<Url, String> {
    let base = base_url.trim().trim_end_matches('/');
    let url = Url::parse(&format!("{base}/embeddings")).map_err(|e| e.to_string())?;
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(format!("scheme {other:?} is not http or https")),
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".into());
    }
    Ok(url)
}

/// The vectors of a 2xx answer in input order, or why the answer cannot be used.
fn parse_embeddings(body: &[u8], count: usize, dimension: Option<usize>) -> Result<Vec<Vec<f32>>, String> {
    let response: EmbeddingsResponse =
        serde_json::from_slice(body).map_err(|e| format!("not an embeddings list: {e}"))?;
    if response.data.len() != count {
        return Err(format!("{} embeddings for {count} inputs", response.data.len()));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; count];
    for (position, item) in response.data.into_iter().enumerate() {
        let index = item.index.unwrap_or(position);
        let slot = slots
            .get_mut(index)
            .ok_or_else(|| format!("index {index} out of range for {count} inputs"))?;
        if slot.replace(item.embedding).is_some() {
            return Err(format!("index {index} appears twice"));
        }
    }
    // Every slot is filled: `count` items went into `count` distinct slots.
    let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
    let expected = match dimension {
        Some(d) => d,
        None => vectors.first().map_or(0, Vec::len),
    };
    if expected == 0 {
        return Err("empty embedding".into());
    }
    if let Some((index, v)) = vectors.iter().enumerate().find(|(_, v)| v.len() != expected) {
        return Err(format!(
            "embedding {index} has dimension {}, expected {expected}",
            v.len()
        ));
    }
    Ok(vectors)
}

/// The provider's own explanation of an error answer: OpenAI's `{"error": {"message": ..}}`,
/// TEI's `{"error": ".."}`, a bare `{"message": ..}`, or else the body itself (shortened).
fn provider_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) {
        let message = json
            .pointer("/error/message")
            .or_else(|| json.get("error"))
            .or_else(|| json.get("message"))
            .and_then(serde_json::Value::as_str);
        if let Some(message) = message {
            return shorten(message);
        }
    }
    let text = text.trim();
    if text.is_empty() {
        "(empty body)".into()
    } else {
        shorten(text)
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
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
                embeddings_url(base).unwrap().as_str(),
                "https://api.openai.com/v1/embeddings"
            );
        }
        assert_eq!(
            embeddings_url("http://127.0.0.1:8080/v1").unwrap().as_str(),
            "http://127.0.0.1:8080/v1/embeddings"
        );
        assert_eq!(
            embeddings_url("http://tei:80").unwrap().as_str(),
            "http://tei/embeddings"
        );
    }

    #[test]
    fn bad_base_urls_are_refused() {
        for base in ["", "api.openai.com/v1", "ftp://host/v1", "http://host/v1?x=1"] {
            assert!(embeddings_url(base).is_err(), "{base:?} accepted");
        }
    }

    #[test]
    fn settings_are_validated() {
        let ok = OpenAiSettings::new("http://localhost:11434/v1", "nomic-embed-text");
        assert!(validate(&ok).is_ok());
        let broken = [
            OpenAiSettings {
                model: " ".into(),
                ..ok.clone()
            },
            OpenAiSettings {
                batch_size: 0,
                ..ok.clone()
            },
            OpenAiSettings {
                timeout: Duration::ZERO,
                ..ok.clone()
            },
            OpenAiSettings {
                dimension: Some(0),
                ..ok.clone()
            },
            OpenAiSettings {
                base_url: "nowhere".into(),
                ..ok.clone()
            },
        ];
        for settings in broken {
            assert!(validate(&settings).is_err(), "{settings:?} accepted");
        }
    }

    #[test]
    fn response_is_ordered_by_index() {
        let body = br#"{"object":"list","data":[
            {"object":"embedding","index":2,"embedding":[2.0,2.5]},
            {"object":"embedding","index":0,"embedding":[0.0,0.5]},
            {"object":"embedding","index":1,"embedding":[1.0,1.5]}
        ],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}"#;
        let vectors = parse_embeddings(body, 3, Some(2)).unwrap();
        assert_eq!(vectors, vec![vec![0.0, 0.5], vec![1.0, 1.5], vec![2.0, 2.5]]);
    }

    #[test]
    fn response_without_indices_keeps_its_order() {
        let body = br#"{"data":[{"embedding":[1.0]},{"embedding":[2.0]}]}"#;
        assert_eq!(parse_embeddings(body, 2, None).unwrap(), vec![vec![1.0], vec![2.0]]);
    }

    #[test]
    fn unusable_responses_are_explained() {
        let cases: [(&[u8], usize, Option<usize>, &str); 7] = [
            (b"{not json", 1, None, "not an embeddings list"),
            (
                br#"{"data":[{"index":0,"embedding":[1.0]}]}"#,
                2,
                None,
                "1 embeddings for 2 inputs",
            ),
            (
                br#"{"data":[{"index":0,"embedding":[1.0]},{"index":0,"embedding":[1.0]}]}"#,
                2,
                None,
                "twice",
            ),
            (br#"{"data":[{"index":5,"embedding":[1.0]}]}"#, 1, None, "out of range"),
            (
                br#"{"data":[{"index":0,"embedding":[1.0,2.0]}]}"#,
                1,
                Some(3),
                "dimension 2, expected 3",
            ),
            (
                br#"{"data":[{"index":0,"embedding":[1.0]},{"index":1,"embedding":[1.0,2.0]}]}"#,
                2,
                None,
                "dimension 2, expected 1",
            ),
            (br#"{"data":[{"index":0,"embedding":[]}]}"#, 1, None, "empty embedding"),
        ];
        for (body, count, dimension, expected) in cases {
            let error = parse_embeddings(body, count, dimension).unwrap_err();
            assert!(error.contains(expected), "{error:?} does not mention {expected:?}");
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
}
