//! `occurred_at` for rules cards: a date the sentence states, as ISO 8601 (`2024-10-03`,
//! `2024-10`, `2024`).
//!
//! Absolute dates win: `2024-10-03`, `2024/10/03`, `2024年10月3日`, `2024年10月`, `March 3,
//! 2024`, `3 March 2024`, `March 2024`, `in 2023`. A date without a year ("March 3rd") is not
//! completed with a guessed year. Day-relative words are resolved against the turn's date
//! (UTC): 前天 / the day before yesterday −2, 昨天 / 昨晚 / yesterday / last night −1, 今天 / 今早 /
//! today / this morning / tonight 0, 明天 / tomorrow +1, 后天 / the day after tomorrow +2. Vaguer
//! spans ("last week", "下周") are left to the caller's fallback, the turn's date.

use std::sync::LazyLock;

use chrono::{Days, NaiveDate};
use regex::{Captures, Regex};

const MONTHS: &str = "jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?";

static ISO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b((?:19|20)\d{2})[-/.](\d{1,2})[-/.](\d{1,2})\b").expect("valid regex"));
static CJK_DATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"((?:19|20)\d{2})\s*年\s*(\d{1,2})\s*月(?:\s*(\d{1,2})\s*[日号])?").expect("valid regex")
});
static MONTH_DAY_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b({MONTHS})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+((?:19|20)\d{{2}})\b"
    ))
    .expect("valid regex")
});
static DAY_MONTH_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({MONTHS})\.?,?\s+((?:19|20)\d{{2}})\b"
    ))
    .expect("valid regex")
});
static MONTH_YEAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!(r"(?i)\b({MONTHS})\.?,?\s+((?:19|20)\d{{2}})\b")).expect("valid regex"));
static YEAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:in|since|during|back\s+in)\s+((?:19|20)\d{2})\b|((?:19|20)\d{2})\s*年").expect("valid regex")
});
/// Longest phrases first, so "the day before yesterday" is not read as "yesterday".
static RELATIVE: LazyLock<Vec<(Regex, i64)>> = LazyLock::new(|| {
    [
        (r"(?i)\bthe\s+day\s+before\s+yesterday\b|前天", -2),
        (r"(?i)\bthe\s+day\s+after\s+tomorrow\b|后天", 2),
        (r"(?i)\byesterday\b|\blast\s+night\b|昨天|昨晚|昨日", -1),
        (r"(?i)\btomorrow\b|明天|明早|明晚|明日", 1),
        (
            r"(?i)\btoday\b|\bthis\s+(?:morning|afternoon|evening)\b|\btonight\b|今天|今早|今晚|今日",
            0,
        ),
    ]
    .into_iter()
    .map(|(p, days)| (Regex::new(p).expect("valid regex"), days))
    .collect()
});

/// The date `sentence` states, if any; relative days count from `turn_date`.
pub(crate) fn stated_date(sentence: &str, turn_date: NaiveDate) -> Option<String> {
    absolute(sentence).or_else(|| relative(sentence, turn_date))
}

fn absolute(s: &str) -> Option<String> {
    let num = |caps: &Captures<'_>, i: usize| caps.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
    if let Some(c) = ISO.captures(s) {
        return ymd(num(&c, 1)?, num(&c, 2)?, num(&c, 3)?);
    }
    if let Some(c) = CJK_DATE.captures(s) {
        return match num(&c, 3) {
            Some(day) => ymd(num(&c, 1)?, num(&c, 2)?, day),
            None => ym(num(&c, 1)?, num(&c, 2)?),
        };
    }
    if let Some(c) = MONTH_DAY_YEAR.captures(s) {
        return ymd(num(&c, 3)?, month(&c[1])?, num(&c, 2)?);
    }
    if let Some(c) = DAY_MONTH_YEAR.captures(s) {
        return ymd(num(&c, 3)?, month(&c[2])?, num(&c, 1)?);
    }
    if let Some(c) = MONTH_YEAR.captures(s) {
        return ym(num(&c, 2)?, month(&c[1])?);
    }
    let c = YEAR.captures(s)?;
    let year = c.get(1).or_else(|| c.get(2))?.as_str();
    Some(year.to_owned())
}

fn relative(s: &str, turn_date: NaiveDate) -> Option<String> {
    let (_, days) = RELATIVE.iter().find(|(re, _)| re.is_match(s))?;
    let date = if *days < 0 {
        turn_date.checked_sub_days(Days::new(days.unsigned_abs()))
    } else {
        turn_date.checked_add_days(Days::new(days.unsigned_abs()))
    }?;
    Some(date.format("%Y-%m-%d").to_string())
}

fn month(name: &str) -> Option<u32> {
    let prefix: String = name.chars().take(3).flat_map(char::to_lowercase).collect();
    let index = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ]
    .iter()
    .position(|m| *m == prefix)?;
    Some(index as u32 + 1)
}

fn ymd(year: u32, month: u32, day: u32) -> Option<String> {
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    Some(date.format("%Y-%m-%d").to_string())
}

fn ym(year: u32, month: u32) -> Option<String> {
    (1..=12).contains(&month).then(|| format!("{year:04}-{month:02}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stated_dates() {
        let today = NaiveDate::from_ymd_opt(2026, 3, 1).expect("valid date");
        let cases: &[(&str, Option<&str>)] = &[
            ("the outage was on 2025-08-20 at night", Some("2025-08-20")),
            ("deadline 2025/8/5", Some("2025-08-05")),
            ("2024年10月我们完成了迁移", Some("2024-10")),
            ("2024年10月3日上线", Some("2024-10-03")),
            ("2024年 我们换了数据库", Some("2024")),
            ("On March 3rd, 2024 we had an outage", Some("2024-03-03")),
            ("On 3 March 2024 we had an outage", Some("2024-03-03")),
            ("since Sept 2023", Some("2023-09")),
            ("We migrated to Postgres in 2023.", Some("2023")),
            ("On March 3rd we had an outage", None),
            ("yesterday the job failed", Some("2026-02-28")),
            ("前天的发布出了问题", Some("2026-02-27")),
            ("the day before yesterday", Some("2026-02-27")),
            ("明天要备份", Some("2026-03-02")),
            ("昨晚两点实例宕机了", Some("2026-02-28")),
            ("this morning the ETL failed", Some("2026-03-01")),
            ("next week we upgrade", None),
            ("2025-02-30 is not a date", None),
            ("we run Python 3.12 and port 2024", None),
        ];
        for (sentence, expected) in cases {
            assert_eq!(stated_date(sentence, today).as_deref(), *expected, "{sentence:?}");
        }
    }
}
