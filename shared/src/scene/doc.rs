//! The scene document: one Markdown file per topic, written by the LLM editor (or the rules
//! planner) and read back by recall's scene navigation.
//!
//! # Format
//! ```text
//! # <name>
//!
//! - created: 2026-01-02T03:04:05Z
//! - updated: 2026-01-03T00:00:00Z
//! - tags: mysql, 慢查询
//! - key times: 2025-08-20 02:10; 2025-08-21
//!
//! ## Overview
//! <free text>
//! ## Event chain
//! - [2025-08-20 02:10] alert fired
//! ## Conclusions
//! ## Open questions
//! ## Persona impact
//! ```
//! [`SceneDoc::render`] always writes every section, so an editor sees where things go.
//! [`SceneDoc::parse`] is lenient, because an LLM writes these files: `-`, `*`, `+` or numbered
//! bullets; headings in English or Chinese at any level (`概述`, `事件链`, `结论`, `未解问题`,
//! `画像影响`, …); extra blank lines; unknown sections skipped. It fails only without a `# name`
//! title. Text it cannot place in a section is not invented into one: the only fallback is that
//! free text under the title becomes the overview when there is no overview section.
//!
//! # Round trip
//! `parse(render(d)) == d` for every canonical document: items are single-line, trimmed and
//! non-empty, tags contain no `,`/`，`/`、`, key times no `;`/`；`, event times no brackets, the
//! overview is trimmed. Render cleans anything else into that shape, so
//! `render(parse(render(d))) == render(d)` for every document.

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use super::text::{normalize, one_line};

/// One link of a scene's event chain.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SceneEvent {
    /// When it happened, as free text (`2025-08-20 02:10`, `2026-Q1`).
    pub when: Option<String>,
    pub what: String,
}

/// A scene (L2): everything known about one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SceneDoc {
    pub name: String,
    pub created: DateTime<Utc>,
    pub updated: DateTime<Utc>,
    pub tags: Vec<String>,
    pub key_times: Vec<String>,
    pub overview: String,
    /// In time order, as the writer gave it.
    pub events: Vec<SceneEvent>,
    pub conclusions: Vec<String>,
    pub open_questions: Vec<String>,
    /// What this topic says about the user, for the persona (L3).
    pub persona_impact: Vec<String>,
}

/// Why a scene document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocError {
    #[error("scene document has no `# name` title")]
    MissingTitle,
}

const CREATED: &str = "created";
const UPDATED: &str = "updated";
const TAGS: &str = "tags";
const KEY_TIMES: &str = "key times";
const TAG_SEPARATORS: [char; 3] = [',', '，', '、'];
const KEY_TIME_SEPARATORS: [char; 2] = [';', '；'];

impl SceneDoc {
    /// An empty scene named `name`, created and updated at `now`.
    pub fn new(name: &str, now: DateTime<Utc>) -> Self {
        Self {
            name: one_line(name),
            created: now,
            updated: now,
            ..Self::default()
        }
    }

    /// The document as Markdown (see the module docs for the layout).
    pub fn render(&self) -> String {
        let mut out = format!("# {}\n\n", one_line(&self.name));
        out.push_str(&format!("- {CREATED}: {}\n", timestamp(self.created)));
        out.push_str(&format!("- {UPDATED}: {}\n", timestamp(self.updated)));
        let tags = clean_items(&self.tags, &TAG_SEPARATORS, " ");
        out.push_str(&header_line(TAGS, &tags.join(", ")));
        let key_times = clean_items(&self.key_times, &KEY_TIME_SEPARATORS, ",");
        out.push_str(&header_line(KEY_TIMES, &key_times.join("; ")));

        out.push_str("\n## Overview\n\n");
        let overview = render_overview(&self.overview);
        if !overview.is_empty() {
            out.push_str(&overview);
            out.push_str("\n\n");
        }
        let events: Vec<String> = self.events.iter().filter_map(render_event).collect();
        push_section(&mut out, "Event chain", &events);
        push_section(&mut out, "Conclusions", &clean_items(&self.conclusions, &[], ""));
        push_section(&mut out, "Open questions", &clean_items(&self.open_questions, &[], ""));
        push_section(&mut out, "Persona impact", &clean_items(&self.persona_impact, &[], ""));
        while out.ends_with("\n\n") {
            out.pop();
        }
        out
    }

