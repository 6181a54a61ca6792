//! The texts an L0 turn is indexed under, one per channel.
//!
//! Measured by the retrieval benchmark (`tests/QUALITY.md`), which calls these functions:
//! - keyword (BM25): the content, and a shared photo's caption (`metadata.caption`) after it;
//! - tags (exact match, [`turn_tags`]): the turn's day and month, and each full date the
//!   content writes, so that "what did we decide in April?" (tagged `m202604` by
//!   [`super::query`]) finds the turn of that month; and the speaker's name
//!   (`metadata.speaker`, `@marc`), so that "what did Marc adopt?" narrows a copy of each
//!   channel to Marc's turns (chit-chat dev set, hybrid R@10 77.4 → 86.0);
//! - dense: the content and a photo's caption, except a short user turn, which gets the
//!   previous turn before it. A terse answer ("Noodle.") means nothing without the question it
//!   answers, while a date or a speaker in front of a full sentence only blurs its vector. The
//!   speaker's name is in neither text: in the dense text it cost the chit-chat dev set 18
//!   points of semantic R@10, and in the keyword text it gained keyword 7 but made every turn
//!   of a person match a question naming them, which crowded hybrid's fusion (single-fact −5,
//!   aggregation −20 at R@10; `tests/QUALITY.md`). As a tag it narrows instead of matching.
//!
//! L1 memories are indexed from their content alone, without tags: they are already
//! statements, and the dates of a turn are not theirs.

use chrono::{DateTime, Utc};

use super::dates::{full_dates, DateMention};
use crate::domain::Role;

/// A user turn shorter than this, in bytes, gets the previous turn in its dense text: about ten
/// English words or twenty Chinese characters (3 bytes each in UTF-8).
pub const SHORT_TURN_BYTES: usize = 64;

/// Longest text given to the embedder, in code points. Sentence models read a few hundred
/// tokens at most (all-MiniLM-L6-v2: 256), and remote providers bill by the token.
pub const EMBED_MAX_CHARS: usize = 2_000;

/// Longest caption read from a turn's metadata, in code points: a caption is a sentence or
/// two; more is someone else's data in the wrong field.
pub const MAX_CAPTION_CHARS: usize = 500;

/// Longest speaker name read from a turn's metadata, in code points.
pub const MAX_SPEAKER_CHARS: usize = 100;

/// What the texts of a turn are built from.
#[derive(Debug, Clone, Copy)]
pub struct TurnFields<'a> {
    pub role: Role,
    pub content: &'a str,
    pub created_at: DateTime<Utc>,
    /// What a shared photo shows (`metadata.caption`).
    pub caption: Option<&'a str>,
    /// Who said it, when the client names people (`metadata.speaker`).
    pub speaker: Option<&'a str>,
}

impl<'a> TurnFields<'a> {
    /// The fields of a turn stored with `metadata`: its caption and its speaker, each when the
    /// client sent it as a string, cut to its bound.
    pub fn with_metadata(mut self, metadata: &'a serde_json::Map<String, serde_json::Value>) -> Self {
        let text = |key: &str, max: usize| {
            metadata
                .get(key)
                .and_then(serde_json::Value::as_str)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| v.char_indices().nth(max).map_or(v, |(end, _)| &v[..end]))
        };
        self.caption = text("caption", MAX_CAPTION_CHARS);
        self.speaker = text("speaker", MAX_SPEAKER_CHARS);
        self
    }

    /// The content, and a shared photo's caption after it: questions ask about what a photo
    /// showed, which the content alone does not say.
    fn shown(&self) -> String {
        match self.caption {
            Some(caption) => format!("{}\n[photo] {caption}", self.content),
            None => self.content.to_owned(),
        }
    }
}

