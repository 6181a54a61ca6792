//! Rules mode of L3: the persona from memories and scenes with no LLM, deterministically.
//!
//! # Where bullets come from
//! - identity ← persona memories;
//! - preferences ← instruction memories that are not prohibitions;
//! - anti-patterns ← instruction memories that are prohibitions ("never", "don't", "do not",
//!   "avoid", "must not", "should not"; 不要, 别, 禁止, 不许, 不准, 绝不, 切勿, 严禁, 不得);
//! - methodology ← work-method memories and scene conclusions;
//! - worldview ← scene persona-impact bullets.
//!
//! Only active memories count. Text is copied, never paraphrased.
//!
//! # Incremental, bounded
//! The current persona's bullets are kept. A text appears once in the whole document
//! (normalized: case, width, spacing and punctuation ignored): a current bullet keeps its
//! place, and a new one goes to the first section that claims it, in the order above.
//! Each section is ordered by priority (highest first), then by age (current bullets first, in
//! their order; then new ones, oldest first), and holds at most [`SECTION_CAP`] bullets, so the
//! least important fall off. A memory's priority is its own; a scene bullet has
//! [`SCENE_PRIORITY`]; a current bullet has the priority of an input that repeats it, or
//! [`KEPT_PRIORITY`] when no input does: an unconfirmed old bullet neither outranks an
//! important new memory nor yields to a trivial one. At equal priority old bullets win, so a
//! full section does not churn.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use regex::Regex;

use super::doc::PersonaDoc;
use crate::memory::{Category, Memory, MemoryStatus};
use crate::scene::doc::SceneDoc;
use crate::scene::text::{is_cjk, normalize, one_line};

/// Most bullets per persona section.
pub const SECTION_CAP: usize = 12;
/// Priority of a bullet taken from a scene (scenes carry none of their own).
pub const SCENE_PRIORITY: u8 = 60;
/// Priority of a current bullet that no input repeats.
pub const KEPT_PRIORITY: u8 = 50;

/// The persona after adding `memories` and `scenes` to `current` (see the module docs).
pub fn build_persona(current: Option<&PersonaDoc>, memories: &[Memory], scenes: &[SceneDoc]) -> PersonaDoc {
    let inputs = inputs(memories, scenes);
    let mut confirmed: HashMap<String, u8> = HashMap::new();
    for input in &inputs {
        let entry = confirmed.entry(input.key.clone()).or_insert(0);
        *entry = (*entry).max(input.priority);
    }

    let empty = PersonaDoc::default();
    let current = current.unwrap_or(&empty);
    let mut sections: [Vec<Entry>; 5] = Default::default();
    let mut claimed: HashSet<String> = HashSet::new();
    for (slot, bullets) in SECTIONS.iter().zip(current_sections(current)) {
        for (position, text) in bullets.iter().enumerate() {
            let text = one_line(text);
            let key = normalize(&text);
            if key.is_empty() || !claimed.insert(key.clone()) {
                continue;
            }
            let priority = confirmed.get(&key).copied().unwrap_or(KEPT_PRIORITY);
            sections[*slot as usize].push(Entry {
                text,
                priority,
                age: Age::Kept(position),
            });
        }
    }
    for input in inputs {
        if !claimed.insert(input.key.clone()) {
            continue;
        }
        sections[input.section as usize].push(Entry {
            text: input.text,
            priority: input.priority,
            age: Age::New(input.at),
        });
    }

    let [identity, preferences, anti_patterns, methodology, worldview] = sections.map(finish);
    PersonaDoc {
        identity,
        preferences,
        methodology,
        worldview,
        anti_patterns,
    }
}

/// Persona sections in claiming order; the discriminant indexes `sections`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Identity = 0,
    Preferences = 1,
    AntiPatterns = 2,
    Methodology = 3,
    Worldview = 4,
}

const SECTIONS: [Slot; 5] = [
    Slot::Identity,
    Slot::Preferences,
    Slot::AntiPatterns,
    Slot::Methodology,
    Slot::Worldview,
];

fn current_sections(doc: &PersonaDoc) -> [&[String]; 5] {
    [
        &doc.identity,
        &doc.preferences,
        &doc.anti_patterns,
        &doc.methodology,
        &doc.worldview,
    ]
}

/// How old a bullet is: current ones (by position) before new ones (by time).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Age {
    Kept(usize),
    New(DateTime<Utc>),
}

#[derive(Debug)]
struct Entry {
    text: String,
    priority: u8,
    age: Age,
}

fn finish(mut entries: Vec<Entry>) -> Vec<String> {
    entries.sort_by(|a, b| (Reverse(a.priority), &a.age, &a.text).cmp(&(Reverse(b.priority), &b.age, &b.text)));
    entries.into_iter().take(SECTION_CAP).map(|e| e.text).collect()
}

