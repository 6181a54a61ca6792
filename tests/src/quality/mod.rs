//! Retrieval-quality benchmarks for long multi-session conversations.
//!
//! [`Dataset::generate`] builds, from a seed alone (no external data, no LLM), owners with
//! months of sessions in English and Chinese, facts stated once and early, and questions asked
//! later whose evidence turns are known. [`chitchat`] builds the second dev set: two friends'
//! real small talk over months (filler from the chitchat-dataset package) with events told
//! once and asked about in the third person. [`metrics`] scores ranked turn ids (R@k, MRR);
//! [`text`] builds the indexed text of a turn and LLM-free query rewrites. The
//! `recall_quality` binary runs the synthetic set against the real index; [`e2e`] (the
//! `recall_e2e` binary) runs either set through the real API. See `tests/QUALITY.md`.

pub mod chitchat;
mod chitchat_events;
mod dataset;
pub mod e2e;
mod facts;
mod filler;
pub mod metrics;
pub mod text;

pub use chitchat_events::Mix;
pub use dataset::{Dataset, GenConfig, Lang, Owner, Question, QuestionKind, Role, Session, Turn};
