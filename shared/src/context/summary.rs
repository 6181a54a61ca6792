//! The structured summary of L3 compaction (seed 000, §5.3): ten dimensions, each a list of
//! short items, stored as JSON and sent to the agent as one system message.
//!
//! The [`Summarizer`] port has two implementations: the rules summarizer (`rules`, extractive,
//! no network) and, once the chat port exists, an LLM one that asks for the same JSON with
//! [`COMPACT_PROMPT`] and reads the answer with [`Summary::from_llm_json`].

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::tokens::estimate_text;
use crate::domain::{Role, Tenant};

/// The version of the summary format and prompt; stored with every summary (provenance).
pub const PROMPT_VERSION: &str = "compact.v1";

/// One of the ten dimensions, in the seed's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    RequestsAndIntent,
    Decisions,
    ObjectsChanged,
    SchemaChanges,
    DataOperations,
    ErrorsAndFixes,
    Todos,
    UserPreferences,
    ToolCalls,
    OtherContext,
}

impl Dimension {
    pub const ALL: [Dimension; 10] = [
        Self::RequestsAndIntent,
        Self::Decisions,
        Self::ObjectsChanged,
        Self::SchemaChanges,
        Self::DataOperations,
        Self::ErrorsAndFixes,
        Self::Todos,
        Self::UserPreferences,
        Self::ToolCalls,
        Self::OtherContext,
    ];

    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Self::RequestsAndIntent => "requests_and_intent",
            Self::Decisions => "decisions",
            Self::ObjectsChanged => "objects_changed",
            Self::SchemaChanges => "schema_changes",
            Self::DataOperations => "data_operations",
            Self::ErrorsAndFixes => "errors_and_fixes",
            Self::Todos => "todos",
            Self::UserPreferences => "user_preferences",
            Self::ToolCalls => "tool_calls",
            Self::OtherContext => "other_context",
        }
    }

    /// The heading in the rendered message.
    pub fn title(self) -> &'static str {
        match self {
            Self::RequestsAndIntent => "Requests and intent",
            Self::Decisions => "Decisions and conclusions",
            Self::ObjectsChanged => "Objects created or changed",
            Self::SchemaChanges => "Schema changes",
            Self::DataOperations => "Data operations",
            Self::ErrorsAndFixes => "Errors and fixes",
            Self::Todos => "TODOs",
            Self::UserPreferences => "User preferences",
            Self::ToolCalls => "Tool calls",
            Self::OtherContext => "Other context",
        }
    }
}

/// The ten dimensions; each item is one short statement. Serialized with the keys of
/// [`Dimension::key`], every key present (an empty list when nothing was found).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    #[serde(default)]
    pub requests_and_intent: Vec<String>,
    #[serde(default)]
    pub decisions: Vec<String>,
    #[serde(default)]
    pub objects_changed: Vec<String>,
    #[serde(default)]
    pub schema_changes: Vec<String>,
    #[serde(default)]
    pub data_operations: Vec<String>,
    #[serde(default)]
    pub errors_and_fixes: Vec<String>,
    #[serde(default)]
    pub todos: Vec<String>,
    #[serde(default)]
    pub user_preferences: Vec<String>,
    #[serde(default)]
    pub tool_calls: Vec<String>,
    #[serde(default)]
    pub other_context: Vec<String>,
}

impl Summary {
    pub fn items(&self, dimension: Dimension) -> &Vec<String> {
        match dimension {
            Dimension::RequestsAndIntent => &self.requests_and_intent,
            Dimension::Decisions => &self.decisions,
            Dimension::ObjectsChanged => &self.objects_changed,
            Dimension::SchemaChanges => &self.schema_changes,
            Dimension::DataOperations => &self.data_operations,
            Dimension::ErrorsAndFixes => &self.errors_and_fixes,
            Dimension::Todos => &self.todos,
            Dimension::UserPreferences => &self.user_preferences,
            Dimension::ToolCalls => &self.tool_calls,
            Dimension::OtherContext => &self.other_context,
        }
    }

    pub fn items_mut(&mut self, dimension: Dimension) -> &mut Vec<String> {
        match dimension {
            Dimension::RequestsAndIntent => &mut self.requests_and_intent,
            Dimension::Decisions => &mut self.decisions,
            Dimension::ObjectsChanged => &mut self.objects_changed,
            Dimension::SchemaChanges => &mut self.schema_changes,
            Dimension::DataOperations => &mut self.data_operations,
            Dimension::ErrorsAndFixes => &mut self.errors_and_fixes,
            Dimension::Todos => &mut self.todos,
            Dimension::UserPreferences => &mut self.user_preferences,
            Dimension::ToolCalls => &mut self.tool_calls,
            Dimension::OtherContext => &mut self.other_context,
        }
    }

