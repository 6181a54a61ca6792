//! The query each channel runs, rewritten from the caller's text without an LLM.
//!
//! - Keyword: question words dropped (BM25's English stopwords miss a few, and it has no
//!   Chinese ones, so 什么, 哪个, 吗 would match every chatty turn).
//! - Tags: the days and months the question mentions, and the people it names (its capitalised
//!   words), as [`super::text::turn_tags`] tags turns; the index runs each channel once more
//!   within the turns that carry one.
//! - Dense: the question, plus the long form of each date it mentions ("in March?" →
//!   "in March? (March 2026)"), which the sentence model relates to dates better than the bare
//!   month name.
//!
//! A mention without a year is the latest such date not after `today`: a question to a memory is
//! about the past. Callers pass the request's date; the benchmark passes its own "today".

use chrono::NaiveDate;

use super::dates::mentioned_dates;
use super::text::{add_tags, name_tag};

/// The texts one search sends to each channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryText {
    pub keyword: String,
    pub dense: String,
    pub tags: Vec<String>,
}

impl QueryText {
    pub fn new(query: &str, today: NaiveDate) -> Self {
        let dates = mentioned_dates(query, today);
        let mut dense = query.to_owned();
        let mut tags = Vec::with_capacity(dates.len());
        for date in dates {
            tags.push(date.tag());
            dense.push_str(" (");
            dense.push_str(&date.long());
            dense.push(')');
        }
        add_tags(&mut tags, query.split_whitespace().filter_map(name_in_question));
        Self {
            keyword: strip_question_words(query),
            dense,
            tags,
        }
    }
}

/// The name tag (`@marc`) of a capitalised word of a question, as `text::turn_tags` tags the
/// turns of a speaker: questions about people ask in the third person ("What did Marc's dog
/// chew?"), and narrowing a channel to that person's turns is what tells Marc's news from his
/// friend's. A capitalised word that starts most English questions, or names a month or a day,
/// is no person; any other word that names nobody narrows to nothing and only costs a filter.
fn name_in_question(word: &str) -> Option<String> {
    if !word.chars().next().is_some_and(char::is_uppercase) {
        return None;
    }
    let tag = name_tag(word)?;
    (!NOT_NAMES.split_whitespace().any(|w| w == &tag[1..])).then_some(tag)
}

/// Capitalised words of questions that name no one (lower case, as in a tag).
const NOT_NAMES: &str = "what when where who whom whose which why how did does do is are was were has \
    have had can could would should will tell remind the my we our you your he she they their january \
    february march april june july august september october november december monday tuesday \
    wednesday thursday friday saturday sunday";

/// English words that carry no topic in a question about one's own past and that BM25's
/// stopword list keeps. Whole words only.
const QUESTION_WORDS_EN: [&str; 11] = [
    "what's", "whats", "who's", "where's", "when's", "how's", "again", "remind", "i'm", "usually", "recall",
];

/// Chinese question words and particles, removed wherever they occur, longest first so that
/// "什么时候" goes before "什么". Only ones that are rarely part of a content word: 的, 了, 是,
/// 要 and 我 also carry no topic, but removing them would cut 目的, 了解, 是否, 需要 and 自我
/// in two, and the tokenizer would then miss the word in the turns.
const QUESTION_WORDS_ZH: [&str; 18] = [
    "什么时候",
    "来着",
    "什么",
    "哪个",
    "哪里",
    "哪儿",
    "哪天",
    "哪场",
    "哪种",
    "怎么",
    "我们",
    "我家",
    "那只",
    "现在",
    "吗",
    "呢",
    "啥",
    "谁",
];

/// The query without question words; the query unchanged if nothing else is left, since a
/// search for "what's" alone still means something to its author.
pub fn strip_question_words(query: &str) -> String {
    let mut words = Vec::new();
    for word in query.split_whitespace() {
        let bare = word
            .trim_matches(|c: char| c.is_ascii_punctuation() || "？！，。、：".contains(c))
            .to_lowercase();
        if QUESTION_WORDS_EN.contains(&bare.as_str()) {
            continue;
        }
        let mut w = word.to_owned();
        for zh in QUESTION_WORDS_ZH {
            if w.contains(zh) {
                w = w.replace(zh, " ");
            }
        }
        words.extend(
            w.split(|c: char| c.is_whitespace() || "？?！!，,。".contains(c))
                .filter(|part| !part.is_empty())
                .map(String::from),
        );
    }
    if words.is_empty() {
        query.to_owned()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 6, 1).unwrap()
    }

    #[test]
    fn keyword_query_loses_question_words_and_dates_become_tags() {
        let q = QueryText::new("What's my dog called again?", today());
        assert_eq!(q.keyword, "my dog called");
        assert_eq!(q.dense, "What's my dog called again?");
        assert!(q.tags.is_empty());
        let q = QueryText::new("What did we decide about the deployment platform in April?", today());
        assert_eq!(q.keyword, "What did we decide about the deployment platform in April");
        assert_eq!(
            q.dense,
            "What did we decide about the deployment platform in April? (April 2026)"
        );
        assert_eq!(q.tags, ["m202604"]);
        let q = QueryText::new("What did we migrate on 2026-01-05?", today());
        assert_eq!(q.keyword, "What did we migrate on 2026-01-05");
        assert_eq!(q.tags, ["d20260105"]);
    }

    #[test]
    fn people_named_in_a_question_become_name_tags() {
        let q = QueryText::new("What did the dog Marc's sister adopted chew in April?", today());
        assert_eq!(q.tags, ["m202604", "@marc"]);
        let q = QueryText::new("When did Mila and Jean-Luc go hiking with Mila?", today());
        assert_eq!(q.tags, ["@mila", "@jean-luc"]);
        // Question words, months and days are capitalised too, but name no one; nor does a
        // lower-case word.
        let q = QueryText::new("Where did we go on Saturday in March? Remind me, marc.", today());
        assert_eq!(q.tags, ["m202603"]);
    }

    #[test]
    fn chinese_question_words_go_but_content_words_stay() {
        assert_eq!(strip_question_words("我家那只狗叫啥来着？"), "狗叫");
        assert_eq!(strip_question_words("我们搬到了哪个城市？"), "搬到了 城市");
        assert_eq!(strip_question_words("需要了解的目的是什么"), "需要了解的目的是");
        let q = QueryText::new("3月14日我们迁移了什么？", today());
        assert_eq!(q.keyword, "3月14日 迁移了");
        assert_eq!(q.tags, ["d20260314"]);
    }

    #[test]
    fn a_query_of_question_words_alone_is_kept() {
        assert_eq!(strip_question_words("what's"), "what's");
        assert_eq!(strip_question_words("什么"), "什么");
        assert_eq!(strip_question_words("port 8080"), "port 8080");
        assert_eq!(strip_question_words(""), "");
    }
}
