//! The rules conflict judge: decides add / update / discard for each new card from its
//! candidates by text similarity, deterministically.
//!
//! For each active candidate the judge finds the relation of the new card to it; the strongest
//! relation wins (repeat > refinement > contradiction), ties go to the more similar candidate:
//! - **repeat** → `Discard { duplicate_of }`: the normalized texts (letters and digits,
//!   lowercased) are equal; or the new text is contained in the old one (as a string, or
//!   [`COVERAGE`] of its tokens); or the pair is a near duplicate (cosine ≥
//!   [`DUPLICATE_COSINE`], or token Jaccard ≥ [`DUPLICATE_JACCARD`] without embeddings) and the
//!   new text is not longer;
//! - **refinement** → `Update { target }`: the reverse, the new card says everything the old
//!   one said and more (contains it, or covers [`COVERAGE`] of its tokens, and is longer; or is
//!   a near duplicate and longer);
//! - **contradiction** → `Update { target }` (the pipeline archives the old memory with its
//!   history): same category and the same *subject key* with a different short value ("I live
//!   in Beijing" / "I live in Shanghai", "我住在北京" / "我住在上海", "my favourite editor is vim"
//!   / "…emacs", "我们的主库是 MySQL 8.0" / "…是 PostgreSQL 16"), or the same statement with its
//!   polarity flipped ("I like vim" / "I don't like vim": a different count of negations and
//!   [`NEGATION_OVERLAP`] of the shorter one's tokens shared);
//! - otherwise `Add`.
//!
//! Similarity is the candidate's cosine when the pipeline has embeddings, and a token Jaccard
//! otherwise (words for Latin script, character bigrams for CJK, so it works for both and a
//! mix). Containment (by string or tokens) also needs cosine ≥ [`REFINE_MIN_COSINE`] when a
//! cosine is given, so a long unrelated text that happens to reuse every word of a short one
//! ("we use it" / "we use it for the rest of the team too") is not taken for its refinement.
//!
//! Subject keys are deliberately few: personal forms ("I live in", "I work at", "my name is",
//! "我住在", "我叫", "我的…是") and possessive ones ("my/our … is", "我们的…是"), and the value must
//! be short (≤ 3 words, ≤ 8 CJK characters) and not start with a preposition, adverb or
//! participle. "Our orders table is partitioned by month" and "…is in the billing schema" are
//! two facts, not a contradiction. A missed contradiction leaves two memories active; a false
//! one would archive a true memory, which is worse.
//!
//! Safety rules: only candidates of that very card are ever targeted; archived candidates are
//! skipped; a memory is the target of at most one `Update` per call (a second card that would
//! update it again is judged against its other candidates, else added), so one batch never
//! archives a memory twice.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use uuid::Uuid;

use super::text::{coverage, fold, is_cjk, jaccard, normalize, tokens};
use crate::memory::{Candidate, Card, Decision, MemoryStatus};

/// Cosine at or above which two memories say the same thing.
pub const DUPLICATE_COSINE: f32 = 0.95;
/// Token Jaccard at or above which two memories say the same thing (no embeddings).
pub const DUPLICATE_JACCARD: f32 = 0.85;
/// Share of one text's tokens found in the other for it to count as contained.
pub const COVERAGE: f32 = 0.9;
/// Cosine a token-containment refinement or repeat also needs, when a cosine is given.
pub const REFINE_MIN_COSINE: f32 = 0.6;
/// Share of the shorter text's tokens the longer one must have for a polarity flip to count as
/// a contradiction rather than two different statements.
pub const NEGATION_OVERLAP: f32 = 0.6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Relation {
    Contradicts,
    Refines,
    Repeats,
}

/// What the judge needs of one text, computed once.
struct Features {
    normalized: String,
    tokens: HashSet<String>,
    negations: usize,
    /// (subject key, value), both normalized, when the text states "subject = value".
    subject: Option<(String, String)>,
}

impl Features {
    fn of(text: &str) -> Self {
        let folded = canonical(text);
        Self {
            normalized: normalize(&folded),
            tokens: tokens(&folded),
            negations: negations(&folded),
            subject: subject(&folded),
        }
    }
}

/// Lowercase with English contractions and spellings unified, so "I'm" and "I am" share keys.
fn canonical(text: &str) -> String {
    let mut s = fold(text).to_lowercase();
    for (from, to) in [
        ("i'm ", "i am "),
        ("we're ", "we are "),
        ("it's ", "it is "),
        ("that's ", "that is "),
        ("favorite", "favourite"),
    ] {
        s = s.replace(from, to);
    }
    s
}

