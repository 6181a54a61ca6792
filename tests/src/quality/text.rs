//! What each retrieval channel sees: the indexed text of a turn (its "shape") and the query
//! text after an LLM-free rewrite.

use chrono::{Datelike, NaiveDate};

use shared::retrieval::dates::{chinese_numeral_month, full_dates, mention, resolve_year, DateMention};

use super::dataset::{Lang, Owner, Role};
use super::facts::MONTHS_EN;

/// How a session date is written into indexed text.
///
/// A question says "in March", never `2026-03-12`, so a written date matches little even now
/// that the tokenizer keeps numbers (it dropped them when these shapes were first measured).
/// `Tagged` adds one rare token per day and month (letters and digits mixed) for the session
/// date and for dates in the content; the `dates` query rewrite produces the same tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DateStyle {
    /// `2026-03-12`.
    Iso,
    /// `12 March 2026` (English owners) or `2026年3月12日` (Chinese owners): what people type.
    Long,
    /// ISO plus tags: `2026-03-12 m202603 d20260312`, and the tags of each date the content
    /// mentions appended at the end. No long form: for Chinese owners 年/月/日 in every turn
    /// would drown the few turns whose content states a date.
    Tagged,
}

/// The indexed text of a turn, built from its content and context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TextShape {
    pub date: Option<DateStyle>,
    pub speaker: bool,
    /// Which turns get the previous turn of the session prepended, so that a terse answer
    /// ("Biscuit.") carries the question it answers.
    pub previous: Previous,
    /// Rendered by the service's own code (`shared::retrieval::text`) instead of the fields
    /// above, which then only say which channel's text it is: [`Self::PRODUCT_KEYWORD`] or
    /// [`Self::PRODUCT_DENSE`].
    pub product: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Previous {
    None,
    All,
    /// User turns only: an assistant reply with the user's turn prepended reads like the
    /// user's fact and competes with it.
    UserTurns,
    /// Short user turns only (under [`SHORT_TURN_BYTES`]): the terse answers that need it,
    /// while a full statement keeps its embedding undiluted.
    ShortUserTurns,
}

/// "Short" for [`Previous::ShortUserTurns`]: about ten English words or twenty Chinese
/// characters (3 bytes each in UTF-8).
pub const SHORT_TURN_BYTES: usize = 64;

impl TextShape {
    pub const RAW: Self = Self {
        date: None,
        speaker: false,
        previous: Previous::None,
        product: false,
    };
    pub const DATED: Self = Self {
        date: Some(DateStyle::Iso),
        speaker: true,
        previous: Previous::None,
        product: false,
    };
    pub const DATED_LONG: Self = Self {
        date: Some(DateStyle::Long),
        speaker: true,
        previous: Previous::None,
        product: false,
    };
    pub const PREVIOUS: Self = Self {
        date: None,
        speaker: false,
        previous: Previous::All,
        product: false,
    };
    pub const PREVIOUS_FOR_USER: Self = Self {
        date: None,
        speaker: false,
        previous: Previous::UserTurns,
        product: false,
    };
    pub const PREVIOUS_FOR_SHORT: Self = Self {
        date: None,
        speaker: false,
        previous: Previous::ShortUserTurns,
        product: false,
    };
    pub const TAGGED: Self = Self {
        date: Some(DateStyle::Tagged),
        speaker: true,
        previous: Previous::None,
        product: false,
    };

    /// What the service indexes for BM25: `[m202603 d20260314] user: content d20260105`.
    pub const PRODUCT_KEYWORD: Self = Self {
        date: Some(DateStyle::Tagged),
        speaker: true,
        previous: Previous::None,
        product: true,
    };
    /// What the service embeds: the content, after the previous turn for a short user turn.
    pub const PRODUCT_DENSE: Self = Self {
        date: None,
        speaker: false,
        previous: Previous::ShortUserTurns,
        product: true,
    };

