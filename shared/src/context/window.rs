//! Window assembly: what a context call returns, decided from the turns and the summary alone
//! (pure; the I/O is in `service`).
//!
//! 1. **L2, summary reuse.** When the history since the reset (every turn, after L1) is
//!    estimated above [`SUMMARY_THRESHOLD`] of the window and a summary of it exists, the
//!    summary replaces the turns it covers: one system message, then the turns after it.
//! 2. **L3 trigger.** When what would be sent (summary + later turns, or the whole history) is
//!    still above [`COMPACTION_THRESHOLD`] of the window, compaction is due — unless no more
//!    than `keep_last` turns lie past the summary, since compaction keeps those anyway and
//!    could not shrink anything.
//! 3. **Fit.** The answer always fits the window: the oldest turns are left out first (the
//!    newest always stays), then the summary, and if the newest turn alone is too long it is
//!    cut (head and tail, as L1 does) to fit. What was left out is counted in the answer; it
//!    happens only while compaction is catching up or the window is very small.

use super::tokens::{estimate_message, MESSAGE_OVERHEAD};
use super::truncate::{cut_around, TRUNCATION_MARKER};
use crate::domain::Role;

/// Above this share of the window, an existing summary replaces the turns it covers.
pub const SUMMARY_THRESHOLD: (u64, u64) = (1, 2);
/// Above this share of the window, compaction is due.
pub const COMPACTION_THRESHOLD: (u64, u64) = (3, 4);

/// A turn of the window, after L1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowTurn {
    pub seq: i64,
    pub role: Role,
    pub content: String,
    /// Estimated tokens of the message (content + overhead).
    pub tokens: u64,
    /// Whether L1 cut it.
    pub truncated: bool,
}

/// A summary ready to stand in for the turns up to `last_seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSummary {
    pub content: String,
    pub last_seq: i64,
    /// Estimated tokens of the message (content + overhead).
    pub tokens: u64,
}

/// One message of the answer; `seq` is `None` for the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextMessage {
    pub role: Role,
    pub content: String,
    pub seq: Option<i64>,
}

/// What a context call returns, and what it decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembled {
    pub messages: Vec<ContextMessage>,
    /// Estimated tokens of `messages`; never above the window.
    pub token_estimate: u64,
    pub summary_used: bool,
    /// Estimated tokens of what would be sent without the fit step (a lower bound when the
    /// turns were not all read: then it is above the window anyway).
    pub pressure: u64,
    /// Whether a compaction should be queued.
    pub compaction_due: bool,
    /// Whether turns since the summary (or since the reset) were left out to fit the window,
    /// or were not read because they could not have fit.
    pub turns_omitted: bool,
    /// Returned turns that L1 (or the fit) cut.
    pub truncated_turns: usize,
}

/// `tokens` is above `share` of `window`.
pub fn above(tokens: u64, window: u64, share: (u64, u64)) -> bool {
    // Integer and exact: tokens / window > num / den.
    tokens * share.1 > window * share.0
}

/// Whether L2 applies: the history since the reset is above half the window. `summarized` is
/// the estimate of the turns the summary covers, `tail` that of the turns after it.
pub fn reuse_summary(summarized: u64, tail: u64, window: u64) -> bool {
    above(summarized + tail, window, SUMMARY_THRESHOLD)
}

/// Builds the answer from the chosen summary (if L2 applies) and the turns after it, in seq
/// order. `complete` says whether `turns` holds every turn after the summary (or, without
/// one, since the reset); when it does not, the caller stopped reading once the turns were
/// over the window, and at least that many more exist.
pub fn assemble(
    summary: Option<WindowSummary>,
    mut turns: Vec<WindowTurn>,
    complete: bool,
    window: u64,
    keep_last: usize,
) -> Assembled {
    let summary_used = summary.is_some();
    let summary_tokens = summary.as_ref().map_or(0, |s| s.tokens);
    let turn_tokens: u64 = turns.iter().map(|t| t.tokens).sum();
    let pressure = summary_tokens + turn_tokens;
    let compactable = !complete || turns.len() > keep_last;
    let compaction_due = compactable && above(pressure, window, COMPACTION_THRESHOLD);

    // Fit: oldest turns first, keeping the newest.
    let mut total = pressure;
    let mut dropped = 0;
    while total > window && turns.len() > 1 {
        total -= turns[0].tokens;
        turns.remove(0);
        dropped += 1;
    }
    let mut summary = summary;
    if total > window {
        if let Some(s) = summary.take() {
            total -= s.tokens;
        }
    }
    if total > window {
        if let Some(last) = turns.last_mut() {
            let budget = window.saturating_sub(total - last.tokens);
            total = total - last.tokens + shrink_to(last, budget);
        }
    }
    let truncated_turns = turns.iter().filter(|t| t.truncated).count();
    let mut messages = Vec::with_capacity(turns.len() + 1);
    let summary_kept = summary.is_some();
    if let Some(s) = summary {
        messages.push(ContextMessage {
            role: Role::System,
            content: s.content,
            seq: None,
        });
    }
    messages.extend(turns.into_iter().map(|t| ContextMessage {
        role: t.role,
        content: t.content,
        seq: Some(t.seq),
    }));
    Assembled {
        messages,
        token_estimate: total,
        summary_used: summary_used && summary_kept,
        pressure,
        compaction_due,
        turns_omitted: dropped > 0 || !complete,
        truncated_turns,
    }
}

