//! Dates as BM25 tokens: `d20260314` for a day, `m202603` for a month.
//!
//! A question says "in March" or "on March 14" while the turn that answers it says nothing of
//! the kind: its date is its `created_at`. Tagging every turn with its own day and month, and
//! every question with the days and months it mentions, lets the keyword channel match the two.
//! A tag is letters and digits mixed, so the tokenizer keeps it as one token whatever it does
//! with numbers, and it is rare enough to carry a high IDF.

use chrono::{Datelike, NaiveDate};

/// A date to the day or to the month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateMention {
    pub year: i32,
    pub month: u32,
    pub day: Option<u32>,
}

/// English month names, for parsing questions and for the dense query's long date.
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

impl DateMention {
    pub fn of_day(date: NaiveDate) -> Self {
        Self {
            year: date.year(),
            month: date.month(),
            day: Some(date.day()),
        }
    }

    pub fn of_month(date: NaiveDate) -> Self {
        Self {
            day: None,
            ..Self::of_day(date)
        }
    }

    /// `m202603` or `d20260314`.
    pub fn tag(self) -> String {
        match self.day {
            Some(day) => format!("d{:04}{:02}{:02}", self.year, self.month, day),
            None => format!("m{:04}{:02}", self.year, self.month),
        }
    }

    /// `14 March 2026` or `March 2026`: the form a sentence model relates to "in March".
    pub fn long(self) -> String {
        let month = MONTHS[self.month as usize - 1];
        match self.day {
            Some(day) => format!("{day} {month} {}", self.year),
            None => format!("{month} {}", self.year),
        }
    }
}

/// Full dates written in a text: `2026-03-14` and `2026年3月14日`.
pub fn full_dates(text: &str) -> Vec<DateMention> {
    let chars: Vec<char> = text.chars().collect();
    let number = |from: usize, max_len: usize| -> (Option<u32>, usize) {
        let mut end = from;
        while end < chars.len() && end - from < max_len && chars[end].is_ascii_digit() {
            end += 1;
        }
        (chars[from..end].iter().collect::<String>().parse().ok(), end)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= chars.len() {
        let starts_number = chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_ascii_digit());
        let (year, after_year) = number(i, 4);
        if !starts_number || after_year != i + 4 {
            i += 1;
            continue;
        }
        // `2026-03-14`, or `2026年3月14日`, which must end with 日 to be a day.
        let (day_separator, end) = match chars.get(after_year) {
            Some('-') => ('-', None),
            Some('年') => ('月', Some('日')),
            _ => {
                i += 1;
                continue;
            }
        };
        let (month, after_month) = number(after_year + 1, 2);
        let (day, after_day) = if chars.get(after_month) == Some(&day_separator) {
            number(after_month + 1, 2)
        } else {
            (None, after_month)
        };
        let closed = end.is_none_or(|c| chars.get(after_day) == Some(&c));
        if let (Some(year), Some(month), Some(day), true) = (year, month, day, closed) {
            if let Some(date) = NaiveDate::from_ymd_opt(year as i32, month, day) {
                out.push(DateMention::of_day(date));
            }
        }
        i = after_day.max(i + 1);
    }
    out
}

/// The year of a month (and day) mentioned without one: the latest occurrence not after
/// `today`, since a question to a memory is about the past.
pub fn resolve_year(month: u32, day: Option<u32>, today: NaiveDate) -> i32 {
    if (month, day.unwrap_or(1)) <= (today.month(), today.day()) {
        today.year()
    } else {
        today.year() - 1
    }
}

/// The mention of this month (and day), if it is a real date.
pub fn mention(year: i32, month: u32, day: Option<u32>) -> Option<DateMention> {
    let valid = match day {
        Some(d) => NaiveDate::from_ymd_opt(year, month, d).is_some(),
        None => (1..=12).contains(&month),
    };
    valid.then_some(DateMention { year, month, day })
}