    pub fn is_empty(&self) -> bool {
        Dimension::ALL.iter().all(|&d| self.items(d).is_empty())
    }

    /// The summary as the system message the agent receives: a header naming the turns it
    /// replaces, then one Markdown section per non-empty dimension.
    pub fn render(&self, first_seq: i64, last_seq: i64, message_count: i64) -> String {
        let mut out = format!(
            "Summary of the earlier conversation (turns {first_seq}–{last_seq}, {message_count} turns), \
             compacted by sediment. The turns after it follow as messages.\n"
        );
        for dimension in Dimension::ALL {
            let items = self.items(dimension);
            if items.is_empty() {
                continue;
            }
            out.push_str("\n## ");
            out.push_str(dimension.title());
            out.push('\n');
            for item in items {
                out.push_str("- ");
                out.push_str(item);
                out.push('\n');
            }
        }
        out
    }

    /// Reads an LLM's answer to [`COMPACT_PROMPT`]: the JSON object, possibly inside a Markdown
    /// code fence or after some prose. Unknown keys are refused (the model did not follow the
    /// format); a dimension given as a single string is taken as a one-item list; blank items
    /// are dropped.
    pub fn from_llm_json(answer: &str) -> Result<Self, String> {
        let start = answer.find('{').unwrap_or(0);
        let end = answer.rfind('}').map_or(answer.len(), |i| i + 1);
        let value: serde_json::Value =
            serde_json::from_str(answer.get(start..end).unwrap_or(answer)).map_err(|e| format!("not JSON: {e}"))?;
        Self::from_llm_value(value)
    }

    /// Reads the JSON object of an LLM's answer (see [`from_llm_json`](Self::from_llm_json));
    /// the error says, for the model, what is wrong with it.
    pub fn from_llm_value(mut value: serde_json::Value) -> Result<Self, String> {
        let Some(map) = value.as_object_mut() else {
            return Err("the answer must be one JSON object with the 10 keys".into());
        };
        for item in map.values_mut() {
            if let serde_json::Value::String(s) = item {
                *item = serde_json::Value::Array(vec![serde_json::Value::String(std::mem::take(s))]);
            }
        }
        let mut summary: Summary = serde_json::from_value(value).map_err(|e| {
            let keys: Vec<&str> = Dimension::ALL.iter().map(|d| d.key()).collect();
            format!(
                "{e}; the keys must be exactly {}, each a list of strings",
                keys.join(", ")
            )
        })?;
        for dimension in Dimension::ALL {
            summary.items_mut(dimension).retain(|item| !item.trim().is_empty());
        }
        Ok(summary)
    }

    /// Drops items until the rendered summary is estimated at most `max_tokens`: the oldest
    /// item of the fullest dimension first (lists run oldest to newest), ties going against the
    /// dimension that matters least (the later in [`Dimension::ALL`]). Whatever engine wrote
    /// the summary, this keeps it inside its budget.
    pub fn trim_to(&mut self, max_tokens: u64) {
        // Per item: "- " + text + "\n"; per section: "\n## title\n"; the header as rendered.
        let item_cost = |item: &String| estimate_text(item) + 2;
        let section_cost = |d: Dimension| estimate_text(d.title()) + 3;
        let header = estimate_text(&Summary::default().render(1, 1, 1));
        let mut total = header
            + Dimension::ALL
                .iter()
                .filter(|&&d| !self.items(d).is_empty())
                .map(|&d| section_cost(d) + self.items(d).iter().map(item_cost).sum::<u64>())
                .sum::<u64>();
        while total > max_tokens {
            let Some(fullest) = Dimension::ALL
                .iter()
                .rev()
                .copied()
                .filter(|&d| !self.items(d).is_empty())
                .max_by_key(|&d| self.items(d).len())
            else {
                return;
            };
            let items = self.items_mut(fullest);
            let removed = items.remove(0);
            total -= item_cost(&removed);
            if items.is_empty() {
                total -= section_cost(fullest);
            }
        }
    }
}

