//! The texts an L0 turn is indexed under, one per channel.
//!
//! Measured by the retrieval benchmark (`tests/QUALITY.md`), which calls these functions:
//! - keyword (BM25): the content;
//! - tags (exact match, [`turn_tags`]): the turn's day and month, and each full date the
//!   content writes, so that "what did we decide in April?" (tagged `m202604` by
//!   [`super::query`]) finds the turn of that month;
//! - dense: the content alone, except a short user turn, which gets the previous turn before
//!   it. A terse answer ("Noodle.") means nothing without the question it answers, while a
//!   date or a speaker in front of a full sentence only blurs its vector.
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

/// What the texts of a turn are built from.
#[derive(Debug, Clone, Copy)]
pub struct TurnFields<'a> {
    pub role: Role,
    pub content: &'a str,
    pub created_at: DateTime<Utc>,
}

/// The BM25 text of a turn: its content.
///
/// Until `TEXT_VERSION` 4 it also carried the role and the date tags of [`turn_tags`]. The
/// role did not change what was found (`tests/QUALITY.md`), and every one of those tokens is
/// shared by most recent turns: edge's appendable segment then spends most of a write walking
/// their posting lists (profiled in `bench cluster ingest`). The tags are exact-match payload now.
pub fn keyword_text(turn: TurnFields<'_>) -> String {
    turn.content.to_owned()
}

/// The tags of a turn ([`crate::index::IndexPoint::tags`]): the month and day it was written
/// (`m202603`, `d20260314`), and each full date its content writes (`2026-01-05` →
/// `d20260105`), so that "what did we decide in April?" (tagged `m202604` by [`super::query`])
/// narrows a channel to the turns of that month.
pub fn turn_tags(turn: TurnFields<'_>) -> Vec<String> {
    let date = turn.created_at.date_naive();
    let mut tags = vec![DateMention::of_month(date).tag(), DateMention::of_day(date).tag()];
    for tag in full_dates(turn.content).into_iter().map(DateMention::tag) {
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    tags
}

/// The text a turn's dense vector is computed from, cut to [`EMBED_MAX_CHARS`] on a character
/// boundary. `previous` is the content of the turn before it in the session, if any.
pub fn dense_text(turn: TurnFields<'_>, previous: Option<&str>) -> String {
    match previous {
        Some(previous) if needs_previous(turn) => {
            // The turn is short, so only the previous turn can be too long: cut its start.
            let text = format!("{previous}\n{}", turn.content);
            let chars = text.chars().count();
            text.chars().skip(chars.saturating_sub(EMBED_MAX_CHARS)).collect()
        }
        Some(_) | None => turn.content.chars().take(EMBED_MAX_CHARS).collect(),
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
}
