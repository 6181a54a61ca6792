//! Sentence splitting for the rules extractor: a card is one sentence of a turn, copied.
//!
//! Ends a sentence: `。！？；`, ASCII `!` and `?` before whitespace or the end, a `.` before
//! whitespace, CJK text or the end, and every line break. Not an end: the full-width comma
//! `，` (a Chinese clause, "我是 DBA，主要管…", stays one statement), `.` inside a token (3.5,
//! v1.2.3, example.com, a.md), a `.` after a title or a Latin abbreviation (Dr., e.g., vs.), an
//! ASCII `;` (code). Fenced code blocks and `>` quotes (someone else's words) yield nothing.
//!
//! The text of a sentence is only cleaned, never rewritten: list markers (`- `, `1. `, `①`,
//! `- [ ] `, `## `) are removed and runs of whitespace become one space.

use std::sync::LazyLock;

use regex::Regex;

use super::text::is_cjk;

/// Shortest sentence kept, in letters and digits: "我是DBA" has 5.
const MIN_ALNUM: usize = 3;
/// Longest sentence kept, in characters. Longer runs without a sentence end are pasted text
/// (logs, documents, minified code), not a statement of the user's.
pub const MAX_SENTENCE_CHARS: usize = 300;

/// Abbreviations after which a `.` does not end a sentence.
pub const ABBREVIATIONS: &[&str] = &[
    "e.g", "i.e", "eg", "ie", "cf", "vs", "v", "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "no", "nos", "fig",
    "approx", "dept", "est", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    "mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun", "a.m", "p.m", "resp", "incl", "min",
    "max", "avg", "ver", "ca", "op", "ref",
];
/// Abbreviations that also often end a sentence: they end one when a capital or CJK follows.
pub const FINAL_ABBREVIATIONS: &[&str] = &["etc", "inc", "ltd", "co", "corp", "al"];

static LIST_MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-*•·+]\s+(?:\[[ xX]?\]\s*)?|\[[ xX]?\]\s+|\d{1,3}[.)]\s+|\d{1,3}、\s*|[（(]\d{1,3}[)）]\s*|[①-⑳]\s*|#{1,6}\s+)")
        .expect("valid regex")
});

/// The sentences of `text`, cleaned, in order.
pub fn split_sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("```") || line.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || line.starts_with('>') {
            continue;
        }
        for sentence in split_line(line) {
            let sentence = clean(sentence);
            let alnum = sentence.chars().filter(|c| c.is_alphanumeric()).count();
            if alnum >= MIN_ALNUM && sentence.chars().count() <= MAX_SENTENCE_CHARS {
                out.push(sentence);
            }
        }
    }
    out
}

