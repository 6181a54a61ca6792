//! Token estimation without a tokenizer.
//!
//! The estimate decides when a session needs its summary and when it needs compaction, on every
//! context call, so it must be cheap (one pass over the characters, no vocabulary) and it must
//! not be fooled by UTF-8: a Chinese character is three bytes but about one token, so the
//! seed's `bytes × 2/3` counts Chinese at twice its real cost, and `chars / 4` counts it at a
//! quarter.
//!
//! # The formula
//! Characters are put in classes and each class has a weight, in tokens:
//!
//! | class | weight |
//! |---|---|
//! | CJK ideograph, kana or Hangul syllable | 1.15 |
//! | CJK or full-width punctuation (`，。！？「」`) | 1.4 |
//! | ASCII letter | 0.1, plus 0.7 per run of letters (a word) |
//! | ASCII digit | 0.2, plus 2 per run of digits (a number; cl100k splits numbers from the space before them and into groups of three) |
//! | ASCII punctuation or symbol | 0.4 |
//! | newline | 1 |
//! | space, tab | 0 (BPE merges a space into the next word) |
//! | anything else (emoji, accented or Cyrillic letters) | 1 per two UTF-8 bytes (rare in the samples, so set high rather than fitted) |
//!
//! and a message costs [`MESSAGE_OVERHEAD`] more for its role and separators (what OpenAI's
//! chat format adds). The sum is rounded up. The weights were fitted against `cl100k_base` and
//! `o200k_base` with `tiktoken-rs` on mixed Chinese/English conversations (the `token_estimate`
//! binary of the integration tests reproduces the fit and the error; `tests/BENCHMARKS.md`,
//! "Token estimate", has the numbers), then rounded up a little: the total of a session comes
//! out within a few percent above `cl100k_base` and 10–20 % above `o200k_base`, whose
//! vocabulary packs Chinese tighter. Leaning high is deliberate: overestimating costs a little
//! window, underestimating overflows it.

/// Tokens a chat message costs beyond its content (role, start and end markers).
pub const MESSAGE_OVERHEAD: u64 = 4;

/// Weights in thousandths of a token, so the sum stays integer and exact.
const CJK_MILLI: u64 = 1_150;
const CJK_PUNCT_MILLI: u64 = 1_400;
const LETTER_MILLI: u64 = 100;
const WORD_MILLI: u64 = 700;
const DIGIT_MILLI: u64 = 200;
const NUMBER_MILLI: u64 = 2_000;
const ASCII_PUNCT_MILLI: u64 = 400;
const NEWLINE_MILLI: u64 = 1_000;
const OTHER_PER_TWO_BYTES_MILLI: u64 = 1_000;

/// How many characters of each class a text holds; the input of the estimate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CharClasses {
    pub cjk: u64,
    pub cjk_punct: u64,
    pub letters: u64,
    pub words: u64,
    pub digits: u64,
    /// Runs of digits (a number).
    pub numbers: u64,
    pub ascii_punct: u64,
    pub newlines: u64,
    pub spaces: u64,
    /// UTF-8 bytes of characters in no other class.
    pub other_bytes: u64,
}

impl CharClasses {
    /// Counts the classes of `text` in one pass.
    pub fn of(text: &str) -> Self {
        let mut c = Self::default();
        let mut in_word = false;
        let mut in_number = false;
        for ch in text.chars() {
            let letter = ch.is_ascii_alphabetic();
            let digit = ch.is_ascii_digit();
            if digit && !in_number {
                c.numbers += 1;
            }
            in_number = digit;
            if letter {
                c.letters += 1;
                if !in_word {
                    c.words += 1;
                }
            } else if digit {
                c.digits += 1;
            } else if ch == '\n' {
                c.newlines += 1;
            } else if ch == ' ' || ch == '\t' || ch == '\r' {
                c.spaces += 1;
            } else if ch.is_ascii() {
                c.ascii_punct += 1;
            } else if is_cjk(ch) {
                c.cjk += 1;
            } else if is_cjk_punct(ch) {
                c.cjk_punct += 1;
            } else {
                c.other_bytes += ch.len_utf8() as u64;
            }
            in_word = letter;
        }
        c
    }

    /// The estimated tokens of a text with these classes (no message overhead).
    pub fn tokens(&self) -> u64 {
        let milli = self.cjk * CJK_MILLI
            + self.cjk_punct * CJK_PUNCT_MILLI
            + self.letters * LETTER_MILLI
            + self.words * WORD_MILLI
            + self.digits * DIGIT_MILLI
            + self.numbers * NUMBER_MILLI
            + self.ascii_punct * ASCII_PUNCT_MILLI
            + self.newlines * NEWLINE_MILLI
            + self.other_bytes.div_ceil(2) * OTHER_PER_TWO_BYTES_MILLI;
        milli.div_ceil(1_000)
    }
}

/// Estimated tokens of a bare text.
pub fn estimate_text(text: &str) -> u64 {
    CharClasses::of(text).tokens()
}

/// Estimated tokens of one chat message with this content, overhead included.
pub fn estimate_message(content: &str) -> u64 {
    estimate_text(content) + MESSAGE_OVERHEAD
}

/// Han ideographs (with the extensions and compatibility blocks), kana and Hangul syllables.
fn is_cjk(ch: char) -> bool {
    matches!(ch,
        '\u{3040}'..='\u{30FF}'     // hiragana, katakana
        | '\u{3400}'..='\u{4DBF}'   // extension A
        | '\u{4E00}'..='\u{9FFF}'   // unified ideographs
        | '\u{AC00}'..='\u{D7AF}'   // Hangul syllables
        | '\u{F900}'..='\u{FAFF}'   // compatibility ideographs
        | '\u{20000}'..='\u{2FA1F}' // extensions B–F, compatibility supplement
    )
}

/// CJK symbols and punctuation, and the full-width and half-width forms.
fn is_cjk_punct(ch: char) -> bool {
    matches!(ch, '\u{3000}'..='\u{303F}' | '\u{FF00}'..='\u{FFEF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_counted_per_character() {
        let c = CharClasses::of("订单表 orders，共 1200 行。\n😀");
        assert_eq!(c.cjk, 5);
        assert_eq!(c.cjk_punct, 2);
        assert_eq!(c.letters, 6);
        assert_eq!(c.words, 1);
        assert_eq!(c.digits, 4);
        assert_eq!(c.numbers, 1);
        assert_eq!(c.spaces, 3);
        assert_eq!(c.newlines, 1);
        assert_eq!(c.other_bytes, 4);
    }

    #[test]
    fn chinese_is_not_counted_by_bytes() {
        // 100 ideographs are 300 bytes; the seed's bytes × 2/3 would say 200 tokens.
        let zh = "数".repeat(100);
        assert_eq!(estimate_text(&zh), 115);
        // Plain English: about 1.3 tokens per word of 4–5 letters.
        let en = "the quick brown fox jumps over the lazy dog";
        let tokens = estimate_text(en);
        assert!((9..=14).contains(&tokens), "{tokens}");
    }

    #[test]
    fn empty_text_costs_only_the_message_overhead() {
        assert_eq!(estimate_text(""), 0);
        assert_eq!(estimate_message(""), MESSAGE_OVERHEAD);
    }

    #[test]
    fn estimate_is_monotonic_in_appended_text() {
        let mut text = String::new();
        let mut last = 0;
        for piece in ["hello", " 世界", "!", " 42", "\n", "naïve"] {
            text.push_str(piece);
            let now = estimate_text(&text);
            assert!(now >= last, "{text:?}: {now} < {last}");
            last = now;
        }
    }
}
