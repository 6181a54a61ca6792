//! Alias normalization of LLM output (seed 001, 第二层 ④ 别名归一).
//!
//! Models asked for `{"category": "episodic", ...}` answer `{"type": "Episode", ...}` often
//! enough that rejecting it would turn good extractions into repair calls or failed batches.
//! These functions rewrite such near-misses (field names, category and action names, scalars
//! where lists are expected) into the canonical shape *before* validation, so that validation
//! only fails on answers that are really wrong. They never invent a value: an unknown name is
//! left as it is, for validation to report.
//!
//! Pure functions over `serde_json::Value`; no I/O.

use serde_json::{Map, Value};

use super::Category;

/// Field names of a card, each with the names models use for it.
const CARD_FIELDS: &[(&str, &[&str])] = &[
    (
        "content",
        &[
            "text",
            "memory",
            "fact",
            "statement",
            "description",
            "summary",
            "note",
            "value",
        ],
    ),
    (
        "category",
        &["type", "kind", "class", "memory_type", "category_name", "label"],
    ),
    (
        "priority",
        &["importance", "weight", "score", "salience", "significance"],
    ),
    ("scene", &["topic", "scene_name", "scene_title", "theme"]),
    (
        "occurred_at",
        &[
            "time",
            "when",
            "timestamp",
            "date",
            "datetime",
            "time_point",
            "time_period",
            "time_range",
            "period",
            "occurred",
            "occurred_on",
            "happened_at",
            "event_time",
        ],
    ),
    (
        "source_message_ids",
        &[
            "sources",
            "source",
            "source_ids",
            "source_refs",
            "source_messages",
            "source_message_refs",
            "message_ids",
            "message_refs",
            "messages",
            "refs",
            "turn_ids",
            "turns",
            "evidence",
        ],
    ),
];

/// Field names of a scene.
const SCENE_FIELDS: &[(&str, &[&str])] = &[
    (
        "scene",
        &["name", "topic", "title", "scene_name", "scene_title", "theme"],
    ),
    ("cards", &["memories", "items", "facts", "memory_cards", "card_list"]),
];

/// Field names of an extraction answer.
const EXTRACTION_FIELDS: &[(&str, &[&str])] = &[
    ("scenes", &["topics", "segments", "scene_list", "groups"]),
    ("cards", &["memories", "items", "facts", "memory_cards", "card_list"]),
];

/// Field names of a dedup answer and of one decision.
const DECISIONS_FIELDS: &[(&str, &[&str])] = &[("decisions", &["results", "items", "verdicts", "actions"])];
const DECISION_FIELDS: &[(&str, &[&str])] = &[
    (
        "card",
        &[
            "card_ref",
            "card_id",
            "new",
            "new_card",
            "new_ref",
            "new_card_ref",
            "ref",
            "id",
        ],
    ),
    ("action", &["decision", "type", "op", "operation", "verdict", "choice"]),
    (
        "targets",
        &[
            "target",
            "target_refs",
            "target_ids",
            "candidate",
            "candidates",
            "candidate_refs",
            "memory_ids",
            "memories",
            "duplicate_of",
            "merge_with",
            "replaces",
        ],
    ),
    (
        "content",
        &[
            "merged_content",
            "updated_content",
            "new_content",
            "merged",
            "text",
            "memory",
        ],
    ),
];

/// Category names, each with its aliases (compared after [`canonical_name`], so case, spaces,
/// hyphens and camel case do not matter).
const CATEGORIES: &[(Category, &[&str])] = &[
    (
        Category::Persona,
        &[
            "persona",
            "profile",
            "user_profile",
            "identity",
            "personal",
            "personal_info",
            "background",
            "bio",
            "role",
            "用户画像",
            "画像",
            "身份",
        ],
    ),
    (
        Category::Episodic,
        &[
            "episodic",
            "episode",
            "episodic_memory",
            "event",
            "experience",
            "incident",
            "history",
            "事件",
            "事件片段",
            "经历",
        ],
    ),
    (
        Category::Instruction,
        &[
            "instruction",
            "preference",
            "instruction_preference",
            "rule",
            "directive",
            "guideline",
            "requirement",
            "constraint",
            "指令",
            "偏好",
            "指令偏好",
            "规则",
        ],
    ),
    (
        Category::WorkFact,
        &[
            "work_fact",
            "fact",
            "knowledge",
            "work_knowledge",
            "information",
            "info",
            "environment",
            "工作事实",
            "事实",
        ],
    ),
    (
        Category::WorkTask,
        &[
            "work_task",
            "task",
            "todo",
            "to_do",
            "plan",
            "action_item",
            "commitment",
            "goal",
            "deadline",
            "工作任务",
            "任务",
            "待办",
        ],
    ),
    (
        Category::WorkMethod,
        &[
            "work_method",
            "method",
            "procedure",
            "process",
            "workflow",
            "how_to",
            "technique",
            "approach",
            "lesson",
            "practice",
            "best_practice",
            "工作方法",
            "方法",
        ],
    ),
    (
        Category::WorkArtifact,
        &[
            "work_artifact",
            "artifact",
            "file",
            "document",
            "doc",
            "resource",
            "deliverable",
            "link",
            "output",
            "工作产物",
            "产物",
        ],
    ),
];

