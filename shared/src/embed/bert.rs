//! The BERT encoder of the `local` provider, laid out for one short query at a time.
//!
//! It computes what candle-transformers' `BertModel` computes (post-norm BERT with absolute
//! positions and exact GELU), differing in how, as profiled on a 20-token query on one core:
//! - every linear weight is stored transposed, `(in, out)` and contiguous. `gemm` multiplies a few
//!   rows by a weight stored `(out, in)` by first repacking the whole weight, every call: 40% of
//!   the time went to that;
//! - the query, key and value projections are one product against their concatenated weights;
//! - only the matrix products go through candle. Layer norm, softmax and GELU run here, on the
//!   calling thread: candle-nn splits the first two over rayon's pool, so each of a query's 19
//!   calls woke the other core and waited for it, and its GELU calls libm's `erff` per element
//!   (8% of the time; see [`erf`]).

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

/// The fields of a Hugging Face BERT `config.json` that the forward pass reads.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Config {
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub pad_token_id: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn default_eps() -> f64 {
    1e-12
}

fn default_act() -> String {
    "gelu".to_owned()
}

impl Config {
    /// Why this encoder cannot run the model, if it cannot.
    pub(super) fn unsupported(&self) -> Option<String> {
        if self.hidden_act != "gelu" {
            return Some(format!("hidden_act {:?} (only \"gelu\" is supported)", self.hidden_act));
        }
        if let Some(kind) = self.position_embedding_type.as_deref().filter(|k| *k != "absolute") {
            return Some(format!(
                "position_embedding_type {kind:?} (only \"absolute\" is supported)"
            ));
        }
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Some(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        None
    }
}

struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    /// Normalises each row of `x` (rows of `weight.len()` values) in place.
    fn apply(&self, x: &mut [f32]) {
        let width = self.weight.len() as f32;
        for row in x.chunks_exact_mut(self.weight.len()) {
            let mean = row.iter().sum::<f32>() / width;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width;
            let inv = 1.0 / (var + self.eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *v = (*v - mean) * inv * w + b;
            }
        }
    }
}

/// A linear layer whose weight is stored `(in, out)`, so a product needs no repacking.
struct Linear {
    weight: Tensor,
    bias: Vec<f32>,
}

impl Linear {
    /// `x W + b` for `rows` rows of `x`.
    fn apply(&self, x: &[f32], rows: usize) -> candle_core::Result<Vec<f32>> {
        let (input, out) = self.weight.dims2()?;
        let x = Tensor::from_slice(x, (rows, input), &Device::Cpu)?;
        let mut y = x.matmul(&self.weight)?.flatten_all()?.to_vec1::<f32>()?;
        debug_assert_eq!(y.len(), rows * out);
        for row in y.chunks_exact_mut(out) {
            for (v, b) in row.iter_mut().zip(&self.bias) {
                *v += b;
            }
        }
        Ok(y)
    }
}

