//! The one BM25 model of the project: text in, sparse vector out.
//!
//! Wraps Qdrant Edge's `EdgeBm25`, whose token ids are the Qdrant server's, configured with the
//! `Multilingual` tokenizer (charabia with jieba for Chinese): the default `Word` tokenizer keeps a
//! Chinese phrase as one token, so "订单" would never match "订单表". Lowercasing, English
//! stopwords and the English stemmer are the library defaults. Every backend indexes and queries
//! with these vectors, so changing the configuration here means re-indexing everything.
//!
//! The tokenizer skips every token without a letter, so numbers alone ("8080", "2024",
//! "10.0.0.12") would be unsearchable. Before tokenizing, each number that does not follow a
//! letter or digit gets a letter in front (`8080` → `n8080`), in documents and queries alike, so
//! ports, years, ticket numbers and versions match. [`TEXT_VERSION`] names this analysis: an index
//! built with another one must be rebuilt, since its vectors would not match the queries'.
//!
//! Pure CPU work, no I/O; `Bm25` is `Send + Sync` and cheap to share behind an `Arc`.

use std::borrow::Cow;

use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};
use qdrant_edge::TokenizerType;

/// The version of the text analysis below, and of what turns are indexed under
/// (`retrieval::text::keyword_text` and `turn_tags`); bump it with any change that alters
/// vectors or tags. "3": turns carry date tags and their role; "4": the content alone, the
/// dates as tags.
pub const TEXT_VERSION: &str = "4";

/// The letter put before a number so that the tokenizer keeps it.
const NUMBER_MARK: char = 'n';

/// Puts [`NUMBER_MARK`] before every run of ASCII digits that does not follow an ASCII letter or
/// digit (`port 8080` → `port n8080`, `2024年3月` → `n2024年n3月`; `v2` and `x86` are left alone).
fn mark_numbers(text: &str) -> Cow<'_, str> {
    let mut previous: Option<char> = None;
    let needs_mark =
        |previous: Option<char>, c: char| c.is_ascii_digit() && !previous.is_some_and(|p| p.is_ascii_alphanumeric());
    if !text.chars().any(|c| c.is_ascii_digit()) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_mark(previous, c) {
            out.push(NUMBER_MARK);
        }
        out.push(c);
        previous = Some(c);
    }
    Cow::Owned(out)
}

/// A sparse vector: parallel `indices` (token ids, unique) and `values` (weights).
///
/// Project-owned, so the ports and the Qdrant-server adapter share no type with a client crate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

impl SparseVector {
    /// Returns true when no token survived tokenization (empty or all-stopword text).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

/// Embeds documents and queries into BM25 sparse vectors (meant for a sparse vector with the IDF
/// modifier: documents carry term-frequency weights, queries unit weights, IDF is applied by the
/// index at query time).
#[derive(Debug)]
pub struct Bm25 {
    model: EdgeBm25,
}

impl Bm25 {
    /// Builds the model with the project's fixed configuration.
    pub fn new() -> Self {
        let config = EdgeBm25Config {
            tokenizer: TokenizerType::Multilingual,
            lowercase: Some(true),
            ..EdgeBm25Config::default()
        };
        // The configuration is a constant: the defaults (k = 1.2, b = 0.75, avg_len = 256,
        // English) always validate, as the unit tests check.
        let model = EdgeBm25::new(config).expect("the fixed bm25 configuration is valid");
        Self { model }
    }

    /// Embeds a document's text: term-frequency weights, normalized by length.
    pub fn embed_document(&self, text: &str) -> SparseVector {
        convert(self.model.embed_document(&mark_numbers(text)))
    }

