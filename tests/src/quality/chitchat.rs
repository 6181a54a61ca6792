//! The `chitchat` dev set: months of casual conversation between two friends, real small talk
//! with a few events told once and asked about later in the third person.
//!
//! [`ChatDataset::generate`] builds, from a seed and a [`Corpus`] of real chit-chat:
//!
//! - conversations of two invented people, each 19–32 dated sessions over 6–10 months with
//!   irregular gaps, ~20–30 turns a session. The filler is real utterances from the
//!   chitchat-dataset package (MIT; installed by `tests/fetch-dev-data.sh`), re-dated, its two
//!   senders mapped to the two names; the unit tests use a small hand-written sample instead;
//! - events (`chitchat_events`) stated once, in first person, often with a relative time,
//!   some as a photo whose caption (in the turn's metadata) holds the answer, with same-topic
//!   distractors;
//! - questions in the third person with little word overlap with their evidence: single-fact,
//!   temporal, multi-hop, aggregation, caption-only and speaker-confusion.
//!
//! Every answer string ("key") occurs in its question's evidence turns and nowhere else in the
//! conversation: the filler is chosen without any of the conversation's keys.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Days, NaiveDate, Utc};
use serde_json::{json, Value};
use shared::domain::Tenant;
use uuid::Uuid;

use super::chitchat_events::{self as events, Cx, Mix};
use super::dataset::Role;
use crate::rng::Rng;

/// Namespace of every turn id (uuid v5 of "seed/conversation/session/turn").
const TURN_NAMESPACE: Uuid = Uuid::from_u128(0xc4a7_c4a7_51e5_4d2b_9f0e_6a1b_3c5d_7e9f);
/// The earliest first session; each conversation starts up to ~13 months later.
const FIRST_DAY: (i32, u32, u32) = (2023, 1, 9);
/// Longest filler turn taken from the corpus, in bytes; longer ones are essays, not chat.
const MAX_FILLER_CHARS: usize = 600;
/// Fewest filler turns in a session, however many beats it holds.
const MIN_FILLER_TURNS: usize = 6;