/// Dedup action names, each with its aliases.
const ACTIONS: &[(&str, &[&str])] = &[
    ("add", &["add", "new", "insert", "create", "keep", "store"]),
    (
        "update",
        &[
            "update",
            "replace",
            "overwrite",
            "supersede",
            "refine",
            "modify",
            "edit",
        ],
    ),
    ("merge", &["merge", "combine", "consolidate", "fuse"]),
    (
        "discard",
        &[
            "discard",
            "skip",
            "ignore",
            "drop",
            "duplicate",
            "redundant",
            "delete",
            "noop",
            "none",
        ],
    ),
];

/// Words for a priority, mapped to a number.
const PRIORITY_WORDS: &[(&str, i64)] = &[
    ("critical", 95),
    ("very_high", 90),
    ("highest", 90),
    ("high", 80),
    ("medium", 50),
    ("normal", 50),
    ("moderate", 50),
    ("low", 20),
    ("very_low", 10),
    ("lowest", 10),
];

/// `Episode`, `work-fact`, `Work Fact`, `workFact`, ` WORK_FACT ` and `用户画像类` all become one
/// canonical spelling: snake case, lowercase, trimmed, without the Chinese "类" (category)
/// suffix.
pub fn canonical_name(name: &str) -> String {
    let name = name.trim();
    let name = name.strip_suffix('类').unwrap_or(name);
    let mut out = String::with_capacity(name.len() + 4);
    let mut previous_lower = false;
    for c in name.chars() {
        if c.is_uppercase() {
            if previous_lower {
                out.push('_');
            }
            out.extend(c.to_lowercase());
            previous_lower = false;
        } else if c == '-' || c == ' ' || c == '_' || c == '.' {
            if !out.ends_with('_') && !out.is_empty() {
                out.push('_');
            }
            previous_lower = false;
        } else {
            out.push(c);
            previous_lower = c.is_lowercase() || c.is_ascii_digit();
        }
    }
    out.trim_end_matches('_').to_owned()
}

/// The category a model meant by `name`, if it is a known name or alias (also in the plural,
/// or without its underscores: `facts`, `workfact`).
pub fn category(name: &str) -> Option<Category> {
    lookup(CATEGORIES, name)
}

/// The dedup action (`add`, `update`, `merge`, `discard`) a model meant by `name`.
pub fn action(name: &str) -> Option<&'static str> {
    lookup(ACTIONS, name)
}

fn lookup<T: Copy>(table: &[(T, &[&str])], name: &str) -> Option<T> {
    let canonical = canonical_name(name);
    let squashed = |s: &str| s.replace('_', "");
    let find = |wanted: &str| {
        table
            .iter()
            .find(|(_, aliases)| aliases.iter().any(|a| *a == wanted || squashed(a) == squashed(wanted)))
            .map(|(value, _)| *value)
    };
    find(&canonical).or_else(|| canonical.strip_suffix('s').and_then(find))
}

/// Rewrites an extraction answer towards `{"scenes": [{"scene", "cards": [card]}]}` or
/// `{"cards": [card]}`: a bare list of cards is wrapped, field names and categories are
/// normalized, a priority word or fraction becomes a number, single source refs become lists.
pub fn normalize_extraction(value: &mut Value) {
    if value.is_array() {
        let cards = value.take();
        *value = Value::Object(Map::from_iter([("cards".to_owned(), cards)]));
    }
    let Some(root) = value.as_object_mut() else {
        return;
    };
    rename_fields(root, EXTRACTION_FIELDS);
    if let Some(scenes) = root.get_mut("scenes").and_then(Value::as_array_mut) {
        for scene in scenes.iter_mut().filter_map(Value::as_object_mut) {
            rename_fields(scene, SCENE_FIELDS);
            if let Some(cards) = scene.get_mut("cards").and_then(Value::as_array_mut) {
                cards.iter_mut().for_each(normalize_card);
            }
        }
    }
    if let Some(cards) = root.get_mut("cards").and_then(Value::as_array_mut) {
        cards.iter_mut().for_each(normalize_card);
    }
}