    pub fn name(self) -> String {
        if self.product {
            return if self.previous == Previous::None {
                "product".into()
            } else {
                "product-dense".into()
            };
        }
        let mut parts = Vec::new();
        match self.date {
            Some(DateStyle::Iso) => parts.push("date"),
            Some(DateStyle::Long) => parts.push("longdate"),
            Some(DateStyle::Tagged) => parts.push("datetags"),
            None => {}
        }
        if self.speaker {
            parts.push("speaker");
        }
        match self.previous {
            Previous::None => {}
            Previous::All => parts.push("prev"),
            Previous::UserTurns => parts.push("prev(user)"),
            Previous::ShortUserTurns => parts.push("prev(short user)"),
        }
        if parts.is_empty() {
            "raw".into()
        } else {
            parts.join("+")
        }
    }

    /// The text of turn `turn` of session `session` of `owner`.
    pub fn render(self, owner: &Owner, session: usize, turn: usize) -> String {
        let s = &owner.sessions[session];
        let t = &s.turns[turn];
        if self.product {
            let fields = product_fields(owner, session, turn);
            return if self.previous == Previous::None {
                shared::retrieval::keyword_text(fields)
            } else {
                let previous = turn.checked_sub(1).map(|p| s.turns[p].content.as_str());
                shared::retrieval::dense_text(fields, previous)
            };
        }
        let mut out = String::new();
        if let Some(style) = self.date {
            out.push('[');
            out.push_str(&format_date(s.date, style, owner.lang));
            out.push_str("] ");
        }
        let with_previous = match self.previous {
            Previous::None => false,
            Previous::All => true,
            Previous::UserTurns => t.role == Role::User,
            Previous::ShortUserTurns => t.role == Role::User && t.content.len() < SHORT_TURN_BYTES,
        };
        if with_previous && turn > 0 {
            let p = &s.turns[turn - 1];
            if self.speaker {
                out.push_str(&p.speaker);
                out.push_str(": ");
            }
            out.push_str(&p.content);
            out.push('\n');
        }
        if self.speaker {
            out.push_str(&t.speaker);
            out.push_str(": ");
        }
        out.push_str(&t.content);
        if self.date == Some(DateStyle::Tagged) {
            for mention in full_dates(&t.content) {
                out.push(' ');
                out.push_str(&mention.tag());
            }
        }
        out
    }

    /// The tags of turn `turn` of session `session` of `owner`: the service's for the
    /// product's keyword shape, none for the others (they write dates into the text).
    pub fn tags(self, owner: &Owner, session: usize, turn: usize) -> Vec<String> {
        if self.product && self.previous == Previous::None {
            shared::retrieval::turn_tags(product_fields(owner, session, turn))
        } else {
            Vec::new()
        }
    }
}

pub fn format_date(d: NaiveDate, style: DateStyle, lang: Lang) -> String {
    match (style, lang) {
        (DateStyle::Iso, _) => d.format("%Y-%m-%d").to_string(),
        (DateStyle::Long, Lang::En) => format!("{} {} {}", d.day(), MONTHS_EN[d.month0() as usize], d.year()),
        (DateStyle::Long, Lang::Zh) => format!("{}年{}月{}日", d.year(), d.month(), d.day()),
        (DateStyle::Tagged, _) => {
            let day = DateMention {
                year: d.year(),
                month: d.month(),
                day: Some(d.day()),
            };
            let month = DateMention { day: None, ..day };
            format!(
                "{} {} {}",
                format_date(d, DateStyle::Long, lang),
                month.tag(),
                day.tag()
            )
        }
    }
}

/// LLM-free query rewriting, applied to the keyword channel's text (and, with `dense_dates`,
/// date normalisation to the semantic channel's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rewrite {
    /// Drop question words and chat filler that BM25's English stopword list keeps (and all
    /// Chinese function words: the tokenizer has no Chinese stopwords).
    pub strip: bool,
    /// Append date tags for month and day mentions ("March 14" → `d20260314`, "in March" →
    /// `m202603`), matching `DateStyle::Tagged` text.
    pub dates: bool,
    /// Append synonyms from a small hand-written table.
    pub synonyms: bool,
    /// Append the full date ("14 March 2026") to the text embedded for the semantic channel.
    pub dense_dates: bool,
    /// The service's own rewrite (`shared::retrieval::QueryText`) instead of the fields above.
    pub product: bool,
}