/// The people of the conversations: two each, never twice in one dataset.
const NAMES: [&str; 24] = [
    "Ana", "Tom", "Maya", "Jake", "Priya", "Leo", "Nina", "Omar", "Rosa", "Sam", "Hana", "Eli", "Zoe", "Raj", "Lucy",
    "Marc", "Ivy", "Noah", "Gwen", "Felix", "Tara", "Hugo", "Mila", "Owen",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChatKind {
    /// One turn states the answer.
    SingleFact,
    /// "When did …?", answered by the statement's relative time and the session date, or a
    /// question naming the date.
    Temporal,
    /// Needs two turns in different sessions (one says who or what, the other the answer).
    MultiHop,
    /// Two or three turns in different sessions each give part of the answer.
    Aggregation,
    /// The answer is in a shared photo's caption only.
    Caption,
    /// Both people said the same kind of thing; only one of them is asked about.
    SpeakerConfusion,
}

impl ChatKind {
    pub const ALL: [Self; 6] = [
        Self::SingleFact,
        Self::Temporal,
        Self::MultiHop,
        Self::Aggregation,
        Self::Caption,
        Self::SpeakerConfusion,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SingleFact => "single-fact",
            Self::Temporal => "temporal",
            Self::MultiHop => "multi-hop",
            Self::Aggregation => "aggregation",
            Self::Caption => "caption",
            Self::SpeakerConfusion => "speaker-confusion",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatTurn {
    pub id: Uuid,
    /// 0 or 1: index into the conversation's `speakers`.
    pub speaker: usize,
    /// Speaker 0 is the `user`, speaker 1 the `assistant` (the API knows no other roles).
    pub role: Role,
    pub content: String,
    /// The caption of a shared photo.
    pub caption: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Written by the generator (an event, a reaction or a distractor), not from the corpus.
    pub injected: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatSession {
    pub id: String,
    pub date: NaiveDate,
    pub turns: Vec<ChatTurn>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub tenant: Tenant,
    pub speakers: [String; 2],
    pub sessions: Vec<ChatSession>,
}

impl Conversation {
    /// The metadata a turn is stored with: `{"speaker": name}`, plus `caption` for a photo.
    pub fn metadata(&self, turn: &ChatTurn) -> Value {
        let mut meta = json!({ "speaker": self.speakers[turn.speaker] });
        if let Some(caption) = &turn.caption {
            meta["caption"] = json!(caption);
        }
        meta
    }

    pub fn turns(&self) -> impl Iterator<Item = &ChatTurn> {
        self.sessions.iter().flat_map(|s| &s.turns)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatQuestion {
    /// Index into `ChatDataset::conversations`.
    pub conversation: usize,
    pub text: String,
    pub kind: ChatKind,
    /// Turns that answer the question; finding any one of them counts as a hit.
    pub evidence: Vec<Uuid>,
    /// Strings stated in the evidence turns (content or caption) and nowhere else in the
    /// conversation.
    pub answers: Vec<String>,
    /// The day the event happened, for temporal questions.
    pub date: Option<NaiveDate>,
    /// Share of the question's content words found in its evidence (see [`overlap`]).
    pub overlap: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatDataset {
    pub seed: u64,
    pub conversations: Vec<Conversation>,
    pub questions: Vec<ChatQuestion>,
}

/// Shape of a generated dataset. The defaults give 10 conversations, ~6k turns and ~220
/// questions about 160 events.
#[derive(Debug, Clone)]
pub struct ChatConfig {
    pub conversations: usize,
    /// Sessions per conversation, inclusive.
    pub sessions: (usize, usize),
    /// Turns per session, inclusive (filler and injected together).
    pub turns: (usize, usize),
    /// Days from the first to the last session, inclusive.
    pub span_days: (usize, usize),
    pub mix: Mix,
}

impl Default for ChatConfig {
    fn default() -> Self {
        Self {
            conversations: 10,
            sessions: (19, 32),
            turns: (20, 30),
            span_days: (180, 300),
            mix: Mix {
                singles: 8,
                photos: 2,
                hops: 2,
                aggregations: 2,
                pairs: 2,
            },
        }
    }
}

/// Real two-person chit-chat to fill sessions with: the chitchat-dataset's conversations, each
/// a list of (sender 0 or 1, text) turns (consecutive messages of a sender joined).
#[derive(Debug, Clone)]
pub struct Corpus {
    conversations: Vec<Vec<(usize, String)>>,
}

impl Corpus {
    /// Parses chitchat-dataset's `dataset.json`: `{id: {"messages": [[{"text", "sender",
    /// "timestamp"}, …], …], …}, …}`, one inner list per run of one sender's messages. Keeps
    /// the conversations of exactly two senders, in id order.
    pub fn parse(json: &str) -> anyhow::Result<Self> {
        let all: serde_json::Map<String, Value> = serde_json::from_str(json).context("parse chitchat json")?;
        let mut ids: Vec<&String> = all.keys().collect();
        ids.sort();
        let mut conversations = Vec::new();
        for id in ids {
            let groups = all[id]["messages"]
                .as_array()
                .with_context(|| format!("conversation {id} has no messages"))?;
            let mut senders: Vec<&str> = Vec::new();
            let mut turns: Vec<(usize, String)> = Vec::new();
            for group in groups {
                let messages = group
                    .as_array()
                    .with_context(|| format!("conversation {id}: bad group"))?;
                let Some(sender) = messages.first().and_then(|m| m["sender"].as_str()) else {
                    continue;
                };
                let text = messages
                    .iter()
                    .filter_map(|m| m["text"].as_str())
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                let text = text.replace('\0', "");
                if text.trim().is_empty() {
                    continue;
                }
                let index = match senders.iter().position(|s| *s == sender) {
                    Some(i) => i,
                    None => {
                        senders.push(sender);
                        senders.len() - 1
                    }
                };
                // A run split by an empty group: join it, so senders keep alternating.
                match turns.last_mut() {
                    Some((last, previous)) if *last == index => {
                        previous.push(' ');
                        previous.push_str(&text);
                    }
                    _ => turns.push((index, text)),
                }
            }
            if senders.len() == 2 {
                conversations.push(turns);
            }
        }
        anyhow::ensure!(
            !conversations.is_empty(),
            "no two-person conversation in the chitchat json"
        );
        Ok(Self { conversations })
    }

    /// The small hand-written sample the unit tests use (same format, invented text).
    pub fn sample() -> Self {
        Self::parse(include_str!("../../data/chitchat/sample.json")).expect("the committed sample parses")
    }

    /// Where `tests/fetch-dev-data.sh` installs `dataset.json`: `$SEDIMENT_DEV_DATA_DIR/chitchat`,
    /// else `~/.cache/sediment/data/chitchat`.
    pub fn default_path() -> PathBuf {
        let root = std::env::var_os("SEDIMENT_DEV_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
                home.join(".cache/sediment/data")
            });
        root.join("chitchat/dataset.json")
    }

    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let json = std::fs::read_to_string(path)
            .with_context(|| format!("read {} (run `bash tests/fetch-dev-data.sh` first)", path.display()))?;
        Self::parse(&json)
    }

    pub fn len(&self) -> usize {
        self.conversations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conversations.is_empty()
    }
}

/// Hands out corpus conversations in a seeded order, each once while any is left unused.
struct Filler<'a> {
    corpus: &'a Corpus,
    order: Vec<usize>,
    next: usize,
    used: Vec<bool>,
}

impl<'a> Filler<'a> {
    fn new(corpus: &'a Corpus, rng: &mut Rng) -> Self {
        let mut order: Vec<usize> = (0..corpus.len()).collect();
        rng.shuffle(&mut order);
        Self {
            corpus,
            order,
            next: 0,
            used: vec![false; corpus.len()],
        }
    }

    /// The first `n` turns of a conversation that has them, all of chat length and none
    /// naming a key (lower case). Unused conversations first; a small corpus is reused.
    fn take(&mut self, n: usize, keys: &[String]) -> Vec<(usize, String)> {
        let fits = |turns: &[(usize, String)]| {
            turns.len() >= n
                && turns[..n].iter().all(|(_, text)| {
                    let lower = text.to_lowercase();
                    text.len() <= MAX_FILLER_CHARS && !keys.iter().any(|k| lower.contains(k.as_str()))
                })
        };
        for reuse in [false, true] {
            for step in 0..self.order.len() {
                let c = self.order[(self.next + step) % self.order.len()];
                if self.used[c] != reuse {
                    continue;
                }
                let turns = &self.corpus.conversations[c];
                if fits(turns) {
                    self.used[c] = true;
                    self.next = (self.next + step + 1) % self.order.len();
                    return turns[..n].to_vec();
                }
            }
        }
        panic!("no corpus conversation has {n} usable turns without the keys {keys:?}");
    }
}

impl ChatDataset {
    pub fn generate(seed: u64, corpus: &Corpus) -> Self {
        Self::generate_with(seed, corpus, &ChatConfig::default())
    }

    pub fn generate_with(seed: u64, corpus: &Corpus, config: &ChatConfig) -> Self {
        assert!(config.sessions.0 >= 4, "multi-hop events need four sessions or more");
        let root = Rng::new(seed);
        let mut filler = Filler::new(corpus, &mut root.fork(u64::MAX));
        let mut names = NAMES.to_vec();
        root.fork(u64::MAX - 1).shuffle(&mut names);
        let mut conversations = Vec::new();
        let mut questions = Vec::new();
        for index in 0..config.conversations {
            let speakers = [
                names[(2 * index) % names.len()].to_owned(),
                names[(2 * index + 1) % names.len()].to_owned(),
            ];
            let mut rng = root.fork(index as u64);
            let (conversation, conversation_questions) =
                generate_conversation(seed, index, speakers, config, &mut filler, &mut rng);
            conversations.push(conversation);
            questions.extend(conversation_questions);
        }
        Self {
            seed,
            conversations,
            questions,
        }
    }

    pub fn turn_count(&self) -> usize {
        self.conversations.iter().map(|c| c.turns().count()).sum()
    }

    pub fn session_count(&self) -> usize {
        self.conversations.iter().map(|c| c.sessions.len()).sum()
    }

    /// Median of the questions' [`overlap`].
    pub fn median_overlap(&self) -> f64 {
        let mut all: Vec<f64> = self.questions.iter().map(|q| q.overlap).collect();
        median(&mut all)
    }

    /// The first `n` conversations and their questions (for a quick run).
    pub fn truncated(mut self, n: usize) -> Self {
        self.conversations.truncate(n);
        self.questions.retain(|q| q.conversation < n);
        self
    }
}

pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Dates of `n` sessions over `span` days from `start`, with irregular gaps (1 to ~45 days).
fn session_dates(rng: &mut Rng, n: usize, span: usize, start: NaiveDate) -> Vec<NaiveDate> {
    // Raw gaps from a skewed spread (many short, a few long), then scaled to the span.
    let raw: Vec<f64> = (1..n)
        .map(|_| {
            let base = 2.0 + rng.below(12) as f64;
            if rng.chance(0.2) {
                base * 2.5
            } else {
                base
            }
        })
        .collect();
    let total: f64 = raw.iter().sum();
    let mut dates = Vec::with_capacity(n);
    let mut day = start;
    dates.push(day);
    let mut elapsed = 0.0;
    let mut placed = 0i64;
    for gap in raw {
        elapsed += gap * span as f64 / total;
        let target = elapsed.round() as i64;
        let step = (target - placed).max(1);
        placed += step;
        day = day + Days::new(step as u64);
        dates.push(day);
    }
    dates
}

/// A turn placed in a session, before it has an id and a time.
struct Placed {
    speaker: usize,
    content: String,
    caption: Option<String>,
    /// (event, beat, line) of an injected turn; `None` for filler.
    line: Option<(usize, usize, usize)>,
}

fn generate_conversation(
    seed: u64,
    index: usize,
    speakers: [String; 2],
    config: &ChatConfig,
    filler: &mut Filler,
    rng: &mut Rng,
) -> (Conversation, Vec<ChatQuestion>) {
    let n_sessions = rng.range(config.sessions.0, config.sessions.1);
    let span = rng.range(config.span_days.0, config.span_days.1);
    let start = NaiveDate::from_ymd_opt(FIRST_DAY.0, FIRST_DAY.1, FIRST_DAY.2).expect("a valid date")
        + Days::new(rng.below(400) as u64);
    let dates = session_dates(rng, n_sessions, span, start);
    let plan = {
        let mut cx = Cx::new(rng, speakers.clone(), &dates);
        events::plan(&mut cx, config.mix)
    };
    let keys: Vec<String> = plan
        .iter()
        .flat_map(|e| &e.questions)
        .flat_map(|q| q.answers.iter().map(|a| a.to_lowercase()))
        .collect();

    // (event, beat) of each session's beats, in plan order.
    let mut per_session: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n_sessions];
    for (e, event) in plan.iter().enumerate() {
        for (b, beat) in event.beats.iter().enumerate() {
            per_session[beat.session].push((e, b));
        }
    }
    let tenant = Tenant {
        team: "quality-e2e".into(),
        agent: "chitchat".into(),
        user: format!("conv-{index:02}"),
    };
    // (event, beat, line) -> turn id.
    let mut line_ids: Vec<Vec<[Uuid; 2]>> = plan.iter().map(|e| vec![[Uuid::nil(); 2]; e.beats.len()]).collect();
    let mut sessions = Vec::with_capacity(n_sessions);
    for (s, &date) in dates.iter().enumerate() {
        let beats = &per_session[s];
        let target = rng.range(config.turns.0, config.turns.1);
        let wanted = target.saturating_sub(2 * beats.len()).max(MIN_FILLER_TURNS);
        let chunk = filler.take(wanted, &keys);
        // Which corpus sender is which person.
        let flip = rng.below(2);
        let chunk: Vec<(usize, String)> = chunk.into_iter().map(|(who, text)| ((who + flip) % 2, text)).collect();
        // A beat goes where its first speaker would talk next: after a turn of the other
        // person (or first, when its speaker opens the chunk), so speakers keep alternating.
        let mut slots: Vec<(usize, usize)> = Vec::new(); // (position in chunk, beat)
        for (i, &(e, b)) in beats.iter().enumerate() {
            let who = plan[e].beats[b].lines[0].speaker;
            let positions: Vec<usize> = (0..=chunk.len())
                .filter(|&p| {
                    let after_other = p == 0 || chunk[p - 1].0 != who;
                    let before_self = p == chunk.len() || chunk[p].0 == who;
                    after_other && before_self
                })
                .collect();
            let p = if positions.is_empty() {
                chunk.len()
            } else {
                *rng.pick(&positions)
            };
            slots.push((p, i));
        }
        slots.sort_unstable();

        let mut placed: Vec<Placed> = Vec::new();
        let mut next_slot = 0;
        for p in 0..=chunk.len() {
            while next_slot < slots.len() && slots[next_slot].0 == p {
                let (e, b) = beats[slots[next_slot].1];
                for (l, line) in plan[e].beats[b].lines.iter().enumerate() {
                    placed.push(Placed {
                        speaker: line.speaker,
                        content: line.content.clone(),
                        caption: line.caption.clone(),
                        line: Some((e, b, l)),
                    });
                }
                next_slot += 1;
            }
            if let Some((speaker, content)) = chunk.get(p) {
                placed.push(Placed {
                    speaker: *speaker,
                    content: content.clone(),
                    caption: None,
                    line: None,
                });
            }
        }

        let opening = date
            .and_hms_opt(rng.range(8, 20) as u32, rng.below(60) as u32, 0)
            .expect("a valid time")
            .and_utc();
        let mut at = opening;
        let mut turns = Vec::with_capacity(placed.len());
        for (t, turn) in placed.into_iter().enumerate() {
            let id = Uuid::new_v5(&TURN_NAMESPACE, format!("{seed}/{index}/{s}/{t}").as_bytes());
            if let Some((e, b, l)) = turn.line {
                line_ids[e][b][l] = id;
            }
            turns.push(ChatTurn {
                id,
                speaker: turn.speaker,
                role: if turn.speaker == 0 { Role::User } else { Role::Assistant },
                content: turn.content,
                caption: turn.caption,
                created_at: at,
                injected: turn.line.is_some(),
            });
            at += chrono::Duration::seconds(rng.range(15, 150) as i64);
        }
        sessions.push(ChatSession {
            id: format!("{}-s{s:02}", tenant.user),
            date,
            turns,
        });
    }

    let conversation = Conversation {
        tenant,
        speakers,
        sessions,
    };
    let by_id: std::collections::HashMap<Uuid, &ChatTurn> = conversation.turns().map(|t| (t.id, t)).collect();
    let questions = plan
        .iter()
        .enumerate()
        .flat_map(|(e, event)| event.questions.iter().map(move |q| (e, q)))
        .map(|(e, q)| {
            let evidence: Vec<Uuid> = q.evidence.iter().map(|&(b, l)| line_ids[e][b][l]).collect();
            let texts: Vec<String> = evidence
                .iter()
                .map(|id| {
                    let turn = by_id[id];
                    match &turn.caption {
                        Some(caption) => format!("{} {caption}", turn.content),
                        None => turn.content.clone(),
                    }
                })
                .collect();
            ChatQuestion {
                conversation: index,
                overlap: overlap(&q.text, &texts),
                text: q.text.clone(),
                kind: q.kind,
                evidence,
                answers: q.answers.clone(),
                date: q.date,
            }
        })
        .collect();
    (conversation, questions)
}

/// Words that carry no topic: function words, auxiliaries, question words, chat fillers.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before",
    "being", "but", "by", "can", "could", "did", "do", "does", "doing", "during", "each", "for", "from", "had", "has",
    "have", "having", "he", "her", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just",
    "like", "lol", "me", "my", "no", "not", "of", "off", "on", "once", "or", "our", "out", "over", "own", "she", "so",
    "some", "soon", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "through", "to", "too", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who",
    "whom", "why", "will", "with", "would", "you", "your", "ok", "oh", "yeah",
];

/// A crude stem: lower case, no possessive, no common English suffix.
fn stem(word: &str) -> String {
    let w = word.to_lowercase();
    let w = w.strip_suffix("'s").unwrap_or(&w).to_owned();
    for suffix in ["ing", "ed", "es", "s"] {
        if w.len() > suffix.len() + 3 {
            if let Some(stripped) = w.strip_suffix(suffix) {
                return stripped.to_owned();
            }
        }
    }
    w
}

/// The stemmed content words of a text.
pub fn content_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
        .filter(|w| !STOPWORDS.contains(&w.to_lowercase().as_str()))
        .map(stem)
        .collect()
}

/// Share of the question's content words (stemmed; the person's name counts) that occur in
/// any of the evidence texts. 0 when the question has no content word.
pub fn overlap(question: &str, evidence: &[String]) -> f64 {
    let asked = content_words(question);
    if asked.is_empty() {
        return 0.0;
    }
    let known: BTreeSet<String> = evidence.iter().flat_map(|e| content_words(e)).collect();
    asked.intersection(&known).count() as f64 / asked.len() as f64
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    fn small() -> ChatConfig {
        ChatConfig {
            conversations: 3,
            sessions: (10, 12),
            turns: (14, 18),
            span_days: (60, 90),
            ..ChatConfig::default()
        }
    }

    fn sample_dataset(seed: u64) -> ChatDataset {
        ChatDataset::generate_with(seed, &Corpus::sample(), &small())
    }

    /// Runs `check` on the full-size dataset when the real corpus is installed.
    fn with_real_corpus(check: impl Fn(&ChatDataset)) {
        let path = Corpus::default_path();
        if !path.exists() {
            eprintln!(
                "SKIPPED: no chitchat corpus at {} (bash tests/fetch-dev-data.sh)",
                path.display()
            );
            return;
        }
        let corpus = Corpus::load(&path).expect("load the chitchat corpus");
        check(&ChatDataset::generate(42, &corpus));
    }

    #[test]
    fn the_sample_parses_into_two_person_conversations() {
        let corpus = Corpus::sample();
        assert!(corpus.len() >= 4, "{}", corpus.len());
        for turns in &corpus.conversations {
            assert!(turns.len() >= 18);
            assert!(turns.windows(2).all(|w| w[0].0 != w[1].0), "senders alternate");
        }
    }

    #[test]
    fn deterministic_for_a_seed() {
        let a = sample_dataset(7);
        assert_eq!(a, sample_dataset(7));
        let b = sample_dataset(8);
        assert_ne!(a.questions, b.questions);
    }

    #[test]
    fn evidence_ids_exist_in_their_own_conversation() {
        let d = sample_dataset(42);
        let owner: HashMap<Uuid, usize> = d
            .conversations
            .iter()
            .enumerate()
            .flat_map(|(c, conv)| conv.turns().map(move |t| (t.id, c)))
            .collect();
        assert_eq!(owner.len(), d.turn_count(), "turn ids are unique");
        for q in &d.questions {
            assert!(!q.evidence.is_empty(), "{q:?}");
            assert_eq!(
                q.evidence.iter().collect::<HashSet<_>>().len(),
                q.evidence.len(),
                "{q:?}"
            );
            for id in &q.evidence {
                assert_eq!(owner.get(id), Some(&q.conversation), "{q:?}");
            }
        }
    }

    /// A filler or distractor turn repeating an answer would turn a counted miss into a hit.
    fn assert_exclusive(d: &ChatDataset) {
        let mut checked = 0;
        for q in &d.questions {
            let evidence: HashSet<Uuid> = q.evidence.iter().copied().collect();
            let containing: HashSet<Uuid> = d.conversations[q.conversation]
                .turns()
                .filter(|t| {
                    let text = format!("{} {}", t.content, t.caption.as_deref().unwrap_or("")).to_lowercase();
                    q.answers.iter().any(|a| text.contains(&a.to_lowercase()))
                })
                .map(|t| t.id)
                .collect();
            assert_eq!(containing, evidence, "{q:?}");
            checked += 1;
        }
        assert!(checked >= 40, "{checked}");
    }

    #[test]
    fn answers_appear_in_the_evidence_only() {
        for seed in [1, 42, 1234] {
            assert_exclusive(&sample_dataset(seed));
        }
    }

    #[test]
    fn every_question_kind_is_asked() {
        let d = sample_dataset(42);
        for kind in ChatKind::ALL {
            let n = d.questions.iter().filter(|q| q.kind == kind).count();
            assert!(n >= 3, "{n} {kind:?} questions");
        }
        for q in d.questions.iter().filter(|q| q.kind == ChatKind::Temporal) {
            let date = q.date.expect("a temporal question has a date");
            let said = d.conversations[q.conversation]
                .sessions
                .iter()
                .find(|s| s.turns.iter().any(|t| t.id == q.evidence[0]))
                .expect("the evidence's session")
                .date;
            assert!((0..=14).contains(&(said - date).num_days()), "{q:?} said on {said}");
        }
        for q in d.questions.iter().filter(|q| q.kind == ChatKind::Caption) {
            let turn = d.conversations[q.conversation]
                .turns()
                .find(|t| t.id == q.evidence[0])
                .expect("the evidence turn");
            let caption = turn.caption.as_deref().expect("a caption");
            assert!(q.answers.iter().all(|a| caption.contains(a.as_str())), "{q:?}");
            assert!(!q.answers.iter().any(|a| turn.content.contains(a.as_str())), "{q:?}");
        }
        for q in d.questions.iter().filter(|q| q.kind == ChatKind::MultiHop) {
            let sessions: HashSet<&str> = q
                .evidence
                .iter()
                .map(|id| {
                    d.conversations[q.conversation]
                        .sessions
                        .iter()
                        .find(|s| s.turns.iter().any(|t| t.id == *id))
                        .expect("a session")
                        .id
                        .as_str()
                })
                .collect();
            assert_eq!(sessions.len(), 2, "{q:?}");
        }
    }

    #[test]
    fn word_overlap_is_measured_and_low() {
        assert_eq!(
            overlap("When did Tom paint the lake?", &["Painted the lake at dawn".into()]),
            2.0 / 3.0
        );
        assert_eq!(overlap("What did Ana do?", &["nothing".into()]), 0.0);
        let d = sample_dataset(42);
        assert!(d.questions.iter().all(|q| (0.0..=1.0).contains(&q.overlap)));
        let median = d.median_overlap();
        assert!(median <= 0.3, "median overlap {median}");
    }

    #[test]
    fn sessions_are_dated_and_speakers_alternate() {
        let d = sample_dataset(3);
        for conv in &d.conversations {
            assert_ne!(conv.speakers[0], conv.speakers[1]);
            assert!(conv.sessions.windows(2).all(|w| w[0].date < w[1].date));
            let turns: Vec<&ChatTurn> = conv.turns().collect();
            assert!(turns.windows(2).all(|w| w[0].created_at < w[1].created_at));
            for s in &conv.sessions {
                assert!(s.turns.iter().all(|t| t.created_at.date_naive() == s.date));
                assert!(
                    s.turns.windows(2).all(|w| w[0].speaker != w[1].speaker),
                    "{}: {:?}",
                    s.id,
                    s.turns.iter().map(|t| t.speaker).collect::<Vec<_>>()
                );
                for t in &s.turns {
                    assert_eq!(t.role == Role::User, t.speaker == 0);
                    let meta = conv.metadata(t);
                    assert_eq!(meta["speaker"], conv.speakers[t.speaker].as_str());
                    assert_eq!(meta.get("caption").is_some(), t.caption.is_some());
                }
            }
        }
    }

    #[test]
    fn default_size_is_as_documented_with_the_real_corpus() {
        with_real_corpus(|d| {
            assert_eq!(d.conversations.len(), 10);
            assert!((5_000..=7_500).contains(&d.turn_count()), "{} turns", d.turn_count());
            for conv in &d.conversations {
                assert!((19..=32).contains(&conv.sessions.len()));
                let days = (conv.sessions.last().unwrap().date - conv.sessions[0].date).num_days();
                assert!((170..=310).contains(&days), "{days} days");
            }
            assert!(d.questions.len() >= 200, "{} questions", d.questions.len());
            assert!(d.median_overlap() <= 0.3, "{}", d.median_overlap());
            assert_exclusive(d);
        });
    }
}