fn normalize_card(card: &mut Value) {
    let Some(card) = card.as_object_mut() else {
        return;
    };
    rename_fields(card, CARD_FIELDS);
    if let Some(category_value) = card.get_mut("category") {
        if let Some(known) = category_value.as_str().and_then(category) {
            *category_value = Value::String(known.as_str().to_owned());
        }
    }
    if let Some(priority) = card.get_mut("priority") {
        normalize_priority(priority);
    }
    if let Some(sources) = card.get_mut("source_message_ids") {
        listify(sources);
    }
}

/// Rewrites a dedup answer towards `{"decisions": [{"card", "action", "targets", "content"}]}`.
pub fn normalize_decisions(value: &mut Value) {
    if value.is_array() {
        let decisions = value.take();
        *value = Value::Object(Map::from_iter([("decisions".to_owned(), decisions)]));
    }
    let Some(root) = value.as_object_mut() else {
        return;
    };
    rename_fields(root, DECISIONS_FIELDS);
    let Some(decisions) = root.get_mut("decisions").and_then(Value::as_array_mut) else {
        return;
    };
    for decision in decisions.iter_mut().filter_map(Value::as_object_mut) {
        rename_fields(decision, DECISION_FIELDS);
        if let Some(action_value) = decision.get_mut("action") {
            if let Some(known) = action_value.as_str().and_then(action) {
                *action_value = Value::String(known.to_owned());
            }
        }
        if let Some(targets) = decision.get_mut("targets") {
            listify(targets);
        }
    }
}

/// Renames alias keys of `object` to their canonical names. A key already spelled canonically
/// (after [`canonical_name`]) wins over an alias; among aliases, the table's order decides.
fn rename_fields(object: &mut Map<String, Value>, table: &[(&str, &[&str])]) {
    let keys: Vec<String> = object.keys().cloned().collect();
    // First the canonical names in another spelling (`Content`, `sourceMessageIds`) ...
    for key in &keys {
        let canonical = canonical_name(key);
        if let Some((name, _)) = table.iter().find(|(name, _)| *name == canonical) {
            if key != name && !object.contains_key(*name) {
                if let Some(value) = object.remove(key) {
                    object.insert((*name).to_owned(), value);
                }
            }
        }
    }
    // ... then the aliases, for the fields still missing.
    for (name, aliases) in table {
        if object.contains_key(*name) {
            continue;
        }
        let found = aliases.iter().find_map(|alias| {
            keys.iter()
                .find(|key| canonical_name(key) == *alias && object.contains_key(*key))
        });
        if let Some(key) = found {
            if let Some(value) = object.remove(key) {
                object.insert((*name).to_owned(), value);
            }
        }
    }
}

/// `"80"` → 80, `"high"` → 80, `0.8` → 80 (a fraction is read as a share of 100).
fn normalize_priority(priority: &mut Value) {
    let number = match &*priority {
        Value::String(text) => {
            let text = text.trim().trim_end_matches('%');
            match text.parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    let word = canonical_name(text);
                    PRIORITY_WORDS.iter().find(|(w, _)| *w == word).map(|(_, n)| *n as f64)
                }
            }
        }
        Value::Number(n) => n.as_f64(),
        Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => None,
    };
    let Some(mut number) = number else {
        return;
    };
    if number > 0.0 && number < 1.0 {
        number *= 100.0;
    }
    if let Some(n) = serde_json::Number::from_f64(number.round()) {
        *priority = n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
            .map_or(Value::Number(n), |f| Value::from(f as i64));
    }
}