fn clean(sentence: &str) -> String {
    let mut s = sentence.trim();
    // A marker may repeat ("- 1. ").
    while let Some(m) = LIST_MARKER.find(s) {
        if m.is_empty() {
            break;
        }
        s = s[m.end()..].trim_start();
    }
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn split_line(line: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (_, c) = chars[i];
        let next = chars.get(i + 1).map(|&(_, c)| c);
        let ends = match c {
            '。' | '！' | '？' | '；' => true,
            '!' | '?' => next.is_none_or(|n| n.is_whitespace() || is_terminator(n) || is_closer(n)),
            '.' => period_ends(line, &chars, i),
            _ => false,
        };
        if !ends {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len() && (is_terminator(chars[j].1) || is_closer(chars[j].1)) {
            j += 1;
        }
        let end = chars.get(j).map_or(line.len(), |&(pos, _)| pos);
        out.push(line[start..end].trim());
        start = end;
        i = j;
    }
    out.push(line[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

fn is_terminator(c: char) -> bool {
    matches!(c, '。' | '！' | '？' | '；' | '!' | '?' | '.' | '…')
}

fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | '”' | '’' | ')' | '）' | ']' | '】' | '」' | '』' | '》')
}

/// Whether the `.` at `chars[i]` ends a sentence.
fn period_ends(line: &str, chars: &[(usize, char)], i: usize) -> bool {
    match chars.get(i + 1).map(|&(_, c)| c) {
        None => return true,
        Some(n) if n.is_whitespace() || is_closer(n) || is_cjk(n) => {}
        // Inside a token: 3.5, v1.2, example.com, "..." (its last dot decides).
        Some(_) => return false,
    }
    let pos = chars[i].0;
    let word_start = line[..pos]
        .rfind(|c: char| c.is_whitespace() || matches!(c, '(' | '"' | '“'))
        .map_or(0, |p| p + line[p..].chars().next().map_or(1, char::len_utf8));
    let raw = &line[word_start..pos];
    let word = raw.to_lowercase();
    if ABBREVIATIONS.contains(&word.as_str()) {
        return false;
    }
    // An initial ("J. Smith").
    if raw.chars().count() == 1 && raw.chars().all(|c| c.is_ascii_uppercase()) {
        return false;
    }
    // A dotted abbreviation ("u.s", "a.m").
    if word.contains('.') && word.split('.').all(|part| part.chars().count() == 1) {
        return false;
    }
    if FINAL_ABBREVIATIONS.contains(&word.as_str()) {
        let following = line[pos + 1..].trim_start().chars().next();
        return following.is_some_and(|c| c.is_uppercase() || is_cjk(c));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_english_and_chinese() {
        let cases: &[(&str, &[&str])] = &[
            ("I'm a DBA. I like vim!", &["I'm a DBA.", "I like vim!"]),
            (
                "我是腾讯云 DBA，主要管北京区的 TDSQL-C",
                &["我是腾讯云 DBA，主要管北京区的 TDSQL-C"],
            ),
            (
                "我是 DBA。我喜欢 vim！你觉得呢？",
                &["我是 DBA。", "我喜欢 vim！", "你觉得呢？"],
            ),
            ("先备份；再升级", &["先备份；", "再升级"]),
            (
                "We run Python 3.5 on v1.2.3 hosts. Next line",
                &["We run Python 3.5 on v1.2.3 hosts.", "Next line"],
            ),
            (
                "See https://example.com/a.md for details. Thanks",
                &["See https://example.com/a.md for details.", "Thanks"],
            ),
            (
                "Ask Dr. Smith, e.g. via Slack. Done",
                &["Ask Dr. Smith, e.g. via Slack.", "Done"],
            ),
            ("J. R. R. Tolkien wrote it. Yes", &["J. R. R. Tolkien wrote it.", "Yes"]),
            (
                "We use vim, emacs, etc. Nobody uses nano",
                &["We use vim, emacs, etc.", "Nobody uses nano"],
            ),
            ("vim, emacs, etc. and more", &["vim, emacs, etc. and more"]),
            ("Really?! Yes.", &["Really?!", "Yes."]),
            ("He said \"stop.\" Then left", &["He said \"stop.\"", "Then left"]),
            ("if a != b then fail", &["if a != b then fail"]),
            ("Wait... what happened", &["Wait...", "what happened"]),
            ("I use vim.我也用 emacs。", &["I use vim.", "我也用 emacs。"]),
            ("第一行\n第二行\r\n第三行", &["第一行", "第二行", "第三行"]),
            (
                "- I prefer tabs\n2. We use Go\n- [ ] migrate the db\n## Notes here",
                &["I prefer tabs", "We use Go", "migrate the db", "Notes here"],
            ),
            ("The disk has 1.5 TB of data", &["The disk has 1.5 TB of data"]),
            ("text\n```\nlet x = 1;\n```\nafter", &["text", "after"]),
            ("> quoted words here\nmine too", &["mine too"]),
            ("ok. 好。", &[]),
            ("  lots   of\tspace  here ", &["lots of space here"]),
        ];
        for (text, expected) in cases {
            assert_eq!(split_sentences(text), *expected, "{text:?}");
        }
    }

    #[test]
    fn drops_overlong_runs() {
        let long = "word ".repeat(100);
        assert!(split_sentences(&long).is_empty());
    }

    #[test]
    fn never_splits_inside_a_character() {
        let text = "中文句子。English here. 😀 emoji ok! 한국어 문장? 日本語．終わり";
        let joined: String = split_sentences(text).concat();
        assert_eq!(joined.replace(' ', ""), text.replace(' ', ""));
    }
}
