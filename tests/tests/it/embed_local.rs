//! The `local` embedding provider against the real sentence-transformers: every reference vector
//! in tests/data/embeddings (made by make_reference.py there) must come out within 1e-4 per
//! component, and bad model directories must fail with a clear error rather than a panic.
//!
//! Needs the model installed (`bash api/fetch-model.sh`; CI does it): in `SEDIMENT_MODEL_DIR`,
//! else in ~/.cache/sediment/models/all-MiniLM-L6-v2. A missing model fails these tests rather
//! than skipping them, so a broken install cannot pass unnoticed.

use std::error::Error as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use shared::embed::{EmbedError, Embedder, LocalEmbedder};

const TOLERANCE: f32 = 1e-4;
const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/embeddings/all-MiniLM-L6-v2.json");

fn model_dir() -> PathBuf {
    let dir = match std::env::var_os("SEDIMENT_MODEL_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            Path::new(&home).join(".cache/sediment/models/all-MiniLM-L6-v2")
        }
    };
    assert!(
        LocalEmbedder::is_model_dir(&dir),
        "no all-MiniLM-L6-v2 model in {}: run `bash api/fetch-model.sh` (or point SEDIMENT_MODEL_DIR at a model dir)",
        dir.display()
    );
    dir
}

/// One model for all tests of this file: loading it reads ~90 MB.
fn embedder() -> Arc<LocalEmbedder> {
    static EMBEDDER: OnceLock<Arc<LocalEmbedder>> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| Arc::new(LocalEmbedder::load(&model_dir()).expect("load the local model")))
        .clone()
}

