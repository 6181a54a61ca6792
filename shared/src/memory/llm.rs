//! The LLM engines of L1: [`LlmExtractor`] (one call per batch segments it into scenes and
//! extracts cards) and [`LlmJudge`] (one call per batch decides add / update / merge / discard
//! for every card that has candidates; a card repeating one of them word for word is
//! discarded without asking).
//!
//! The model never sees a UUID: turns are shown as `m1, m2, ...` (context first), new cards as
//! `n1, n2, ...` and stored memories as `c1, c2, ...`, and the answer's refs are mapped back.
//! Short refs cost fewer tokens and cannot be half-copied into a wrong id; a ref the mapping
//! does not know is dropped, never guessed.
//!
//! The answer is alias-normalized (`alias`), then validated with precise, path-qualified
//! messages ("scenes[0].cards[2].category: ..."), which the chat client quotes in its single
//! repair request. What validation accepts is then made safe rather than rejected: priorities
//! are clamped, empty cards dropped, unknown refs removed, impossible decisions become `Add`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::SecondsFormat;
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use super::{
    alias, Batch, BatchTurn, Candidate, Card, CardExtractor, Category, ConflictJudge, Decision, EngineError, EngineRun,
    Extraction, MAX_PRIORITY,
};
use crate::llm::{trace, CallLabels, ChatClient, EffectiveTemplate, LlmError, Message, Prompts, TemplateId};

/// The `mode()` of both engines.
const MODE: &str = "llm";
/// Priority of a card whose answer gave none.
const DEFAULT_PRIORITY: u8 = 50;
/// Validation problems quoted in one error message; more would drown the model's repair.
const MAX_PROBLEMS: usize = 8;

impl From<LlmError> for EngineError {
    fn from(error: LlmError) -> Self {
        match error {
            LlmError::Unavailable(source) => Self::Unavailable(source),
            LlmError::Rejected(source) => Self::Rejected(source),
            LlmError::Malformed(reason) => Self::Malformed(reason),
        }
    }
}

/// Extracts cards with one LLM call per batch, under the effective `l1-extract` template.
#[derive(Debug, Clone)]
pub struct LlmExtractor {
    chat: Arc<ChatClient>,
    prompts: Prompts,
}

impl LlmExtractor {
    pub fn new(chat: Arc<ChatClient>, prompts: Prompts) -> Self {
        Self { chat, prompts }
    }
}

/// Decides what new cards do to stored memories with one LLM call per batch, under the
/// effective `l1-dedup` template.
#[derive(Debug, Clone)]
pub struct LlmJudge {
    chat: Arc<ChatClient>,
    prompts: Prompts,
}

impl LlmJudge {
    pub fn new(chat: Arc<ChatClient>, prompts: Prompts) -> Self {
        Self { chat, prompts }
    }
}

async fn template(prompts: &Prompts, id: TemplateId, batch: &Batch) -> Result<EffectiveTemplate, EngineError> {
    prompts
        .effective(id, &batch.tenant)
        .await
        .map_err(|e| EngineError::Unavailable(Box::new(e)))
}

#[async_trait]
impl CardExtractor for LlmExtractor {
    fn mode(&self) -> &'static str {
        MODE
    }

    async fn extract(&self, batch: &Batch) -> Result<Extraction, EngineError> {
        let template = template(&self.prompts, TemplateId::L1Extract, batch).await?;
        let run = EngineRun {
            template: template.template,
            model: self.chat.model().to_owned(),
        };
        if batch.turns.is_empty() {
            return Ok(Extraction { cards: Vec::new(), run });
        }
        let refs = TurnRefs::new(batch);
        let messages = vec![Message::system(template.text), Message::user(refs.render(batch))];
        let labels = CallLabels::new(trace::L1_EXTRACT, &batch.tenant, Some(&batch.session_id));
        let reply = self.chat.complete_json(&labels, messages, parse_extraction).await?;
        let cards = refs.cards(reply.value);
        tracing::debug!(
            turns = batch.turns.len(),
            cards = cards.len(),
            repaired = reply.repaired,
            "extracted cards"
        );
        Ok(Extraction { cards, run })
    }
}

