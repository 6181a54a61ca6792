//! The rules summarizer: fills the ten dimensions extractively, with no model and no network.
//!
//! Each turn is split into sentences (and the lines of its code blocks); each sentence goes to
//! at most one dimension, chosen by keyword cues in English and Chinese and by the turn's role;
//! the item is the sentence itself, clipped, prefixed with its turn (`[#12 user] …`). Nothing is
//! paraphrased, so nothing is invented: every item is a piece of a turn or of the previous
//! summary.
//!
//! Later sentences win: a repeated statement keeps only its latest occurrence, each dimension
//! keeps its latest [`MAX_ITEMS_PER_DIMENSION`] items, and when the rendered summary is over
//! its token budget the oldest items of the fullest dimensions go first.

use std::collections::HashSet;

use async_trait::async_trait;
use unicode_segmentation::UnicodeSegmentation as _;

use super::summary::{Dimension, SummarizeError, Summarizer, Summary, SummaryRequest, SummaryTurn};
use crate::domain::Role;

/// Longest item, in code points, before it is clipped with an ellipsis.
pub const ITEM_CHARS: usize = 240;
/// Items kept per dimension (the latest ones).
pub const MAX_ITEMS_PER_DIMENSION: usize = 20;
/// Shorter sentences carry too little to be worth an item ("ok", "好的").
const MIN_SENTENCE_CHARS: usize = 6;

/// The extractive summarizer.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesSummarizer;

#[async_trait]
impl Summarizer for RulesSummarizer {
    fn name(&self) -> String {
        "rules".to_owned()
    }

    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, SummarizeError> {
        Ok(summarize(request))
    }
}

/// The rules summary of `request`; pure and deterministic.
pub fn summarize(request: SummaryRequest<'_>) -> Summary {
    let mut summary = request.previous.cloned().unwrap_or_default();
    for turn in request.turns {
        for (dimension, item) in classify_turn(turn) {
            summary.items_mut(dimension).push(item);
        }
    }
    for dimension in Dimension::ALL {
        let items = summary.items_mut(dimension);
        keep_latest_distinct(items);
        let excess = items.len().saturating_sub(MAX_ITEMS_PER_DIMENSION);
        items.drain(..excess);
    }
    summary.trim_to(request.max_tokens);
    summary
}

/// The items one turn contributes, in sentence order.
fn classify_turn(turn: &SummaryTurn) -> Vec<(Dimension, String)> {
    let mut items = Vec::new();
    let tag = format!("[#{} {}] ", turn.seq, turn.role.as_str());
    if turn.tool || turn.role == Role::Tool || looks_like_tool_output(&turn.content) {
        if let Some(first) = sentences(&turn.content).into_iter().next() {
            items.push((Dimension::ToolCalls, format!("{tag}{}", clip(first))));
        }
        return items;
    }
    for sentence in sentences(&turn.content) {
        if let Some(dimension) = classify(sentence, turn.role) {
            items.push((dimension, format!("{tag}{}", clip(sentence))));
        }
    }
    if items.is_empty() && turn.role != Role::User {
        // An answer with no cue still says something; keep its opening as context.
        if let Some(first) = sentences(&turn.content).into_iter().next() {
            items.push((Dimension::OtherContext, format!("{tag}{}", clip(first))));
        }
    }
    items
}

/// The dimension of one sentence, by the first rule that matches; `None` for a sentence that
/// carries nothing the summary keeps.
fn classify(sentence: &str, role: Role) -> Option<Dimension> {
    let lower = sentence.to_lowercase();
    let has = |cues: &[&str]| cues.iter().any(|cue| contains_cue(&lower, cue));
    // An explicit marker says what the sentence is, whatever else it mentions.
    if lower.starts_with("todo") || lower.contains("待办") {
        return Some(Dimension::Todos);
    }
    if is_ddl(&lower) || has(SCHEMA_CUES) {
        return Some(Dimension::SchemaChanges);
    }
    if is_dml(&lower) || has(DATA_CUES) {
        return Some(Dimension::DataOperations);
    }
    if has(ERROR_CUES) {
        return Some(Dimension::ErrorsAndFixes);
    }
    if role == Role::User && has(PREFERENCE_CUES) {
        return Some(Dimension::UserPreferences);
    }
    if has(DECISION_CUES) {
        return Some(Dimension::Decisions);
    }
    if has(TODO_CUES) {
        return Some(Dimension::Todos);
    }
    if has(TOOL_CUES) {
        return Some(Dimension::ToolCalls);
    }
    if has(OBJECT_CUES) {
        return Some(Dimension::ObjectsChanged);
    }
    if role == Role::User && (has(REQUEST_CUES) || sentence.ends_with(['?', '？'])) {
        return Some(Dimension::RequestsAndIntent);
    }
    if role == Role::System {
        return Some(Dimension::OtherContext);
    }
    None
}