struct Layer {
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

/// A BERT encoder on the CPU, in f32.
pub(super) struct Encoder {
    word: Tensor,
    position: Vec<f32>,
    token_type: Tensor,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
}

impl Encoder {
    /// Builds the encoder from a safetensors file's bytes. Names may carry the `bert.` prefix
    /// of checkpoints exported from a task model; f16 and bf16 weights are widened to f32.
    pub(super) fn load(bytes: &[u8], config: &Config) -> Result<Self, String> {
        let tensors: HashMap<String, Tensor> = candle_core::safetensors::load_buffer(bytes, &Device::Cpu)
            .map_err(|e| format!("not a safetensors file: {e}"))?;
        let prefix = if tensors.contains_key("embeddings.word_embeddings.weight") {
            ""
        } else {
            "bert."
        };
        let hidden = config.hidden_size;
        // `None` in `shape` is a dimension the config does not fix (the vocabulary, the
        // intermediate size), taken from the file; the others must agree with the config.
        let get = |name: &str, shape: &[Option<usize>]| -> Result<Tensor, String> {
            let full = format!("{prefix}{name}");
            let t = tensors.get(&full).ok_or_else(|| format!("tensor {full} is missing"))?;
            let dims = t.dims();
            let fits = dims.len() == shape.len() && dims.iter().zip(shape).all(|(d, s)| s.is_none_or(|s| s == *d));
            if !fits {
                return Err(format!("tensor {full} has shape {dims:?}, expected {shape:?}"));
            }
            t.to_dtype(DType::F32).map_err(|e| format!("tensor {full}: {e}"))
        };
        let values = |t: Tensor, name: &str| -> Result<Vec<f32>, String> {
            t.flatten_all()
                .and_then(|t| t.to_vec1::<f32>())
                .map_err(|e| format!("tensor {name}: {e}"))
        };
        let norm = |name: &str| -> Result<LayerNorm, String> {
            Ok(LayerNorm {
                weight: values(get(&format!("{name}.weight"), &[Some(hidden)])?, name)?,
                bias: values(get(&format!("{name}.bias"), &[Some(hidden)])?, name)?,
                eps: config.layer_norm_eps as f32,
            })
        };
        let linear = |name: &str, out: Option<usize>, input: usize| -> Result<Linear, String> {
            let weight = get(&format!("{name}.weight"), &[out, Some(input)])?;
            let out = weight.dim(0).map_err(|e| format!("tensor {name}: {e}"))?;
            Ok(Linear {
                weight: weight
                    .t()
                    .and_then(|t| t.contiguous())
                    .map_err(|e| format!("tensor {name}: {e}"))?,
                bias: values(get(&format!("{name}.bias"), &[Some(out)])?, name)?,
            })
        };

        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for i in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            let [q, k, v] = ["query", "key", "value"]
                .map(|part| linear(&format!("{p}.attention.self.{part}"), Some(hidden), hidden));
            let (q, k, v) = (q?, k?, v?);
            let intermediate = linear(&format!("{p}.intermediate.dense"), None, hidden)?;
            let inner = intermediate.bias.len();
            layers.push(Layer {
                qkv: Linear {
                    weight: Tensor::cat(&[&q.weight, &k.weight, &v.weight], 1)
                        .and_then(|t| t.contiguous())
                        .map_err(|e| format!("{p}.attention.self: {e}"))?,
                    bias: [q.bias, k.bias, v.bias].concat(),
                },
                attention_out: linear(&format!("{p}.attention.output.dense"), Some(hidden), hidden)?,
                attention_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                intermediate,
                output: linear(&format!("{p}.output.dense"), Some(hidden), inner)?,
                output_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        let position = get(
            "embeddings.position_embeddings.weight",
            &[Some(config.max_position_embeddings), Some(hidden)],
        )?;
        Ok(Self {
            word: get("embeddings.word_embeddings.weight", &[None, Some(hidden)])?,
            position: values(position, "embeddings.position_embeddings.weight")?,
            token_type: get("embeddings.token_type_embeddings.weight", &[None, Some(hidden)])?,
            embedding_norm: norm("embeddings.LayerNorm")?,
            layers,
            hidden,
            heads: config.num_attention_heads,
        })
    }

    pub(super) fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// The last hidden state, `n * len * hidden` values, of `n` sequences padded to `len`
    /// tokens (`ids`, `type_ids` and `mask` hold `n * len` values). `mask` is 1 for a token and
    /// 0 for padding, which every position's attention leaves out.
    pub(super) fn forward(
        &self,
        ids: &[u32],
        type_ids: &[u32],
        mask: &[u32],
        n: usize,
        len: usize,
    ) -> candle_core::Result<Vec<f32>> {
        let (hidden, heads) = (self.hidden, self.heads);
        let head = hidden / heads;
        let rows = n * len;
        debug_assert!(ids.len() == rows && type_ids.len() == rows && mask.len() == rows);
        if len * hidden > self.position.len() {
            candle_core::bail!("{len} tokens are more than the model's positions");
        }

        let gather = |table: &Tensor, ids: &[u32]| -> candle_core::Result<Vec<f32>> {
            let ids = Tensor::from_slice(ids, rows, &Device::Cpu)?;
            table.index_select(&ids, 0)?.flatten_all()?.to_vec1::<f32>()
        };
        let mut x = gather(&self.word, ids)?;
        let types = gather(&self.token_type, type_ids)?;
        for (r, row) in x.chunks_exact_mut(hidden).enumerate() {
            let position = &self.position[(r % len) * hidden..][..hidden];
            for ((v, t), p) in row.iter_mut().zip(&types[r * hidden..]).zip(position) {
                *v += t + p;
            }
        }
        self.embedding_norm.apply(&mut x);

        let scale = 1.0 / (head as f32).sqrt();
        let batches = n * heads;
        let mut q = vec![0.0f32; rows * hidden];
        let mut k = vec![0.0f32; rows * hidden];
        let mut v = vec![0.0f32; rows * hidden];
        for layer in &self.layers {
            // (rows, 3 * hidden) -> q, k, v as (n, heads, len, head), the layout batched
            // products take.
            let qkv = layer.qkv.apply(&x, rows)?;
            for (r, row) in qkv.chunks_exact(3 * hidden).enumerate() {
                let (s, t) = (r / len, r % len);
                for h in 0..heads {
                    let dst = ((s * heads + h) * len + t) * head;
                    q[dst..dst + head].copy_from_slice(&row[h * head..][..head]);
                    k[dst..dst + head].copy_from_slice(&row[hidden + h * head..][..head]);
                    v[dst..dst + head].copy_from_slice(&row[2 * hidden + h * head..][..head]);
                }
            }
            let qt = Tensor::from_slice(&q, (batches, len, head), &Device::Cpu)?;
            let kt = Tensor::from_slice(&k, (batches, len, head), &Device::Cpu)?;
            let vt = Tensor::from_slice(&v, (batches, len, head), &Device::Cpu)?;
            let mut scores = qt.matmul(&kt.t()?)?.flatten_all()?.to_vec1::<f32>()?; // (batches, len, len)
            for (b, row) in scores.chunks_exact_mut(len).enumerate() {
                let keys = &mask[(b / (heads * len)) * len..][..len];
                softmax_masked(row, keys, scale);
            }
            let weights = Tensor::from_vec(scores, (batches, len, len), &Device::Cpu)?;
            // (batches, len, head), then back to one row per token: (n, len, heads * head).
            let context = weights.matmul(&vt)?.flatten_all()?.to_vec1::<f32>()?;
            let mut merged = vec![0.0f32; rows * hidden];
            for (r, row) in merged.chunks_exact_mut(hidden).enumerate() {
                let (s, t) = (r / len, r % len);
                for h in 0..heads {
                    let src = ((s * heads + h) * len + t) * head;
                    row[h * head..][..head].copy_from_slice(&context[src..src + head]);
                }
            }

            let mut attended = layer.attention_out.apply(&merged, rows)?;
            add(&mut attended, &x);
            layer.attention_norm.apply(&mut attended);
            x = attended;

            let mut inner = layer.intermediate.apply(&x, rows)?;
            gelu(&mut inner);
            let mut out = layer.output.apply(&inner, rows)?;
            add(&mut out, &x);
            layer.output_norm.apply(&mut out);
            x = out;
        }
        Ok(x)
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Softmax of `scores * scale` over the keys whose `mask` is 1; masked keys get weight 0, as
/// transformers' additive mask of the most negative float gives them.
fn softmax_masked(scores: &mut [f32], mask: &[u32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for (s, &m) in scores.iter_mut().zip(mask) {
        *s = if m == 0 { f32::NEG_INFINITY } else { *s * scale };
        max = max.max(*s);
    }
    if max == f32::NEG_INFINITY {
        // No key to attend to (never so for a tokenised text, which has [CLS]): uniform, as the
        // additive mask would give, rather than NaN.
        scores.fill(1.0 / scores.len() as f32);
        return;
    }
    let mut sum = 0.0;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    for s in scores.iter_mut() {
        *s /= sum;
    }
}

/// `0.5 x (1 + erf(x / sqrt 2))`, BERT's exact GELU, with [`erf`] below, in place.
fn gelu(x: &mut [f32]) {
    for v in x {
        *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// erf as a ratio of two polynomials on [-4, 4] (outside it erf is ±1 in f32), the
/// approximation Eigen and XLA use for f32. It has no branch and no libm call, so the loop in
/// [`gelu`] vectorises; its error is below 1e-6 (the unit test checks it against f64).
// The coefficients as Eigen prints them; f32 rounds them the same way it does there.
#[allow(clippy::excessive_precision)]
#[inline]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    // Plain multiply-adds, not `mul_add`: without the `fma` target feature that is a libm call
    // per element and the loop would not vectorise.
    let mut p = x2 * -2.72614225801306e-10 + 2.77068142495902e-08;
    p = x2 * p - 2.10102402082508e-06;
    p = x2 * p - 5.69250639462346e-05;
    p = x2 * p - 7.34990630326855e-04;
    p = x2 * p - 2.95459980854025e-03;
    p = x2 * p - 1.60960333262415e-02;
    let mut q = x2 * -1.45660718464996e-05 - 2.13374055278905e-04;
    q = x2 * q - 1.68282697438203e-03;
    q = x2 * q - 7.37332916720468e-03;
    q = x2 * q - 1.42647390514189e-02;
    x * p / q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf in f64 from its Taylor series (|x| < 3) and its asymptotic continued fraction
    /// (beyond), both far more precise than the f32 approximation under test.
    fn erf64(x: f64) -> f64 {
        if x.abs() >= 3.0 {
            // erfc(x) = exp(-x^2) / (x sqrt(pi)) * 1 / (1 + 1/(2x^2) / (1 + 2/(2x^2) / ...)),
            // evaluated bottom-up.
            let a = x.abs();
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (a + f);
            }
            let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f);
            return (1.0 - erfc).copysign(x);
        }
        let mut sum = 0.0;
        let mut term = x;
        for n in 0..200 {
            sum += term / (2 * n + 1) as f64;
            term *= -x * x / (n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_is_within_a_millionth_everywhere() {
        let mut worst = (0.0f64, 0.0f32);
        for i in -100_000..=100_000 {
            let x = i as f32 * 1e-4 * 6.0; // [-6, 6]
            let err = (f64::from(erf(x)) - erf64(f64::from(x))).abs();
            if err > worst.0 {
                worst = (err, x);
            }
        }
        assert!(worst.0 < 1e-6, "erf is off by {} at {}", worst.0, worst.1);
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(f32::INFINITY), erf(4.0));
    }

    #[test]
    fn gelu_matches_known_values() {
        let mut y = vec![-3.0f32, -1.0, 0.0, 1.0, 3.0, 10.0];
        gelu(&mut y);
        // gelu(1) = 0.841344746..., gelu(-1) = -0.158655253..., gelu(10) = 10.
        assert!((y[3] - 0.841_344_7).abs() < 1e-6, "{y:?}");
        assert!((y[1] + 0.158_655_25).abs() < 1e-6, "{y:?}");
        assert_eq!(y[2], 0.0);
        assert!((y[5] - 10.0).abs() < 1e-6, "{y:?}");
    }

    #[test]
    fn softmax_leaves_out_masked_keys() {
        let mut scores = vec![1.0f32, 2.0, 50.0, 3.0];
        softmax_masked(&mut scores, &[1, 1, 0, 1], 0.5);
        assert_eq!(scores[2], 0.0, "a padded key gets no weight, however high its score");
        let sum: f32 = scores.iter().sum();
        assert!((sum - 1.0).abs() < 1e-6);
        // exp(0.5), exp(1), exp(1.5), normalised.
        let e = [0.5f32.exp(), 1.0f32.exp(), 1.5f32.exp()];
        let total: f32 = e.iter().sum();
        assert!((scores[0] - e[0] / total).abs() < 1e-6 && (scores[3] - e[2] / total).abs() < 1e-6);

        let mut none = vec![4.0f32, 1.0];
        softmax_masked(&mut none, &[0, 0], 1.0);
        assert_eq!(none, vec![0.5, 0.5], "no key at all gives uniform weights, not NaN");
    }

    #[test]
    fn layer_norm_centres_and_scales_each_row() {
        let norm = LayerNorm {
            weight: vec![2.0, 2.0, 2.0],
            bias: vec![1.0, 1.0, 1.0],
            eps: 1e-12,
        };
        let mut x = vec![1.0f32, 2.0, 3.0, 5.0, 5.0, 5.0];
        norm.apply(&mut x);
        // Row 1: mean 2, std sqrt(2/3); row 2 is constant, so all its values become the bias.
        let z = (1.5f32).sqrt();
        let want = [1.0 - 2.0 * z, 1.0, 1.0 + 2.0 * z, 1.0, 1.0, 1.0];
        for (got, want) in x.iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{x:?}");
        }
    }

    #[test]
    fn config_outside_what_the_encoder_runs_is_named() {
        let config = |extra: &str| -> Config {
            serde_json::from_str(&format!(
                r#"{{"hidden_size": 384, "num_attention_heads": 12, "num_hidden_layers": 6,
                    "max_position_embeddings": 512{extra}}}"#
            ))
            .unwrap()
        };
        assert!(config("").unsupported().is_none());
        assert!(config(r#", "hidden_act": "relu""#)
            .unsupported()
            .unwrap()
            .contains("relu"));
        assert!(config(r#", "position_embedding_type": "relative_key""#)
            .unsupported()
            .unwrap()
            .contains("relative_key"));
        let mut odd = config("");
        odd.num_attention_heads = 5;
        assert!(odd.unsupported().unwrap().contains("multiple"));
    }
}