    /// Embeds a query's text: unit weight per distinct token. Empty when no token is left.
    pub fn embed_query(&self, text: &str) -> SparseVector {
        convert(self.model.embed_query(&mark_numbers(text)))
    }
}

impl Default for Bm25 {
    fn default() -> Self {
        Self::new()
    }
}

fn convert(vector: qdrant_edge::SparseVector) -> SparseVector {
    SparseVector {
        indices: vector.indices,
        values: vector.values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares_a_token(query: &SparseVector, document: &SparseVector) -> bool {
        query.indices.iter().any(|i| document.indices.contains(i))
    }

    #[test]
    fn chinese_word_matches_inside_a_longer_phrase() {
        let bm25 = Bm25::new();
        let query = bm25.embed_query("订单");
        let document = bm25.embed_document("请检查订单表的索引");
        assert!(!query.is_empty());
        assert!(shares_a_token(&query, &document), "{query:?} vs {document:?}");
    }

    #[test]
    fn numbers_alone_are_searchable() {
        let bm25 = Bm25::new();
        let document = bm25.embed_document("the gateway listens on port 8080 since 2024年3月, see ticket #4521");
        for query in ["8080", "2024", "4521", "port 8080"] {
            let query = bm25.embed_query(query);
            assert!(!query.is_empty(), "a number alone is a query");
            assert!(shares_a_token(&query, &document), "{query:?} vs {document:?}");
        }
        assert!(!shares_a_token(&bm25.embed_query("9090"), &document));
        assert!(
            shares_a_token(&bm25.embed_query("3月"), &document),
            "a number after a CJK character"
        );
        // Tokens that had a letter keep matching as before.
        assert!(shares_a_token(
            &bm25.embed_query("v2"),
            &bm25.embed_document("upgrade to v2 today")
        ));
    }

    #[test]
    fn only_numbers_not_after_a_letter_are_marked() {
        assert_eq!(mark_numbers("no digits here"), "no digits here");
        assert_eq!(
            mark_numbers("port 8080, v2, x86 and 3.5"),
            "port n8080, v2, x86 and n3.n5"
        );
        assert_eq!(mark_numbers("2024年3月"), "n2024年n3月");
    }

    #[test]
    fn english_is_stemmed_and_lowercased() {
        let bm25 = Bm25::new();
        let query = bm25.embed_query("Run");
        let document = bm25.embed_document("the service was running slowly");
        assert!(shares_a_token(&query, &document), "{query:?} vs {document:?}");
    }

    #[test]
    fn mixed_text_yields_tokens_of_both_scripts() {
        let bm25 = Bm25::new();
        let document = bm25.embed_document("deploy 订单服务 today");
        assert!(shares_a_token(&bm25.embed_query("订单"), &document));
        assert!(shares_a_token(&bm25.embed_query("deploy"), &document));
    }

    #[test]
    fn empty_and_stopword_only_queries_are_empty() {
        let bm25 = Bm25::new();
        assert!(bm25.embed_query("").is_empty());
        assert!(bm25.embed_query("   ").is_empty());
        assert!(bm25.embed_query("the and of").is_empty());
    }

    #[test]
    fn vectors_are_well_formed() {
        let bm25 = Bm25::new();
        for text in ["a b c alpha alpha beta", "订单表 订单 索引", ""] {
            for vector in [bm25.embed_document(text), bm25.embed_query(text)] {
                assert_eq!(vector.indices.len(), vector.values.len());
                let mut unique = vector.indices.clone();
                unique.sort_unstable();
                unique.dedup();
                assert_eq!(unique.len(), vector.indices.len(), "indices are unique");
                assert!(vector.values.iter().all(|v| v.is_finite() && *v > 0.0));
            }
        }
    }

    #[test]
    fn repeated_words_weigh_more_in_documents() {
        let bm25 = Bm25::new();
        let once = bm25.embed_document("invoice pending");
        let twice = bm25.embed_document("invoice invoice");
        let id = bm25.embed_query("invoice").indices[0];
        let weight = |v: &SparseVector| v.values[v.indices.iter().position(|i| *i == id).unwrap()];
        assert!(weight(&twice) > weight(&once));
    }
}