const SCHEMA_CUES: &[&str] = &[
    "schema",
    "migration",
    "add column",
    "drop column",
    "rename column",
    "partition",
    "表结构",
    "建表",
    "加列",
    "加字段",
    "删字段",
    "索引",
    "分区",
    "字段类型",
    "迁移",
];
const DATA_CUES: &[&str] = &[
    "backfill",
    "rows affected",
    "bulk load",
    "插入",
    "删除",
    "删掉",
    "导入",
    "导出",
    "回填",
    "归档",
    "批量更新",
    "清理数据",
];
const ERROR_CUES: &[&str] = &[
    "error",
    "exception",
    "failed",
    "failure",
    "bug",
    "fix",
    "fixed",
    "traceback",
    "panic",
    "timeout",
    "timed out",
    "deadlock",
    "crash",
    "报错",
    "错误",
    "异常",
    "失败",
    "修复",
    "死锁",
    "超时",
    "崩溃",
    "故障",
];
const PREFERENCE_CUES: &[&str] = &[
    "i prefer",
    "i like",
    "i don't like",
    "i do not like",
    "i hate",
    "please always",
    "always use",
    "never use",
    "don't use",
    "from now on",
    "i want you to",
    "偏好",
    "喜欢",
    "习惯",
    "以后",
    "不要用",
    "请都用",
    "一律",
];
const DECISION_CUES: &[&str] = &[
    "decided",
    "decide",
    "decision",
    "let's",
    "we'll",
    "we will",
    "agreed",
    "conclusion",
    "going with",
    "chose",
    "决定",
    "结论",
    "确定",
    "采用",
    "就用",
    "定了",
    "方案",
];
const TODO_CUES: &[&str] = &[
    "todo",
    "next step",
    "remember to",
    "remind me",
    "follow up",
    "follow-up",
    "need to",
    "deadline",
    "待办",
    "下一步",
    "稍后",
    "记得",
    "提醒",
    "截止",
    "下周",
];
const TOOL_CUES: &[&str] = &["called", "invoked", "tool call", "调用了", "执行了"];
const OBJECT_CUES: &[&str] = &[
    "created",
    "renamed",
    "modified",
    "added",
    "removed",
    "deployed",
    "released",
    "创建",
    "新建",
    "修改",
    "添加",
    "增加",
    "重命名",
    "上线",
    "发布",
    "改好",
];
const REQUEST_CUES: &[&str] = &[
    "can you",
    "could you",
    "please",
    "help me",
    "i want",
    "i need",
    "how do",
    "how to",
    "帮我",
    "请",
    "我想",
    "我需要",
    "能否",
    "能不能",
    "如何",
    "怎么",
    "为什么",
    "查一下",
];

/// A cue in ASCII must stand as whole words ("fix" is not in "prefix"); any other cue (Chinese)
/// is a plain substring, since Chinese has no spaces.
fn contains_cue(lower: &str, cue: &str) -> bool {
    if !cue.is_ascii() {
        return lower.contains(cue);
    }
    let mut from = 0;
    while let Some(at) = lower[from..].find(cue) {
        let start = from + at;
        let end = start + cue.len();
        let before = lower[..start].chars().next_back();
        let after = lower[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        if boundary(before) && boundary(after) {
            return true;
        }
        from = end;
    }
    false
}

fn is_ddl(lower: &str) -> bool {
    [
        "alter table",
        "create table",
        "drop table",
        "create index",
        "drop index",
        "create view",
    ]
    .iter()
    .any(|cue| contains_cue(lower, cue))
}

fn is_dml(lower: &str) -> bool {
    contains_cue(lower, "insert into")
        || contains_cue(lower, "delete from")
        || contains_cue(lower, "truncate table")
        || (contains_cue(lower, "update") && contains_cue(lower, "set"))
}

/// A JSON object with a "tool" key: how agents commonly log a tool's result in a turn.
fn looks_like_tool_output(content: &str) -> bool {
    let trimmed = content.trim_start();
    trimmed.starts_with('{') && (trimmed.contains("\"tool\"") || trimmed.contains("\"tool_call"))
}

/// Splits prose into sentences at `。！？；!?;` and at `.` before whitespace; inside fenced code
/// blocks, each non-empty line is a sentence (a SQL statement, a log line). Sentences shorter
/// than [`MIN_SENTENCE_CHARS`] are dropped.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            push_sentence(&mut out, trimmed);
            continue;
        }
        let mut start = 0;
        let mut chars = line.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            let ends = match c {
                '。' | '！' | '？' | '；' | '!' | '?' | ';' => true,
                '.' => chars.peek().is_none_or(|(_, next)| next.is_whitespace()),
                _ => false,
            };
            if ends {
                let end = at + c.len_utf8();
                push_sentence(&mut out, line[start..end].trim());
                start = end;
            }
        }
        push_sentence(&mut out, line[start..].trim());
    }
    out
}

