//! The dataset model and its assembly: owners with dated sessions of turns, and questions
//! whose answers are known turns.

use chrono::{Days, NaiveDate};
use shared::domain::Tenant;
use uuid::Uuid;

use super::facts::{self, Block};
use super::filler;
use crate::rng::Rng;

/// Namespace of every turn id (uuid v5 of "seed/owner/session/turn"), so ids are stable for a
/// seed and never collide across seeds.
const TURN_NAMESPACE: Uuid = Uuid::from_u128(0x5ed1_3e47_9a11_4c0b_8f3e_2b6d_0c7a_91e5);

/// The first possible session date; sessions then follow every ~2 weeks.
const FIRST_SESSION: (i32, u32, u32) = (2025, 11, 3);
/// When the questions are asked: after every session.
const TODAY: (i32, u32, u32) = (2026, 6, 1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lang {
    En,
    Zh,
}

impl Lang {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::En => "en",
            Self::Zh => "zh",
        }
    }

    pub fn other(self) -> Self {
        match self {
            Self::En => Self::Zh,
            Self::Zh => Self::En,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuestionKind {
    /// Shares the evidence's rare words.
    Lexical,
    /// Asks the same thing in other words: little or no overlap with the evidence.
    Paraphrase,
    /// Needs the session date or a date in the text ("in March", "on May 9").
    Temporal,
    /// About who does or owns what, among several named people.
    MultiPerson,
    /// Asked in the other language than the owner's conversations.
    CrossLanguage,
}

impl QuestionKind {
    pub const ALL: [Self; 5] = [
        Self::Lexical,
        Self::Paraphrase,
        Self::Temporal,
        Self::MultiPerson,
        Self::CrossLanguage,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lexical => "lexical",
            Self::Paraphrase => "paraphrase",
            Self::Temporal => "temporal",
            Self::MultiPerson => "multi-person",
            Self::CrossLanguage => "cross-language",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub id: Uuid,
    pub role: Role,
    /// The owner's display name for user turns, `assistant` otherwise.
    pub speaker: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub id: String,
    pub date: NaiveDate,
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    pub tenant: Tenant,
    pub name: String,
    /// The language the owner's conversations are held in.
    pub lang: Lang,
    pub sessions: Vec<Session>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Index into `Dataset::owners`.
    pub owner: usize,
    pub text: String,
    pub kind: QuestionKind,
    pub lang: Lang,
    /// Turns that answer the question; finding any one of them counts as a hit.
    pub evidence: Vec<Uuid>,
    /// The answer, when it is a string stated in the evidence turns and nowhere else in the
    /// owner's conversations (for inspecting misses, and for the generator's tests).
    pub answer: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub seed: u64,
    /// The day the questions are asked, for resolving "in March" to a year.
    pub today: NaiveDate,
    pub owners: Vec<Owner>,
    pub questions: Vec<Question>,
}

/// Shape of a generated dataset. The defaults give 12 owners × 15 sessions × ~40 turns.
#[derive(Debug, Clone)]
pub struct GenConfig {
    pub owners: usize,
    /// Every third owner speaks Chinese when this is 3 (owners 2, 5, 8, 11).
    pub chinese_every: usize,
    pub sessions: usize,
    pub turns_per_session: usize,
}

impl Default for GenConfig {
    fn default() -> Self {
        Self {
            owners: 12,
            chinese_every: 3,
            sessions: 15,
            turns_per_session: 40,
        }
    }
}

impl Dataset {
    pub fn generate(seed: u64) -> Self {
        Self::generate_with(seed, &GenConfig::default())
    }

    pub fn generate_with(seed: u64, config: &GenConfig) -> Self {
        assert!(config.sessions >= 8, "facts need early and late sessions");
        let root = Rng::new(seed);
        let mut owners = Vec::new();
        let mut questions = Vec::new();
        for index in 0..config.owners {
            let lang = if config.chinese_every > 0 && index % config.chinese_every == config.chinese_every - 1 {
                Lang::Zh
            } else {
                Lang::En
            };
            let (owner, owner_questions) = generate_owner(seed, index, lang, config, &mut root.fork(index as u64));
            owners.push(owner);
            questions.extend(owner_questions);
        }
        Self {
            seed,
            today: date(TODAY),
            owners,
            questions,
        }
    }

    pub fn turn_count(&self) -> usize {
        self.owners
            .iter()
            .flat_map(|o| &o.sessions)
            .map(|s| s.turns.len())
            .sum()
    }
}

fn date((y, m, d): (i32, u32, u32)) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).expect("a valid constant date")
}

fn session_dates(rng: &mut Rng, sessions: usize) -> Vec<NaiveDate> {
    let mut day = date(FIRST_SESSION) + Days::new(rng.below(6) as u64);
    let mut dates = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        dates.push(day);
        day = day + Days::new(rng.range(10, 16) as u64);
    }
    dates
}