/// One candidate bullet from a memory or a scene.
#[derive(Debug)]
struct Input {
    section: Slot,
    text: String,
    key: String,
    priority: u8,
    at: DateTime<Utc>,
}

/// Every candidate bullet, in claiming order: sections in [`SECTIONS`] order, then the highest
/// priority (so of two inputs with the same text, the more important one's wording is kept),
/// then the oldest.
fn inputs(memories: &[Memory], scenes: &[SceneDoc]) -> Vec<Input> {
    let mut out = Vec::new();
    for memory in memories.iter().filter(|m| m.status == MemoryStatus::Active) {
        let section = match memory.category {
            Category::Persona => Slot::Identity,
            Category::Instruction if is_prohibition(&memory.content) => Slot::AntiPatterns,
            Category::Instruction => Slot::Preferences,
            Category::WorkMethod => Slot::Methodology,
            Category::Episodic | Category::WorkFact | Category::WorkTask | Category::WorkArtifact => continue,
        };
        out.push(input(section, &memory.content, memory.priority, memory.created_at));
    }
    for scene in scenes {
        for conclusion in &scene.conclusions {
            out.push(input(Slot::Methodology, conclusion, SCENE_PRIORITY, scene.updated));
        }
        for impact in &scene.persona_impact {
            out.push(input(Slot::Worldview, impact, SCENE_PRIORITY, scene.updated));
        }
    }
    out.retain(|i| !i.key.is_empty());
    out.sort_by(|a, b| {
        (a.section as usize, Reverse(a.priority), a.at, &a.text).cmp(&(
            b.section as usize,
            Reverse(b.priority),
            b.at,
            &b.text,
        ))
    });
    out
}

fn input(section: Slot, text: &str, priority: u8, at: DateTime<Utc>) -> Input {
    let text = one_line(text);
    Input {
        section,
        key: normalize(&text),
        text,
        priority,
        at,
    }
}

static PROHIBITION_EN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:never|don'?t|do not|avoid|must not|mustn'?t|should not|shouldn'?t)\b").expect("valid regex")
});

/// Chinese words that forbid on their own.
const PROHIBITION_ZH: &[&str] = &["不要", "禁止", "不许", "不准", "绝不", "切勿", "请勿", "严禁", "不得"];
/// What may stand right before a forbidding 别 ("你别", "千万别"); after anything else it is
/// part of a word (特别, 区别, 分别, 级别).
const BIE_AFTER: &[char] = &['你', '您', '请', '就', '也', '都', '可', '还', '万', '们', '再'];
/// What may not follow a forbidding 别 (别人, 别的, 别处, 别名).
const BIE_NOT_BEFORE: &[char] = &['人', '的', '处', '名', '针', '墅', '扭'];