fn push_sentence<'a>(out: &mut Vec<&'a str>, sentence: &'a str) {
    let sentence = sentence.trim_start_matches(['-', '*', '•', ' ']).trim();
    if sentence.chars().filter(|c| !c.is_whitespace()).count() >= MIN_SENTENCE_CHARS {
        out.push(sentence);
    }
}

/// Clips to [`ITEM_CHARS`] code points on a grapheme boundary, ending with `…` when it cut.
fn clip(sentence: &str) -> String {
    if sentence.chars().count() <= ITEM_CHARS {
        return sentence.to_owned();
    }
    let mut out = String::new();
    let mut chars = 0;
    for grapheme in sentence.graphemes(true) {
        chars += grapheme.chars().count();
        if chars > ITEM_CHARS - 1 {
            break;
        }
        out.push_str(grapheme);
    }
    out.push('…');
    out
}

/// Removes earlier repeats of an item (same text after the `[#seq role]` tag, ignoring case and
/// spacing), keeping the latest, in order.
fn keep_latest_distinct(items: &mut Vec<String>) {
    let mut seen = HashSet::new();
    let mut kept: Vec<String> = Vec::with_capacity(items.len());
    for item in items.drain(..).rev() {
        if seen.insert(normalized(&item)) {
            kept.push(item);
        }
    }
    kept.reverse();
    *items = kept;
}