struct Reference {
    texts: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

fn reference() -> Reference {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(REFERENCE).expect("read the reference file"))
            .expect("reference is JSON");
    let sentences = json["sentences"].as_array().expect("sentences array");
    let texts = sentences
        .iter()
        .map(|s| s["text"].as_str().expect("text").to_owned())
        .collect();
    let vectors = sentences
        .iter()
        .map(|s| {
            s["embedding"]
                .as_array()
                .expect("embedding array")
                .iter()
                .map(|x| x.as_f64().expect("float") as f32)
                .collect()
        })
        .collect();
    Reference { texts, vectors }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vector lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The message of the error's source (the `Backend` payload), where the detail lives.
fn detail(err: &EmbedError) -> String {
    err.source().map(|s| s.to_string()).unwrap_or_default()
}

/// A temp dir with the model's files linked in, except `skip`.
fn model_copy_without(skip: &[&str]) -> tempfile::TempDir {
    let src = model_dir();
    let dir = tempfile::tempdir().expect("temp dir");
    for name in [
        "model.safetensors",
        "tokenizer.json",
        "config.json",
        "sentence_bert_config.json",
    ] {
        if !skip.contains(&name) {
            std::os::unix::fs::symlink(src.join(name), dir.path().join(name)).expect("link model file");
        }
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_sentence_transformers_reference() {
    let reference = reference();
    assert!(reference.texts.len() >= 10, "reference has too few sentences");
    let got = embedder().embed(&reference.texts).await.expect("embed");
    assert_eq!(got.len(), reference.texts.len());
    let mut worst = (0.0f32, "");
    for ((text, want), got) in reference.texts.iter().zip(&reference.vectors).zip(&got) {
        let diff = max_abs_diff(got, want);
        assert!(diff <= TOLERANCE, "{text:?}: max abs diff {diff} > {TOLERANCE}");
        if diff >= worst.0 {
            worst = (diff, text);
        }
    }
    let shown: String = worst.1.chars().take(40).collect();
    println!("max abs diff vs sentence-transformers: {:e} (on {shown:?})", worst.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_equals_one_by_one() {
    let texts = reference().texts;
    let embedder = embedder();
    let batch = embedder.embed(&texts).await.expect("embed batch");
    for (text, from_batch) in texts.iter().zip(&batch) {
        let alone = embedder.embed(std::slice::from_ref(text)).await.expect("embed one");
        assert_eq!(alone.len(), 1);
        // Padding changes only the shapes of the matrix products, so only rounding differs.
        let diff = max_abs_diff(&alone[0], from_batch);
        assert!(diff <= 1e-5, "{text:?}: batch and single differ by {diff}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_texts_keep_their_order() {
    let reference = reference();
    // More texts than one forward pass takes, in an order unrelated to their lengths, so the
    // sort-by-length sub-batching has to put every vector back in its place.
    let short = reference.texts.len() - 1;
    let picks: Vec<usize> = (0..40).map(|i| (i * 7) % short).collect();
    let texts: Vec<String> = picks.iter().map(|&i| reference.texts[i].clone()).collect();
    let got = embedder().embed(&texts).await.expect("embed");
    assert_eq!(got.len(), texts.len());
    for (k, (&i, v)) in picks.iter().zip(&got).enumerate() {
        let diff = max_abs_diff(v, &reference.vectors[i]);
        assert!(
            diff <= TOLERANCE,
            "position {k} ({:?}): diff {diff}",
            reference.texts[i]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_are_unit_length_with_the_model_dimension() {
    let embedder = embedder();
    assert_eq!(embedder.dimension(), 384);
    assert!(!embedder.model().is_empty());
    assert!(embedder.embed(&[]).await.expect("embed nothing").is_empty());

    let texts: Vec<String> = ["", " ", "\n\t", "a", "🚀", "订单"].map(String::from).to_vec();
    let got = embedder.embed(&texts).await.expect("embed");
    assert_eq!(got.len(), texts.len());
    for (text, v) in texts.iter().zip(&got) {
        assert_eq!(v.len(), 384, "{text:?}");
        assert!(v.iter().all(|x| x.is_finite()), "{text:?} has a non-finite component");
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{text:?}: norm {norm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_past_max_seq_length_is_truncated() {
    let reference = reference();
    let long = reference.texts.last().expect("the long text is last").clone();
    let longer = format!("{long} And then something completely different happened to the cluster.");
    let got = embedder().embed(&[long, longer]).await.expect("embed");
    // Both are cut at 256 tokens, before the point where they differ.
    let diff = max_abs_diff(&got[0], &got[1]);
    assert!(diff <= 1e-5, "tokens past max_seq_length changed the vector by {diff}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_all_succeed() {
    let reference = reference();
    let embedder = embedder();
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let embedder = embedder.clone();
            // Different slices per task, so several batch shapes run at the same time; the long
            // text (last) is left out since it costs more than all the others together.
            let end = reference.texts.len() - 1;
            let start = i % end;
            let texts: Vec<String> = reference.texts[start..end].to_vec();
            let want: Vec<Vec<f32>> = reference.vectors[start..end].to_vec();
            tokio::spawn(async move {
                let got = embedder.embed(&texts).await.expect("concurrent embed");
                for ((text, got), want) in texts.iter().zip(&got).zip(&want) {
                    let diff = max_abs_diff(got, want);
                    assert!(diff <= TOLERANCE, "task {i}, {text:?}: diff {diff}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task did not panic");
    }
}

#[test]
fn missing_tokenizer_is_a_backend_error_naming_the_file() {
    let dir = model_copy_without(&["tokenizer.json"]);
    assert!(!LocalEmbedder::is_model_dir(dir.path()));
    let err = LocalEmbedder::load(dir.path()).err().expect("load must fail");
    assert!(matches!(err, EmbedError::Backend(_)), "{err:?}");
    let message = detail(&err);
    assert!(message.contains("tokenizer.json"), "{message}");
    assert!(message.contains(&dir.path().display().to_string()), "{message}");
}

#[test]
fn corrupt_weights_are_an_error_not_a_panic() {
    let real = std::fs::read(model_dir().join("model.safetensors")).expect("read weights");
    let cases: [(&str, Vec<u8>); 4] = [
        ("garbage", b"this is not a safetensors file at all".repeat(100)),
        ("empty", Vec::new()),
        ("truncated", real[..real.len() / 2].to_vec()),
        ("header only", real[..4096].to_vec()),
    ];
    for (case, bytes) in cases {
        let dir = model_copy_without(&["model.safetensors"]);
        std::fs::write(dir.path().join("model.safetensors"), bytes).expect("write weights");
        assert!(LocalEmbedder::is_model_dir(dir.path()));
        let result = std::panic::catch_unwind(|| LocalEmbedder::load(dir.path()));
        let err = result
            .unwrap_or_else(|_| panic!("{case}: load panicked"))
            .err()
            .unwrap_or_else(|| panic!("{case}: load succeeded"));
        assert!(matches!(err, EmbedError::Backend(_)), "{case}: {err:?}");
        assert!(detail(&err).contains("model.safetensors"), "{case}: {}", detail(&err));
    }
}

#[test]
fn corrupt_config_is_an_error() {
    for name in ["config.json", "sentence_bert_config.json", "tokenizer.json"] {
        let dir = model_copy_without(&[name]);
        std::fs::write(dir.path().join(name), b"{ not json").expect("write config");
        let err = LocalEmbedder::load(dir.path()).err().expect("load must fail");
        assert!(matches!(err, EmbedError::Backend(_)), "{name}: {err:?}");
        assert!(detail(&err).contains(name), "{name}: {}", detail(&err));
    }
}

/// A copy of the model dir whose config.json sets `key` to `value`.
fn model_with_config(key: &str, value: serde_json::Value) -> tempfile::TempDir {
    let dir = model_copy_without(&["config.json"]);
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model_dir().join("config.json")).expect("read config")).expect("config");
    config[key] = value;
    std::fs::write(
        dir.path().join("config.json"),
        serde_json::to_vec(&config).expect("json"),
    )
    .expect("write config");
    dir
}

#[test]
fn a_model_the_encoder_cannot_run_is_refused_naming_why() {
    let cases = [
        ("hidden_act", serde_json::json!("relu"), "relu"),
        (
            "position_embedding_type",
            serde_json::json!("relative_key"),
            "relative_key",
        ),
        // One layer more than the weights hold: the missing tensor is named.
        ("num_hidden_layers", serde_json::json!(7), "encoder.layer.6"),
    ];
    for (key, value, named) in cases {
        let dir = model_with_config(key, value);
        let err = LocalEmbedder::load(dir.path())
            .err()
            .unwrap_or_else(|| panic!("{key}: load succeeded"));
        assert!(matches!(err, EmbedError::Backend(_)), "{key}: {err:?}");
        assert!(detail(&err).contains(named), "{key}: {}", detail(&err));
    }
}

/// Checkpoints exported from a task model name their tensors `bert.…`; the encoder finds them
/// there and gives the same vectors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_named_under_bert_give_the_same_vectors() {
    // safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's
    // dtype, shape and byte range, then the bytes. Renaming is rewriting the header.
    let real = std::fs::read(model_dir().join("model.safetensors")).expect("read weights");
    let header_len = u64::from_le_bytes(real[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&real[8..8 + header_len]).expect("header");
    let renamed: serde_json::Map<String, serde_json::Value> = header
        .into_iter()
        .map(|(name, v)| {
            if name == "__metadata__" {
                (name, v)
            } else {
                (format!("bert.{name}"), v)
            }
        })
        .collect();
    let renamed = serde_json::to_vec(&renamed).expect("json");
    let mut file = (renamed.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&renamed);
    file.extend_from_slice(&real[8 + header_len..]);
    let dir = model_copy_without(&["model.safetensors"]);
    std::fs::write(dir.path().join("model.safetensors"), file).expect("write weights");

    let reference = reference();
    let texts = &reference.texts[..4];
    let embedder = LocalEmbedder::load(dir.path()).expect("load the renamed model");
    let got = embedder.embed(texts).await.expect("embed");
    for ((text, got), want) in texts.iter().zip(&got).zip(&reference.vectors) {
        let diff = max_abs_diff(got, want);
        assert!(diff <= TOLERANCE, "{text:?}: diff {diff}");
    }
}
