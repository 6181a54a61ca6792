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
//! ports, years, ticket numbers and versions match. Charabia does not cut words at a no-break
//! space (U+00A0, U+202F) and a few other Unicode spaces, so every space becomes an ASCII one
//! first (`plain_spaces`). [`TEXT_VERSION`] names this analysis: an index
//! built with another one must be rebuilt, since its vectors would not match the queries'.
//!
//! Most English text is ASCII with some punctuation, and for it charabia does far more than it
//! needs to: it detects the language of every run of Latin letters (which changes nothing in
//! our configuration) and walks a separator automaton of hundreds of Unicode entries. Such text
//! is therefore tokenized by a fast path that gives exactly the tokens charabia would (see
//! [`fast_words`]; a test checks it against charabia on random text), so the vectors are the
//! same and no index needs rebuilding. Everything else goes to charabia.
//!
//! Pure CPU work, no I/O; `Bm25` is `Send + Sync` and cheap to share behind an `Arc`.

use std::borrow::Cow;

use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};
use qdrant_edge::TokenizerType;

/// The version of the text analysis below, and of what turns are indexed under
/// (`retrieval::text::keyword_text` and `turn_tags`); bump it with any change that alters
/// vectors or tags. "3": turns carry date tags and their role; "4": the content alone, the
/// dates as tags; "5": every Unicode space separates words; "6": a photo's caption from the
/// turn's metadata; "7": the speaker's name (`metadata.speaker`) as tags.
pub const TEXT_VERSION: &str = "7";

/// Turns every Unicode space that charabia might not cut at into an ASCII space. Without it,
/// text copied from a web page or typeset by an LLM ("invoice\u{a0}pending", "10\u{202f}GB")
/// is indexed as one token that neither of its words finds.
fn plain_spaces(text: &str) -> Cow<'_, str> {
    let odd = |c: char| c.is_whitespace() && !matches!(c, ' ' | '\t' | '\n' | '\r');
    if !text.chars().any(odd) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().map(|c| if odd(c) { ' ' } else { c }).collect())
}

/// The text as the tokenizer gets it, for documents and queries alike.
fn prepare(text: &str) -> Cow<'_, str> {
    match plain_spaces(text) {
        Cow::Borrowed(text) => mark_numbers(text),
        Cow::Owned(text) => Cow::Owned(mark_numbers(&text).into_owned()),
    }
}

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

/// The characters the fast path cuts words at: charabia's `DEFAULT_SEPARATORS` (the Unicode
/// punctuation, math symbol and space classes, plus a few) that are ASCII, Latin-1 punctuation
/// (U+00A0 to U+00BF) or general punctuation (U+2000 to U+206F: dashes, curly quotes, the
/// ellipsis, bullets, the spaces), which is what English text from people and LLMs holds
/// beside ASCII. Charabia's longer entries (". ", ", ") are made of such characters, so cutting
/// at each character cuts where charabia does.
#[derive(Debug)]
struct Separators {
    ascii: [bool; 128],
    /// Sorted.
    punctuation: Vec<char>,
}

impl Separators {
    fn new() -> Self {
        let mut ascii = [false; 128];
        let mut punctuation = Vec::new();
        for separator in charabia::separators::DEFAULT_SEPARATORS {
            let mut chars = separator.chars();
            let (Some(c), None) = (chars.next(), chars.next()) else {
                continue;
            };
            match c {
                _ if c.is_ascii() => ascii[c as usize] = true,
                '\u{a0}'..='\u{bf}' | '\u{2000}'..='\u{206f}' => punctuation.push(c),
                _ => {}
            }
        }
        punctuation.sort_unstable();
        punctuation.dedup();
        Self { ascii, punctuation }
    }

    fn is_separator(&self, c: char) -> bool {
        if c.is_ascii() {
            self.ascii[c as usize]
        } else {
            self.punctuation.binary_search(&c).is_ok()
        }
    }

    /// Whether the fast path tokenizes text of such characters as charabia does: printable
    /// ASCII, tab, LF, CR and the punctuation above. Charabia would delete other control
    /// characters from inside a word, and other non-ASCII text meets its normalizers (accents,
    /// compatibility forms, variation selectors) and other scripts.
    fn takes(&self, c: char) -> bool {
        matches!(c, ' '..='~' | '\t' | '\n' | '\r') || (!c.is_ascii() && self.is_separator(c))
    }
}

/// The words `Multilingual` tokenization keeps from `text`, joined by single spaces, when the
/// fast path takes every character of `text` (see [`Separators::takes`]); `None` otherwise
/// (the caller falls back to charabia).
///
/// For such text charabia's pipeline reduces to: one run of Latin script (digits and
/// punctuation belong to none), cut at the separators; each piece kept whole (the Latin
/// segmenter does not split words, as built for qdrant-edge) and lowercased; pieces without a
/// letter dropped (qdrant's rule). Lowercasing, stopwords and stemming are left to the
/// `Whitespace` model, which applies the same processor to each word as the `Multilingual`
/// one.
fn fast_words(text: &str, separators: &Separators) -> Option<String> {
    if !text.chars().all(|c| separators.takes(c)) {
        return None;
    }
    let mut words = String::with_capacity(text.len());
    for piece in text.split(|c: char| separators.is_separator(c)) {
        if piece.bytes().any(|b| b.is_ascii_alphabetic()) {
            if !words.is_empty() {
                words.push(' ');
            }
            words.push_str(piece);
        }
    }
    Some(words)
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
    /// The same model over words already split (see [`fast_words`]).
    words: EdgeBm25,
    separators: Separators,
}