fn normalized(item: &str) -> String {
    let body = match item.strip_prefix("[#") {
        Some(rest) => rest.split_once("] ").map_or(item, |(_, body)| body),
        None => item,
    };
    body.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::summary::Summary;
    use crate::context::tokens::estimate_text;

    fn turn(seq: i64, role: Role, content: &str) -> SummaryTurn {
        SummaryTurn {
            seq,
            role,
            content: content.to_owned(),
            tool: false,
        }
    }

    fn run(turns: &[SummaryTurn], previous: Option<&Summary>, max_tokens: u64) -> Summary {
        let tenant = crate::domain::Tenant::new(Some("t"), Some("a"), Some("u")).unwrap();
        summarize(SummaryRequest {
            tenant: &tenant,
            session_id: "s",
            previous,
            turns,
            max_tokens,
        })
    }

    fn sample() -> Vec<SummaryTurn> {
        vec![
            turn(1, Role::User, "帮我查一下 orders 表里北京区域最近 7 天的 amount 分布。"),
            turn(
                2,
                Role::Assistant,
                "可以用下面的查询：\n```sql\nselect count(*) from orders where region = '北京';\n```\n结果按天返回。",
            ),
            turn(3, Role::User, "以后写 SQL 请都用小写关键字，我不喜欢全大写的风格。"),
            turn(4, Role::User, "我决定把 orders 按月分区，先从 2024 年的数据开始迁移。"),
            turn(
                5,
                Role::User,
                "ALTER TABLE orders ADD COLUMN note text; 这个改动需要先在 staging 跑一遍吗？",
            ),
            turn(
                6,
                Role::User,
                "order-api 又报错了：ERROR: deadlock detected while updating orders",
            ),
            turn(
                7,
                Role::User,
                "TODO: 下周一之前把 payments 的历史数据归档到冷存储，记得提醒我。",
            ),
            turn(
                8,
                Role::User,
                "Please run DELETE FROM coupons WHERE expired = true. Tell me the count first.",
            ),
            turn(9, Role::Tool, "{\"tool\": \"run_sql\", \"rows\": 1200}"),
            turn(
                10,
                Role::User,
                "I prefer answers in Chinese, but keep identifiers in English.",
            ),
            turn(
                11,
                Role::Assistant,
                "Done. I created view orders_compat so old readers keep working.",
            ),
            turn(12, Role::User, "ok"),
        ]
    }

    #[test]
    fn sentences_land_in_their_dimensions() {
        let s = run(&sample(), None, 10_000);
        assert_eq!(
            s.requests_and_intent,
            [
                "[#1 user] 帮我查一下 orders 表里北京区域最近 7 天的 amount 分布。",
                "[#5 user] 这个改动需要先在 staging 跑一遍吗？"
            ]
        );
        assert!(
            s.user_preferences.iter().any(|i| i.contains("请都用小写关键字")),
            "{s:#?}"
        );
        assert!(
            s.user_preferences.iter().any(|i| i.starts_with("[#10 user] I prefer")),
            "{s:#?}"
        );
        assert!(s
            .schema_changes
            .iter()
            .any(|i| i.contains("ALTER TABLE orders ADD COLUMN note text;")));
        assert!(s.schema_changes.iter().any(|i| i.contains("按月分区")), "{s:#?}");
        assert!(s.errors_and_fixes.iter().any(|i| i.contains("deadlock detected")));
        assert!(s.data_operations.iter().any(|i| i.contains("DELETE FROM coupons")));
        assert!(s.todos.iter().any(|i| i.contains("归档到冷存储")), "{s:#?}");
        assert_eq!(s.tool_calls, ["[#9 tool] {\"tool\": \"run_sql\", \"rows\": 1200}"]);
        assert!(s
            .objects_changed
            .iter()
            .any(|i| i.contains("created view orders_compat")));
        assert!(
            s.other_context
                .iter()
                .any(|i| i.starts_with("[#2 assistant] 可以用下面的查询")),
            "{s:#?}"
        );
        let all: Vec<&String> = Dimension::ALL.iter().flat_map(|&d| s.items(d)).collect();
        assert!(all.iter().all(|i| !i.contains("[#12")), "'ok' carries nothing");
    }

    #[test]
    fn nothing_is_invented() {
        let turns = sample();
        let s = run(&turns, None, 10_000);
        for dimension in Dimension::ALL {
            for item in s.items(dimension) {
                let body = item.split_once("] ").unwrap().1.trim_end_matches('…');
                assert!(
                    turns.iter().any(|t| t.content.contains(body)),
                    "{item:?} is not a piece of any turn"
                );
            }
        }
    }

    #[test]
    fn previous_items_are_kept_and_repeats_keep_the_latest() {
        let first = run(&sample()[..4], None, 10_000);
        let again = [turn(
            20,
            Role::User,
            "帮我查一下 orders 表里北京区域最近 7 天的 amount 分布。",
        )];
        let merged = run(&again, Some(&first), 10_000);
        assert_eq!(
            merged.requests_and_intent,
            ["[#20 user] 帮我查一下 orders 表里北京区域最近 7 天的 amount 分布。"]
        );
        assert_eq!(merged.user_preferences, first.user_preferences);
    }

    #[test]
    fn the_budget_drops_the_oldest_items_of_the_fullest_dimension() {
        let turns: Vec<SummaryTurn> = (1..=60)
            .map(|i| {
                turn(
                    i,
                    Role::User,
                    &format!("ERROR: job {i} failed with a timeout on shard {i}"),
                )
            })
            .collect();
        let unbounded = run(&turns, None, 100_000);
        assert_eq!(unbounded.errors_and_fixes.len(), MAX_ITEMS_PER_DIMENSION);
        assert!(unbounded.errors_and_fixes[0].starts_with("[#41 user]"));
        let bounded = run(&turns, None, 120);
        let text = bounded.render(1, 60, 60);
        assert!(estimate_text(&text) <= 120, "{}", estimate_text(&text));
        assert!(!bounded.errors_and_fixes.is_empty());
        assert!(bounded.errors_and_fixes.last().unwrap().starts_with("[#60 user]"));
    }

    #[test]
    fn long_sentences_are_clipped_on_a_character_boundary() {
        let long = format!("请帮我{}", "分析".repeat(300));
        let s = run(&[turn(1, Role::User, &long)], None, 10_000);
        let item = &s.requests_and_intent[0];
        assert!(item.ends_with('…'));
        assert_eq!(item.split_once("] ").unwrap().1.chars().count(), ITEM_CHARS);
    }

    #[test]
    fn cues_in_ascii_match_whole_words_only() {
        assert!(contains_cue("please fix it", "fix"));
        assert!(!contains_cue("the prefix is", "fix"));
        assert!(contains_cue("时间超时了", "超时"));
        assert!(is_dml("update orders set status = 'x'"));
        assert!(!is_dml("i will update you later"));
    }
}
