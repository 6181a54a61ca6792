//! The LLM summarizer: seed 000's compaction prompt on any OpenAI-compatible chat endpoint,
//! through the LLM port (`crate::llm::ChatClient`: JSON answers, one repair, retries, labels).
//!
//! The system message is [`COMPACT_PROMPT`]; the user message holds the previous summary (JSON)
//! when there is one, then the turns, one per line block, tagged `[#seq role]` like the rules
//! summarizer's items. The answer must be the ten-key JSON object; anything else gets one
//! repair request with the reason, then fails the job (retried later by the sweep).
//!
//! A model's context is finite, so one call takes at most `max_input_tokens` of turns; the
//! compactor folds a longer stretch in several jobs, each building on the last one's summary.

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;

use super::summary::{SummarizeError, Summarizer, Summary, SummaryRequest, COMPACT_PROMPT};
use crate::llm::{trace, CallLabels, ChatClient, LlmError, Message};

/// Summarizes with an LLM.
pub struct LlmSummarizer {
    chat: Arc<ChatClient>,
    max_input_tokens: u64,
}

impl LlmSummarizer {
    pub fn new(chat: Arc<ChatClient>, max_input_tokens: u64) -> Self {
        Self { chat, max_input_tokens }
    }
}

impl From<LlmError> for SummarizeError {
    fn from(e: LlmError) -> Self {
        Self {
            retryable: e.is_retryable(),
            source: Box::new(e),
        }
    }
}

#[async_trait]
impl Summarizer for LlmSummarizer {
    fn name(&self) -> String {
        format!("llm:{}", self.chat.model())
    }

    fn max_input_tokens(&self) -> Option<u64> {
        Some(self.max_input_tokens)
    }

    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, SummarizeError> {
        let labels = CallLabels::new(trace::SESSION_COMPACT, request.tenant, Some(request.session_id));
        let messages = vec![Message::system(COMPACT_PROMPT), Message::user(user_message(&request))];
        let reply = self
            .chat
            .complete_json(&labels, messages, Summary::from_llm_value)
            .await?;
        Ok(reply.value)
    }
}

/// The previous summary, then the turns to fold into it.
pub fn user_message(request: &SummaryRequest<'_>) -> String {
    let mut out = String::new();
    if let Some(previous) = request.previous {
        let json = serde_json::to_string(previous).unwrap_or_default();
        let _ = writeln!(out, "Previous summary (JSON), to merge with the new turns:\n{json}\n");
    }
    let (first, last) = match (request.turns.first(), request.turns.last()) {
        (Some(first), Some(last)) => (first.seq, last.seq),
        _ => (0, 0),
    };
    let _ = writeln!(
        out,
        "Conversation turns {first}–{last} to summarize, each tagged [#seq role]. Keep the whole \
         summary under about {} tokens.\n",
        request.max_tokens
    );
    for turn in request.turns {
        let _ = writeln!(out, "[#{} {}] {}", turn.seq, turn.role.as_str(), turn.content);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::summary::SummaryTurn;
    use crate::domain::{Role, Tenant};

    #[test]
    fn the_user_message_carries_the_previous_summary_and_tagged_turns() {
        let tenant = Tenant::new(Some("t"), Some("a"), Some("u")).unwrap();
        let previous = Summary {
            decisions: vec!["partition orders by month".into()],
            ..Summary::default()
        };
        let turns = [
            SummaryTurn {
                seq: 7,
                role: Role::User,
                content: "帮我查一下 orders 的慢查询".into(),
                tool: false,
            },
            SummaryTurn {
                seq: 8,
                role: Role::Assistant,
                content: "Index Scan now, 41 ms.".into(),
                tool: false,
            },
        ];
        let message = user_message(&SummaryRequest {
            tenant: &tenant,
            session_id: "s",
            previous: Some(&previous),
            turns: &turns,
            max_tokens: 900,
        });
        assert!(message.starts_with("Previous summary (JSON)"));
        assert!(message.contains("\"decisions\":[\"partition orders by month\"]"));
        assert!(message.contains("turns 7–8"));
        assert!(message.contains("under about 900 tokens"));
        assert!(message.contains("[#7 user] 帮我查一下 orders 的慢查询\n[#8 assistant] Index Scan now, 41 ms.\n"));
    }
}
