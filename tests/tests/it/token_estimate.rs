//! The token estimate against a real tokenizer (`cl100k_base`, `o200k_base` via tiktoken-rs,
//! offline) on the mixed Chinese/English session: pins the error tests/BENCHMARKS.md states. The full
//! measurement is the `token_estimate` binary.

use integration_tests::mixed_session;
use shared::context::tokens::{estimate_message, MESSAGE_OVERHEAD};

/// Estimated over real tokens of 200 turns, minus one.
fn total_error(bpe: &tiktoken_rs::CoreBPE, seed: u64) -> f64 {
    let (mut estimated, mut real) = (0u64, 0u64);
    for turn in mixed_session::turns(seed, 200) {
        let content = turn["content"].as_str().expect("content");
        estimated += estimate_message(content);
        real += bpe.encode_ordinary(content).len() as u64 + MESSAGE_OVERHEAD;
    }
    estimated as f64 / real as f64 - 1.0
}

#[test]
fn the_estimate_of_a_mixed_session_is_close_to_cl100k_and_above_o200k() {
    let cl100k = tiktoken_rs::cl100k_base().expect("cl100k_base");
    let o200k = tiktoken_rs::o200k_base().expect("o200k_base");
    for seed in [1, 2, 3] {
        let cl = total_error(&cl100k, seed);
        assert!(
            (-0.02..=0.10).contains(&cl),
            "seed {seed}: {:+.1} % against cl100k",
            cl * 100.0
        );
        let o = total_error(&o200k, seed);
        assert!(
            (0.0..=0.30).contains(&o),
            "seed {seed}: {:+.1} % against o200k",
            o * 100.0
        );
    }
}

#[test]
fn the_seeds_byte_formula_would_double_count_chinese() {
    let cl100k = tiktoken_rs::cl100k_base().expect("cl100k_base");
    let zh = "订单表按月分区，先迁移二零二四年的数据。".repeat(20);
    let real = cl100k.encode_ordinary(&zh).len() as f64;
    let seed_formula = (zh.len() * 2 / 3) as f64;
    let ours = shared::context::tokens::estimate_text(&zh) as f64;
    assert!(seed_formula / real > 1.8, "bytes × 2/3 = {seed_formula} vs {real}");
    // Very common characters are one token each in cl100k; the weights (fitted on mixed text,
    // rarer characters included) lean high on them, by design never low.
    assert!((1.0..1.25).contains(&(ours / real)), "ours = {ours} vs {real}");
}