#[async_trait]
impl ConflictJudge for LlmJudge {
    fn mode(&self) -> &'static str {
        MODE
    }

    async fn decide(
        &self,
        batch: &Batch,
        cards: &[Card],
        candidates: &[Vec<Candidate>],
    ) -> Result<(Vec<Decision>, EngineRun), EngineError> {
        let template = template(&self.prompts, TemplateId::L1Dedup, batch).await?;
        let run = EngineRun {
            template: template.template,
            model: self.chat.model().to_owned(),
        };
        // A card that repeats a stored memory word for word is a duplicate whatever a model
        // would say: it is discarded here, and the model is asked only about the others.
        let repeats: Vec<Option<Uuid>> = cards
            .iter()
            .zip(candidates.iter().map(Vec::as_slice).chain(std::iter::repeat(&[][..])))
            .map(|(card, own)| repeated(card, own))
            .collect();
        let asked: Vec<Vec<Candidate>> = candidates
            .iter()
            .zip(&repeats)
            .map(|(own, repeat)| if repeat.is_some() { Vec::new() } else { own.clone() })
            .collect();
        let discarded = |mut decisions: Vec<Decision>| {
            for (decision, repeat) in decisions.iter_mut().zip(&repeats) {
                if let Some(id) = repeat {
                    *decision = Decision::Discard {
                        duplicate_of: Some(*id),
                    };
                }
            }
            decisions
        };
        let refs = CandidateRefs::new(cards, &asked);
        // A card without candidates can only be added: no call for it, and none at all when
        // no card has any (the common case early in a user's history).
        let Some(input) = refs.render(cards, &asked) else {
            return Ok((discarded(vec![Decision::Add; cards.len()]), run));
        };
        let messages = vec![Message::system(template.text), Message::user(input)];
        let labels = CallLabels::new(trace::L1_DEDUP, &batch.tenant, Some(&batch.session_id));
        let reply = self.chat.complete_json(&labels, messages, parse_decisions).await?;
        let (decisions, fallbacks) = refs.decisions(reply.value, cards.len(), &asked);
        let decisions = discarded(decisions);
        if fallbacks > 0 {
            tracing::warn!(
                cards = cards.len(),
                fallbacks,
                "LLM dedup named targets outside the cards' candidates or left cards out; those cards are added"
            );
        }
        Ok((decisions, run))
    }
}

// ---------------------------------------------------------------------------------------------
// Extraction

/// The short refs of one batch's turns: `m1..` over the context, then the turns.
struct TurnRefs {
    /// Ref → turn id, for the turns cards may come from (not the context).
    sources: HashMap<String, Uuid>,
    /// Every turn of `batch.turns`, for cards whose refs are all invalid.
    all_sources: Vec<Uuid>,
}

#[derive(Serialize)]
struct TurnView<'a> {
    #[serde(rename = "ref")]
    reference: String,
    role: &'static str,
    time: String,
    content: &'a str,
}

impl TurnRefs {
    fn new(batch: &Batch) -> Self {
        let offset = batch.context.len();
        let sources = batch
            .turns
            .iter()
            .enumerate()
            .map(|(i, t)| (turn_ref(offset + i), t.id))
            .collect();
        Self {
            sources,
            all_sources: batch.turns.iter().map(|t| t.id).collect(),
        }
    }

    /// The user message: `{"context": [turn], "turns": [turn]}`. JSON keeps turn boundaries
    /// unambiguous whatever the turns contain.
    fn render(&self, batch: &Batch) -> String {
        fn view(index: usize, turn: &BatchTurn) -> TurnView<'_> {
            TurnView {
                reference: turn_ref(index),
                role: turn.role.as_str(),
                time: turn.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
                content: &turn.content,
            }
        }
        let offset = batch.context.len();
        let input = serde_json::json!({
            "context": batch.context.iter().enumerate().map(|(i, t)| view(i, t)).collect::<Vec<_>>(),
            "turns": batch.turns.iter().enumerate().map(|(i, t)| view(offset + i, t)).collect::<Vec<_>>(),
        });
        input.to_string()
    }

    /// The cards of a validated answer: refs mapped to turn ids (unknown and context-only refs
    /// dropped; none left means every turn of the batch), priority clamped, empty cards gone.
    fn cards(&self, raw: Vec<RawCard>) -> Vec<Card> {
        raw.into_iter()
            .map(|card| {
                let mut seen = HashSet::new();
                let mut sources: Vec<Uuid> = card
                    .sources
                    .iter()
                    .filter_map(|r| self.sources.get(r).copied())
                    .filter(|id| seen.insert(*id))
                    .collect();
                if sources.is_empty() {
                    sources.clone_from(&self.all_sources);
                }
                Card {
                    content: card.content,
                    category: card.category,
                    priority: card
                        .priority
                        .map_or(DEFAULT_PRIORITY, |p| p.clamp(0, i64::from(MAX_PRIORITY)) as u8),
                    scene: card.scene,
                    occurred_at: card.occurred_at,
                    source_message_ids: sources,
                }
            })
            .collect()
    }
}

fn turn_ref(index: usize) -> String {
    format!("m{}", index + 1)
}

/// A card as the answer gave it, validated but not yet mapped.
#[derive(Debug, Clone, PartialEq)]
struct RawCard {
    content: String,
    category: Category,
    priority: Option<i64>,
    scene: Option<String>,
    occurred_at: Option<String>,
    /// Normalized refs (`m3`), possibly unknown.
    sources: Vec<String>,
}

