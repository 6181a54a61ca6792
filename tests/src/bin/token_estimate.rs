//! Measures sediment's token estimate (`shared::context::tokens`) against real tokenizers
//! (`cl100k_base` and `o200k_base`, from `tiktoken-rs`, offline), on mixed Chinese/English text:
//!
//! - `mixed`: the mixed working session of `integration_tests::mixed_session` (2,000 turns);
//! - `quality`: the turns of the retrieval-quality dataset (English and Chinese owners, code,
//!   tool output; ~7k turns);
//! - `seed000`: the paragraphs of the DBridge memory seed (`../shared/seeds/000_*.txt`, real
//!   Chinese technical prose with Go and SQL), when that directory is beside the repository.
//!
//! ```sh
//! cargo run --release -p integration-tests --bin token_estimate          # the error report
//! cargo run --release -p integration-tests --bin token_estimate -- fit   # least-squares weights
//! ```
//!
//! Each message is counted as the estimator counts it: content plus the per-message overhead,
//! against tokenizer tokens plus the same overhead (OpenAI's chat format adds it). Reported:
//! the error of the total (what a window decision sees), the mean and p95 of the per-message
//! absolute error, and how often a message is underestimated.

use integration_tests::mixed_session;
use integration_tests::quality::Dataset;
use shared::context::tokens::{estimate_message, CharClasses, MESSAGE_OVERHEAD};
use tiktoken_rs::CoreBPE;

fn corpora() -> Vec<(&'static str, Vec<String>)> {
    let mut out = Vec::new();
    let mixed: Vec<String> = (1..=10)
        .flat_map(|seed| mixed_session::turns(seed, 200))
        .map(|t| t["content"].as_str().expect("content").to_owned())
        .collect();
    out.push(("mixed", mixed));
    let quality: Vec<String> = Dataset::generate(42)
        .owners
        .iter()
        .flat_map(|o| &o.sessions)
        .flat_map(|s| &s.turns)
        .map(|t| t.content.clone())
        .collect();
    out.push(("quality", quality));
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/seeds");
    if let Some(path) = std::fs::read_dir(&seeds).ok().and_then(|dir| {
        dir.filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("000_")))
    }) {
        let text = std::fs::read_to_string(&path).expect("read the seed");
        let paragraphs: Vec<String> = text
            .split("\n\n")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        out.push(("seed000", paragraphs));
    } else {
        eprintln!(
            "no seed 000 beside the repository ({}); skipping that sample",
            seeds.display()
        );
    }
    out
}

struct Report {
    total_error: f64,
    mean_abs: f64,
    p95_abs: f64,
    under: f64,
    real_total: u64,
}

fn report(texts: &[String], bpe: &CoreBPE) -> Report {
    let mut errors = Vec::with_capacity(texts.len());
    let (mut est_total, mut real_total, mut under) = (0u64, 0u64, 0usize);
    for text in texts {
        let real = bpe.encode_ordinary(text).len() as u64 + MESSAGE_OVERHEAD;
        let est = estimate_message(text);
        est_total += est;
        real_total += real;
        if est < real {
            under += 1;
        }
        errors.push((est as f64 - real as f64).abs() / real as f64);
    }
    errors.sort_by(f64::total_cmp);
    Report {
        total_error: est_total as f64 / real_total as f64 - 1.0,
        mean_abs: errors.iter().sum::<f64>() / errors.len() as f64,
        p95_abs: errors[(errors.len() - 1) * 95 / 100],
        under: under as f64 / texts.len() as f64,
        real_total,
    }
}

fn features(text: &str) -> [f64; 9] {
    let c = CharClasses::of(text);
    [
        c.cjk as f64,
        c.cjk_punct as f64,
        c.letters as f64,
        c.words as f64,
        c.digits as f64,
        c.numbers as f64,
        c.ascii_punct as f64,
        c.newlines as f64,
        c.other_bytes as f64 / 2.0,
    ]
}

/// Least squares (normal equations, Gaussian elimination) of content tokens on the classes.
fn fit(texts: &[&String], bpe: &CoreBPE) -> [f64; 9] {
    const N: usize = 9;
    let mut a = [[0f64; N + 1]; N];
    for text in texts {
        let x = features(text);
        let y = bpe.encode_ordinary(text).len() as f64;
        for i in 0..N {
            for j in 0..N {
                a[i][j] += x[i] * x[j];
            }
            a[i][N] += x[i] * y;
        }
    }
    for (i, row) in a.iter_mut().enumerate() {
        row[i] += 1e-6; // a class absent from the corpus must not make the system singular
    }
    for col in 0..N {
        let pivot = (col..N)
            .max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))
            .expect("rows");
        a.swap(col, pivot);
        let pivot_row = a[col];
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (cell, pivot_cell) in row.iter_mut().zip(pivot_row).skip(col) {
                    *cell -= f * pivot_cell;
                }
            }
        }
    }
    std::array::from_fn(|i| a[i][N] / a[i][i])
}

fn main() {
    let cl100k = tiktoken_rs::cl100k_base().expect("load cl100k_base");
    let o200k = tiktoken_rs::o200k_base().expect("load o200k_base");
    let corpora = corpora();
    if std::env::args().nth(1).as_deref() == Some("fit") {
        let all: Vec<&String> = corpora.iter().flat_map(|(_, t)| t).collect();
        let names = [
            "cjk",
            "cjk_punct",
            "letter",
            "word",
            "digit",
            "number",
            "ascii_punct",
            "newline",
            "other/2B",
        ];
        for (name, bpe) in [("cl100k", &cl100k), ("o200k", &o200k)] {
            let w = fit(&all, bpe);
            let shown: Vec<String> = names.iter().zip(w).map(|(n, w)| format!("{n}={w:.3}")).collect();
            println!("{name}: {}", shown.join(" "));
        }
        return;
    }
    println!("| sample | messages | tokenizer | real tokens | total error | mean abs error | p95 abs error | underestimated |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, texts) in &corpora {
        for (tok, bpe) in [("cl100k", &cl100k), ("o200k", &o200k)] {
            let r = report(texts, bpe);
            println!(
                "| {name} | {} | {tok} | {} | {:+.1} % | {:.1} % | {:.1} % | {:.1} % |",
                texts.len(),
                r.real_total,
                r.total_error * 100.0,
                r.mean_abs * 100.0,
                r.p95_abs * 100.0,
                r.under * 100.0
            );
        }
    }
    // The seed's formula, for comparison: bytes × 2/3 per message.
    for (name, texts) in &corpora {
        let real: u64 = texts
            .iter()
            .map(|t| cl100k.encode_ordinary(t).len() as u64 + MESSAGE_OVERHEAD)
            .sum();
        let seed: u64 = texts.iter().map(|t| t.len() as u64 * 2 / 3 + MESSAGE_OVERHEAD).sum();
        println!(
            "seed formula (bytes × 2/3) on {name}: {:+.1} % against cl100k",
            (seed as f64 / real as f64 - 1.0) * 100.0
        );
    }
}