fn generate_owner(seed: u64, index: usize, lang: Lang, config: &GenConfig, rng: &mut Rng) -> (Owner, Vec<Question>) {
    let dates = session_dates(rng, config.sessions);
    let world = facts::World::new(rng, lang, index, dates.clone());
    let facts = facts::all(rng, &world);

    // Which blocks land in which session, in generation order.
    let mut per_session: Vec<Vec<(usize, usize)>> = vec![Vec::new(); config.sessions];
    for (f, fact) in facts.iter().enumerate() {
        for (b, block) in fact.blocks.iter().enumerate() {
            per_session[block.session].push((f, b));
        }
    }
    let distractors: Vec<&str> = facts
        .iter()
        .flat_map(|f| f.distractors.iter().map(String::as_str))
        .collect();

    let tenant = Tenant {
        team: "quality-bench".into(),
        agent: "assistant".into(),
        user: format!("owner-{index:02}"),
    };
    // (fact, block) -> ids of that block's turns, to resolve evidence afterwards.
    let mut block_ids: Vec<Vec<Vec<Uuid>>> = facts.iter().map(|f| vec![Vec::new(); f.blocks.len()]).collect();
    let mut sessions = Vec::with_capacity(config.sessions);
    for (s, &day) in dates.iter().enumerate() {
        let session_id = format!("{}-s{s:02}", tenant.user);
        let blocks: Vec<(usize, usize, &Block)> = per_session[s]
            .iter()
            .map(|&(f, b)| (f, b, &facts[f].blocks[b]))
            .collect();
        let block_turns: usize = blocks.iter().map(|(_, _, b)| b.turns.len()).sum();
        // ±4 turns so sessions differ in length, always whole user/assistant exchanges.
        let target = (config.turns_per_session + rng.below(9))
            .saturating_sub(4)
            .max(block_turns + 4);
        let filler_exchanges = (target - block_turns) / 2;
        // Blocks land at random exchange boundaries, so facts sit anywhere in a session.
        let mut slots: Vec<usize> = (0..blocks.len()).map(|_| rng.below(filler_exchanges + 1)).collect();
        slots.sort_unstable();

        let mut raw: Vec<(Role, String)> = Vec::with_capacity(target);
        let mut starts = Vec::with_capacity(blocks.len());
        let mut next_block = 0;
        for e in 0..=filler_exchanges {
            while next_block < blocks.len() && slots[next_block] == e {
                starts.push(raw.len());
                raw.extend(blocks[next_block].2.turns.iter().cloned());
                next_block += 1;
            }
            if e < filler_exchanges {
                let (user, assistant) = filler::exchange(rng, &world, &distractors);
                raw.push((Role::User, user));
                raw.push((Role::Assistant, assistant));
            }
        }

        let turns: Vec<Turn> = raw
            .into_iter()
            .enumerate()
            .map(|(t, (role, content))| Turn {
                id: Uuid::new_v5(&TURN_NAMESPACE, format!("{seed}/{index}/{s}/{t}").as_bytes()),
                role,
                speaker: match role {
                    Role::User => world.name.clone(),
                    Role::Assistant => "assistant".into(),
                },
                content,
            })
            .collect();
        for ((f, b, block), start) in blocks.iter().zip(starts) {
            block_ids[*f][*b] = block.evidence.iter().map(|e| turns[start + e].id).collect();
        }
        sessions.push(Session {
            id: session_id,
            date: day,
            turns,
        });
    }

    let questions = facts
        .iter()
        .enumerate()
        .flat_map(|(f, fact)| {
            let block_ids = &block_ids[f];
            fact.questions.iter().map(move |q| Question {
                owner: index,
                text: q.text.clone(),
                kind: q.kind,
                lang: q.lang,
                evidence: q.blocks.iter().flat_map(|&b| block_ids[b].iter().copied()).collect(),
                answer: q.answer.clone(),
            })
        })
        .collect();
    let owner = Owner {
        tenant,
        name: world.name.clone(),
        lang,
        sessions,
    };
    (owner, questions)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    fn small() -> GenConfig {
        GenConfig {
            owners: 4,
            ..GenConfig::default()
        }
    }

    #[test]
    fn deterministic_for_a_seed() {
        let a = Dataset::generate_with(7, &small());
        let b = Dataset::generate_with(7, &small());
        assert_eq!(a, b);
        let c = Dataset::generate_with(8, &small());
        assert_ne!(a.owners[0].sessions[0].turns, c.owners[0].sessions[0].turns);
    }

    #[test]
    fn default_size_is_as_documented() {
        let d = Dataset::generate(42);
        assert_eq!(d.owners.len(), 12);
        assert!((6_000..=8_500).contains(&d.turn_count()), "{} turns", d.turn_count());
        assert!(d.questions.len() >= 300, "{} questions", d.questions.len());
        for kind in QuestionKind::ALL {
            let n = d.questions.iter().filter(|q| q.kind == kind).count();
            assert!(n >= 40, "{} {kind:?} questions", n);
        }
        for lang in [Lang::En, Lang::Zh] {
            assert!(d.owners.iter().any(|o| o.lang == lang));
            assert!(d.questions.iter().filter(|q| q.lang == lang).count() >= 60);
        }
    }

    #[test]
    fn every_evidence_turn_is_in_its_own_owner() {
        let d = Dataset::generate(42);
        let owner_of: HashMap<Uuid, usize> = d
            .owners
            .iter()
            .enumerate()
            .flat_map(|(o, owner)| {
                owner
                    .sessions
                    .iter()
                    .flat_map(move |s| s.turns.iter().map(move |t| (t.id, o)))
            })
            .collect();
        assert_eq!(owner_of.len(), d.turn_count(), "turn ids are unique");
        for q in &d.questions {
            assert!(!q.evidence.is_empty(), "{q:?}");
            let unique: HashSet<_> = q.evidence.iter().collect();
            assert_eq!(unique.len(), q.evidence.len(), "{q:?}");
            for id in &q.evidence {
                assert_eq!(owner_of.get(id), Some(&q.owner), "{q:?}");
            }
        }
    }

    #[test]
    fn turns_alternate_and_sessions_are_ordered() {
        let d = Dataset::generate_with(3, &small());
        for owner in &d.owners {
            assert!(owner.sessions.windows(2).all(|w| w[0].date < w[1].date));
            assert!(owner.sessions.iter().all(|s| s.date < d.today));
            for s in &owner.sessions {
                for (i, t) in s.turns.iter().enumerate() {
                    let expected = if i % 2 == 0 { Role::User } else { Role::Assistant };
                    assert_eq!(t.role, expected, "{} turn {i}", s.id);
                    assert!(!t.content.trim().is_empty());
                }
            }
        }
    }

    #[test]
    fn exclusive_answers_appear_in_the_evidence_only() {
        // A filler turn repeating an answer would turn a counted miss into a real hit.
        let d = Dataset::generate(42);
        let mut checked = 0;
        for q in d.questions.iter() {
            let Some(answer) = &q.answer else { continue };
            let containing: HashSet<Uuid> = d.owners[q.owner]
                .sessions
                .iter()
                .flat_map(|s| &s.turns)
                .filter(|t| t.content.contains(answer.as_str()))
                .map(|t| t.id)
                .collect();
            let evidence: HashSet<Uuid> = q.evidence.iter().copied().collect();
            assert_eq!(containing, evidence, "{q:?}");
            checked += 1;
        }
        assert!(checked >= 100, "{checked}");
    }

    #[test]
    fn sessions_have_about_the_configured_length() {
        let d = Dataset::generate(42);
        for owner in &d.owners {
            for s in &owner.sessions {
                assert!((30..=52).contains(&s.turns.len()), "{}: {}", s.id, s.turns.len());
            }
        }
    }
}
