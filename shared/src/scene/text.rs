//! Text helpers shared by the scene and persona rules: single-line cleanup, normalization for
//! dedup, and token sets for similarity over mixed Chinese and English.
//!
//! Normalization and tokenization are the L1 rules engine's (`memory::rules::text`): lowercase
//! words for Latin script, character bigrams for CJK runs. On top of them this module drops
//! function words, because L2 compares a short memory with a whole scene document, where
//! "the", "to" and "我们" would match anything.

use std::collections::BTreeSet;

use crate::memory::rules::text as l1;
pub(crate) use crate::memory::rules::text::{is_cjk, normalize};

/// A token set; ordered, so that everything computed from it is deterministic.
pub(crate) type Tokens = BTreeSet<String>;

/// One line: runs of whitespace (newlines included) become one space, ends trimmed. Every
/// bullet, tag and heading value goes through this, so a rendered document parses back to
/// the same text.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// English function words: present in nearly every text, so they carry no topic.
const STOPWORDS_EN: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "did",
    "do", "does", "for", "from", "had", "has", "have", "he", "her", "his", "i", "if", "in", "into", "is", "it", "its",
    "just", "me", "my", "no", "not", "of", "on", "or", "our", "she", "so", "than", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "those", "to", "too", "us", "was", "we", "were", "what", "when", "which",
    "who", "will", "with", "would", "you", "your",
];

/// Chinese function words, as the bigrams or lone characters the tokenizer makes of them.
const STOPWORDS_ZH: &[&str] = &[
    "我们", "你们", "他们", "一个", "这个", "那个", "已经", "可以", "需要", "就是", "还是", "然后", "因为", "所以",
    "的", "了", "是", "在", "我", "你", "他", "她", "它", "和", "与", "也", "就", "都", "很",
];

fn is_stopword(token: &str) -> bool {
    STOPWORDS_EN.contains(&token) || STOPWORDS_ZH.contains(&token)
}

/// Topic tokens of a text: the L1 tokens (lowercase words for Latin script, character bigrams
/// for CJK runs, a lone CJK character its own token), function words dropped.
pub(crate) fn tokens(text: &str) -> Tokens {
    l1::tokens(text).into_iter().filter(|t| !is_stopword(t)).collect()
}

/// |a ∩ b| / |a ∪ b|; 0 when both are empty.
pub(crate) fn jaccard(a: &Tokens, b: &Tokens) -> f32 {
    let shared = a.intersection(b).count();
    let union = a.len() + b.len() - shared;
    if union == 0 {
        return 0.0;
    }
    shared as f32 / union as f32
}

/// Share of `part`'s tokens that are also in `whole`, and how many that is; 0 when `part` is
/// empty.
pub(crate) fn coverage(part: &Tokens, whole: &Tokens) -> (f32, usize) {
    if part.is_empty() {
        return (0.0, 0);
    }
    let shared = part.intersection(whole).count();
    (shared as f32 / part.len() as f32, shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> Tokens {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tokenizes_mixed_text_without_function_words() {
        assert_eq!(
            tokens("The slow query on instance A"),
            set(&["slow", "query", "instance"])
        );
        assert_eq!(tokens("实例A慢查询"), set(&["实例", "慢查", "查询"]));
        assert_eq!(tokens("ＤＢＡ 我"), set(&["dba"]));
    }

    #[test]
    fn measures_overlap() {
        let a = tokens("slow query fixed");
        let b = tokens("slow query on instance A, fixed by an index");
        assert_eq!(coverage(&a, &b), (1.0, 3));
        assert!((jaccard(&a, &b) - 3.0 / 5.0).abs() < 1e-6);
        assert_eq!(jaccard(&Tokens::new(), &Tokens::new()), 0.0);
    }

    #[test]
    fn cleans_lines_and_normalizes() {
        assert_eq!(one_line("  a\n b\t\tc "), "a b c");
        assert_eq!(normalize("Slow  Query!"), normalize("slow query"));
        assert_eq!(normalize("慢查询，已修复。"), "慢查询已修复");
    }
}
