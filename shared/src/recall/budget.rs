//! Recall budgets: a per-item cap and a total cap, counted in Unicode code points.
//!
//! Cuts fall on extended grapheme cluster boundaries, so a cut never splits a character as a
//! reader sees it (an emoji with modifiers, a flag, a letter with combining marks) even when
//! that character is several code points.

use unicode_segmentation::UnicodeSegmentation;

/// Appended to an item that was cut, so the agent knows there is more and how to get it.
pub const CUT_MARKER: &str = " …[truncated; search for the rest]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Most code points of one item, the cut marker included.
    pub item_chars: usize,
    /// Most code points of all items together.
    pub total_chars: usize,
}

/// An item to fit: its text and its rank score.
pub trait Budgeted {
    fn text_mut(&mut self) -> &mut String;
    fn score(&self) -> f32;
    /// Items of a lower tier rank before every item of a higher one, whatever the scores (for
    /// items whose scores are on different scales; recall ranks memories and turns on one
    /// scale, `fuse`, and leaves every item in tier 0).
    fn tier(&self) -> u8 {
        0
    }
}

/// The longest prefix of `text` with at most `max_chars` code points that ends on a grapheme
/// boundary.
pub fn prefix_chars(text: &str, max_chars: usize) -> &str {
    let mut chars = 0;
    let mut end = 0;
    for (at, grapheme) in text.grapheme_indices(true) {
        let len = grapheme.chars().count();
        if chars + len > max_chars {
            break;
        }
        chars += len;
        end = at + grapheme.len();
    }
    &text[..end]
}

/// Cuts `text` to at most `max_chars` code points, ending with `CUT_MARKER` when there is room
/// for it. Returns whether it cut.
pub fn cut(text: &mut String, max_chars: usize) -> bool {
    if text.chars().count() <= max_chars {
        return false;
    }
    let marker = CUT_MARKER.chars().count();
    let (keep, marker) = if max_chars > marker {
        (max_chars - marker, CUT_MARKER)
    } else {
        (max_chars, "")
    };
    let mut out = prefix_chars(text, keep).trim_end().to_owned();
    out.push_str(marker);
    *text = out;
    true
}

/// Applies both caps to items sorted best first (by tier, then score): cuts each item to the
/// item cap, then drops the lowest-ranked items until the total fits, and cuts the last one left if it alone is
/// over. Returns whether anything was cut or dropped.
pub fn apply<T: Budgeted>(items: &mut Vec<T>, budget: Budget) -> bool {
    let mut truncated = false;
    for item in items.iter_mut() {
        truncated |= cut(item.text_mut(), budget.item_chars);
    }
    // Stable, and explicit: callers pass ranked items, but the caps must drop the lowest.
    items.sort_by(|a, b| a.tier().cmp(&b.tier()).then(b.score().total_cmp(&a.score())));
    let mut total: usize = items.iter_mut().map(|i| i.text_mut().chars().count()).sum();
    while total > budget.total_chars && items.len() > 1 {
        let dropped = items.pop().expect("len > 1");
        total -= dropped_len(dropped);
        truncated = true;
    }
    if let Some(only) = items.first_mut() {
        if total > budget.total_chars {
            truncated |= cut(only.text_mut(), budget.total_chars);
        }
    }
    truncated
}