/// Validates an extraction answer: `{"scenes": [{"scene", "cards": [card]}]}`, or (also
/// accepted) `{"cards": [card]}` with each card naming its own scene. Cards with empty content
/// are dropped here; any other problem is an error.
fn parse_extraction(mut value: Value) -> Result<Vec<RawCard>, String> {
    alias::normalize_extraction(&mut value);
    let Value::Object(root) = value else {
        return Err(format!(
            "expected a JSON object with a \"scenes\" list, got {}",
            kind(&value)
        ));
    };
    if !root.contains_key("scenes") && !root.contains_key("cards") {
        return Err("expected a JSON object with a \"scenes\" list, but it has no \"scenes\" key".into());
    }
    let mut problems = Problems::default();
    let mut cards = Vec::new();
    if let Some(scenes) = root.get("scenes") {
        match scenes.as_array() {
            Some(scenes) => {
                for (i, scene) in scenes.iter().enumerate() {
                    let path = format!("scenes[{i}]");
                    let Value::Object(scene) = scene else {
                        problems.push(&path, format!("must be an object, got {}", kind(scene)));
                        continue;
                    };
                    let name = optional_text(scene, "scene", &path, &mut problems);
                    match scene.get("cards") {
                        Some(Value::Array(list)) => {
                            for (j, card) in list.iter().enumerate() {
                                let path = format!("{path}.cards[{j}]");
                                cards.extend(parse_card(card, &path, name.as_deref(), &mut problems));
                            }
                        }
                        Some(other) => {
                            problems.push(&format!("{path}.cards"), format!("must be a list, got {}", kind(other)))
                        }
                        None => problems.push(&path, "has no \"cards\" list"),
                    }
                }
            }
            None => problems.push("scenes", format!("must be a list, got {}", kind(scenes))),
        }
    }
    match root.get("cards") {
        Some(Value::Array(list)) => {
            for (j, card) in list.iter().enumerate() {
                cards.extend(parse_card(card, &format!("cards[{j}]"), None, &mut problems));
            }
        }
        Some(other) => problems.push("cards", format!("must be a list, got {}", kind(other))),
        None => {}
    }
    problems.into_result(cards)
}

fn parse_card(card: &Value, path: &str, scene: Option<&str>, problems: &mut Problems) -> Option<RawCard> {
    let Value::Object(card) = card else {
        problems.push(path, format!("must be an object, got {}", kind(card)));
        return None;
    };
    let content = match card.get("content") {
        Some(Value::String(text)) => text.trim().to_owned(),
        None | Some(Value::Null) => {
            problems.push(path, "has no \"content\"");
            return None;
        }
        Some(other) => {
            problems.push(
                &format!("{path}.content"),
                format!("must be a string, got {}", kind(other)),
            );
            return None;
        }
    };
    if content.is_empty() {
        return None;
    }
    let category = match card.get("category") {
        Some(Value::String(name)) => match Category::parse(name).or_else(|| alias::category(name)) {
            Some(category) => Some(category),
            None => {
                problems.push(
                    &format!("{path}.category"),
                    format!("{name:?} is not a category (use one of {})", category_names()),
                );
                None
            }
        },
        None | Some(Value::Null) => {
            problems.push(path, format!("has no \"category\" (use one of {})", category_names()));
            None
        }
        Some(other) => {
            problems.push(
                &format!("{path}.category"),
                format!("must be a string, got {}", kind(other)),
            );
            None
        }
    };
    let priority = match card.get("priority") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64().map(|f| f.round() as i64),
        Some(other) => {
            problems.push(
                &format!("{path}.priority"),
                format!("must be an integer from 0 to 100, got {}", kind(other)),
            );
            None
        }
    };
    let own_scene = optional_text(card, "scene", path, problems);
    let occurred_at = match card.get("occurred_at") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.trim().to_owned()).filter(|t| !t.is_empty()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::Object(period)) => period_text(period),
        Some(other) => {
            problems.push(
                &format!("{path}.occurred_at"),
                format!("must be a string or null, got {}", kind(other)),
            );
            None
        }
    };
    let sources = match card.get("source_message_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().filter_map(|item| short_ref(item, 'm')).collect(),
        Some(other) => {
            problems.push(
                &format!("{path}.source_message_ids"),
                format!("must be a list of turn refs, got {}", kind(other)),
            );
            Vec::new()
        }
    };
    Some(RawCard {
        content,
        category: category?,
        priority,
        scene: own_scene.or_else(|| scene.map(str::to_owned)),
        occurred_at,
        sources,
    })
}