    /// Reads a scene document leniently (see the module docs); fails only without a title.
    pub fn parse(markdown: &str) -> Result<SceneDoc, DocError> {
        let mut lines = markdown.lines();
        let name = lines
            .by_ref()
            .find_map(|line| match heading(line) {
                Some((1, title)) => Some(one_line(title)).filter(|name| !name.is_empty()),
                Some(_) | None => None,
            })
            .ok_or(DocError::MissingTitle)?;

        let mut parser = Parser::default();
        for line in lines {
            parser.line(line);
        }
        Ok(parser.finish(name))
    }

    /// The overview's first sentence on one line, at most `max_chars` characters (an ellipsis
    /// marks a cut), for the scene navigation list.
    pub fn one_line_overview(&self, max_chars: usize) -> String {
        let text = one_line(&self.overview);
        let sentence = first_sentence(&text);
        if sentence.chars().count() <= max_chars {
            return sentence.to_owned();
        }
        if max_chars == 0 {
            return String::new();
        }
        let mut cut: String = sentence.chars().take(max_chars - 1).collect();
        cut.truncate(cut.trim_end().len());
        cut.push('…');
        cut
    }
}

fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn header_line(key: &str, value: &str) -> String {
    if value.is_empty() {
        format!("- {key}:\n")
    } else {
        format!("- {key}: {value}\n")
    }
}

/// Items on one line, with the characters that would split them on parsing replaced, and
/// empty ones dropped.
fn clean_items(items: &[String], separators: &[char], replacement: &str) -> Vec<String> {
    items
        .iter()
        .map(|item| one_line(&item.replace(separators, replacement)))
        .filter(|item| !item.is_empty())
        .collect()
}

fn push_section(out: &mut String, title: &str, bullets: &[String]) {
    out.push_str(&format!("## {title}\n\n"));
    for bullet in bullets {
        out.push_str(&format!("- {bullet}\n"));
    }
    if !bullets.is_empty() {
        out.push('\n');
    }
}