static NEGATION_EN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:not|no|never|nor|without|cannot|dont|doesnt|didnt|cant|wont|isnt|arent|wasnt)\b|\w+n't\b")
        .expect("valid regex")
});
/// Chinese words with 不 or 没 in them that negate nothing.
const ZH_NOT_NEGATIONS: &[&str] = &[
    "不错",
    "不仅",
    "不过",
    "不同",
    "不少",
    "不断",
    "差不多",
    "不久",
    "没错",
    "不管",
];

fn negations(text: &str) -> usize {
    let mut zh = text.to_owned();
    for word in ZH_NOT_NEGATIONS {
        zh = zh.replace(word, "");
    }
    let cjk = zh
        .chars()
        .filter(|c| matches!(c, '不' | '没' | '别' | '勿' | '未' | '非'))
        .count();
    NEGATION_EN.find_iter(text).count() + cjk
}

/// "Subject is value" forms, most specific first. The key is the captured prefix.
static SUBJECT_KEYS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"^(i live in|i am based in|i am located in|i work at|i work for|i work as|my name is|call me|i am from)\b",
        r"^((?:my|our)\s+(?:[\w'-]+\s+){0,4}?(?:is|are))\b",
        r"^(我(?:现在|目前)?(?:住在|人在|家在|base在|常驻))",
        r"^(我叫|我的名字是)",
        r"^(我的.{1,8}?是)",
        r"^((?:我们|公司|团队|我们公司|我们团队|我们组)(?:的)?.{1,10}?(?:用的是|是))",
    ]
    .into_iter()
    .map(|p| Regex::new(p).expect("valid regex"))
    .collect()
});

/// A value that reads as a description ("partitioned by month", "in the billing schema",
/// "按月分区的") rather than a name, a place or a version. No "-ing": Beijing, Nanjing.
static NOT_A_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:in|on|at|by|for|with|from|to|under|over|not|also|very|too|so|really|still|now|currently|always|usually|being|been|\w+ed)\b|^(?:在|按|用|被|很|不|也|都|还|从|由|给|对|把|已经|正在)")
        .expect("valid regex")
});
const MAX_VALUE_WORDS: usize = 3;
const MAX_VALUE_CJK: usize = 8;

fn subject(text: &str) -> Option<(String, String)> {
    let text = text.trim();
    let caps = SUBJECT_KEYS.iter().find_map(|re| re.captures(text))?;
    let key = caps.get(1)?;
    let raw = text[key.end()..].trim();
    let words = raw
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .filter(|w| w.chars().any(|c| c.is_ascii_alphanumeric()))
        .count();
    let cjk = raw.chars().filter(|&c| is_cjk(c)).count();
    if words > MAX_VALUE_WORDS || cjk > MAX_VALUE_CJK || NOT_A_VALUE.is_match(raw) {
        return None;
    }
    let value = normalize(raw);
    let key = normalize(key.as_str());
    (!value.is_empty() && !key.is_empty()).then_some((key, value))
}

fn relation(new: &Features, old: &Features, same_category: bool, cosine: Option<f32>, lex: f32) -> Option<Relation> {
    let conflict = same_category
        && match (&new.subject, &old.subject) {
            (Some((new_key, new_value)), Some((old_key, old_value))) => {
                new_key == old_key && !new_value.contains(old_value.as_str()) && !old_value.contains(new_value.as_str())
            }
            _ => false,
        };
    if new.negations != old.negations {
        let overlap = coverage(&new.tokens, &old.tokens).max(coverage(&old.tokens, &new.tokens));
        return ((same_category && overlap >= NEGATION_OVERLAP) || conflict).then_some(Relation::Contradicts);
    }
    if new.normalized == old.normalized {
        return Some(Relation::Repeats);
    }
    // Before similarity: "I live in Beijing" and "I live in Shanghai" may embed as near
    // duplicates, and the shorter one must not be discarded as a repeat.
    if conflict {
        return Some(Relation::Contradicts);
    }
    let (new_len, old_len) = (new.normalized.chars().count(), old.normalized.chars().count());
    let near_duplicate = match cosine {
        Some(c) => c >= DUPLICATE_COSINE,
        None => lex >= DUPLICATE_JACCARD,
    };
    if near_duplicate {
        return Some(if new_len > old_len {
            Relation::Refines
        } else {
            Relation::Repeats
        });
    }
    if cosine.is_some_and(|c| c < REFINE_MIN_COSINE) {
        return None;
    }
    let contains = |whole: &Features, part: &Features| {
        (!part.normalized.is_empty() && whole.normalized.contains(&part.normalized))
            || coverage(&part.tokens, &whole.tokens) >= COVERAGE
    };
    if new_len > old_len && contains(new, old) {
        Some(Relation::Refines)
    } else if new_len <= old_len && contains(old, new) {
        Some(Relation::Repeats)
    } else {
        None
    }
}