/// Whether an instruction forbids something, in English or Chinese.
pub fn is_prohibition(text: &str) -> bool {
    let folded: String = text
        .chars()
        .map(|c| match c {
            '’' | '‘' | '`' | '´' => '\'',
            other => other,
        })
        .collect();
    // "不得不" is "have to", the opposite of "不得".
    let folded = folded.replace("不得不", "");
    if PROHIBITION_EN.is_match(&folded) || PROHIBITION_ZH.iter().any(|w| folded.contains(w)) {
        return true;
    }
    let chars: Vec<char> = folded.chars().collect();
    chars.iter().enumerate().any(|(i, c)| {
        *c == '别'
            && i.checked_sub(1)
                .map(|p| chars[p])
                .is_none_or(|before| !is_cjk(before) || BIE_AFTER.contains(&before))
            && chars.get(i + 1).is_none_or(|after| !BIE_NOT_BEFORE.contains(after))
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use uuid::Uuid;

    use super::*;
    use crate::domain::Tenant;

    fn memory(n: u32, content: &str, category: Category, priority: u8) -> Memory {
        let at = Utc.with_ymd_and_hms(2026, 2, 1, 0, n, 0).unwrap();
        Memory {
            id: Uuid::from_u128(n.into()),
            tenant: Tenant {
                team: "t".into(),
                agent: "a".into(),
                user: "u".into(),
            },
            session_id: "s".into(),
            content: content.into(),
            category,
            priority,
            scene: None,
            occurred_at: None,
            source_message_ids: vec![Uuid::from_u128(99)],
            status: MemoryStatus::Active,
            superseded_by: None,
            task: None,
            created_at: at,
            updated_at: at,
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn detects_prohibitions() {
        for text in [
            "Never push to main",
            "Don’t use tabs",
            "do not reply in French",
            "Avoid long answers",
            "You must not delete backups",
            "不要在周五发布",
            "别用 MySQL 5.7",
            "千万别删库",
            "禁止直接改生产库",
            "回答里绝不出现密码",
        ] {
            assert!(is_prohibition(text), "{text}");
        }
        for text in [
            "Always answer in English",
            "I prefer short answers",
            "Avoidance is not the topic; nevertheless fine",
            "回答要特别简洁",
            "区别对待测试和生产",
            "把别人的代码也看一遍",
            "用中文回答",
            "我们不得不先备份",
        ] {
            assert!(!is_prohibition(text), "{text}");
        }
    }

    #[test]
    fn builds_a_first_persona_in_english() {
        let memories = vec![
            memory(1, "I am a DBA at Tencent Cloud", Category::Persona, 80),
            memory(2, "Answer briefly", Category::Instruction, 80),
            memory(3, "Never run DDL without a backup", Category::Instruction, 90),
            memory(4, "Use CONCURRENTLY for big tables", Category::WorkMethod, 75),
            memory(5, "Slow query at 02:10", Category::Episodic, 55),
            memory(6, "I live in Beijing", Category::Persona, 60),
        ];
        let scene = SceneDoc {
            conclusions: strings(&[
                "Match composite indexes to WHERE order",
                "use concurrently for BIG tables!",
            ]),
            persona_impact: strings(&["Values reliability over speed", "Answer briefly"]),
            ..SceneDoc::default()
        };
        let persona = build_persona(None, &memories, &[scene]);
        assert_eq!(
            persona.identity,
            strings(&["I am a DBA at Tencent Cloud", "I live in Beijing"])
        );
        assert_eq!(persona.preferences, strings(&["Answer briefly"]));
        assert_eq!(persona.anti_patterns, strings(&["Never run DDL without a backup"]));
        assert_eq!(
            persona.methodology,
            strings(&[
                "Use CONCURRENTLY for big tables",
                "Match composite indexes to WHERE order"
            ])
        );
        assert_eq!(persona.worldview, strings(&["Values reliability over speed"]));
    }

    #[test]
    fn keeps_the_current_persona_and_adds_chinese_memories() {
        let current = PersonaDoc {
            identity: strings(&["腾讯云 DBA"]),
            preferences: strings(&["回答简洁"]),
            ..PersonaDoc::default()
        };
        let memories = vec![
            memory(1, "负责北京区 TDSQL-C", Category::Persona, 80),
            memory(2, "回答简洁。", Category::Instruction, 80),
            memory(3, "不要在周五发布", Category::Instruction, 90),
            memory(4, "用中文回答", Category::Instruction, 40),
        ];
        let mut archived = memory(5, "已归档的偏好", Category::Instruction, 99);
        archived.status = MemoryStatus::Archived;
        let mut all = memories.clone();
        all.push(archived);
        let persona = build_persona(Some(&current), &all, &[]);
        // The kept identity bullet has no confirming input: priority 50, below the new 80.
        assert_eq!(persona.identity, strings(&["负责北京区 TDSQL-C", "腾讯云 DBA"]));
        // "回答简洁" is confirmed by a priority-80 memory and keeps its own wording.
        assert_eq!(persona.preferences, strings(&["回答简洁", "用中文回答"]));
        assert_eq!(persona.anti_patterns, strings(&["不要在周五发布"]));
        assert!(persona.methodology.is_empty());
        // Running again changes nothing.
        assert_eq!(build_persona(Some(&persona), &all, &[]), persona);
    }

    #[test]
    fn caps_each_section_by_priority_then_age() {
        let current = PersonaDoc {
            preferences: (0..SECTION_CAP).map(|i| format!("old preference {i}")).collect(),
            ..PersonaDoc::default()
        };
        let memories = vec![
            memory(1, "important new preference", Category::Instruction, 90),
            memory(2, "trivial new preference", Category::Instruction, 10),
            memory(3, "equal new preference", Category::Instruction, KEPT_PRIORITY),
        ];
        let persona = build_persona(Some(&current), &memories, &[]);
        assert_eq!(persona.preferences.len(), SECTION_CAP);
        assert_eq!(persona.preferences[0], "important new preference");
        assert_eq!(persona.preferences[1], "old preference 0");
        assert!(!persona.preferences.contains(&"trivial new preference".to_owned()));
        assert!(!persona.preferences.contains(&"equal new preference".to_owned()));
        assert!(!persona
            .preferences
            .contains(&format!("old preference {}", SECTION_CAP - 1)));
    }

    #[test]
    fn nothing_in_gives_nothing_out() {
        assert!(build_persona(None, &[], &[]).is_empty());
        let facts = [memory(1, "The cluster has 6 nodes", Category::WorkFact, 60)];
        assert!(build_persona(None, &facts, &[]).is_empty());
    }
}
