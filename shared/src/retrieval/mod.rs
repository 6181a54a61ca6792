//! What each retrieval channel indexes and queries, beyond the raw text: the shaped texts of
//! L0 turns ([`text`]) and the LLM-free rewrite of a query ([`query`]), both built on date
//! tags ([`dates`]).
//!
//! The shapes and rewrites were chosen by the retrieval benchmark (`tests/QUALITY.md`), which
//! runs these same functions. Changing what [`text::keyword_text`] or [`text::turn_tags`]
//! produces changes the points of every turn: bump `index::bm25::TEXT_VERSION` with it, so
//! that indexes are rebuilt.

pub mod dates;
pub mod query;
pub mod text;

pub use query::QueryText;
pub use text::{dense_text, keyword_text, turn_tags, TurnFields};