/// The BM25 text of a turn: its content, and a photo's caption after it.
///
/// Until `TEXT_VERSION` 4 it also carried the role and the date tags of [`turn_tags`]. The
/// role did not change what was found (`tests/QUALITY.md`), and every one of those tokens is
/// shared by most recent turns: edge's appendable segment then spends most of a write walking
/// their posting lists (profiled in `bench cluster ingest`). The tags are exact-match payload now.
pub fn keyword_text(turn: TurnFields<'_>) -> String {
    turn.shown()
}

/// The tags of a turn ([`crate::index::IndexPoint::tags`]): the month and day it was written
/// (`m202603`, `d20260314`), and each full date its content writes (`2026-01-05` →
/// `d20260105`), so that "what did we decide in April?" (tagged `m202604` by [`super::query`])
/// narrows a channel to the turns of that month; and a [`name_tag`] per word of the speaker's
/// name.
pub fn turn_tags(turn: TurnFields<'_>) -> Vec<String> {
    let date = turn.created_at.date_naive();
    let mut tags = vec![DateMention::of_month(date).tag(), DateMention::of_day(date).tag()];
    add_tags(&mut tags, full_dates(turn.content).into_iter().map(DateMention::tag));
    if let Some(speaker) = turn.speaker {
        add_tags(&mut tags, speaker.split_whitespace().filter_map(name_tag));
    }
    tags
}

