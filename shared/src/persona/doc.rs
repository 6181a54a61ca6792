//! The persona document: one Markdown profile per owner, in four layers from shallow to deep.
//!
//! ```text
//! # Persona
//! ## Identity        name, role, team, core labels
//! ## Preferences     language and answer style, work habits, tools
//! ## Methodology     how work is done: process, architecture beliefs, risk, conflict handling
//! ## Worldview       long-term goals, values, technical convictions
//! ### Anti-patterns  what the agent must never do
//! ```
//! [`PersonaDoc::parse`] is lenient like the scene parser (a model writes this file too):
//! English or Chinese headings at any level (`身份`, `偏好`, `方法论`, `世界观`, `反模式`),
//! any bullet style, unknown sections skipped. Bullets before the first section heading count as
//! identity, the shallowest layer, rather than being dropped; plain text there ("Here is the
//! updated persona:") is chatter and is dropped. It fails only on text with neither a section
//! heading nor a bullet: a refusal or an answer in prose, not a persona.
//! `parse(render(d)) == Ok(d)` for every document whose items are single-line, trimmed and
//! non-empty.

use serde::{Deserialize, Serialize};

use crate::scene::doc::{bullet, heading, list_line};
use crate::scene::text::{normalize, one_line};

/// An owner's persona (L3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PersonaDoc {
    pub identity: Vec<String>,
    pub preferences: Vec<String>,
    pub methodology: Vec<String>,
    pub worldview: Vec<String>,
    /// Things the agent must never do; rendered inside the worldview.
    pub anti_patterns: Vec<String>,
}

/// Why a text is not a persona document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersonaDocError {
    #[error("no persona section heading and no bullet in the text")]
    NotAPersona,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Before the first known section heading: only bullets count, as identity.
    Preamble,
    Identity,
    Preferences,
    Methodology,
    Worldview,
    AntiPatterns,
    Ignored,
}