/// The seed's compaction prompt (`compactPrompt`), in English with the seed's ten dimensions,
/// asking for the JSON that [`Summary::from_llm_json`] reads. For the LLM summarizer; the
/// turns follow it in the user message, and a previous summary, if any, before them.
pub const COMPACT_PROMPT: &str = r#"Summarize the conversation history below into a structured summary with these 10 dimensions:
1. requests_and_intent: the user's main requests and intent
2. decisions: key decisions and conclusions
3. objects_changed: objects created or changed (tables, fields, files, configuration, ...)
4. schema_changes: schema changes
5. data_operations: data operations (INSERT / UPDATE / DELETE, imports, exports)
6. errors_and_fixes: errors and how they were fixed
7. todos: open TODOs
8. user_preferences: the user's preferences
9. tool_calls: tool calls and their results
10. other_context: other important context

Rules: use only what the conversation says; never invent names, numbers or outcomes. Keep each
item one short sentence, in the language of the conversation, and keep identifiers (table,
column, file, service names) exactly as written. If a previous summary is given, merge it with
the new turns and drop what the new turns make obsolete. Answer with one JSON object whose keys
are exactly the 10 names above, each a list of strings (an empty list when nothing applies), and
nothing else."#;

/// One turn handed to a summarizer, already cut by L1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryTurn {
    pub seq: i64,
    pub role: Role,
    pub content: String,
    /// Whether the turn's metadata marks it as a tool call or a tool result.
    pub tool: bool,
}

/// What a summarizer is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct SummaryRequest<'a> {
    /// Whose session it is (an LLM call is labelled with it).
    pub tenant: &'a Tenant,
    pub session_id: &'a str,
    /// The session's last summary, to fold the new turns into; `None` on the first compaction
    /// (or the first after a reset).
    pub previous: Option<&'a Summary>,
    /// The turns to summarize, in seq order; never empty.
    pub turns: &'a [SummaryTurn],
    /// The rendered summary should stay within this many estimated tokens.
    pub max_tokens: u64,
}

/// A summarizer failed; `retryable` says whether the same request may succeed later (a
/// timeout, a rate limit) or not (the model's answer could not be read).
#[derive(Debug, thiserror::Error)]
#[error("summarizer failed")]
pub struct SummarizeError {
    pub retryable: bool,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Turns a stretch of conversation (and the summary of what came before) into a [`Summary`].
#[async_trait]
pub trait Summarizer: Send + Sync + 'static {
    /// Names the engine and model in provenance records: `rules`, or `llm:<model>`.
    fn name(&self) -> String;

    /// The most turn tokens (estimated) one call should get; the compactor folds a longer
    /// stretch in several jobs, oldest turns first. `None`: no limit.
    fn max_input_tokens(&self) -> Option<u64> {
        None
    }

    /// Summarizes `request.turns` merged with `request.previous`. Must not invent content.
    /// May take long (an LLM call); the caller bounds it with a timeout shorter than the lease.
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, SummarizeError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_every_dimension_key() {
        let value = serde_json::to_value(Summary::default()).unwrap();
        let mut keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut expected: Vec<&str> = Dimension::ALL.iter().map(|d| d.key()).collect();
        expected.sort_unstable();
        assert_eq!(keys, expected);
    }

    #[test]
    fn llm_answers_are_read_leniently_but_not_blindly() {
        let fenced = "Here it is:\n```json\n{\"decisions\": [\"partition orders by month\", \" \"], \"todos\": \"archive 2023\"}\n```";
        let summary = Summary::from_llm_json(fenced).unwrap();
        assert_eq!(summary.decisions, ["partition orders by month"]);
        assert_eq!(summary.todos, ["archive 2023"]);
        assert!(summary.schema_changes.is_empty());
        let unknown = Summary::from_llm_json("{\"mood\": [\"happy\"]}").unwrap_err();
        assert!(
            unknown.contains("requests_and_intent"),
            "the reason names the keys: {unknown}"
        );
        assert!(Summary::from_llm_json("no json here").is_err());
        assert!(Summary::from_llm_value(serde_json::json!(["a list"])).is_err());
    }

    #[test]
    fn render_names_the_replaced_turns_and_skips_empty_dimensions() {
        let summary = Summary {
            decisions: vec!["用 pg_partman 按月分区".into()],
            todos: vec!["archive 2023 data".into()],
            ..Summary::default()
        };
        let text = summary.render(1, 40, 40);
        assert!(text.starts_with("Summary of the earlier conversation (turns 1–40, 40 turns)"));
        assert!(text.contains("## Decisions and conclusions\n- 用 pg_partman 按月分区\n"));
        assert!(text.contains("## TODOs\n- archive 2023 data\n"));
        assert!(!text.contains("Schema changes"));
    }
}
