//! The model of `llm-faults`: the scripted OpenAI-compatible server ([`FakeOpenAi`]) answering
//! as a model that extracts one memory per user turn, until a fault makes it fail every call
//! the same way for a while.
//!
//! It runs inside the harness, on a loopback port the API process reaches like any provider.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{chat_message, FakeOpenAi, Fault};

/// The model's answers while [`Phase::Garbage`]: JSON cut off mid-card, for the answer and
/// for its repair alike.
const GARBAGE: &str = r#"{"scenes": [{"scene": "deploys", "cards": [{"content": "The user pre"#;

/// One way the model fails, for every call while it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// 500 with an OpenAI error body.
    ServerErrors,
    /// No answer until well after the client's timeout.
    Hangs,
    /// 200, with a completion that is not the JSON asked for.
    Garbage,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::ServerErrors, Phase::Hangs, Phase::Garbage];

    pub fn label(self) -> &'static str {
        match self {
            Phase::ServerErrors => "5xx",
            Phase::Hangs => "hung",
            Phase::Garbage => "garbage JSON",
        }
    }
}

/// The fake provider and its fault switch.
pub struct ScriptedModel {
    llm: FakeOpenAi,
    garbage: Arc<AtomicBool>,
    /// How long a call hangs in [`Phase::Hangs`].
    hang: Duration,
}

impl ScriptedModel {
    /// Starts the fake with a model that answers well; a hung call waits `hang`.
    pub async fn start(hang: Duration) -> Self {
        let llm = FakeOpenAi::start(8).await;
        let garbage = Arc::new(AtomicBool::new(false));
        let flag = garbage.clone();
        llm.set_chat_responder(move |body| {
            if flag.load(Ordering::SeqCst) {
                return Some(GARBAGE.to_owned());
            }
            answer(body)
        });
        Self { llm, garbage, hang }
    }

    /// The API root to give the server (`SEDIMENT_LLM_URL`).
    pub fn base_url(&self) -> String {
        self.llm.base_url()
    }

    /// Makes every coming call fail as `phase` says, or answer well again with `None`.
    pub fn set(&self, phase: Option<Phase>) {
        let standing = match phase {
            Some(Phase::ServerErrors) => Some(Fault::Status(500)),
            Some(Phase::Hangs) => Some(Fault::Delay(self.hang)),
            Some(Phase::Garbage) | None => None,
        };
        self.llm.chat().set_standing(standing);
        self.garbage.store(phase == Some(Phase::Garbage), Ordering::SeqCst);
    }

    /// Makes every answer wait `latency`, as a real model's take seconds.
    pub fn set_latency(&self, latency: Duration) {
        self.llm.set_latency(latency);
    }

    /// Chat calls received so far, failed ones included.
    pub fn calls(&self) -> usize {
        self.llm.chat().requests()
    }
}

/// A model that does its job: one card per user turn of an extraction (in its own words,
/// citing that turn alone), and `add` for every card of a dedup call. Each of the load's user
/// turns states something new, so one memory per turn is the right answer.
fn answer(body: &Value) -> Option<String> {
    let payload: Value = chat_message(body, "user").and_then(|text| serde_json::from_str(&text).ok())?;
    if let Some(turns) = payload["turns"].as_array() {
        let cards: Vec<Value> = turns
            .iter()
            .filter(|t| t["role"] == "user")
            .map(|t| {
                json!({
                    "content": format!("The user said: {}", t["content"].as_str().unwrap_or_default()),
                    "category": "persona",
                    "priority": 80,
                    "occurred_at": null,
                    "source_message_ids": [t["ref"]],
                })
            })
            .collect();
        return Some(json!({ "scenes": [{ "scene": "deploys", "cards": cards }] }).to_string());
    }
    let cards = payload["cards"].as_array()?;
    let decisions: Vec<Value> = cards
        .iter()
        .map(|c| json!({ "card": c["ref"], "action": "add", "targets": [], "content": null }))
        .collect();
    Some(json!({ "decisions": decisions }).to_string())
}