/// Cuts a turn's content (head and tail around the marker) until its message fits `budget`
/// tokens: to the marker alone, or to nothing, if need be. Returns its new tokens.
fn shrink_to(turn: &mut WindowTurn, budget: u64) -> u64 {
    let chars = turn.content.chars().count();
    // Binary search on the kept code points; the estimate is monotonic in them.
    let (mut lo, mut hi) = (0usize, chars);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if estimate_message(&cut_keep(&turn.content, mid)) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    turn.content = cut_keep(&turn.content, lo);
    if estimate_message(&turn.content) > budget {
        // Not even the marker fits (only below the smallest window the API accepts).
        turn.content.clear();
    }
    turn.truncated = true;
    turn.tokens = estimate_message(&turn.content);
    turn.tokens
}

fn cut_keep(content: &str, keep: usize) -> String {
    if keep == 0 {
        return TRUNCATION_MARKER.trim().to_owned();
    }
    cut_around(content, keep.div_ceil(2), keep / 2)
}

/// The estimate of a message with no content at all: the floor of any window.
pub const MIN_MESSAGE_TOKENS: u64 = MESSAGE_OVERHEAD;

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(seq: i64, tokens_of: &str) -> WindowTurn {
        WindowTurn {
            seq,
            role: if seq % 2 == 1 { Role::User } else { Role::Assistant },
            content: tokens_of.to_owned(),
            tokens: estimate_message(tokens_of),
            truncated: false,
        }
    }

    fn turns(n: i64, text: &str) -> Vec<WindowTurn> {
        (1..=n).map(|seq| turn(seq, text)).collect()
    }

    fn summary(last_seq: i64) -> WindowSummary {
        let content = "Summary of the earlier conversation: 订单表按月分区。".to_owned();
        WindowSummary {
            tokens: estimate_message(&content),
            content,
            last_seq,
        }
    }

    #[test]
    fn thresholds_are_exclusive_and_exact() {
        assert!(!above(50, 100, SUMMARY_THRESHOLD));
        assert!(above(51, 100, SUMMARY_THRESHOLD));
        assert!(!above(75, 100, COMPACTION_THRESHOLD));
        assert!(above(76, 100, COMPACTION_THRESHOLD));
        assert!(reuse_summary(40, 11, 100));
        assert!(!reuse_summary(40, 10, 100));
    }

    #[test]
    fn a_small_history_is_returned_whole() {
        let t = turns(4, "订单表 orders 有多少行？");
        let total: u64 = t.iter().map(|t| t.tokens).sum();
        let a = assemble(None, t, true, 1_000, 5);
        assert_eq!(a.messages.len(), 4);
        assert_eq!(a.token_estimate, total);
        assert_eq!(a.pressure, total);
        assert!(!a.summary_used && !a.compaction_due);
        assert!(!a.turns_omitted);
        assert_eq!(a.messages[0].seq, Some(1));
    }

    #[test]
    fn over_three_quarters_compaction_is_due_unless_nothing_can_shrink() {
        let t = turns(10, "订单表 orders 有多少行？");
        let per = t[0].tokens;
        let window = per * 10 * 4 / 3 - 1; // 10 turns are just over 75 %
        let a = assemble(None, t.clone(), true, window, 5);
        assert!(a.compaction_due);
        assert_eq!(a.messages.len(), 10, "still fits: nothing dropped");
        // Only the 5 turns compaction keeps lie past the summary: no point compacting.
        let a = assemble(Some(summary(5)), t[5..].to_vec(), true, per * 5, 5);
        assert!(!a.compaction_due);
    }

    #[test]
    fn the_summary_comes_first_as_a_system_message() {
        let a = assemble(Some(summary(8)), turns(3, "hello there"), true, 1_000, 5);
        assert!(a.summary_used);
        assert_eq!(a.messages[0].role, Role::System);
        assert_eq!(a.messages[0].seq, None);
        assert_eq!(a.messages.len(), 4);
        let expected: u64 = summary(8).tokens + 3 * estimate_message("hello there");
        assert_eq!(a.token_estimate, expected);
    }

    #[test]
    fn an_oversized_history_drops_the_oldest_turns_and_still_fits() {
        let t = turns(100, "The deploy of order-api failed with a timeout; 回滚到 v2.3。");
        let a = assemble(None, t, true, 300, 5);
        assert!(a.token_estimate <= 300);
        assert!(a.compaction_due);
        assert!(a.turns_omitted);
        assert_eq!(a.messages.last().unwrap().seq, Some(100), "the newest turn stays");
        let seqs: Vec<i64> = a.messages.iter().filter_map(|m| m.seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "a contiguous run of the newest turns"
        );
    }

    #[test]
    fn a_newest_turn_longer_than_the_window_is_cut_to_fit() {
        let long = "数据库".repeat(600);
        let a = assemble(Some(summary(3)), vec![turn(4, &long)], true, 200, 5);
        assert!(a.token_estimate <= 200, "{}", a.token_estimate);
        assert!(!a.summary_used, "the summary went first");
        assert_eq!(a.messages.len(), 1);
        assert!(a.messages[0].content.contains(TRUNCATION_MARKER));
        assert_eq!(a.truncated_turns, 1);
        let tiny = assemble(None, vec![turn(1, &long)], true, MIN_MESSAGE_TOKENS + 5, 5);
        assert!(tiny.token_estimate <= MIN_MESSAGE_TOKENS + 5);
    }

    #[test]
    fn an_incomplete_read_is_known_to_be_over_the_window() {
        let t = turns(20, "check the replica lag on 北京 region");
        let a = assemble(None, t, false, 100, 5);
        assert!(a.compaction_due);
        assert!(a.turns_omitted);
        assert!(a.token_estimate <= 100);
    }
}