/// The day and month mentions of a question, each year resolved against `today`: "March 14",
/// "14th March", "in March", "3月14日", "3月份", "三月", and full dates (`2026-03-14`).
pub fn mentioned_dates(question: &str, today: NaiveDate) -> Vec<DateMention> {
    let mut out = full_dates(question);
    let tokens: Vec<String> = question
        .split(|c: char| c.is_whitespace() || ",?.!;:()".contains(c))
        .filter(|t| !t.is_empty())
        .map(|t| t.to_lowercase())
        .collect();
    let day_of = |t: &str| -> Option<u32> {
        let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        digits.parse().ok().filter(|d| (1..=31).contains(d))
    };
    for (i, token) in tokens.iter().enumerate() {
        let Some(month) = MONTHS.iter().position(|m| {
            let m = m.to_lowercase();
            *token == m || (token.len() == 3 && m.starts_with(token.as_str()) && token != "may")
        }) else {
            continue;
        };
        let month = month as u32 + 1;
        let day = tokens
            .get(i + 1)
            .and_then(|t| day_of(t))
            .or_else(|| i.checked_sub(1).and_then(|j| day_of(&tokens[j])));
        // "may" is mostly the verb: only "in May" or May next to a day number is the month.
        if month == 5 && day.is_none() && !(i > 0 && tokens[i - 1] == "in") {
            continue;
        }
        out.extend(mention(resolve_year(month, day, today), month, day));
    }
    let chars: Vec<char> = question.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c != '月' {
            continue;
        }
        let mut start = i;
        while start > 0 && chars[start - 1].is_ascii_digit() {
            start -= 1;
        }
        // A year right before (`2026年3月`) is a full date, already found above when it has a
        // day; without one it is a month of that year.
        let year_before = (start >= 5 && chars[start - 1] == '年')
            .then(|| {
                chars[start - 5..start - 1]
                    .iter()
                    .collect::<String>()
                    .parse::<i32>()
                    .ok()
            })
            .flatten();
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
        match year_before {
            Some(_) if day.is_some() && chars.get(end) == Some(&'日') => {}
            Some(year) => out.extend(mention(year, month, day)),
            None => out.extend(mention(resolve_year(month, day, today), month, day)),
        }
    }
    out.dedup();
    out
}

/// The month of a Chinese numeral ending `chars` ("三" → 3, "十二" → 12).
pub fn chinese_numeral_month(chars: &[char]) -> Option<u32> {
    const DIGITS: [char; 10] = ['零', '一', '二', '三', '四', '五', '六', '七', '八', '九'];
    let digit = |c: char| DIGITS.iter().position(|d| *d == c).map(|p| p as u32);
    match chars {
        [.., '十', last] => digit(*last).map(|d| 10 + d),
        [.., '十'] => Some(10),
        [.., last] => digit(*last).filter(|d| *d > 0),
        [] => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 6, 1).unwrap()
    }

    fn tags(question: &str) -> Vec<String> {
        mentioned_dates(question, today())
            .into_iter()
            .map(DateMention::tag)
            .collect()
    }

    #[test]
    fn english_mentions_resolve_to_the_latest_past_year() {
        assert_eq!(tags("What did we migrate on March 14?"), ["d20260314"]);
        assert_eq!(tags("What's happening on 9th May?"), ["d20260509"]);
        assert_eq!(tags("What did we decide in December?"), ["m202512"]);
        assert_eq!(tags("What did we decide in May?"), ["m202605"]);
        assert!(tags("You may ask again").is_empty());
        assert!(tags("Which city do I live in?").is_empty());
    }

    #[test]
    fn chinese_mentions() {
        assert_eq!(tags("3月14日我们迁移了什么？"), ["d20260314"]);
        assert_eq!(tags("12月份关于日志系统定的是什么？"), ["m202512"]);
        assert_eq!(tags("三月份我们做了什么决定？"), ["m202603"]);
        assert_eq!(tags("十一月份呢？"), ["m202511"]);
        assert_eq!(tags("2025年3月的事"), ["m202503"]);
    }

    #[test]
    fn full_dates_in_text_and_questions() {
        let found: Vec<String> = full_dates("on 2026-03-14, then 2025年12月1日; not 2026-13-01 or 12026-01-01x")
            .into_iter()
            .map(DateMention::tag)
            .collect();
        assert_eq!(found, ["d20260314", "d20251201"]);
        assert_eq!(tags("what happened on 2026-01-05?"), ["d20260105"]);
        assert_eq!(tags("2025年12月1日发生了什么"), ["d20251201"]);
    }

    #[test]
    fn long_form() {
        assert_eq!(mentioned_dates("on March 4", today())[0].long(), "4 March 2026");
        assert_eq!(mentioned_dates("in March", today())[0].long(), "March 2026");
    }
}