/// Appends each of `new` that `tags` does not hold yet, in order: a tag is a filter value, so
/// twice is only a longer filter.
pub(crate) fn add_tags(tags: &mut Vec<String>, new: impl IntoIterator<Item = String>) {
    for tag in new {
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
}

/// The tag of one word of a person's name (`@marc`), as a turn's speaker and a question's
/// capitalised word both give it; `None` for what is no name (one letter, digits, a symbol).
pub fn name_tag(word: &str) -> Option<String> {
    let word = word.trim_matches(|c: char| !c.is_alphanumeric());
    let word = word
        .strip_suffix("'s")
        .or_else(|| word.strip_suffix("\u{2019}s"))
        .unwrap_or(word);
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    let name = letters >= 2 && word.chars().all(|c| c.is_alphabetic() || "-'\u{2019}".contains(c));
    name.then(|| format!("@{}", word.to_lowercase()))
}

/// The text a turn's dense vector is computed from, cut to [`EMBED_MAX_CHARS`] on a character
/// boundary. `previous` is the content of the turn before it in the session, if any.
pub fn dense_text(turn: TurnFields<'_>, previous: Option<&str>) -> String {
    let said = turn.shown();
    match previous {
        Some(previous) if needs_previous(turn) => {
            // The turn is short, so only the previous turn can be too long: cut its start.
            let text = format!("{previous}\n{said}");
            let chars = text.chars().count();
            text.chars().skip(chars.saturating_sub(EMBED_MAX_CHARS)).collect()
        }
        Some(_) | None => said.chars().take(EMBED_MAX_CHARS).collect(),
    }
}

/// Whether the dense text of `turn` includes the previous turn: only a short user turn. An
/// assistant's "Got it." with the user's fact before it would read like the fact and outrank
/// it without being it.
pub fn needs_previous(turn: TurnFields<'_>) -> bool {
    turn.role == Role::User && turn.content.len() < SHORT_TURN_BYTES
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn turn(role: Role, content: &str) -> TurnFields<'_> {
        TurnFields {
            role,
            content,
            created_at: Utc.with_ymd_and_hms(2026, 3, 14, 9, 30, 0).unwrap(),
            caption: None,
            speaker: None,
        }
    }

    #[test]
    fn keyword_text_is_the_content_and_dates_are_tags() {
        let migrate = turn(Role::User, "We migrate the billing DB on 2026-01-05, not 2026-03-14.");
        assert_eq!(keyword_text(migrate), migrate.content);
        assert_eq!(turn_tags(migrate), ["m202603", "d20260314", "d20260105"]);
        assert_eq!(turn_tags(turn(Role::Assistant, "好的")), ["m202603", "d20260314"]);
        assert_eq!(
            turn_tags(turn(Role::User, "2026年1月5日 和 2026-01-05 是同一天")),
            ["m202603", "d20260314", "d20260105"]
        );
    }

    #[test]
    fn only_short_user_turns_get_the_previous_turn() {
        let question = "What did you name the puppy?";
        assert_eq!(
            dense_text(turn(Role::User, "Noodle."), Some(question)),
            "What did you name the puppy?\nNoodle."
        );
        assert_eq!(dense_text(turn(Role::User, "Noodle."), None), "Noodle.");
        assert_eq!(dense_text(turn(Role::Assistant, "Got it."), Some(question)), "Got it.");
        let long = "We adopted a puppy last weekend and named it Noodle after the ramen place.";
        assert_eq!(dense_text(turn(Role::User, long), Some(question)), long);
    }

    #[test]
    fn dense_text_is_bounded_and_keeps_the_turn() {
        let previous = "x".repeat(3 * EMBED_MAX_CHARS);
        let text = dense_text(turn(Role::User, "好的，就这样"), Some(&previous));
        assert_eq!(text.chars().count(), EMBED_MAX_CHARS);
        assert!(text.ends_with("\n好的，就这样"));
        let long = "é".repeat(EMBED_MAX_CHARS + 10);
        assert_eq!(
            dense_text(turn(Role::User, &long), None).chars().count(),
            EMBED_MAX_CHARS
        );
    }

    #[test]
    fn a_caption_reaches_both_texts_and_the_speaker_neither() {
        let meta = |v: serde_json::Value| v.as_object().cloned().expect("an object");
        let with = meta(serde_json::json!({ "speaker": "Ana", "caption": " a red kayak on a lake " }));
        let ana = turn(Role::User, "Look what I bought!").with_metadata(&with);
        assert_eq!(keyword_text(ana), "Look what I bought!\n[photo] a red kayak on a lake");
        assert_eq!(
            dense_text(ana, None),
            "Look what I bought!\n[photo] a red kayak on a lake"
        );

        // What is not a non-blank string is not read.
        for caption in [serde_json::json!(3), serde_json::json!("  "), serde_json::json!(["x"])] {
            let meta = meta(serde_json::json!({ "caption": caption }));
            assert_eq!(keyword_text(turn(Role::User, "hi").with_metadata(&meta)), "hi");
        }

        // Bounded, on a character boundary.
        let long = meta(serde_json::json!({ "caption": "字".repeat(600) }));
        let bounded = turn(Role::User, "hi").with_metadata(&long);
        assert_eq!(bounded.caption.map(|c| c.chars().count()), Some(MAX_CAPTION_CHARS));
    }

    #[test]
    fn a_speaker_is_a_tag_per_word_of_the_name() {
        let meta = |v: serde_json::Value| v.as_object().cloned().expect("an object");
        let named = meta(serde_json::json!({ "speaker": " Mary-Ann  O'Neil " }));
        assert_eq!(
            turn_tags(turn(Role::User, "hi").with_metadata(&named)),
            ["m202603", "d20260314", "@mary-ann", "@o'neil"]
        );
        let none = meta(serde_json::json!({ "speaker": 7 }));
        assert_eq!(
            turn_tags(turn(Role::User, "hi").with_metadata(&none)),
            ["m202603", "d20260314"]
        );

        assert_eq!(name_tag("Marc's").as_deref(), Some("@marc"));
        assert_eq!(name_tag("Marc\u{2019}s,").as_deref(), Some("@marc"));
        assert_eq!(name_tag("(Zoë)").as_deref(), Some("@zoë"));
        assert_eq!(name_tag("李雷").as_deref(), Some("@李雷"));
        for no_name in ["I", "42", "R2D2", "--", ""] {
            assert_eq!(name_tag(no_name), None, "{no_name}");
        }
    }
}
