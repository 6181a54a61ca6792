//! The `local` embedding provider: a sentence-transformers BERT model (all-MiniLM-L6-v2 in
//! practice) run in-process on the CPU, by [`super::bert`] on candle's tensors.
//!
//! It reproduces sentence-transformers' `encode(texts, normalize_embeddings=True)`: tokenize
//! with the model's own `tokenizer.json` (truncated to `max_seq_length`), run the BERT encoder,
//! mean-pool the last hidden state over the attention mask, then L2-normalise.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tokenizers::{Encoding, Tokenizer, TruncationParams};

use super::bert::{Config, Encoder};
use super::{EmbedError, EmbedResult, Embedder};

/// Files a model directory must hold; see [`LocalEmbedder::is_model_dir`].
const REQUIRED_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];

/// What sentence-transformers ships for all-MiniLM-L6-v2, used when the directory has no
/// `sentence_bert_config.json`.
const DEFAULT_MAX_SEQ_LENGTH: usize = 256;

/// Most texts in one forward pass; bounds memory (attention is `batch x heads x len x len`
/// floats).
const DEFAULT_BATCH_SIZE: usize = 32;

/// Most padded tokens (texts x longest text) in one forward pass. Measured on 2 cores with
/// all-MiniLM-L6-v2 (tests/src/bin/bench_embed.rs): passes of 256-512 tokens ran up to 1.7x
/// faster per sentence than 32 texts at once, likely as a small pass's activations stay in
/// cache. A text longer than this still runs, alone.
const TOKEN_BUDGET: usize = 512;

/// gemm splits a product over every core once it is 48 x 48 x 256 multiply-adds; this
/// threshold turns that off, and [`Inner::embed_blocking`] runs sub-batches side by side instead.
/// Measured on 2 cores, release: a query's products (20 tokens x 384 x 1536) are past gemm's
/// threshold, and with the other core busy, splitting them raised a query's p99 from 15-16 ms
/// to 67-88 (p50 10 against 11-14); in bulk, one sub-batch split over both cores embedded 92
/// sentences/s, two sub-batches side by side unsplit 143-152.
const SINGLE_THREADED_PRODUCTS: usize = usize::MAX;

/// Vectors with the position of their text in the call.
type Indexed = Vec<(usize, Vec<f32>)>;

/// A sentence-transformers BERT model loaded from a local directory.
///
/// Share one instance (behind an `Arc`) rather than loading the model twice: concurrent
/// [`Embedder::embed`] calls each run on their own blocking thread over the same weights.
pub struct LocalEmbedder {
    inner: Arc<Inner>,
    model_name: String,
    dimension: usize,
    batch_size: usize,
}

struct Inner {
    model: Encoder,
    tokenizer: Tokenizer,
    pad_id: u32,
    lowercase: bool,
}

impl LocalEmbedder {
    /// Loads the model in `dir` (`model.safetensors`, `tokenizer.json`, `config.json`, and
    /// optionally `sentence_bert_config.json`). Blocking: reads ~90 MB and builds the model, so
    /// async callers run it in `spawn_blocking`.
    ///
    /// Every failure (a missing or corrupt file, a config this code cannot run) is an
    /// [`EmbedError::Backend`] whose message names the file and the directory.
    pub fn load(dir: &Path) -> EmbedResult<Self> {
        for name in REQUIRED_FILES {
            if !dir.join(name).is_file() {
                return Err(backend(format!(
                    "model file {name} is missing from {} (install the model with `bash api/fetch-model.sh`)",
                    dir.display()
                )));
            }
        }
        let file = |name: &str| -> PathBuf { dir.join(name) };
        let read = |name: &str| -> EmbedResult<Vec<u8>> {
            std::fs::read(file(name)).map_err(|e| backend(format!("cannot read {}: {e}", file(name).display())))
        };

        let config: Config = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| backend(format!("{} is not a BERT config: {e}", file("config.json").display())))?;
        if let Some(why) = config.unsupported() {
            return Err(backend(format!("{} asks for {why}", file("config.json").display())));
        }
        let st_config = SentenceBertConfig::read(dir)?;
        // Position embeddings stop at max_position_embeddings; a longer input cannot run at all.
        let max_len = st_config.max_seq_length.min(config.max_position_embeddings);
        if max_len < 2 {
            return Err(backend(format!(
                "max_seq_length {max_len} in {} is too small",
                dir.display()
            )));
        }