/// The decision for one card. `claimed` holds memories already updated earlier in this call;
/// they are not updated again (a repeat of one may still be discarded).
pub(crate) fn decide_one(card: &Card, candidates: &[Candidate], claimed: &mut HashSet<Uuid>) -> Decision {
    let new = Features::of(&card.content);
    let mut best: Option<(Relation, f32, Uuid)> = None;
    for candidate in candidates {
        match candidate.memory.status {
            MemoryStatus::Active => {}
            MemoryStatus::Archived => continue,
        }
        let old = Features::of(&candidate.memory.content);
        let lex = jaccard(&new.tokens, &old.tokens);
        let same_category = candidate.memory.category == card.category;
        let Some(relation) = relation(&new, &old, same_category, candidate.similarity, lex) else {
            continue;
        };
        let id = candidate.memory.id;
        if relation != Relation::Repeats && claimed.contains(&id) {
            continue;
        }
        let similarity = candidate.similarity.unwrap_or(lex);
        let better = best.is_none_or(|(r, s, _)| (relation, similarity) > (r, s));
        if better {
            best = Some((relation, similarity, id));
        }
    }
    match best {
        None => Decision::Add,
        Some((Relation::Repeats, _, id)) => Decision::Discard { duplicate_of: Some(id) },
        Some((Relation::Refines | Relation::Contradicts, _, id)) => {
            claimed.insert(id);
            Decision::Update {
                target: id,
                content: None,
            }
        }
    }
}