/// The overview with trailing spaces removed and any line that would read as a heading escaped.
fn render_overview(overview: &str) -> String {
    overview
        .trim()
        .lines()
        .map(|line| {
            let line = line.trim_end();
            if heading(line).is_some() {
                format!("\\{}", line.trim_start())
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn render_event(event: &SceneEvent) -> Option<String> {
    let what = one_line(&event.what);
    // Brackets inside the time would end it early on parsing.
    let when = event
        .when
        .as_deref()
        .map(|w| one_line(&w.replace('[', "(").replace(']', ")")))
        .filter(|w| !w.is_empty());
    match when {
        Some(when) => Some(format!("[{when}] {what}").trim_end().to_owned()),
        None if what.is_empty() => None,
        // An empty time keeps a leading bracket in the text from reading as a time.
        None if what.starts_with(['[', '【']) => Some(format!("[] {what}")),
        None => Some(what),
    }
}

/// `(level, title)` of an ATX heading line (`## Title`).
pub(crate) fn heading(line: &str) -> Option<(usize, &str)> {
    let trimmed = line.trim_start();
    let level = trimmed.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &trimmed[level..];
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    Some((level, rest.trim().trim_end_matches('#').trim()))
}

/// The text of a bullet line (`-`, `*`, `+`, `•` or `1.` / `1)`), or `None` for another line.
pub(crate) fn bullet(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    for marker in ['-', '*', '+', '•'] {
        if let Some(rest) = trimmed.strip_prefix(marker) {
            if rest.is_empty() || rest.starts_with(char::is_whitespace) {
                return Some(rest.trim());
            }
        }
    }
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &trimmed[digits..];
        for marker in ['.', ')', '、'] {
            if let Some(text) = rest.strip_prefix(marker) {
                if text.is_empty() || text.starts_with(char::is_whitespace) || marker == '、' {
                    return Some(text.trim());
                }
            }
        }
    }
    None
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Section {
    /// Between the title and the first section heading.
    #[default]
    Header,
    Overview,
    Events,
    Conclusions,
    OpenQuestions,
    PersonaImpact,
    /// A section we do not know: its content is skipped.
    Ignored,
}

/// Heading aliases, normalized, checked in order: the first whose alias the heading contains
/// wins ("未解问题" is an open question before it is anything else).
const SECTION_ALIASES: &[(Section, &[&str])] = &[
    (Section::PersonaImpact, &["persona", "画像", "人设"]),
    (Section::OpenQuestions, &["question", "未解", "待解", "问题", "疑问"]),
    (
        Section::Conclusions,
        &["conclusion", "takeaway", "lesson", "结论", "可复用", "方法", "经验"],
    ),
    (
        Section::Events,
        &["event", "timeline", "history", "事件", "时间线", "经过"],
    ),
    (
        Section::Overview,
        &["overview", "summary", "概述", "概要", "摘要", "简介", "背景"],
    ),
];

fn section_of(title: &str) -> Option<Section> {
    let key = normalize(title);
    if key.is_empty() {
        return None;
    }
    SECTION_ALIASES
        .iter()
        .find(|(_, aliases)| aliases.iter().any(|alias| key.contains(alias)))
        .map(|(section, _)| *section)
}

/// Header keys, normalized, to the field they set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeaderKey {
    Created,
    Updated,
    Tags,
    KeyTimes,
}

fn header_key(key: &str) -> Option<HeaderKey> {
    match normalize(key).as_str() {
        "created" | "createdat" | "创建" | "创建时间" | "创建于" => Some(HeaderKey::Created),
        "updated" | "updatedat" | "lastupdated" | "更新" | "更新时间" | "更新于" | "最后更新" => {
            Some(HeaderKey::Updated)
        }
        "tags" | "tag" | "标签" => Some(HeaderKey::Tags),
        "keytimes" | "keytime" | "关键时间" | "关键时间点" | "时间范围" | "timerange" => {
            Some(HeaderKey::KeyTimes)
        }
        _ => None,
    }
}

/// Line-by-line state of [`SceneDoc::parse`] after the title.
#[derive(Debug, Default)]
struct Parser {
    section: Section,
    created: Option<DateTime<Utc>>,
    updated: Option<DateTime<Utc>>,
    tags: Vec<String>,
    key_times: Vec<String>,
    /// Free text under the title: the overview when there is no overview section.
    preamble: Vec<String>,
    overview: Vec<String>,
    saw_overview: bool,
    events: Vec<String>,
    conclusions: Vec<String>,
    open_questions: Vec<String>,
    persona_impact: Vec<String>,
    /// Whether the previous line was blank: a plain line right after a bullet continues it.
    after_blank: bool,
}

impl Parser {
    fn line(&mut self, line: &str) {
        if let Some((level, title)) = heading(line) {
            self.heading(level, title);
            self.after_blank = true;
            return;
        }
        let blank = line.trim().is_empty();
        match self.section {
            Section::Header => self.header_line(line),
            Section::Overview => {
                let line = line.trim_end();
                let line = line
                    .strip_prefix('\\')
                    .filter(|rest| rest.starts_with('#'))
                    .unwrap_or(line);
                self.overview.push(line.to_owned());
            }
            Section::Events => list_line(&mut self.events, line, self.after_blank),
            Section::Conclusions => list_line(&mut self.conclusions, line, self.after_blank),
            Section::OpenQuestions => list_line(&mut self.open_questions, line, self.after_blank),
            Section::PersonaImpact => list_line(&mut self.persona_impact, line, self.after_blank),
            Section::Ignored => {}
        }
        self.after_blank = blank;
    }

    fn heading(&mut self, level: usize, title: &str) {
        match section_of(title) {
            Some(section) => {
                self.saw_overview |= section == Section::Overview;
                self.section = section;
            }
            // A sub-heading we do not know is structure inside the current section; an unknown
            // top-level section is someone else's content.
            None if level <= 2 => self.section = Section::Ignored,
            None => {}
        }
    }

    fn header_line(&mut self, line: &str) {
        let text = bullet(line).unwrap_or(line.trim());
        if text.is_empty() {
            return;
        }
        let field = text
            .split_once([':', '：'])
            .and_then(|(key, value)| header_key(key.trim_matches(['*', '_', ' '])).map(|k| (k, value)));
        let Some((key, value)) = field else {
            self.preamble.push(text.to_owned());
            return;
        };
        let value = value.trim_matches(['*', '_', ' ']).trim();
        match key {
            HeaderKey::Created => self.created = parse_time(value).or(self.created),
            HeaderKey::Updated => self.updated = parse_time(value).or(self.updated),
            HeaderKey::Tags => self.tags.extend(split_items(value, &TAG_SEPARATORS)),
            HeaderKey::KeyTimes => self.key_times.extend(split_items(value, &KEY_TIME_SEPARATORS)),
        }
    }

    fn finish(self, name: String) -> SceneDoc {
        // A document without times is one a person or a model wrote by hand; the caller, which
        // knows the scene's index row, is expected to set them.
        let created = self.created.or(self.updated).unwrap_or(DateTime::UNIX_EPOCH);
        let updated = self.updated.unwrap_or(created);
        let overview = if self.saw_overview {
            self.overview
        } else {
            self.preamble
        };
        SceneDoc {
            name,
            created,
            updated,
            tags: self.tags,
            key_times: self.key_times,
            overview: overview.join("\n").trim().to_owned(),
            events: self.events.iter().map(|text| parse_event(text)).collect(),
            conclusions: self.conclusions,
            open_questions: self.open_questions,
            persona_impact: self.persona_impact,
        }
    }
}

/// Adds a line of a bullet section: a bullet starts an item, a plain line right under an item
/// continues it (a wrapped line), any other plain line is an item of its own.
pub(crate) fn list_line(items: &mut Vec<String>, line: &str, after_blank: bool) {
    if line.trim().is_empty() {
        return;
    }
    match bullet(line) {
        Some(text) => {
            let text = one_line(text);
            if !text.is_empty() {
                items.push(text);
            }
        }
        None => match items.last_mut() {
            Some(last) if !after_blank => {
                last.push(' ');
                last.push_str(&one_line(line));
            }
            Some(_) | None => items.push(one_line(line)),
        },
    }
}

fn split_items(value: &str, separators: &[char]) -> Vec<String> {
    value
        .split(separators)
        .map(one_line)
        .filter(|item| !item.is_empty())
        .collect()
}

fn parse_time(value: &str) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc3339(value) {
        return Some(at.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(at) = NaiveDateTime::parse_from_str(value, format) {
            return Some(at.and_utc());
        }
    }
    NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .ok()
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .map(|at| at.and_utc())
}

/// `[when] what` or `【when】what`; anything else is an event without a time.
fn parse_event(text: &str) -> SceneEvent {
    let split = match text.chars().next() {
        Some('[') => closing(text, '[', ']'),
        Some('【') => closing(text, '【', '】'),
        Some(_) | None => None,
    };
    match split {
        Some((when, what)) => SceneEvent {
            when: Some(one_line(when)).filter(|w| !w.is_empty()),
            what: one_line(what),
        },
        None => SceneEvent {
            when: None,
            what: text.to_owned(),
        },
    }
}

/// The text inside the bracket that opens `text`, and what follows its matching close.
fn closing(text: &str, open: char, close: char) -> Option<(&str, &str)> {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return Some((&text[open.len_utf8()..at], &text[at + close.len_utf8()..]));
            }
        }
    }
    None
}