impl Rewrite {
    pub const NONE: Self = Self {
        strip: false,
        dates: false,
        synonyms: false,
        dense_dates: false,
        product: false,
    };
    pub const PRODUCT: Self = Self {
        product: true,
        ..Self::NONE
    };

    pub fn name(self) -> String {
        if self.product {
            return "product".into();
        }
        let mut parts = Vec::new();
        if self.strip {
            parts.push("strip");
        }
        if self.dates {
            parts.push("dates");
        }
        if self.synonyms {
            parts.push("synonyms");
        }
        if self.dense_dates {
            parts.push("dense-dates");
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join("+")
        }
    }

    pub fn keyword_text(self, question: &str, today: NaiveDate) -> String {
        if self.product {
            return shared::retrieval::QueryText::new(question, today).keyword;
        }
        let mut text = if self.strip {
            strip(question)
        } else {
            question.to_string()
        };
        if self.synonyms {
            let extra = synonyms(question);
            if !extra.is_empty() {
                text.push(' ');
                text.push_str(&extra.join(" "));
            }
        }
        if self.dates {
            for date in dates_in(question, today) {
                text.push(' ');
                text.push_str(&date.tag());
            }
        }
        text
    }

    /// The tags of the query: the service's for the product rewrite, none for the others.
    pub fn tags(self, question: &str, today: NaiveDate) -> Vec<String> {
        if self.product {
            shared::retrieval::QueryText::new(question, today).tags
        } else {
            Vec::new()
        }
    }

    pub fn dense_text(self, question: &str, today: NaiveDate) -> String {
        if self.product {
            return shared::retrieval::QueryText::new(question, today).dense;
        }
        let mut text = question.to_string();
        if self.dense_dates {
            for date in dates_in(question, today) {
                text.push_str(" (");
                text.push_str(&date.long());
                text.push(')');
            }
        }
        text
    }
}

/// A turn as the service sees it.
fn product_fields(owner: &Owner, session: usize, turn: usize) -> shared::retrieval::TurnFields<'_> {
    let s = &owner.sessions[session];
    let t = &s.turns[turn];
    shared::retrieval::TurnFields {
        role: match t.role {
            Role::User => shared::domain::Role::User,
            Role::Assistant => shared::domain::Role::Assistant,
        },
        content: &t.content,
        // Only the day is read; noon keeps it the same day in any reading.
        created_at: s.date.and_hms_opt(12, 0, 0).expect("noon exists").and_utc(),
        caption: None,
        speaker: None,
    }
}

/// English words that carry no topic in a question about one's own past; BM25's stopword list
/// already drops the rest (what, did, my, ...).
const QUESTION_WORDS_EN: [&str; 16] = [
    "what's", "whats", "who's", "again", "remind", "tell", "know", "these", "days", "now", "back", "should", "get",
    "ping", "usually", "i'm",
];
/// Chinese question words and particles, longest first so "我们" goes before "我".
const QUESTION_WORDS_ZH: [&str; 27] = [
    "什么时候",
    "来着",
    "什么",
    "哪个",
    "哪里",
    "哪儿",
    "哪天",
    "哪场",
    "哪种",
    "哪",
    "谁",
    "吗",
    "呢",
    "啥",
    "怎么",
    "我们",
    "我家",
    "现在",
    "一般",
    "该",
    "是",
    "的",
    "我",
    "了",
    "那只",
    "给",
    "要",
];