impl Bm25 {
    /// Builds the model with the project's fixed configuration.
    pub fn new() -> Self {
        let with = |tokenizer| {
            let config = EdgeBm25Config {
                tokenizer,
                lowercase: Some(true),
                ..EdgeBm25Config::default()
            };
            // The configuration is a constant: the defaults (k = 1.2, b = 0.75, avg_len = 256,
            // English) always validate, as the unit tests check.
            EdgeBm25::new(config).expect("the fixed bm25 configuration is valid")
        };
        Self {
            model: with(TokenizerType::Multilingual),
            words: with(TokenizerType::Whitespace),
            separators: Separators::new(),
        }
    }

    /// Embeds a document's text: term-frequency weights, normalized by length.
    pub fn embed_document(&self, text: &str) -> SparseVector {
        let (model, text) = self.analyze(text);
        convert(model.embed_document(&text))
    }

    /// Embeds a query's text: unit weight per distinct token. Empty when no token is left.
    pub fn embed_query(&self, text: &str) -> SparseVector {
        let (model, text) = self.analyze(text);
        convert(model.embed_query(&text))
    }

    /// The model to embed `text` with and what to give it, the same for documents and
    /// queries: the fast path's words when it takes the text, charabia's input otherwise.
    fn analyze<'a>(&self, text: &'a str) -> (&EdgeBm25, Cow<'a, str>) {
        let text = prepare(text);
        match fast_words(&text, &self.separators) {
            Some(words) => (&self.words, Cow::Owned(words)),
            None => (&self.model, text),
        }
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

    /// The fast path's vectors next to charabia's for `text`, documents and queries.
    fn assert_fast_path_matches(bm25: &Bm25, text: &str) {
        let marked = prepare(text);
        let words = fast_words(&marked, &bm25.separators).expect("the fast path takes this text");
        assert_eq!(
            convert(bm25.words.embed_document(&words)),
            convert(bm25.model.embed_document(&marked)),
            "document {text:?} (words {words:?})"
        );
        assert_eq!(
            convert(bm25.words.embed_query(&words)),
            convert(bm25.model.embed_query(&marked)),
            "query {text:?} (words {words:?})"
        );
    }

    #[test]
    fn fast_path_gives_charabias_vectors() {
        let bm25 = Bm25::new();
        for text in [
            "The quick (\"brown\") fox can't jump 32.3 feet, right? Brr, it's 29.3F!",
            "camelCase kebab-case snake_case SCREAMING_CASE dot.case path/to/file.rs",
            "It's what they'd've done: don't, won't, shouldn't; rock'n'roll.",
            "ssh root@10.0.0.12 -p 2222 && curl https://api.example.com/v1/users?id=42&x=y#top",
            "fn main() { let x = a+b*c; if x<=y || z>=w { return $HOME ~ ^caret | pipe; } }",
            "Running runs ran runner; the RUNNERS were running. I, me, my, myself, we",
            "email me at Jane.Doe+tag@Example.COM; `code` **bold** _em_ [link](url) > quote",
            "v2 x86 3D 2nd 1st 10x h264 ipv4 sha256 utf-8 e.g. i.e. U.S.A. a.b.c",
            "tabs\tand\nnewlines\r\nmixed   spaces",
            "!!! ??? ... --- 123 456.789 %$#@",
            "It’s “quoted” — and so… • bullets «guillemets» ¿que? don’t break\u{2009}thin",
            "",
            "   ",
        ] {
            assert_fast_path_matches(&bm25, text);
        }
        // Random text over every character the fast path takes, in word-like runs.
        let alphabet: Vec<char> = (' '..='~')
            .chain(['\t', '\n', '\r'])
            .chain(bm25.separators.punctuation.iter().copied())
            .collect();
        assert!(
            alphabet.len() > 128,
            "the punctuation the fast path takes is in the alphabet"
        );
        let words = ["the", "it", "s", "don", "running", "Jumps", "API", "x86", "n42", "ok"];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        for _ in 0..3_000 {
            let mut text = String::new();
            for _ in 0..next(12) {
                match next(3) {
                    0 => text.push_str(words[next(words.len())]),
                    1 => (0..1 + next(4)).for_each(|_| text.push(char::from(b'a' + next(26) as u8))),
                    _ => (0..1 + next(3)).for_each(|_| text.push(alphabet[next(alphabet.len())])),
                }
            }
            assert_fast_path_matches(&bm25, &text);
        }
    }

    #[test]
    fn every_unicode_space_separates_words() {
        let bm25 = Bm25::new();
        for text in [
            "invoice\u{a0}pending",
            "invoice\u{202f}pending",
            "invoice\u{c}pending",
            "invoice\u{3000}pending",
        ] {
            let document = bm25.embed_document(text);
            for word in ["invoice", "pending"] {
                assert!(shares_a_token(&bm25.embed_query(word), &document), "{word} in {text:?}");
            }
            assert_eq!(document, bm25.embed_document("invoice pending"), "{text:?}");
        }
        assert_eq!(plain_spaces("tabs\tand\nnewlines stay"), "tabs\tand\nnewlines stay");
        assert!(matches!(plain_spaces("line\nbreak"), Cow::Borrowed(_)));
    }

    #[test]
    fn other_text_goes_to_charabia() {
        let separators = Separators::new();
        for text in [
            "café",
            "订单表",
            "naïve résumé",
            "bell\u{7}inside",
            "form\u{c}feed",
            "thumbs 👍\u{fe0f}",
            "a\u{2060}joiner", // word joiner: general punctuation, but no separator
            "no\u{a0}break",   // no separator for charabia either, see `plain_spaces`
        ] {
            assert_eq!(fast_words(text, &separators), None, "{text:?}");
        }
        // And those are still tokenized as charabia does: accents folded, Chinese segmented.
        let bm25 = Bm25::new();
        assert!(shares_a_token(
            &bm25.embed_query("cafe"),
            &bm25.embed_document("un café noir")
        ));
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