fn dropped_len<T: Budgeted>(mut item: T) -> usize {
    item.text_mut().chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Item(String, f32);

    impl Budgeted for Item {
        fn text_mut(&mut self) -> &mut String {
            &mut self.0
        }
        fn score(&self) -> f32 {
            self.1
        }
    }

    fn chars(s: &str) -> usize {
        s.chars().count()
    }

    /// An item of a tier, for the ordering tests.
    #[derive(Debug, Clone, PartialEq)]
    struct Tiered(String, f32, u8);

    impl Budgeted for Tiered {
        fn text_mut(&mut self) -> &mut String {
            &mut self.0
        }
        fn score(&self) -> f32 {
            self.1
        }
        fn tier(&self) -> u8 {
            self.2
        }
    }

    #[test]
    fn a_lower_tier_ranks_first_and_is_dropped_last() {
        // Memories (tier 0) score on another scale than turns (tier 1): a turn's higher score
        // must neither put it first nor keep it over a memory.
        let mut items = vec![
            Tiered("turn".into(), 9.0, 1),
            Tiered("memory b".into(), 0.2, 0),
            Tiered("memory a".into(), 0.5, 0),
        ];
        let budget = Budget {
            item_chars: 100,
            total_chars: 16,
        };
        assert!(apply(&mut items, budget));
        let kept: Vec<&str> = items.iter().map(|i| i.0.as_str()).collect();
        assert_eq!(kept, ["memory a", "memory b"]);
    }

    #[test]
    fn short_items_pass_untouched() {
        let mut items = vec![Item("订单表".into(), 1.0), Item("ok 👍".into(), 0.5)];
        assert!(!apply(
            &mut items,
            Budget {
                item_chars: 10,
                total_chars: 100
            }
        ));
        assert_eq!(items, vec![Item("订单表".into(), 1.0), Item("ok 👍".into(), 0.5)]);
    }

    #[test]
    fn long_item_is_cut_with_marker_within_cap() {
        let text = "我喜欢用 PostgreSQL 做订单表，".repeat(20);
        let mut s = text.clone();
        assert!(cut(&mut s, 100));
        assert!(chars(&s) <= 100, "{} > 100", chars(&s));
        assert!(s.ends_with(CUT_MARKER));
        assert!(text.starts_with(s.trim_end_matches(CUT_MARKER)));
    }

    #[test]
    fn cuts_never_split_an_emoji_or_a_cjk_character() {
        // A family emoji is 5 code points (3 people joined by 2 ZWJ); a flag is 2.
        let family = "👨‍👩‍👧";
        let text = format!("ab{family}🇨🇳中文");
        assert_eq!(prefix_chars(&text, 2), "ab");
        assert_eq!(prefix_chars(&text, 4), "ab", "half a family is no family");
        assert_eq!(prefix_chars(&text, 7), format!("ab{family}"));
        assert_eq!(prefix_chars(&text, 8), format!("ab{family}"), "nor half a flag");
        assert_eq!(prefix_chars(&text, 10), format!("ab{family}🇨🇳中"));
        // Tiny caps: no room for the marker, only whole characters.
        let mut s = "中文字符".to_owned();
        assert!(cut(&mut s, 3));
        assert_eq!(s, "中文字");
    }

    #[test]
    fn total_cap_drops_the_lowest_scored_first() {
        let mut items = vec![
            Item("a".repeat(40), 0.2),
            Item("b".repeat(40), 0.9),
            Item("c".repeat(40), 0.5),
        ];
        assert!(apply(
            &mut items,
            Budget {
                item_chars: 1000,
                total_chars: 85
            }
        ));
        let kept: Vec<f32> = items.iter().map(|i| i.1).collect();
        assert_eq!(kept, vec![0.9, 0.5], "the 0.2 item goes first");
    }

    #[test]
    fn a_single_item_over_the_total_is_cut_to_it() {
        let mut items = vec![Item("表".repeat(500), 1.0), Item("x".repeat(10), 0.1)];
        assert!(apply(
            &mut items,
            Budget {
                item_chars: 400,
                total_chars: 120
            }
        ));
        assert_eq!(items.len(), 1);
        assert!(chars(&items[0].0) <= 120);
        assert!(items[0].0.ends_with(CUT_MARKER));
    }

    #[test]
    fn mixed_cjk_and_emoji_fit_exactly_in_code_points() {
        let text = "数据库😀".repeat(30); // 4 code points each
        let mut items = vec![Item(text, 1.0)];
        apply(
            &mut items,
            Budget {
                item_chars: 80,
                total_chars: 80,
            },
        );
        let out = &items[0].0;
        assert!(chars(out) <= 80);
        let body = out.trim_end_matches(CUT_MARKER);
        assert!("数据库😀".repeat(30).starts_with(body));
    }
}
