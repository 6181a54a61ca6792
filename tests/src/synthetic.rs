//! Synthetic conversation text for the benchmarks: a few common domain words (English and
//! Chinese) over a long Zipf-like tail, so posting lists have the skew of real text.

const WORDS: &[&str] = &[
    "database",
    "index",
    "replica",
    "backup",
    "latency",
    "query",
    "schema",
    "migration",
    "订单",
    "用户",
    "索引",
    "慢查询",
    "北京",
    "上海",
    "deploy",
    "rollback",
    "cache",
    "timeout",
    "partition",
    "vacuum",
    "kafka",
    "rabbit",
];
/// Distinct synthetic terms besides `WORDS`.
const VOCABULARY: usize = 20_000;

/// xorshift64: deterministic, so every run loads the same text.
pub struct Rng(pub u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A term: a quarter of the time a common domain word, else one of the long tail.
    pub fn word(&mut self) -> String {
        if self.next_u64().is_multiple_of(4) {
            return WORDS[(self.next_u64() % WORDS.len() as u64) as usize].to_owned();
        }
        self.tail_word()
    }

    /// A term of the long tail only (rank ~ 1/u²).
    pub fn tail_word(&mut self) -> String {
        let u = (self.next_u64() % 1_000_000) as f64 / 1_000_000.0 + 1e-6;
        let rank = ((VOCABULARY as f64) * u * u) as usize;
        format!("term{rank}")
    }
}

/// Twelve terms and a unique tag `#seed`.
pub fn sentence(seed: usize) -> String {
    sentence_of(seed, Rng::word)
}

/// Like [`sentence`], with terms of the long tail only.
pub fn tail_sentence(seed: usize) -> String {
    sentence_of(seed, Rng::tail_word)
}

fn sentence_of(seed: usize, mut word: impl FnMut(&mut Rng) -> String) -> String {
    let mut rng = Rng(seed as u64 * 2_654_435_761 + 0x9e37_79b9);
    let words: Vec<String> = (0..12).map(|_| word(&mut rng)).collect();
    format!("{} #{seed}", words.join(" "))
}