/// `{"start": a, "end": b}` (or `from`/`to`) as `a to b`.
fn period_text(period: &Map<String, Value>) -> Option<String> {
    let text = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| period.get(*k).and_then(Value::as_str))
            .map(str::trim)
            .filter(|t| !t.is_empty())
    };
    match (text(&["start", "from", "begin"]), text(&["end", "to", "until"])) {
        (Some(start), Some(end)) => Some(format!("{start} to {end}")),
        (Some(one), None) | (None, Some(one)) => Some(one.to_owned()),
        (None, None) => None,
    }
}

fn category_names() -> String {
    Category::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

// ---------------------------------------------------------------------------------------------
// Dedup

/// The active candidate that `card` repeats exactly: the same text (ignoring case and runs of
/// white space), category and time. Anything less exact is the model's to judge.
fn repeated(card: &Card, candidates: &[Candidate]) -> Option<Uuid> {
    let text = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let content = text(&card.content);
    candidates
        .iter()
        .map(|c| &c.memory)
        .find(|m| {
            m.status == super::MemoryStatus::Active
                && m.category == card.category
                && m.occurred_at == card.occurred_at
                && text(&m.content) == content
        })
        .map(|m| m.id)
}

/// The short refs of one dedup call: `n{i+1}` for `cards[i]`, `c1..` for the distinct stored
/// memories among the candidates.
struct CandidateRefs {
    memories: HashMap<String, Uuid>,
    by_id: HashMap<Uuid, String>,
}

#[derive(Serialize)]
struct CardView<'a> {
    #[serde(rename = "ref")]
    reference: String,
    content: &'a str,
    category: &'static str,
    scene: Option<&'a str>,
    occurred_at: Option<&'a str>,
    candidates: Vec<CandidateView<'a>>,
}

#[derive(Serialize)]
struct CandidateView<'a> {
    #[serde(rename = "ref")]
    reference: &'a str,
    content: &'a str,
    category: &'static str,
    scene: Option<&'a str>,
    occurred_at: Option<&'a str>,
    updated_at: String,
}

impl CandidateRefs {
    fn new(cards: &[Card], candidates: &[Vec<Candidate>]) -> Self {
        let mut memories = HashMap::new();
        let mut by_id = HashMap::new();
        for candidate in candidates.iter().take(cards.len()).flatten() {
            let id = candidate.memory.id;
            if !by_id.contains_key(&id) {
                let reference = format!("c{}", by_id.len() + 1);
                memories.insert(reference.clone(), id);
                by_id.insert(id, reference);
            }
        }
        Self { memories, by_id }
    }

    /// The user message, `{"cards": [card with its candidates]}` over the cards that have
    /// candidates; `None` when none has.
    fn render(&self, cards: &[Card], candidates: &[Vec<Candidate>]) -> Option<String> {
        let views: Vec<CardView<'_>> = cards
            .iter()
            .enumerate()
            .filter_map(|(i, card)| {
                let own = candidates.get(i).filter(|c| !c.is_empty())?;
                Some(CardView {
                    reference: card_ref(i),
                    content: &card.content,
                    category: card.category.as_str(),
                    scene: card.scene.as_deref(),
                    occurred_at: card.occurred_at.as_deref(),
                    candidates: own
                        .iter()
                        .filter_map(|c| {
                            let reference = self.by_id.get(&c.memory.id)?;
                            Some(CandidateView {
                                reference,
                                content: &c.memory.content,
                                category: c.memory.category.as_str(),
                                scene: c.memory.scene.as_deref(),
                                occurred_at: c.memory.occurred_at.as_deref(),
                                updated_at: c.memory.updated_at.to_rfc3339_opts(SecondsFormat::Secs, true),
                            })
                        })
                        .collect(),
                })
            })
            .collect();
        if views.is_empty() {
            return None;
        }
        Some(serde_json::json!({ "cards": views }).to_string())
    }