/// Up to and including the first sentence end: `。！？!?`, or `.` before a space or the end
/// (so "v1.2" and "3.5 s" do not end a sentence).
fn first_sentence(text: &str) -> &str {
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end = match c {
            '。' | '！' | '？' | '!' | '?' => true,
            '.' => chars.peek().is_none_or(|(_, next)| next.is_whitespace()),
            _ => false,
        };
        if end {
            return &text[..at + c.len_utf8()];
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(day: u32, hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, day, hour, 0, 0).unwrap()
    }

    fn event(when: Option<&str>, what: &str) -> SceneEvent {
        SceneEvent {
            when: when.map(str::to_owned),
            what: what.to_owned(),
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn english() -> SceneDoc {
        SceneDoc {
            name: "Slow queries on instance A".into(),
            created: at(1, 2),
            updated: at(2, 3) + chrono::Duration::milliseconds(250),
            tags: strings(&["mysql", "performance"]),
            key_times: strings(&["2025-08-20 02:10", "Aug 20, 2025"]),
            overview: "Instance A had slow queries at night.\n\nThe report job was the cause.".into(),
            events: vec![
                event(Some("2025-08-20 02:10"), "alert fired"),
                event(None, "[draft] plan written"),
                event(None, "index added"),
            ],
            conclusions: strings(&["Use CONCURRENTLY for DDL on big tables"]),
            open_questions: strings(&["Why did the plan change?"]),
            persona_impact: strings(&["Prefers online DDL"]),
        }
    }

    fn chinese() -> SceneDoc {
        SceneDoc {
            name: "实例A慢查询排查 🐢".into(),
            created: at(3, 0),
            updated: at(4, 0),
            tags: strings(&["慢查询", "索引 优化"]),
            key_times: strings(&["2025-08-20 02:10 ~ 03:00"]),
            overview: "凌晨报表任务导致慢查询。已修复 ✅".into(),
            events: vec![
                event(Some("02:10"), "告警 🚨"),
                event(Some("02:30"), "定位报表 SQL"),
                event(Some("02:50"), "建复合索引，命中率恢复 99.2%"),
            ],
            conclusions: strings(&["大表 DDL 优先 CONCURRENTLY", "复合索引匹配 WHERE 列顺序"]),
            open_questions: vec![],
            persona_impact: strings(&["偏好在线 DDL 方案"]),
        }
    }

    #[test]
    fn round_trips() {
        let docs = [
            english(),
            chinese(),
            SceneDoc::new("Empty", at(5, 5)),
            SceneDoc {
                overview: "# not a heading\n## nor this".into(),
                ..SceneDoc::new("🎉 Launch", at(6, 6))
            },
        ];
        for doc in docs {
            let rendered = doc.render();
            assert_eq!(SceneDoc::parse(&rendered).as_ref(), Ok(&doc), "{rendered}");
        }
    }

    #[test]
    fn renders_the_layout() {
        let rendered = english().render();
        assert!(rendered.starts_with("# Slow queries on instance A\n\n- created: 2026-01-01T02:00:00Z\n"));
        assert!(rendered.contains("- updated: 2026-01-02T03:00:00.250Z\n"));
        assert!(rendered.contains("- tags: mysql, performance\n- key times: 2025-08-20 02:10; Aug 20, 2025\n"));
        assert!(rendered.contains("## Event chain\n\n- [2025-08-20 02:10] alert fired\n- [] [draft] plan written\n"));
        assert!(rendered.contains("## Open questions\n\n- Why did the plan change?\n"));
        assert!(rendered.ends_with("## Persona impact\n\n- Prefers online DDL\n"));
    }

    #[test]
    fn render_cleans_what_would_not_parse_back() {
        let messy = SceneDoc {
            name: "  two\nlines ".into(),
            tags: strings(&["a,b", " ", "c"]),
            key_times: strings(&["x;y"]),
            events: vec![event(Some("[approx] May"), "a\nb"), event(None, "  ")],
            conclusions: strings(&["line one\nline two", ""]),
            ..SceneDoc::new("x", at(1, 1))
        };
        let once = messy.render();
        let parsed = SceneDoc::parse(&once).unwrap();
        assert_eq!(parsed.render(), once);
        assert_eq!(parsed.name, "two lines");
        assert_eq!(parsed.tags, strings(&["a b", "c"]));
        assert_eq!(parsed.events, vec![event(Some("(approx) May"), "a b")]);
        assert_eq!(parsed.conclusions, strings(&["line one line two"]));
    }

    #[test]
    fn parses_what_an_llm_writes() {
        let markdown = "\n\n# 实例A慢查询\n\n* **创建时间**： 2025-08-20 02:10\n* 标签：慢查询、索引\n* 时间范围：2025-08-20 02:10 ~ 03:00\n\n\
                        ### 一、概述\n\n凌晨慢查询。\n\n\n### 二、事件链\n\n1. 【02:10】告警\n2. [02:30] 定位报表 SQL\n   持续 45 分钟\n\n\
                        ## 附录\n\n- 不属于任何一节\n\n## 可复用方法\n\n+ 大表 DDL 优先 CONCURRENTLY\n\n## 待解问题\n- 为什么没走索引？\n\n\
                        ## 对画像的影响\n- 偏好在线 DDL";
        let doc = SceneDoc::parse(markdown).unwrap();
        assert_eq!(doc.name, "实例A慢查询");
        assert_eq!(doc.created, Utc.with_ymd_and_hms(2025, 8, 20, 2, 10, 0).unwrap());
        assert_eq!(doc.updated, doc.created);
        assert_eq!(doc.tags, strings(&["慢查询", "索引"]));
        assert_eq!(doc.key_times, strings(&["2025-08-20 02:10 ~ 03:00"]));
        assert_eq!(doc.overview, "凌晨慢查询。");
        assert_eq!(
            doc.events,
            vec![
                event(Some("02:10"), "告警"),
                event(Some("02:30"), "定位报表 SQL 持续 45 分钟")
            ]
        );
        assert_eq!(doc.conclusions, strings(&["大表 DDL 优先 CONCURRENTLY"]));
        assert_eq!(doc.open_questions, strings(&["为什么没走索引？"]));
        assert_eq!(doc.persona_impact, strings(&["偏好在线 DDL"]));
    }

    #[test]
    fn parses_minimal_documents() {
        let doc = SceneDoc::parse("# Only a title").unwrap();
        assert_eq!(doc, SceneDoc::new("Only a title", DateTime::UNIX_EPOCH));
        let doc = SceneDoc::parse("# Title\nSome words about it.\n- tags: x").unwrap();
        assert_eq!(doc.overview, "Some words about it.");
        assert_eq!(doc.tags, strings(&["x"]));
        let doc = SceneDoc::parse("# T\n## Conclusions\nplain line\n\nanother\n").unwrap();
        assert_eq!(doc.conclusions, strings(&["plain line", "another"]));
    }

    #[test]
    fn fails_only_without_a_title() {
        assert_eq!(SceneDoc::parse(""), Err(DocError::MissingTitle));
        assert_eq!(SceneDoc::parse("## Overview\ntext"), Err(DocError::MissingTitle));
        assert_eq!(SceneDoc::parse("#   \n"), Err(DocError::MissingTitle));
        assert_eq!(SceneDoc::parse("#\n# Real").map(|d| d.name), Ok("Real".to_owned()));
        assert_eq!(
            SceneDoc::parse("#hashtag\n# Real").map(|d| d.name),
            Ok("Real".to_owned())
        );
    }

    #[test]
    fn one_line_overview_takes_the_first_sentence() {
        let doc = english();
        assert_eq!(doc.one_line_overview(100), "Instance A had slow queries at night.");
        assert_eq!(doc.one_line_overview(10), "Instance…");
        assert_eq!(chinese().one_line_overview(100), "凌晨报表任务导致慢查询。");
        assert_eq!(chinese().one_line_overview(5), "凌晨报表…");
        let version = SceneDoc {
            overview: "Upgrade to v1.2 went fine\nthen more".into(),
            ..SceneDoc::default()
        };
        assert_eq!(version.one_line_overview(100), "Upgrade to v1.2 went fine then more");
        assert_eq!(version.one_line_overview(0), "");
    }
}