/// A scalar where a list is expected becomes a list: `"m1"` → `["m1"]`, `"m1, m2"` →
/// `["m1", "m2"]`, `3` → `[3]`, `null` → `[]`.
fn listify(value: &mut Value) {
    match value {
        Value::String(text) => {
            let items: Vec<Value> = text
                .split([',', ' ', ';', '，', '、'])
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_owned()))
                .collect();
            *value = Value::Array(items);
        }
        Value::Number(_) => *value = Value::Array(vec![value.take()]),
        Value::Null => *value = Value::Array(Vec::new()),
        Value::Bool(_) | Value::Array(_) | Value::Object(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_are_canonicalized() {
        for (name, expected) in [
            ("Episode", "episode"),
            ("work-fact", "work_fact"),
            ("Work Fact", "work_fact"),
            ("workFact", "work_fact"),
            ("WorkFact", "work_fact"),
            (" WORK_FACT ", "work_fact"),
            ("sourceMessageIds", "source_message_ids"),
            ("source-message-ids", "source_message_ids"),
            ("用户画像类", "用户画像"),
        ] {
            assert_eq!(canonical_name(name), expected, "{name:?}");
        }
    }

    #[test]
    fn category_aliases_map_to_categories() {
        let cases = [
            ("episodic", Category::Episodic),
            ("episode", Category::Episodic),
            ("Episodes", Category::Episodic),
            ("event", Category::Episodic),
            ("preference", Category::Instruction),
            ("Preferences", Category::Instruction),
            ("rule", Category::Instruction),
            ("instruction-preference", Category::Instruction),
            ("fact", Category::WorkFact),
            ("work fact", Category::WorkFact),
            ("WorkFact", Category::WorkFact),
            ("workfact", Category::WorkFact),
            ("task", Category::WorkTask),
            ("TODO", Category::WorkTask),
            ("to-do", Category::WorkTask),
            ("method", Category::WorkMethod),
            ("procedure", Category::WorkMethod),
            ("artifact", Category::WorkArtifact),
            ("file", Category::WorkArtifact),
            ("profile", Category::Persona),
            ("identity", Category::Persona),
            ("用户画像类", Category::Persona),
            ("工作事实", Category::WorkFact),
            ("指令偏好类", Category::Instruction),
        ];
        for (name, expected) in cases {
            assert_eq!(category(name), Some(expected), "{name:?}");
        }
        for &c in Category::ALL {
            assert_eq!(category(c.as_str()), Some(c));
        }
        for unknown in ["", "misc", "other", "weather"] {
            assert_eq!(category(unknown), None, "{unknown:?}");
        }
    }

    #[test]
    fn action_aliases_map_to_actions() {
        for (name, expected) in [
            ("ADD", "add"),
            ("new", "add"),
            ("Replace", "update"),
            ("combine", "merge"),
            ("skip", "discard"),
            ("duplicate", "discard"),
        ] {
            assert_eq!(action(name), Some(expected), "{name:?}");
        }
        assert_eq!(action("maybe"), None);
    }

    #[test]
    fn near_miss_extraction_becomes_canonical() {
        let mut answer = json!({
            "Topics": [{
                "name": "slow query",
                "memories": [{
                    "text": "实例 A 02:10 出现慢查询",
                    "type": "Episode",
                    "importance": "0.8",
                    "when": "2026-03-02 02:10",
                    "sources": "m6, m7",
                }, {
                    "Content": "The user prefers tables",
                    "kind": "preference",
                    "priority": "high",
                    "message_ids": 8,
                }],
            }],
        });
        normalize_extraction(&mut answer);
        assert_eq!(
            answer,
            json!({
                "scenes": [{
                    "scene": "slow query",
                    "cards": [{
                        "content": "实例 A 02:10 出现慢查询",
                        "category": "episodic",
                        "priority": 80,
                        "occurred_at": "2026-03-02 02:10",
                        "source_message_ids": ["m6", "m7"],
                    }, {
                        "content": "The user prefers tables",
                        "category": "instruction",
                        "priority": 80,
                        "source_message_ids": [8],
                    }],
                }],
            })
        );
    }

    #[test]
    fn canonical_fields_win_over_aliases_and_unknowns_stay() {
        let mut answer = json!([{
            "content": "kept",
            "text": "alias ignored",
            "category": "weather",
            "priority": 73.6,
            "source_message_ids": null,
            "confidence": 0.9,
        }]);
        normalize_extraction(&mut answer);
        assert_eq!(
            answer,
            json!({"cards": [{
                "content": "kept",
                "text": "alias ignored",
                "category": "weather",
                "priority": 74,
                "source_message_ids": [],
                "confidence": 0.9,
            }]})
        );
    }

    #[test]
    fn near_miss_decisions_become_canonical() {
        let mut answer = json!({"results": [
            {"card_ref": "n1", "decision": "Replace", "target": "c2", "merged_content": "x"},
            {"id": "n2", "op": "SKIP", "duplicate_of": "c1"},
            {"card": "n3", "action": "add", "targets": null},
        ]});
        normalize_decisions(&mut answer);
        assert_eq!(
            answer,
            json!({"decisions": [
                {"card": "n1", "action": "update", "targets": ["c2"], "content": "x"},
                {"card": "n2", "action": "discard", "targets": ["c1"]},
                {"card": "n3", "action": "add", "targets": []},
            ]})
        );
        let mut bare = json!([{"card": "n1", "action": "merge", "targets": ["c1", "c2"]}]);
        normalize_decisions(&mut bare);
        assert_eq!(bare["decisions"][0]["action"], json!("merge"));
    }
}