/// Heading aliases, normalized, checked in order ("反模式" before anything broader).
const SECTION_ALIASES: &[(Section, &[&str])] = &[
    (Section::AntiPatterns, &["anti", "反模式", "禁忌", "禁止", "never"]),
    (
        Section::Worldview,
        &["worldview", "world", "values", "belief", "世界观", "价值观"],
    ),
    (Section::Methodology, &["method", "approach", "方法"]),
    (Section::Preferences, &["preference", "style", "habit", "偏好", "习惯"]),
    (Section::Identity, &["identity", "who", "profile", "身份", "基本信息"]),
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

impl PersonaDoc {
    /// Whether the persona says nothing at all.
    pub fn is_empty(&self) -> bool {
        self.identity.is_empty()
            && self.preferences.is_empty()
            && self.methodology.is_empty()
            && self.worldview.is_empty()
            && self.anti_patterns.is_empty()
    }

    /// The persona as Markdown (see the module docs for the layout).
    pub fn render(&self) -> String {
        let mut out = String::from("# Persona\n\n");
        push_section(&mut out, "## Identity", &self.identity);
        push_section(&mut out, "## Preferences", &self.preferences);
        push_section(&mut out, "## Methodology", &self.methodology);
        push_section(&mut out, "## Worldview", &self.worldview);
        push_section(&mut out, "### Anti-patterns", &self.anti_patterns);
        while out.ends_with("\n\n") {
            out.pop();
        }
        out
    }

    /// Reads a persona document leniently (see the module docs).
    pub fn parse(markdown: &str) -> Result<PersonaDoc, PersonaDocError> {
        let mut doc = PersonaDoc::default();
        let mut section = Section::Preamble;
        let mut after_blank = true;
        for line in markdown.lines() {
            if let Some((level, title)) = heading(line) {
                match section_of(title) {
                    Some(found) => section = found,
                    // The `# Persona` title, or any level-1 heading, opens no section.
                    None if level == 1 => {}
                    None if level == 2 => section = Section::Ignored,
                    None => {}
                }
                after_blank = true;
                continue;
            }
            let items = match section {
                Section::Preamble if bullet(line).is_some() => &mut doc.identity,
                Section::Identity => &mut doc.identity,
                Section::Preferences => &mut doc.preferences,
                Section::Methodology => &mut doc.methodology,
                Section::Worldview => &mut doc.worldview,
                Section::AntiPatterns => &mut doc.anti_patterns,
                Section::Preamble | Section::Ignored => {
                    after_blank = line.trim().is_empty();
                    continue;
                }
            };
            list_line(items, line, after_blank);
            after_blank = line.trim().is_empty();
        }
        if section == Section::Preamble && doc.is_empty() {
            return Err(PersonaDocError::NotAPersona);
        }
        Ok(doc)
    }
}

fn push_section(out: &mut String, heading: &str, items: &[String]) {
    out.push_str(heading);
    out.push_str("\n\n");
    let mut any = false;
    for item in items.iter().map(|item| one_line(item)).filter(|item| !item.is_empty()) {
        out.push_str(&format!("- {item}\n"));
        any = true;
    }
    if any {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn english() -> PersonaDoc {
        PersonaDoc {
            identity: strings(&["DBA at Tencent Cloud", "Manages TDSQL-C in Beijing"]),
            preferences: strings(&["Short answers", "Uses vim 🧑‍💻"]),
            methodology: strings(&["Prefers online DDL (CONCURRENTLY)"]),
            worldview: strings(&["Reliability over speed"]),
            anti_patterns: strings(&["Never run DDL on production without a backup"]),
        }
    }

    fn chinese() -> PersonaDoc {
        PersonaDoc {
            identity: strings(&["腾讯云 DBA，负责北京区 TDSQL-C"]),
            preferences: strings(&["回答要简洁 ✅"]),
            methodology: vec![],
            worldview: strings(&["稳定压倒一切"]),
            anti_patterns: strings(&["不要在周五发布"]),
        }
    }

    #[test]
    fn round_trips() {
        for doc in [english(), chinese(), PersonaDoc::default()] {
            let rendered = doc.render();
            assert_eq!(PersonaDoc::parse(&rendered), Ok(doc), "{rendered}");
        }
    }

    #[test]
    fn renders_anti_patterns_inside_the_worldview() {
        let rendered = english().render();
        assert!(rendered.starts_with("# Persona\n\n## Identity\n\n- DBA at Tencent Cloud\n"));
        assert!(rendered.contains(
            "## Worldview\n\n- Reliability over speed\n\n### Anti-patterns\n\n- Never run DDL on production without a backup\n"
        ));
        assert_eq!(
            PersonaDoc::default().render(),
            "# Persona\n\n## Identity\n\n## Preferences\n\n## Methodology\n\n## Worldview\n\n### Anti-patterns\n"
        );
    }

    #[test]
    fn parses_chinese_headings_and_loose_markdown() {
        let markdown = "以下是更新后的画像：\n# 用户画像\n\n* 一位 DBA\n\n## 身份层（最浅）\n1. 负责 TDSQL-C\n\n## 偏好层\n+ 回答简洁\n  用中文\n\n\
                        ## 附录\n- 忽略我\n\n## 方法论层\n- 先看 WHERE 组合\n\n## 世界观层（最深）\n- 稳定优先\n### 反模式\n- 不要删库\n";
        let doc = PersonaDoc::parse(markdown).unwrap();
        assert_eq!(doc.identity, strings(&["一位 DBA", "负责 TDSQL-C"]));
        assert_eq!(doc.preferences, strings(&["回答简洁 用中文"]));
        assert_eq!(doc.methodology, strings(&["先看 WHERE 组合"]));
        assert_eq!(doc.worldview, strings(&["稳定优先"]));
        assert_eq!(doc.anti_patterns, strings(&["不要删库"]));
    }

    #[test]
    fn emptiness() {
        assert!(PersonaDoc::default().is_empty());
        assert!(PersonaDoc::parse("# Persona\n\n## Identity\n\n").unwrap().is_empty());
        assert!(!english().is_empty());
        let only_anti = PersonaDoc {
            anti_patterns: strings(&["x"]),
            ..PersonaDoc::default()
        };
        assert!(!only_anti.is_empty());
    }

    #[test]
    fn fails_only_on_text_that_is_no_persona() {
        assert_eq!(PersonaDoc::parse(""), Err(PersonaDocError::NotAPersona));
        assert_eq!(
            PersonaDoc::parse("# Persona\nI'm sorry, I cannot help with that."),
            Err(PersonaDocError::NotAPersona)
        );
        let bare = PersonaDoc::parse("Here you go:\n- A DBA\n- Lives in Beijing").unwrap();
        assert_eq!(bare.identity, strings(&["A DBA", "Lives in Beijing"]));
    }
}
