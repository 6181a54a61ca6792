//! A retrieval-quality benchmark for long multi-session conversations.
//!
//! [`Dataset::generate`] builds, from a seed alone (no external data, no LLM), owners with
//! months of sessions in English and Chinese, facts stated once and early, and questions asked
//! later whose evidence turns are known. [`metrics`] scores ranked turn ids (R@k, MRR);
//! [`text`] builds the indexed text of a turn and LLM-free query rewrites. The
//! `recall_quality` binary runs it all against the real index; see `tests/QUALITY.md`.

mod dataset;
mod facts;
mod filler;
pub mod metrics;
mod rng;
pub mod text;

pub use dataset::{Dataset, GenConfig, Lang, Owner, Question, QuestionKind, Role, Session, Turn};