    /// One decision per card, and how many cards fell back to `Add` because their decision
    /// was missing or named a target outside their own candidates.
    fn decisions(&self, raw: Vec<RawDecision>, count: usize, candidates: &[Vec<Candidate>]) -> (Vec<Decision>, usize) {
        let mut decided: Vec<Option<Decision>> = vec![None; count];
        let mut fallbacks = 0;
        for decision in raw {
            let Some(index) = card_index(&decision.card).filter(|i| *i < count) else {
                continue;
            };
            // The first decision for a card counts; a model repeating itself is not asking twice.
            if decided[index].is_some() {
                continue;
            }
            let own: HashSet<Uuid> = candidates
                .get(index)
                .map(|c| c.iter().map(|c| c.memory.id).collect())
                .unwrap_or_default();
            let mut targets = Vec::new();
            let mut all_own = true;
            for reference in &decision.targets {
                match self.memories.get(reference).filter(|id| own.contains(id)) {
                    Some(id) if !targets.contains(id) => targets.push(*id),
                    Some(_) => {}
                    None => all_own = false,
                }
            }
            let content = decision.content;
            let mapped = match (decision.action, all_own, targets.as_slice()) {
                (Action::Add, _, _) => Some(Decision::Add),
                // A target the card was not compared with: acting on it could archive an
                // unrelated memory, so the card is simply added.
                (Action::Update | Action::Merge | Action::Discard, false, _)
                | (Action::Update | Action::Merge | Action::Discard, true, []) => None,
                (Action::Update | Action::Merge, true, [target]) => Some(Decision::Update {
                    target: *target,
                    content,
                }),
                (Action::Update | Action::Merge, true, many) => Some(Decision::Merge {
                    targets: many.to_vec(),
                    content,
                }),
                (Action::Discard, true, [first, ..]) => Some(Decision::Discard {
                    duplicate_of: Some(*first),
                }),
            };
            if mapped.is_none() {
                fallbacks += 1;
            }
            decided[index] = Some(mapped.unwrap_or(Decision::Add));
        }
        let decisions = decided
            .into_iter()
            .enumerate()
            .map(|(i, decision)| {
                decision.unwrap_or_else(|| {
                    // A card without candidates was not asked about: `Add` is its answer.
                    if candidates.get(i).is_some_and(|c| !c.is_empty()) {
                        fallbacks += 1;
                    }
                    Decision::Add
                })
            })
            .collect();
        (decisions, fallbacks)
    }
}

fn card_ref(index: usize) -> String {
    format!("n{}", index + 1)
}

fn card_index(reference: &str) -> Option<usize> {
    reference.strip_prefix('n')?.parse::<usize>().ok()?.checked_sub(1)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Add,
    Update,
    Merge,
    Discard,
}

#[derive(Debug, Clone, PartialEq)]
struct RawDecision {
    /// Normalized card ref (`n2`).
    card: String,
    action: Action,
    /// Normalized candidate refs (`c1`).
    targets: Vec<String>,
    content: Option<String>,
}

/// Validates a dedup answer: `{"decisions": [{"card", "action", "targets", "content"}]}`.
fn parse_decisions(mut value: Value) -> Result<Vec<RawDecision>, String> {
    alias::normalize_decisions(&mut value);
    let Some(root) = value.as_object() else {
        return Err(format!(
            "expected a JSON object with a \"decisions\" list, got {}",
            kind(&value)
        ));
    };
    let list = match root.get("decisions") {
        Some(Value::Array(list)) => list,
        Some(other) => return Err(format!("\"decisions\" must be a list, got {}", kind(other))),
        None => return Err("expected a JSON object with a \"decisions\" list, but it has no \"decisions\" key".into()),
    };
    let mut problems = Problems::default();
    let mut decisions = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let path = format!("decisions[{i}]");
        let Value::Object(item) = item else {
            problems.push(&path, format!("must be an object, got {}", kind(item)));
            continue;
        };
        let card = item.get("card").and_then(|c| short_ref(c, 'n'));
        if card.is_none() {
            problems.push(&path, "has no \"card\" ref (such as \"n1\")");
        }
        let action = match item.get("action").and_then(Value::as_str) {
            Some(name) => match alias::action(name) {
                Some("add") => Some(Action::Add),
                Some("update") => Some(Action::Update),
                Some("merge") => Some(Action::Merge),
                Some("discard") => Some(Action::Discard),
                Some(_) | None => {
                    problems.push(
                        &format!("{path}.action"),
                        format!("{name:?} is not an action (use add, update, merge or discard)"),
                    );
                    None
                }
            },
            None => {
                problems.push(path.as_str(), "has no \"action\" (add, update, merge or discard)");
                None
            }
        };
        let targets = match item.get("targets") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.iter().filter_map(|t| short_ref(t, 'c')).collect(),
            Some(other) => {
                problems.push(
                    &format!("{path}.targets"),
                    format!("must be a list of candidate refs, got {}", kind(other)),
                );
                Vec::new()
            }
        };
        let content = match item.get("content") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.trim().to_owned()).filter(|t| !t.is_empty()),
            Some(other) => {
                problems.push(
                    &format!("{path}.content"),
                    format!("must be a string or null, got {}", kind(other)),
                );
                None
            }
        };
        if let (Some(card), Some(action)) = (card, action) {
            decisions.push(RawDecision {
                card,
                action,
                targets,
                content,
            });
        }
    }
    problems.into_result(decisions)
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

