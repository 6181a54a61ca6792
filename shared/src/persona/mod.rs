//! L3 persona: the pure logic (seed 001, 第四层). No I/O here: the persona worker reads the
//! scenes and memories, calls these functions, and writes the document and its row.
//!
//! # What the persona is
//! The highest abstraction of the memory: one Markdown profile per owner, compressing what the
//! scenes say about the user into four layers from shallow to deep: identity, preferences,
//! methodology, worldview, the last with explicit anti-patterns (what the agent must never
//! do) ([`doc`]). It goes, whole, into the stable part of every recall.
//!
//! # How it is built
//! First build: from nothing, all four layers. Incremental build: the current persona plus
//! only the scenes changed since the last build, so the model (or the rules) sees little,
//! spends little and has little chance to drop good paragraphs. Which one, and whether to
//! build at all, is [`trigger::decide`]. In rules mode ([`rules`]) bullets are copied from
//! memories and scenes by category; in LLM mode a model writes the document, which is parsed
//! leniently.
//!
//! # Concurrency
//! One persona build per owner at a time: the worker holds a lease row (see `DESIGN.md`);
//! nothing here keeps state between calls.

pub mod build;
pub mod doc;
pub mod rules;
pub mod trigger;

pub use doc::{PersonaDoc, PersonaDocError};
pub use rules::build_persona;
pub use trigger::{decide, PersonaState, PersonaTrigger, PersonaTriggerSettings};
