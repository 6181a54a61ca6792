//! The rules engine: L1 extraction and conflict decisions with no LLM, deterministically.
//! It is what the embedded default runs when no LLM is configured, and a documented mode of
//! its own (`mode() == "rules"`), not a degraded fallback: the pipeline treats it exactly like
//! the LLM engines.
//!
//! # Extraction ([`RulesExtractor`])
//! Each turn of `batch.turns` is cut into sentences ([`split_sentences`]) and every sentence is
//! classified by ordered English and Chinese pattern tables ([`classify_sentence`]; the tables
//! and their order are documented in `patterns.rs`). A sentence that matches becomes one card:
//! - `content` is the sentence itself: only list markers and runs of whitespace are cleaned.
//!   Nothing is paraphrased, completed or invented.
//! - `category` and `priority` come from the rule; "remember / 记住 / always / never / 务必"
//!   give [`EXPLICIT_PRIORITY`] (90), persona and preferences 80, decisions 75, tasks 65–80,
//!   facts 60, artifacts and episodes 55.
//! - `occurred_at` is a date the sentence states (absolute, or a day-relative word such as
//!   "yesterday" / "明天" resolved against the turn's UTC date); failing that, the turn's UTC
//!   date for episodic and task cards; otherwise none.
//! - `scene` is `None`: topic segmentation needs understanding the rules do not have, and a
//!   wrong scene would mislead L2 more than a missing one.
//! - `source_message_ids` is the turn's id; a sentence said twice in the batch (same normalized
//!   text) is one card with both turns' ids and the higher priority.
//!
//! Which turns speak: **user turns only**. Context turns never produce cards. Assistant turns do
//! not either: the rules cannot tell a proposal ("let's use Kafka") from a confirmed decision,
//! and "I created the table" copied from an assistant turn would be misattributed to the user.
//! When the user confirms ("好的，就用 Kafka"), the user's own sentence carries the card. System
//! and tool turns are instructions and data for the agent, not statements by the user.
//!
//! # Conflict decisions ([`RulesJudge`])
//! Deterministic thresholds on text similarity; see `judge.rs` for the rules and
//! [`DUPLICATE_COSINE`] and friends for the values.
//!
//! # Provenance
//! Both engines report `model = "rules"` and a template `{id, version: RULES_VERSION, source:
//! "rules", hash}` whose hash is the SHA-256 of a stable text of every table and threshold, so
//! a memory can be traced to the exact rules that made it and a changed table shows up as a
//! new hash even if the version was not bumped.

mod dates;
mod judge;
mod patterns;
mod sentences;
pub(crate) mod text;

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use sha2::{Digest, Sha256};

pub use judge::{COVERAGE, DUPLICATE_COSINE, DUPLICATE_JACCARD, NEGATION_OVERLAP, REFINE_MIN_COSINE};
pub use patterns::{classify_sentence, Classified, EXPLICIT_PRIORITY};
pub use sentences::{split_sentences, MAX_SENTENCE_CHARS};

use super::{Batch, BatchTurn, Candidate, Card, CardExtractor, Category, ConflictJudge, Decision, EngineError};
use super::{EngineRun, Extraction, TemplateRef};
use crate::domain::Role;

/// Version of the rule tables; bump it with any change to them.
pub const RULES_VERSION: &str = "1";
/// `mode()` of both rules engines, and their `model` in provenance.
pub const RULES_MODE: &str = "rules";
/// Template id of extraction, shared with the LLM engine's prompt.
pub const EXTRACT_TEMPLATE_ID: &str = "l1-extract";
/// Template id of conflict decisions, shared with the LLM engine's prompt.
pub const DEDUP_TEMPLATE_ID: &str = "l1-dedup";

static EXTRACT_HASH: LazyLock<String> = LazyLock::new(|| {
    let mut description = format!("sediment rules l1-extract v{RULES_VERSION}\n");
    patterns::describe(&mut description);
    description.push_str(&format!(
        "abbreviations {:?} {:?}\nmax_sentence_chars {MAX_SENTENCE_CHARS}\n",
        sentences::ABBREVIATIONS,
        sentences::FINAL_ABBREVIATIONS
    ));
    hex_sha256(&description)
});

static DEDUP_HASH: LazyLock<String> = LazyLock::new(|| {
    let mut description = format!("sediment rules l1-dedup v{RULES_VERSION}\n");
    judge::describe(&mut description);
    hex_sha256(&description)
});

