//! The embeddings port: text in, one dense vector per text out.
//!
//! Backends:
//! - `openai` ([`OpenAiEmbedder`]): any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI,
//!   vLLM, TEI, Ollama), batched, with a timeout and retries with backoff on 429 and 5xx;
//! - `local` ([`LocalEmbedder`]): a sentence-transformers BERT model run in-process with candle
//!   (mean pooling, L2 normalisation);
//! - `none`: no embedder at all; search falls back to BM25 and says so.
//!
//! Embeddings are computed off the ingest path: the index worker embeds turns, and the API
//! embeds only queries.

mod bert;
mod cache;
mod local;
mod openai;

use async_trait::async_trait;

pub use cache::{QueryVectorCache, MAX_CACHED_CHARS};
pub use local::LocalEmbedder;
pub use openai::{OpenAiEmbedder, OpenAiSettings};

pub type EmbedResult<T> = Result<T, EmbedError>;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The provider could not be reached, timed out, or kept answering 429/5xx: worth retrying.
    #[error("embedding provider unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The provider refused the request or answered with something unusable (4xx other than
    /// 429, wrong dimension, wrong count, a model that does not load): retrying will not help.
    #[error("embedding failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl EmbedError {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::Backend(_) => false,
        }
    }
}

#[async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// Length of every vector this embedder returns (fixed for its lifetime).
    fn dimension(&self) -> usize;

    /// A short name of the model, for logs and metrics (e.g. `all-MiniLM-L6-v2`).
    fn model(&self) -> &str;

    /// One vector per text, in order, each of length `dimension()`. An empty slice returns an
    /// empty vec without calling the provider. Texts are embedded as given; callers cut them
    /// to a sensible length first (the local model truncates at its own maximum).
    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>>;
}
