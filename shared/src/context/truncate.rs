//! L1 of seed 000: a turn longer than a limit is cut to its head and its tail around a marker.
//!
//! Lengths are Unicode code points, and cuts fall on extended grapheme cluster boundaries, so a
//! cut never splits a character as a reader sees it (not even an emoji of several code points);
//! a kept part may then be a code point or two shorter than asked. The seed's version counts
//! bytes and slices UTF-8 mid-character; this one does neither.

use std::borrow::Cow;

use unicode_segmentation::UnicodeSegmentation as _;

/// Stands between the head and the tail of a cut turn.
pub const TRUNCATION_MARKER: &str = "\n...[truncated]...\n";

/// When and how much of a turn L1 keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    /// A turn with more code points than this is cut.
    pub max_chars: usize,
    /// Code points kept from the start of a cut turn.
    pub head_chars: usize,
    /// Code points kept from the end of a cut turn.
    pub tail_chars: usize,
}

impl Default for Truncation {
    /// The seed's numbers: over 2,000, keep 1,000 + 1,000.
    fn default() -> Self {
        Self {
            max_chars: 2_000,
            head_chars: 1_000,
            tail_chars: 1_000,
        }
    }
}

/// Applies L1 to one turn: the content itself when it is short enough, otherwise head +
/// [`TRUNCATION_MARKER`] + tail.
pub fn truncate<'a>(content: &'a str, rule: &Truncation) -> Cow<'a, str> {
    // Cheap exits first: a UTF-8 string has at most as many code points as bytes.
    if content.len() <= rule.max_chars || content.chars().count() <= rule.max_chars {
        return Cow::Borrowed(content);
    }
    Cow::Owned(cut_around(content, rule.head_chars, rule.tail_chars))
}

/// Head of at most `head` code points + marker + tail of at most `tail` code points, both cut
/// on grapheme boundaries. The caller knows the content is longer than `head + tail`.
pub fn cut_around(content: &str, head: usize, tail: usize) -> String {
    let head_end = prefix_end(content, head);
    let tail_start = suffix_start(content, tail).max(head_end);
    let mut out = String::with_capacity(head_end + TRUNCATION_MARKER.len() + content.len() - tail_start);
    out.push_str(&content[..head_end]);
    out.push_str(TRUNCATION_MARKER);
    out.push_str(&content[tail_start..]);
    out
}

/// Byte offset where the longest prefix of at most `max_chars` code points ends, on a grapheme
/// boundary.
fn prefix_end(text: &str, max_chars: usize) -> usize {
    let mut chars = 0;
    let mut end = 0;
    for (at, grapheme) in text.grapheme_indices(true) {
        chars += grapheme.chars().count();
        if chars > max_chars {
            break;
        }
        end = at + grapheme.len();
    }
    end
}

/// Byte offset where the longest suffix of at most `max_chars` code points starts, on a
/// grapheme boundary.
fn suffix_start(text: &str, max_chars: usize) -> usize {
    let mut chars = 0;
    let mut start = text.len();
    for (at, grapheme) in text.grapheme_indices(true).rev() {
        chars += grapheme.chars().count();
        if chars > max_chars {
            break;
        }
        start = at;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: Truncation = Truncation {
        max_chars: 10,
        head_chars: 4,
        tail_chars: 3,
    };

    #[test]
    fn short_turns_are_kept_as_they_are() {
        assert!(matches!(truncate("0123456789", &RULE), Cow::Borrowed("0123456789")));
        // 10 code points, 30 bytes: counted in code points, so not cut.
        let zh = "一二三四五六七八九十";
        assert!(matches!(truncate(zh, &RULE), Cow::Borrowed(_)));
    }

    #[test]
    fn long_turns_keep_head_and_tail() {
        assert_eq!(truncate("0123456789A", &RULE), format!("0123{TRUNCATION_MARKER}89A"));
        let zh = "一二三四五六七八九十百";
        assert_eq!(truncate(zh, &RULE), format!("一二三四{TRUNCATION_MARKER}九十百"));
    }

    #[test]
    fn cuts_never_split_a_grapheme() {
        // A family emoji is 7 code points (4 people + 3 joiners); it straddles the head cut.
        let family = "👨‍👩‍👧‍👦";
        let text = format!("ab{family}cdefghijklmnop");
        let cut = truncate(&text, &RULE);
        assert_eq!(cut, format!("ab{TRUNCATION_MARKER}nop"));
        let text = format!("abcdefghijklmn{family}");
        assert_eq!(truncate(&text, &RULE), format!("abcd{TRUNCATION_MARKER}"));
    }

    #[test]
    fn the_seed_defaults_keep_one_thousand_each_side() {
        let text: String = "数据".repeat(1_500);
        let cut = truncate(&text, &Truncation::default());
        let marker = TRUNCATION_MARKER.chars().count();
        assert_eq!(cut.chars().count(), 2_000 + marker);
        assert!(cut.starts_with("数据数据"));
        assert!(cut.ends_with("数据"));
    }
}