pub fn strip(question: &str) -> String {
    let mut words = Vec::new();
    for word in question.split_whitespace() {
        let bare: String = word
            .trim_matches(|c: char| c.is_ascii_punctuation() || "？！，。、：".contains(c))
            .to_lowercase();
        if QUESTION_WORDS_EN.contains(&bare.as_str()) {
            continue;
        }
        let mut w = word.to_string();
        for zh in QUESTION_WORDS_ZH {
            w = w.replace(zh, " ");
        }
        words.extend(
            w.split(|c: char| c.is_whitespace() || "？?！!，,。".contains(c))
                .filter(|part| !part.is_empty())
                .map(String::from),
        );
    }
    words.join(" ")
}

/// A generic-looking thesaurus. It was written by the same hand as the generator's
/// paraphrases, so it overstates what a real synonym list would recover; see QUALITY.md.
const SYNONYMS: [(&str, &str); 36] = [
    ("dog", "puppy pet"),
    ("cat", "kitten pet"),
    ("rabbit", "bunny pet"),
    ("called", "named name"),
    ("live", "moved flat city"),
    ("manager", "report boss"),
    ("boss", "manager report"),
    ("ping", "owns responsible"),
    ("responsible", "owns owner"),
    ("took", "owns handed"),
    ("due", "deadline ship"),
    ("deadline", "due ship"),
    ("data", "database"),
    ("db", "database"),
    ("ide", "editor"),
    ("drink", "coffee"),
    ("race", "marathon"),
    ("running", "run marathon"),
    ("ingredient", "allergic allergy"),
    ("skill", "learn"),
    ("decide", "decision"),
    ("happening", "event"),
    ("狗", "小狗 宠物"),
    ("猫", "小猫 宠物"),
    ("兔子", "小兔子 宠物"),
    ("叫", "名字 取名"),
    ("住", "搬 城市"),
    ("领导", "汇报 经理"),
    ("忌口", "过敏"),
    ("饮品", "咖啡"),
    ("期限", "截止 上线"),
    ("比赛", "马拉松"),
    ("本领", "学 技能"),
    ("存放", "数据库"),
    ("预发布", "staging 测试环境"),
    ("写代码", "编辑器"),
];

pub fn synonyms(question: &str) -> Vec<&'static str> {
    let lower = question.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| !w.is_empty())
        .collect();
    SYNONYMS
        .iter()
        .filter(|(key, _)| {
            if key.is_ascii() {
                words.contains(key)
            } else {
                lower.contains(key)
            }
        })
        .map(|(_, extra)| *extra)
        .collect()
}