        let mut tokenizer = Tokenizer::from_file(file("tokenizer.json"))
            .map_err(|e| backend(format!("cannot load {}: {e}", file("tokenizer.json").display())))?;
        // tokenizer.json carries the settings of whoever exported it (all-MiniLM-L6-v2's pads
        // and truncates to 128); sentence-transformers overrides both, so do we. Padding is done
        // per sub-batch below.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..TruncationParams::default()
            }))
            .map_err(|e| {
                backend(format!(
                    "cannot set truncation on {}: {e}",
                    file("tokenizer.json").display()
                ))
            })?;
        tokenizer.with_padding(None);
        let pad_id = tokenizer.token_to_id("[PAD]").unwrap_or(config.pad_token_id as u32);

        // A buffered load (not mmap) because the workspace forbids `unsafe`, and a file replaced
        // under an mmap would be undefined behaviour anyway.
        let model = Encoder::load(&read("model.safetensors")?, &config)
            .map_err(|e| backend(format!("cannot load {}: {e}", file("model.safetensors").display())))?;
        gemm::set_threading_threshold(SINGLE_THREADED_PRODUCTS);

        let model_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        tracing::info!(
            model = %model_name,
            dir = %dir.display(),
            dimension = config.hidden_size,
            max_seq_length = max_len,
            "local embedding model loaded"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                model,
                tokenizer,
                pad_id,
                lowercase: st_config.do_lower_case,
            }),
            model_name,
            dimension: config.hidden_size,
            batch_size: DEFAULT_BATCH_SIZE,
        })
    }

    /// Whether `dir` holds the files [`LocalEmbedder::load`] needs (it may still fail to load
    /// if one of them is corrupt).
    pub fn is_model_dir(dir: &Path) -> bool {
        REQUIRED_FILES.iter().all(|name| dir.join(name).is_file())
    }

    /// Sets the most texts that go through the model in one forward pass (default 32; at least
    /// 1). A pass also holds at most about 512 padded tokens, so this caps short texts only.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size.max(1);
        self
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn dimension(&self) -> usize {
        self.dimension
    }

    fn model(&self) -> &str {
        &self.model_name
    }

    async fn embed(&self, texts: &[String]) -> EmbedResult<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        let texts = texts.to_vec();
        let batch_size = self.batch_size;
        // The forward pass is seconds of CPU work for large inputs: keep it off the async
        // workers.
        let vectors = tokio::task::spawn_blocking(move || inner.embed_blocking(&texts, batch_size))
            .await
            .map_err(|e| backend(format!("local embedding task failed: {e}")))??;
        debug_assert!(vectors.iter().all(|v| v.len() == self.dimension));
        Ok(vectors)
    }
}