fn hex_sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn run(template_id: &str, hash: &str) -> EngineRun {
    EngineRun {
        template: TemplateRef {
            id: template_id.to_owned(),
            version: RULES_VERSION.to_owned(),
            source: RULES_MODE.to_owned(),
            hash: hash.to_owned(),
        },
        model: RULES_MODE.to_owned(),
    }
}

/// Whether a turn of this role may produce cards (see the module doc).
fn speaks(role: Role) -> bool {
    match role {
        Role::User => true,
        Role::Assistant | Role::System | Role::Tool => false,
    }
}

/// The rules extractor: sentences of user turns matched against pattern tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesExtractor;

impl RulesExtractor {
    pub fn new() -> Self {
        Self
    }

    /// The provenance of everything this extractor produces.
    pub fn run(&self) -> EngineRun {
        run(EXTRACT_TEMPLATE_ID, &EXTRACT_HASH)
    }

    /// The cards of `batch.turns`, in turn and sentence order. Pure and infallible.
    pub fn cards(&self, batch: &Batch) -> Vec<Card> {
        let mut cards: Vec<Card> = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for turn in batch.turns.iter().filter(|t| speaks(t.role)) {
            for sentence in split_sentences(&turn.content) {
                let Some(hit) = classify_sentence(&sentence) else {
                    continue;
                };
                let key = text::normalize(&sentence);
                if let Some(&i) = seen.get(&key) {
                    let card = &mut cards[i];
                    if !card.source_message_ids.contains(&turn.id) {
                        card.source_message_ids.push(turn.id);
                    }
                    card.priority = card.priority.max(hit.priority);
                    continue;
                }
                seen.insert(key, cards.len());
                cards.push(Card {
                    occurred_at: occurred_at(&sentence, hit.category, turn),
                    content: sentence,
                    category: hit.category,
                    priority: hit.priority,
                    scene: None,
                    source_message_ids: vec![turn.id],
                });
            }
        }
        cards
    }
}

fn occurred_at(sentence: &str, category: Category, turn: &BatchTurn) -> Option<String> {
    let date = turn.created_at.date_naive();
    let dated = match category {
        Category::Episodic | Category::WorkTask => true,
        Category::Persona
        | Category::Instruction
        | Category::WorkFact
        | Category::WorkMethod
        | Category::WorkArtifact => false,
    };
    dates::stated_date(sentence, date).or_else(|| dated.then(|| date.format("%Y-%m-%d").to_string()))
}

#[async_trait::async_trait]
impl CardExtractor for RulesExtractor {
    fn mode(&self) -> &'static str {
        RULES_MODE
    }

    async fn extract(&self, batch: &Batch) -> Result<Extraction, EngineError> {
        Ok(Extraction {
            cards: self.cards(batch),
            run: self.run(),
        })
    }
}

/// The rules conflict judge: repeat, refinement and contradiction by text similarity.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesJudge;

impl RulesJudge {
    pub fn new() -> Self {
        Self
    }

    /// The provenance of every decision this judge makes.
    pub fn run(&self) -> EngineRun {
        run(DEDUP_TEMPLATE_ID, &DEDUP_HASH)
    }

    /// One decision per card, in order; `candidates[i]` belong to `cards[i]` (missing ones
    /// count as none). Pure and infallible.
    pub fn decisions(&self, cards: &[Card], candidates: &[Vec<Candidate>]) -> Vec<Decision> {
        let mut claimed = HashSet::new();
        cards
            .iter()
            .enumerate()
            .map(|(i, card)| judge::decide_one(card, candidates.get(i).map_or(&[], Vec::as_slice), &mut claimed))
            .collect()
    }
}

