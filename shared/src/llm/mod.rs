//! The LLM port: an OpenAI-compatible chat client that asks for JSON, validates it and repairs
//! it once ([`ChatClient`]), and the versioned prompt templates it is driven with, overridable
//! per instance, team and agent ([`Prompts`]).
//!
//! The engines built on it (`memory::llm` for L1, later scenes, persona and compaction) each
//! own their output schema: they hand [`ChatClient::complete_json`] a validation function, and
//! get back either a value that passed it or an [`LlmError`] that says whether a retry can help.
//!
//! Every call is labelled ([`CallLabels`]) with the tenant, the session and a stable trace name
//! from [`trace`]; the labels go to the provider as `X-Sediment-*` headers and the OpenAI `user`
//! field, onto the call's tracing span, and (the trace name only, to bound cardinality) onto
//! the metrics.

mod chat;
mod template;

pub use chat::{
    CallLabels, ChatClient, ChatRole, ChatSettings, InvalidSettings, JsonReply, LlmError, Message, Usage, HEADER_AGENT,
    HEADER_SESSION, HEADER_TEAM, HEADER_TRACE, HEADER_USER,
};
pub use template::{
    resolve, EffectiveTemplate, InstanceTemplates, NoOverrides, OverrideLevel, OverridesError, Prompts, TemplateError,
    TemplateId, TemplateOverride, TemplateOverrides, TemplateSource,
};

/// Stable names of the LLM call sites, for the `trace` label of calls, spans and metrics. A
/// name never changes once dashboards use it.
pub mod trace {
    /// L1: segment a batch into scenes and extract cards.
    pub const L1_EXTRACT: &str = "memory.l1-extract";
    /// L1: decide add / update / merge / discard for new cards against stored memories.
    pub const L1_DEDUP: &str = "memory.l1-dedup";
    /// L2: write or merge scene documents.
    pub const L2_SCENE: &str = "memory.l2-scene";
    /// L3: build or update the persona.
    pub const L3_PERSONA: &str = "memory.l3-persona";
    /// Session context: L3 compaction of a long session.
    pub const SESSION_COMPACT: &str = "session.compact";
    /// Skills: review a conversation for reusable procedures.
    pub const SKILL_REVIEW: &str = "skill.review";
}