impl Inner {
    fn embed_blocking(&self, texts: &[String], batch_size: usize) -> EmbedResult<Vec<Vec<f32>>> {
        // `do_lower_case` in sentence_bert_config.json asks for lowercasing on top of whatever
        // the tokenizer's own normaliser does. One text at a time, on this thread: the
        // tokenizer's batch call hands even one text to rayon's pool and waits for it; issue 37
        // saw that pool make a query take 716 ms instead of 4 while the other core was busy.
        let encodings = texts
            .iter()
            .map(|t| {
                let text = if self.lowercase { t.to_lowercase() } else { t.clone() };
                self.tokenizer.encode(text, true)
            })
            .collect::<Result<Vec<Encoding>, _>>()
            .map_err(|e| backend(format!("tokenization failed: {e}")))?;

        // Sorting by length keeps similar lengths in one sub-batch, so little compute goes to
        // padding, and lets each sub-batch be sized by the token budget; results are put back
        // in input order.
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].get_ids().len()));
        let mut chunks: Vec<&[usize]> = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let longest = encodings[order[start]].get_ids().len().max(1);
            let end = (start + (TOKEN_BUDGET / longest).clamp(1, batch_size)).min(order.len());
            chunks.push(&order[start..end]);
            start = end;
        }

        // Sub-batches run side by side, one thread each, each product on the thread that asked
        // for it (see SINGLE_THREADED_PRODUCTS); a query is one sub-batch and stays on the
        // caller's thread.
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(chunks.len());
        let next = AtomicUsize::new(0);
        let run = || -> EmbedResult<Indexed> {
            let mut done = Vec::new();
            while let Some(chunk) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
                let batch: Vec<&Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
                let vectors = self
                    .forward(&batch)
                    .map_err(|e| backend(format!("local model forward pass failed: {e}")))?;
                done.extend(chunk.iter().copied().zip(vectors));
            }
            Ok(done)
        };
        let parts: Vec<EmbedResult<Indexed>> = std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(run)).collect();
            let mut parts = vec![run()];
            parts.extend(helpers.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(backend("local model forward pass panicked".into())))
            }));
            parts
        });
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encodings.len()];
        for part in parts {
            for (i, v) in part? {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Runs one padded sub-batch and returns its mean-pooled, L2-normalised vectors.
    fn forward(&self, batch: &[&Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let len = batch.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let n = batch.len();
        let mut ids = Vec::with_capacity(n * len);
        let mut type_ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in batch {
            let pad = len - e.get_ids().len();
            ids.extend_from_slice(e.get_ids());
            ids.extend(std::iter::repeat_n(self.pad_id, pad));
            type_ids.extend_from_slice(e.get_type_ids());
            type_ids.extend(std::iter::repeat_n(0, pad));
            mask.extend_from_slice(e.get_attention_mask());
            mask.extend(std::iter::repeat_n(0, pad));
        }
        let dim = self.model.hidden_size();
        if len == 0 {
            // Only a tokenizer that adds no [CLS] can give no token at all; the floors below
            // would make that a zero vector, as sentence-transformers does.
            return Ok(vec![vec![0.0; dim]; n]);
        }
        let hidden = self.model.forward(&ids, &type_ids, &mask, n, len)?; // n * len * dim
        let mut out = Vec::with_capacity(n);
        for (states, mask) in hidden.chunks_exact(len * dim).zip(mask.chunks_exact(len)) {
            let mut mean = vec![0.0f32; dim];
            for (state, _) in states.chunks_exact(dim).zip(mask).filter(|(_, &m)| m != 0) {
                for (acc, v) in mean.iter_mut().zip(state) {
                    *acc += v;
                }
            }
            // The same floors as sentence-transformers (Pooling: 1e-9, Normalize: 1e-12), so a
            // text that is all padding or a zero vector cannot turn into NaN.
            let count = (mask.iter().filter(|&&m| m != 0).count() as f32).max(1e-9);
            mean.iter_mut().for_each(|v| *v /= count);
            let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            mean.iter_mut().for_each(|v| *v /= norm);
            out.push(mean);
        }
        Ok(out)
    }
}

/// The part of `sentence_bert_config.json` that changes the output.
struct SentenceBertConfig {
    max_seq_length: usize,
    do_lower_case: bool,
}

impl SentenceBertConfig {
    fn read(dir: &Path) -> EmbedResult<Self> {
        let path = dir.join("sentence_bert_config.json");
        let mut config = Self {
            max_seq_length: DEFAULT_MAX_SEQ_LENGTH,
            do_lower_case: false,
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(config),
            Err(e) => return Err(backend(format!("cannot read {}: {e}", path.display()))),
        };
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| backend(format!("{} is not valid JSON: {e}", path.display())))?;
        if let Some(max) = value.get("max_seq_length").filter(|v| !v.is_null()) {
            config.max_seq_length = max
                .as_u64()
                .and_then(|m| usize::try_from(m).ok())
                .ok_or_else(|| backend(format!("max_seq_length in {} is not a number", path.display())))?;
        }
        if let Some(lower) = value.get("do_lower_case").and_then(|v| v.as_bool()) {
            config.do_lower_case = lower;
        }
        Ok(config)
    }
}

fn backend(message: String) -> EmbedError {
    EmbedError::Backend(message.into())
}