#[async_trait::async_trait]
impl ConflictJudge for RulesJudge {
    fn mode(&self) -> &'static str {
        RULES_MODE
    }

    async fn decide(
        &self,
        _batch: &Batch,
        cards: &[Card],
        candidates: &[Vec<Candidate>],
    ) -> Result<(Vec<Decision>, EngineRun), EngineError> {
        Ok((self.decisions(cards, candidates), self.run()))
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use uuid::Uuid;

    use super::*;
    use crate::domain::Tenant;

    fn turn(role: Role, content: &str) -> BatchTurn {
        BatchTurn {
            id: Uuid::new_v4(),
            seq: 0,
            role,
            content: content.into(),
            created_at: Utc.with_ymd_and_hms(2026, 3, 1, 9, 30, 0).single().expect("valid time"),
        }
    }

    fn batch(context: Vec<BatchTurn>, turns: Vec<BatchTurn>) -> Batch {
        Batch {
            tenant: Tenant {
                team: "team".into(),
                agent: "agent".into(),
                user: "user".into(),
            },
            session_id: "s1".into(),
            context,
            turns,
        }
    }

    #[tokio::test]
    async fn seed_case_makes_a_persona_card_with_the_exact_sentence() {
        let first = turn(Role::User, "我是腾讯云 DBA，主要管北京区的 TDSQL-C");
        let extraction = RulesExtractor::new()
            .extract(&batch(vec![], vec![first.clone()]))
            .await
            .expect("rules never fail");
        assert_eq!(
            extraction.cards,
            vec![Card {
                content: "我是腾讯云 DBA，主要管北京区的 TDSQL-C".into(),
                category: Category::Persona,
                priority: 80,
                scene: None,
                occurred_at: None,
                source_message_ids: vec![first.id],
            }]
        );
        assert_eq!(extraction.run.model, "rules");
        assert_eq!(extraction.run.template.id, "l1-extract");
        assert_eq!(extraction.run.template.source, "rules");
        assert_eq!(extraction.run.template.version, RULES_VERSION);
    }

    #[test]
    fn only_user_turns_of_the_batch_speak() {
        let context = turn(Role::User, "I'm a backend engineer.");
        let turns = vec![
            turn(Role::Assistant, "I created the table order_archive for you."),
            turn(Role::System, "Always answer in English."),
            turn(Role::Tool, "We use Postgres 15."),
            turn(Role::User, "ok thanks"),
        ];
        assert!(RulesExtractor::new().cards(&batch(vec![context], turns)).is_empty());
    }

    #[test]
    fn one_card_per_memorable_sentence_with_dates() {
        let a = turn(
            Role::User,
            "Yesterday the primary crashed. How do I read the logs? I need to rotate the keys by Friday.",
        );
        let b = turn(Role::User, "- 我们决定用双写做迁移\n- 2024年10月我们完成了迁移");
        let cards = RulesExtractor::new().cards(&batch(vec![], vec![a.clone(), b.clone()]));
        let got: Vec<_> = cards
            .iter()
            .map(|c| {
                (
                    c.content.as_str(),
                    c.category,
                    c.occurred_at.as_deref(),
                    c.source_message_ids.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "Yesterday the primary crashed.",
                    Category::Episodic,
                    Some("2026-02-28"),
                    vec![a.id]
                ),
                (
                    "I need to rotate the keys by Friday.",
                    Category::WorkTask,
                    Some("2026-03-01"),
                    vec![a.id]
                ),
                ("我们决定用双写做迁移", Category::WorkMethod, None, vec![b.id]),
                (
                    "2024年10月我们完成了迁移",
                    Category::Episodic,
                    Some("2024-10"),
                    vec![b.id]
                ),
            ]
        );
    }

    #[test]
    fn repeats_within_a_batch_become_one_card() {
        let a = turn(Role::User, "I prefer tabs.");
        let b = turn(Role::User, "Remember: I prefer tabs!");
        let c = turn(Role::User, "i prefer   TABS");
        let cards = RulesExtractor::new().cards(&batch(vec![], vec![a.clone(), b.clone(), c.clone()]));
        // "Remember: I prefer tabs!" is another sentence (it says "remember"), the third a repeat.
        assert_eq!(cards.len(), 2);
        assert_eq!(cards[0].source_message_ids, vec![a.id, c.id]);
        assert_eq!(cards[1].priority, EXPLICIT_PRIORITY);
    }

    #[test]
    fn hashes_are_stable_hex() {
        let (x, y) = (RulesExtractor::new().run(), RulesJudge::new().run());
        for hash in [&x.template.hash, &y.template.hash] {
            assert_eq!(hash.len(), 64);
            assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
        }
        assert_ne!(x.template.hash, y.template.hash);
        assert_eq!(x, RulesExtractor::new().run());
        assert_eq!(y.template.id, "l1-dedup");
    }

    #[tokio::test]
    async fn judge_answers_one_decision_per_card() {
        let cards: Vec<Card> = ["I live in Shanghai", "We use Kafka"]
            .iter()
            .map(|content| Card {
                content: (*content).into(),
                category: Category::Persona,
                priority: 80,
                scene: None,
                occurred_at: None,
                source_message_ids: vec![Uuid::new_v4()],
            })
            .collect();
        // Fewer candidate lists than cards: the missing ones are "none".
        let (decisions, run) = RulesJudge::new()
            .decide(&batch(vec![], vec![]), &cards, &[])
            .await
            .expect("rules never fail");
        assert_eq!(decisions, vec![Decision::Add, Decision::Add]);
        assert_eq!(run.model, "rules");
    }
}