/// A stable text of the thresholds and key patterns, for the provenance hash.
pub(crate) fn describe(out: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "duplicate_cosine {DUPLICATE_COSINE}\nduplicate_jaccard {DUPLICATE_JACCARD}\ncoverage {COVERAGE}\nrefine_min_cosine {REFINE_MIN_COSINE}\nnegation_overlap {NEGATION_OVERLAP}"
    );
    for re in SUBJECT_KEYS.iter() {
        let _ = writeln!(out, "subject {:?}", re.as_str());
    }
    let _ = writeln!(out, "negation {:?} {ZH_NOT_NEGATIONS:?}", NEGATION_EN.as_str());
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::domain::Tenant;
    use crate::memory::{Category, Memory};

    fn card(content: &str, category: Category) -> Card {
        Card {
            content: content.into(),
            category,
            priority: 50,
            scene: None,
            occurred_at: None,
            source_message_ids: vec![Uuid::new_v4()],
        }
    }

    fn candidate(content: &str, category: Category, similarity: Option<f32>) -> Candidate {
        let now = Utc::now();
        Candidate {
            memory: Memory {
                id: Uuid::new_v4(),
                tenant: Tenant {
                    team: "t".into(),
                    agent: "a".into(),
                    user: "u".into(),
                },
                session_id: "s".into(),
                content: content.into(),
                category,
                priority: 50,
                scene: None,
                occurred_at: None,
                source_message_ids: vec![Uuid::new_v4()],
                status: MemoryStatus::Active,
                superseded_by: None,
                task: None,
                created_at: now,
                updated_at: now,
            },
            similarity,
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Want {
        Add,
        Update(usize),
        Discard(usize),
    }

    use Category::{Instruction, Persona, WorkFact};

    #[test]
    fn decides_by_table() {
        type Old<'a> = (&'a str, Category, Option<f32>);
        let cases: &[(&str, Category, &[Old<'_>], Want)] = &[
            // Repeats.
            (
                "I live in Beijing.",
                Persona,
                &[("i live in beijing", Persona, None)],
                Want::Discard(0),
            ),
            (
                "我住在北京",
                Persona,
                &[("我住在北京。", Persona, Some(0.99))],
                Want::Discard(0),
            ),
            (
                "I use vim",
                Instruction,
                &[("I use vim for Rust and Go", Instruction, None)],
                Want::Discard(0),
            ),
            (
                "我是 DBA",
                Persona,
                &[("我是腾讯云 DBA，主要管北京区的 TDSQL-C", Persona, None)],
                Want::Discard(0),
            ),
            (
                "Our DB is Postgres 15",
                WorkFact,
                &[("Our database is PostgreSQL 15", WorkFact, Some(0.97))],
                Want::Discard(0),
            ),
            // Refinements.
            (
                "我是腾讯云 DBA，主要管北京区的 TDSQL-C",
                Persona,
                &[("我是 DBA", Persona, None)],
                Want::Update(0),
            ),
            (
                "I use vim for Rust and Go",
                Instruction,
                &[("I use vim", Instruction, Some(0.8))],
                Want::Update(0),
            ),
            (
                "Our main database is PostgreSQL 15 on RDS",
                WorkFact,
                &[("our main database is postgresql 15", WorkFact, None)],
                Want::Update(0),
            ),
            // Contradictions.
            (
                "I live in Shanghai.",
                Persona,
                &[("I live in Beijing.", Persona, Some(0.9))],
                Want::Update(0),
            ),
            (
                "I live in Beijing.",
                Persona,
                &[("I live in Shanghai.", Persona, Some(0.97))],
                Want::Update(0),
            ),
            ("我住在上海", Persona, &[("我住在北京", Persona, None)], Want::Update(0)),
            (
                "My favorite editor is emacs",
                Instruction,
                &[("my favourite editor is vim", Instruction, None)],
                Want::Update(0),
            ),
            (
                "我们的主库是 PostgreSQL 16",
                WorkFact,
                &[("我们的主库是 MySQL 8.0", WorkFact, None)],
                Want::Update(0),
            ),
            (
                "I don't like vim",
                Instruction,
                &[("I like vim", Instruction, None)],
                Want::Update(0),
            ),
            (
                "我不喜欢 vim",
                Instruction,
                &[("我喜欢 vim", Instruction, None)],
                Want::Update(0),
            ),
            // Different facts.
            (
                "I live in Shanghai.",
                Persona,
                &[("I live in Beijing.", Instruction, None)],
                Want::Add,
            ),
            ("我是组长", Persona, &[("我是 DBA", Persona, None)], Want::Add),
            (
                "I'm a father of two",
                Persona,
                &[("I'm a backend engineer", Persona, Some(0.5))],
                Want::Add,
            ),
            ("We use Kafka", WorkFact, &[("We use Redis", WorkFact, None)], Want::Add),
            (
                "I like tea",
                Instruction,
                &[("I like coffee", Instruction, Some(0.8))],
                Want::Add,
            ),
            (
                "Our orders table is partitioned by month",
                WorkFact,
                &[("Our orders table is in the billing schema", WorkFact, None)],
                Want::Add,
            ),
            (
                "I work at a fintech startup in Berlin",
                Persona,
                &[("I work at Stripe", Persona, None)],
                Want::Add,
            ),
            ("Deploys happen on Tuesdays", WorkFact, &[], Want::Add),
            // A long text reusing all the words of a short one, judged unrelated by cosine.
            (
                "we use it for the rest of the team too",
                WorkFact,
                &[("we use it", WorkFact, Some(0.3))],
                Want::Add,
            ),
            // The strongest relation wins, then the higher similarity.
            (
                "I live in Shanghai.",
                Persona,
                &[
                    ("I live in Beijing.", Persona, Some(0.9)),
                    ("I live in Shanghai", Persona, Some(0.7)),
                ],
                Want::Discard(1),
            ),
            (
                "Our main database is PostgreSQL 15 on RDS",
                WorkFact,
                &[
                    ("our main database is postgresql", WorkFact, Some(0.8)),
                    ("our main database is postgresql 15", WorkFact, Some(0.9)),
                ],
                Want::Update(1),
            ),
        ];
        for (new, category, olds, want) in cases {
            let candidates: Vec<Candidate> = olds.iter().map(|(c, cat, s)| candidate(c, *cat, *s)).collect();
            let decision = decide_one(&card(new, *category), &candidates, &mut HashSet::new());
            let got = match &decision {
                Decision::Add => Want::Add,
                Decision::Update { target, content: None } => Want::Update(
                    candidates
                        .iter()
                        .position(|c| c.memory.id == *target)
                        .expect("own candidate"),
                ),
                Decision::Discard { duplicate_of: Some(id) } => Want::Discard(
                    candidates
                        .iter()
                        .position(|c| c.memory.id == *id)
                        .expect("own candidate"),
                ),
                other @ (Decision::Update { .. } | Decision::Merge { .. } | Decision::Discard { .. }) => {
                    panic!("unexpected {other:?} for {new:?}")
                }
            };
            assert_eq!(got, *want, "{new:?} vs {olds:?}");
        }
    }

    #[test]
    fn never_targets_archived_or_claimed_memories() {
        let mut archived = candidate("I live in Beijing", Persona, None);
        archived.memory.status = MemoryStatus::Archived;
        let new = card("I live in Shanghai", Persona);
        assert_eq!(decide_one(&new, &[archived], &mut HashSet::new()), Decision::Add);

        let old = candidate("I live in Beijing", Persona, None);
        let mut claimed = HashSet::new();
        let first = decide_one(&new, std::slice::from_ref(&old), &mut claimed);
        assert!(matches!(first, Decision::Update { target, .. } if target == old.memory.id));
        let second = decide_one(&card("I live in Shenzhen", Persona), &[old], &mut claimed);
        assert_eq!(second, Decision::Add);
    }
}