/// The month/day mentions in a question, year resolved against `today`: "March 14",
/// "14 March", "in March", "3月14日", "3月份", "三月". The benchmark's first rewrite, kept to
/// reproduce its variants' numbers; the service's is `shared::retrieval::dates::mentioned_dates`.
pub fn dates_in(question: &str, today: NaiveDate) -> Vec<DateMention> {
    let mut out = Vec::new();
    // English: a month name, with a day number right before or after it.
    let tokens: Vec<String> = question
        .split(|c: char| c.is_whitespace() || ",?.!".contains(c))
        .filter(|t| !t.is_empty())
        .map(|t| t.to_lowercase())
        .collect();
    let day_of = |t: &str| -> Option<u32> {
        let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        digits.parse().ok().filter(|d| (1..=31).contains(d))
    };
    for (i, token) in tokens.iter().enumerate() {
        let Some(month) = MONTHS_EN.iter().position(|m| {
            let m = m.to_lowercase();
            *token == m || (token.len() == 3 && m.starts_with(token.as_str()) && token != "may")
        }) else {
            continue;
        };
        // "may" is mostly the verb; only a capitalised "May" followed or preceded by a day
        // counts, or "in May".
        let month = month as u32 + 1;
        let day = tokens
            .get(i + 1)
            .and_then(|t| day_of(t))
            .or_else(|| i.checked_sub(1).and_then(|j| day_of(&tokens[j])));
        if month == 5 && day.is_none() && !(i > 0 && tokens[i - 1] == "in") {
            continue;
        }
        out.extend(mention(resolve_year(month, day, today), month, day));
    }
    // Chinese: "3月14日", "3月14号", "3月份", "3月", "三月".
    let chars: Vec<char> = question.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c != '月' {
            continue;
        }
        let mut start = i;
        while start > 0 && chars[start - 1].is_ascii_digit() {
            start -= 1;
        }
        let month = if start < i {
            chars[start..i].iter().collect::<String>().parse::<u32>().ok()
        } else {
            i.checked_sub(1).and_then(|j| chinese_numeral_month(&chars[..=j]))
        };
        let Some(month) = month.filter(|m| (1..=12).contains(m)) else {
            continue;
        };
        let mut end = i + 1;
        while end < chars.len() && chars[end].is_ascii_digit() {
            end += 1;
        }
        let day = (end > i + 1 && chars.get(end).is_some_and(|c| *c == '日' || *c == '号'))
            .then(|| chars[i + 1..end].iter().collect::<String>().parse::<u32>().ok())
            .flatten();
        out.extend(mention(resolve_year(month, day, today), month, day));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 6, 1).unwrap()
    }

    fn isos(question: &str) -> Vec<String> {
        let iso = |d: DateMention| match d.day {
            Some(day) => format!("{:04}-{:02}-{:02}", d.year, d.month, day),
            None => format!("{:04}-{:02}", d.year, d.month),
        };
        dates_in(question, today()).into_iter().map(iso).collect()
    }

    #[test]
    fn english_dates_resolve_to_the_latest_past_year() {
        assert_eq!(isos("What did we migrate on March 14?"), ["2026-03-14"]);
        assert_eq!(isos("What's happening on 9th May?"), ["2026-05-09"]);
        assert_eq!(isos("What did we decide in December?"), ["2025-12"]);
        assert_eq!(isos("What did we decide in May?"), ["2026-05"]);
        assert!(dates_in("You may ask again", today()).is_empty());
        assert!(dates_in("Which city do I live in?", today()).is_empty());
    }

    #[test]
    fn chinese_dates() {
        assert_eq!(isos("3月14日我们迁移了什么？"), ["2026-03-14"]);
        assert_eq!(isos("12月份关于日志系统定的是什么？"), ["2025-12"]);
        assert_eq!(isos("三月份我们做了什么决定？"), ["2026-03"]);
        assert_eq!(isos("十一月份呢？"), ["2025-11"]);
    }

    #[test]
    fn content_dates_and_tags() {
        let found = full_dates("moved on 2026-03-14, then 2025年12月1日; not 2026-13-01 or 12026-01-01x");
        let tags: Vec<String> = found.iter().map(|d| d.tag()).collect();
        assert_eq!(tags, ["d20260314", "d20251201"]);
        assert_eq!(isos("in March")[0], "2026-03");
        assert_eq!(dates_in("in March", today())[0].tag(), "m202603");
        assert_eq!(dates_in("on March 4", today())[0].long(), "4 March 2026");
        let d = NaiveDate::from_ymd_opt(2026, 3, 4).unwrap();
        assert_eq!(
            format_date(d, DateStyle::Tagged, Lang::En),
            "4 March 2026 m202603 d20260304"
        );
    }

    #[test]
    fn strip_keeps_the_topic() {
        assert_eq!(strip("What's my dog called again?"), "my dog called");
        assert_eq!(strip("我家那只狗叫啥来着？"), "狗叫");
        assert_eq!(strip("我们搬到了哪个城市？"), "搬到 城市");
    }

    #[test]
    fn rewrites_compose() {
        let r = Rewrite {
            strip: true,
            dates: true,
            synonyms: true,
            dense_dates: false,
            product: false,
        };
        assert_eq!(
            r.keyword_text("What's my dog called on March 3?", today()),
            "my dog called on March 3 puppy pet named name d20260303"
        );
        assert_eq!(r.dense_text("in March?", today()), "in March?");
        let dense = Rewrite {
            dense_dates: true,
            ..Rewrite::NONE
        };
        assert_eq!(dense.dense_text("in March?", today()), "in March? (March 2026)");
        assert_eq!(Rewrite::NONE.name(), "none");
        assert_eq!(r.name(), "strip+dates+synonyms");
    }
}
