//! A client for any OpenAI-compatible `POST {base_url}/embeddings` endpoint (OpenAI, vLLM, TEI,
//! Ollama).
//!
//! One `embed` call becomes one request per `batch_size` texts, sent one after the other. Each
//! request is retried on connect errors, timeouts, 429 and 5xx with exponential backoff (or the
//! provider's `Retry-After`), then gives up as [`EmbedError::Unavailable`]; anything else that
//! goes wrong (another 4xx, an answer of the wrong shape, count or dimension) is
//! [`EmbedError::Backend`] at once, because asking again would get the same answer. The retry
//! and classification rules are `http_retry`'s, shared with the LLM chat client.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use reqwest::{Client, Url};
use serde::{Deserialize, Serialize};

use super::{EmbedError, EmbedResult, Embedder};
use crate::config::Secret;
use crate::http_retry::{self, Failure, HttpError, Outcome, RetryError, RetryPolicy};
use crate::metrics;

/// The `provider` label of this backend's metrics.
const PROVIDER: &str = "openai";
/// Embedded at connect to learn the dimension and prove the endpoint works.
const PROBE_TEXT: &str = "sediment embedding probe";

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
    retry: RetryPolicy,
}

/// Why one request failed, as carried inside [`EmbedError`].
#[derive(Debug, thiserror::Error)]
enum OpenAiError {
    #[error("invalid embedding settings: {0}")]
    Settings(String),
    #[error(transparent)]
    Http(HttpError),
    #[error("POST {url} answered with an unusable body: {reason}")]
    InvalidResponse { url: Url, reason: String },
    #[error("model {model} returns vectors of dimension {actual}, but dimension {expected} is configured")]
    DimensionMismatch {
        model: String,
        expected: usize,
        actual: usize,
    },
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
            retry: RetryPolicy {
                max_retries: settings.max_retries,
                base_delay: settings.retry_base_delay,
            },
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
        let result = http_retry::with_retries(
            self.retry,
            "embedding",
            |_| self.attempt(texts, dimension),
            |report| {
                ::metrics::histogram!(metrics::EMBEDDING_LATENCY, "provider" => PROVIDER)
                    .record(report.elapsed.as_secs_f64());
                let result = match report.outcome {
                    Outcome::Ok => "ok",
                    Outcome::Retry => "retry",
                    Outcome::GaveUp | Outcome::Permanent => "error",
                };
                ::metrics::counter!(metrics::EMBEDDING_REQUESTS, "provider" => PROVIDER, "result" => result)
                    .increment(1);
                if report.outcome == Outcome::Ok {
                    tracing::debug!(
                        texts = texts.len(),
                        attempt = report.attempt,
                        elapsed_ms = report.elapsed.as_millis() as u64,
                        "embedded batch"
                    );
                }
            },
        )
        .await;
        result.map_err(|error| match error {
            RetryError::Permanent(error) => EmbedError::Backend(Box::new(error)),
            RetryError::Unavailable(error) => EmbedError::Unavailable(Box::new(error)),
        })
    }

    /// One HTTP request and the validation of its answer.
    async fn attempt(&self, texts: &[String], dimension: Option<usize>) -> Result<Vec<Vec<f32>>, Failure<OpenAiError>> {
        let request = EmbeddingsRequest {
            model: &self.model,
            input: texts,
        };
        let body = http_retry::post_json(
            &self.client,
            &self.url,
            self.api_key.as_ref(),
            HeaderMap::new(),
            &request,
        )
        .await
        .map_err(|failure| failure.map_permanent(OpenAiError::Http))?;
        parse_embeddings(&body, texts.len(), dimension).map_err(|reason| {
            Failure::Permanent(OpenAiError::InvalidResponse {
                url: self.url.clone(),
                reason,
            })
        })
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
    http_retry::endpoint_url(&settings.base_url, "embeddings")
        .map_err(|reason| invalid(format!("base_url {:?}: {reason}", settings.base_url)))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