/// A ref as the model wrote it, normalized: `" M3 "`, `"[m3]"`, `"3"` and `3` are all `m3`
/// (for `prefix` `m`). Anything else is no ref.
fn short_ref(value: &Value, prefix: char) -> Option<String> {
    let text = match value {
        Value::String(text) => text.trim().trim_matches(|c| c == '[' || c == ']').trim().to_lowercase(),
        Value::Number(n) => n.as_u64()?.to_string(),
        Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => return None,
    };
    if text.is_empty() {
        None
    } else if text.chars().all(|c| c.is_ascii_digit()) {
        Some(format!("{prefix}{text}"))
    } else {
        Some(text)
    }
}

/// An optional string field; a non-string is a problem, an empty string is `None`.
fn optional_text(object: &Map<String, Value>, key: &str, path: &str, problems: &mut Problems) -> Option<String> {
    match object.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.trim().to_owned()).filter(|t| !t.is_empty()),
        Some(other) => {
            problems.push(
                &format!("{path}.{key}"),
                format!("must be a string or null, got {}", kind(other)),
            );
            None
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Validation problems, each with the path of the value it is about.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn push(&mut self, path: &str, problem: impl std::fmt::Display) {
        self.0.push(format!("{path}: {problem}"));
    }

    fn into_result<T>(self, value: T) -> Result<T, String> {
        match self.0.len() {
            0 => Ok(value),
            n if n <= MAX_PROBLEMS => Err(self.0.join("; ")),
            n => Err(format!(
                "{}; and {} more",
                self.0[..MAX_PROBLEMS].join("; "),
                n - MAX_PROBLEMS
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::domain::{Role, Tenant};
    use crate::memory::{Memory, MemoryStatus};

    fn tenant() -> Tenant {
        Tenant {
            team: "t".into(),
            agent: "a".into(),
            user: "u".into(),
        }
    }

    fn turn(seq: i64, role: Role, content: &str) -> BatchTurn {
        BatchTurn {
            id: Uuid::new_v4(),
            seq,
            role,
            content: content.into(),
            created_at: Utc.with_ymd_and_hms(2026, 3, 2, 2, 10, seq as u32).unwrap(),
        }
    }

    fn batch(context: usize, turns: usize) -> Batch {
        Batch {
            tenant: tenant(),
            session_id: "s1".into(),
            context: (0..context).map(|i| turn(i as i64, Role::User, "earlier")).collect(),
            turns: (0..turns)
                .map(|i| turn((context + i) as i64, Role::User, &format!("turn {i}")))
                .collect(),
        }
    }

    fn card(content: &str) -> Card {
        Card {
            content: content.into(),
            category: Category::WorkFact,
            priority: 50,
            scene: None,
            occurred_at: None,
            source_message_ids: vec![Uuid::new_v4()],
        }
    }

    fn candidate(content: &str) -> Candidate {
        let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        Candidate {
            memory: Memory {
                id: Uuid::new_v4(),
                tenant: tenant(),
                session_id: "s0".into(),
                content: content.into(),
                category: Category::WorkFact,
                priority: 50,
                scene: None,
                occurred_at: None,
                source_message_ids: vec![],
                status: MemoryStatus::Active,
                superseded_by: None,
                task: None,
                created_at: at,
                updated_at: at,
            },
            similarity: Some(0.9),
        }
    }

    #[test]
    fn turns_are_rendered_with_short_refs_and_no_ids() {
        let batch = batch(2, 2);
        let refs = TurnRefs::new(&batch);
        let rendered: Value = serde_json::from_str(&refs.render(&batch)).unwrap();
        assert_eq!(rendered["context"][1]["ref"], json!("m2"));
        assert_eq!(rendered["turns"][0]["ref"], json!("m3"));
        assert_eq!(rendered["turns"][1]["content"], json!("turn 1"));
        assert_eq!(rendered["turns"][0]["role"], json!("user"));
        assert_eq!(rendered["turns"][0]["time"], json!("2026-03-02T02:10:02Z"));
        let text = refs.render(&batch);
        for t in batch.context.iter().chain(&batch.turns) {
            assert!(!text.contains(&t.id.to_string()), "a UUID reached the prompt");
        }
    }

    #[test]
    fn refs_map_back_and_bad_ones_fall_back_to_every_turn() {
        let batch = batch(2, 3);
        let refs = TurnRefs::new(&batch);
        let raw = parse_extraction(json!({"scenes": [{"scene": "db", "cards": [
            {"content": "a", "category": "fact", "priority": 250, "source_message_ids": ["m4", "M4", 3, "m9"]},
            {"content": "b", "category": "work_task", "priority": -5, "source_message_ids": ["m1", "m2"]},
            {"content": "  ", "category": "fact"},
            {"content": "c", "category": "persona", "scene": "me", "occurred_at": {"start": "2026-03-01", "end": "2026-03-02"}},
        ]}]}))
        .unwrap();
        let cards = refs.cards(raw);
        let all: Vec<Uuid> = batch.turns.iter().map(|t| t.id).collect();
        assert_eq!(cards.len(), 3, "the empty card is dropped");
        assert_eq!(cards[0].source_message_ids, vec![batch.turns[1].id, batch.turns[0].id]);
        assert_eq!((cards[0].priority, cards[0].category), (100, Category::WorkFact));
        assert_eq!(cards[0].scene.as_deref(), Some("db"));
        assert_eq!(cards[1].source_message_ids, all, "context-only refs are not sources");
        assert_eq!(cards[1].priority, 0);
        assert_eq!(cards[2].source_message_ids, all, "no refs at all");
        assert_eq!(cards[2].priority, DEFAULT_PRIORITY);
        assert_eq!(cards[2].scene.as_deref(), Some("me"), "the card's own scene wins");
        assert_eq!(cards[2].occurred_at.as_deref(), Some("2026-03-01 to 2026-03-02"));
    }

    #[test]
    fn flat_cards_and_empty_answers_are_accepted() {
        let raw = parse_extraction(json!({"cards": [{"content": "x", "category": "episode", "scene": "s"}]})).unwrap();
        assert_eq!(raw[0].category, Category::Episodic);
        assert_eq!(raw[0].scene.as_deref(), Some("s"));
        assert!(parse_extraction(json!({"scenes": []})).unwrap().is_empty());
        assert!(parse_extraction(json!([])).unwrap().is_empty());
    }

    #[test]
    fn invalid_extractions_are_explained_with_paths() {
        let cases = [
            (
                json!("cards"),
                "expected a JSON object with a \"scenes\" list, got a string",
            ),
            (json!({"result": []}), "has no \"scenes\" key"),
            (json!({"scenes": {}}), "scenes: must be a list, got an object"),
            (json!({"scenes": [{"scene": "x"}]}), "scenes[0]: has no \"cards\" list"),
            (
                json!({"scenes": [{"cards": [{"content": "x", "category": "weather"}]}]}),
                "scenes[0].cards[0].category: \"weather\" is not a category (use one of persona, episodic",
            ),
            (
                json!({"scenes": [{"cards": [{"content": "x"}]}]}),
                "scenes[0].cards[0]: has no \"category\"",
            ),
            (
                json!({"scenes": [{"cards": [{"category": "fact"}]}]}),
                "scenes[0].cards[0]: has no \"content\"",
            ),
            (
                json!({"cards": [{"content": "x", "category": "fact", "priority": [1]}]}),
                "cards[0].priority: must be an integer from 0 to 100, got a list",
            ),
            (
                json!({"cards": [{"content": "x", "category": "fact", "source_message_ids": {"a": 1}}]}),
                "cards[0].source_message_ids: must be a list of turn refs, got an object",
            ),
        ];
        for (answer, expected) in cases {
            let error = parse_extraction(answer.clone()).unwrap_err();
            assert!(error.contains(expected), "{answer}: {error}");
        }
        let many: Vec<Value> = (0..12).map(|_| json!({"content": "x"})).collect();
        let error = parse_extraction(json!({ "cards": many })).unwrap_err();
        assert!(error.ends_with("and 4 more"), "{error}");
    }

    #[test]
    fn dedup_input_shows_only_cards_with_candidates_and_short_refs() {
        let cards = vec![card("one"), card("two"), card("three")];
        let shared = candidate("stored A");
        let candidates = vec![
            vec![shared.clone(), candidate("stored B")],
            vec![],
            vec![shared.clone()],
        ];
        let refs = CandidateRefs::new(&cards, &candidates);
        let input: Value = serde_json::from_str(&refs.render(&cards, &candidates).unwrap()).unwrap();
        let shown: Vec<&str> = input["cards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["ref"].as_str().unwrap())
            .collect();
        assert_eq!(shown, vec!["n1", "n3"]);
        assert_eq!(input["cards"][0]["candidates"][1]["ref"], json!("c2"));
        assert_eq!(
            input["cards"][1]["candidates"][0]["ref"],
            json!("c1"),
            "one memory, one ref"
        );
        assert_eq!(input["cards"][1]["candidates"][0]["content"], json!("stored A"));
        assert!(!input.to_string().contains(&shared.memory.id.to_string()));

        let none = vec![vec![], vec![], vec![]];
        assert!(CandidateRefs::new(&cards, &none).render(&cards, &none).is_none());
    }

    #[test]
    fn decisions_map_to_own_candidates_or_fall_back_to_add() {
        let cards: Vec<Card> = (0..7).map(|i| card(&format!("card {i}"))).collect();
        let a = candidate("A");
        let b = candidate("B");
        let c = candidate("C");
        let candidates = vec![
            vec![a.clone()],
            vec![a.clone(), b.clone()],
            vec![b.clone()],
            vec![c.clone()],
            vec![a.clone(), c.clone()],
            vec![c.clone()],
            vec![],
        ];
        let refs = CandidateRefs::new(&cards, &candidates);
        let (ra, rb, rc) = (
            &refs.by_id[&a.memory.id],
            &refs.by_id[&b.memory.id],
            &refs.by_id[&c.memory.id],
        );
        let raw = parse_decisions(json!({"decisions": [
            {"card": "n1", "action": "update", "targets": [ra], "content": "A, refined"},
            {"card": "n2", "action": "merge", "targets": [ra, rb], "content": "A and B"},
            {"card": "n3", "action": "discard", "targets": [rb]},
            {"card": "n4", "action": "update", "targets": [ra]},
            {"card": "n5", "action": "discard", "targets": []},
            {"card": "n1", "action": "discard", "targets": [ra]},
            {"card": "n99", "action": "discard", "targets": [rc]},
        ]}))
        .unwrap();
        let (decisions, fallbacks) = refs.decisions(raw, cards.len(), &candidates);
        assert_eq!(
            decisions,
            vec![
                Decision::Update {
                    target: a.memory.id,
                    content: Some("A, refined".into())
                },
                Decision::Merge {
                    targets: vec![a.memory.id, b.memory.id],
                    content: Some("A and B".into())
                },
                Decision::Discard {
                    duplicate_of: Some(b.memory.id)
                },
                Decision::Add,
                Decision::Add,
                Decision::Add,
                Decision::Add,
            ]
        );
        // n4 named another card's candidate, n5 discarded without a target, n6 got no
        // decision; n7 had no candidates and was never asked.
        assert_eq!(fallbacks, 3);
    }

    #[test]
    fn merge_with_one_target_is_an_update_and_update_with_two_a_merge() {
        let cards = vec![card("x"), card("y")];
        let (a, b) = (candidate("A"), candidate("B"));
        let candidates = vec![vec![a.clone()], vec![a.clone(), b.clone()]];
        let refs = CandidateRefs::new(&cards, &candidates);
        let raw = parse_decisions(json!([
            {"card": 1, "action": "merge", "targets": ["c1"]},
            {"card": "n2", "action": "replace", "targets": "c1, c2", "content": " "},
        ]))
        .unwrap();
        let (decisions, fallbacks) = refs.decisions(raw, cards.len(), &candidates);
        assert_eq!(fallbacks, 0);
        assert_eq!(
            decisions,
            vec![
                Decision::Update {
                    target: a.memory.id,
                    content: None
                },
                Decision::Merge {
                    targets: vec![a.memory.id, b.memory.id],
                    content: None
                },
            ]
        );
    }

    #[test]
    fn invalid_decisions_are_explained_with_paths() {
        let cases = [
            (json!({"verdict": "ok"}), "has no \"decisions\" key"),
            (
                json!({"decisions": "all add"}),
                "\"decisions\" must be a list, got a string",
            ),
            (
                json!({"decisions": [{"action": "add"}]}),
                "decisions[0]: has no \"card\" ref",
            ),
            (
                json!({"decisions": [{"card": "n1"}]}),
                "decisions[0]: has no \"action\"",
            ),
            (
                json!({"decisions": [{"card": "n1", "action": "maybe"}]}),
                "decisions[0].action: \"maybe\" is not an action",
            ),
            (
                json!({"decisions": [{"card": "n1", "action": "update", "targets": {"c1": 1}}]}),
                "decisions[0].targets: must be a list of candidate refs",
            ),
        ];
        for (answer, expected) in cases {
            let error = parse_decisions(answer.clone()).unwrap_err();
            assert!(error.contains(expected), "{answer}: {error}");
        }
    }

    #[test]
    fn short_refs_are_normalized() {
        assert_eq!(short_ref(&json!(" M3 "), 'm').as_deref(), Some("m3"));
        assert_eq!(short_ref(&json!("[m3]"), 'm').as_deref(), Some("m3"));
        assert_eq!(short_ref(&json!("3"), 'm').as_deref(), Some("m3"));
        assert_eq!(short_ref(&json!(3), 'c').as_deref(), Some("c3"));
        assert_eq!(short_ref(&json!(""), 'm'), None);
        assert_eq!(short_ref(&json!(-1), 'm'), None);
        assert_eq!(short_ref(&json!(null), 'm'), None);
    }

    #[test]
    fn llm_errors_keep_their_class_as_engine_errors() {
        assert!(matches!(
            EngineError::from(LlmError::Unavailable("x".into())),
            EngineError::Unavailable(_)
        ));
        assert!(matches!(
            EngineError::from(LlmError::Rejected("x".into())),
            EngineError::Rejected(_)
        ));
        assert!(
            matches!(EngineError::from(LlmError::Malformed("bad".into())), EngineError::Malformed(r) if r == "bad")
        );
    }
}
