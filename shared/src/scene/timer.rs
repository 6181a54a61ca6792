//! The scene timer: when an owner's next L2 run is due (seed 001, 调度 "场景").
//!
//! The state is three timestamps per owner, stored in the database; these functions are its
//! only transitions, so every replica and every restart computes the same due-time. The
//! wake-up is a delayed message and the sweep catches a lost one; [`is_due`] is the test both
//! apply.
//!
//! # Rules
//! With `after_l1` = 90 s, `min_gap` = 900 s, `max_wait` = 3600 s by default:
//! - **After an L1 batch** at `now`, the candidate is the later of `now + after_l1` (let the
//!   batch's memories settle, and let a few batches arrive together) and
//!   `last_run + min(min_gap, max_wait)` (do not re-run the same topics within 15 minutes).
//! - **Only earlier, never later**: a pending due-time becomes `min(pending, candidate)`. A
//!   steady stream of L1 batches can therefore never postpone a run; a debounce that moved the
//!   due-time with every batch would starve a busy owner.
//! - **After a run** that started at `started`: if an L1 batch arrived at or after `started`,
//!   that run may not have seen its memories, so another is due at the later of
//!   `last_l1 + after_l1` and `min(finished + min(min_gap, max_wait), started + max_wait)`;
//!   otherwise nothing is due. A batch recorded at the very instant the run started counts as
//!   missed: an extra run costs less than memories no scene ever sees.
//! - **The one-hour rule** ("at least once an hour while active"): the run covering an L1
//!   batch at `b` is due no later than `max(b + max_wait, latest batch + after_l1)`. A batch
//!   between runs gets a candidate of at most `max(b + after_l1, last_run + min(min_gap,
//!   max_wait))` with `last_run ≤ b`, and its due-time only moves earlier; a batch during a
//!   run is bounded through `started + max_wait`, with `started < b`. With the defaults the gap
//!   rule already bounds the wait at about 15 minutes, so `max_wait` is slack; it wins when an
//!   operator sets `min_gap` above it, or when a run takes longer than `max_wait − min_gap`.
//!   `after_l1` is always honoured for the latest batch. An owner with no new L1 batch has
//!   nothing new for L2, so it is not run at all.
//! - **After a failed run**, the next attempt is due at `now + retry`, even when that is later
//!   than the due-time that just failed: keeping the past due-time would re-run at once, in a
//!   hot loop against a failing LLM. This is the only transition that moves a due-time later,
//!   and the only way two runs come closer than `min_gap`. A failure is not a run:
//!   `last_run_at` is left alone.
//!
//! Two successful runs are at least `min_gap` apart (from one's finish to the next one's
//! start), provided runs start no earlier than their due-time, `min_gap ≤ max_wait`, and no run
//! takes longer than `max_wait − min_gap`: where the two rules collide, `max_wait` wins.

use std::time::Duration;

use chrono::{DateTime, Utc};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SceneTimerSettings {
    /// How long after an L1 batch its scene run may start at the earliest.
    pub after_l1: Duration,
    /// Least time from the end of one scene run to the start of the next.
    pub min_gap: Duration,
    /// Longest time new memories wait for a scene run (see the one-hour rule).
    pub max_wait: Duration,
}

impl Default for SceneTimerSettings {
    fn default() -> Self {
        Self {
            after_l1: Duration::from_secs(90),
            min_gap: Duration::from_secs(900),
            max_wait: Duration::from_secs(3600),
        }
    }
}

impl SceneTimerSettings {
    /// The gap actually kept between runs: `min_gap`, unless that would break `max_wait`.
    fn gap(&self) -> Duration {
        self.min_gap.min(self.max_wait)
    }
}

/// One owner's scene timer state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SceneTimer {
    /// When the next scene run is due; `None` when nothing is waiting for one.
    pub due_at: Option<DateTime<Utc>>,
    /// When the last successful run finished.
    pub last_run_at: Option<DateTime<Utc>>,
    /// When the last L1 batch was stored.
    pub last_l1_at: Option<DateTime<Utc>>,
}

/// `at + duration`, saturating at the end of time (a huge configured duration means "never").
fn plus(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// An L1 batch was stored at `now`.
pub fn on_l1_batch(state: SceneTimer, now: DateTime<Utc>, settings: &SceneTimerSettings) -> SceneTimer {
    let settled = plus(now, settings.after_l1);
    let candidate = match state.last_run_at {
        Some(last_run) => settled.max(plus(last_run, settings.gap())),
        None => settled,
    };
    let due_at = match state.due_at {
        Some(pending) => pending.min(candidate),
        None => candidate,
    };
    SceneTimer {
        due_at: Some(due_at),
        last_run_at: state.last_run_at,
        last_l1_at: Some(now),
    }
}

/// A scene run that started at `started_at` succeeded at `finished_at`.
pub fn on_run_finished(
    state: SceneTimer,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    settings: &SceneTimerSettings,
) -> SceneTimer {
    let missed = state.last_l1_at.filter(|l1| *l1 >= started_at);
    // Every missed batch came after `started_at`, so `started_at + max_wait` bounds its wait.
    let gap_end = plus(finished_at, settings.gap()).min(plus(started_at, settings.max_wait));
    let due_at = missed.map(|l1| plus(l1, settings.after_l1).max(gap_end));
    SceneTimer {
        due_at,
        last_run_at: Some(finished_at),
        last_l1_at: state.last_l1_at,
    }
}

/// A scene run failed at `now`; try again after `retry`.
pub fn on_run_failed(state: SceneTimer, now: DateTime<Utc>, retry: Duration) -> SceneTimer {
    SceneTimer {
        due_at: Some(plus(now, retry)),
        ..state
    }
}

/// Whether a scene run is due at `now`.
pub fn is_due(state: &SceneTimer, now: DateTime<Utc>) -> bool {
    state.due_at.is_some_and(|due| due <= now)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn t(seconds: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(seconds)
    }

    fn settings() -> SceneTimerSettings {
        SceneTimerSettings::default()
    }

    #[test]
    fn a_first_batch_is_due_after_the_settle_time() {
        let state = on_l1_batch(SceneTimer::default(), t(0), &settings());
        assert_eq!(state.due_at, Some(t(90)));
        assert_eq!(state.last_l1_at, Some(t(0)));
        assert!(!is_due(&state, t(89)));
        assert!(is_due(&state, t(90)));
    }

    #[test]
    fn a_batch_soon_after_a_run_waits_for_the_gap() {
        let ran = SceneTimer {
            last_run_at: Some(t(1000)),
            ..SceneTimer::default()
        };
        assert_eq!(on_l1_batch(ran.clone(), t(1010), &settings()).due_at, Some(t(1900)));
        // Long after the run, only the settle time applies.
        assert_eq!(on_l1_batch(ran, t(5000), &settings()).due_at, Some(t(5090)));
    }

    #[test]
    fn a_pending_due_time_only_moves_earlier() {
        let pending = SceneTimer {
            due_at: Some(t(500)),
            last_run_at: None,
            last_l1_at: Some(t(0)),
        };
        assert_eq!(on_l1_batch(pending.clone(), t(450), &settings()).due_at, Some(t(500)));
        let late = SceneTimer {
            due_at: Some(t(5000)),
            ..pending
        };
        assert_eq!(on_l1_batch(late, t(100), &settings()).due_at, Some(t(190)));
    }

    #[test]
    fn a_burst_of_batches_never_pushes_the_due_time_later() {
        let mut state = SceneTimer {
            last_run_at: Some(t(0)),
            ..SceneTimer::default()
        };
        let mut previous: Option<DateTime<Utc>> = None;
        for i in 0..100 {
            state = on_l1_batch(state, t(10 + i * 7), &settings());
            let due = state.due_at.unwrap();
            assert!(
                previous.is_none_or(|p| due <= p),
                "batch {i} moved {previous:?} to {due}"
            );
            previous = Some(due);
        }
        assert_eq!(state.due_at, Some(t(900)));
        assert_eq!(state.last_l1_at, Some(t(10 + 99 * 7)));
    }

    #[test]
    fn a_finished_run_clears_or_reschedules() {
        let idle = SceneTimer {
            due_at: Some(t(90)),
            last_run_at: None,
            last_l1_at: Some(t(0)),
        };
        let done = on_run_finished(idle.clone(), t(100), t(130), &settings());
        assert_eq!(done.due_at, None);
        assert_eq!(done.last_run_at, Some(t(130)));

        // A batch during the run: its memories still need a scene run, after the gap.
        let busy = on_l1_batch(idle, t(110), &settings());
        let done = on_run_finished(busy, t(100), t(130), &settings());
        assert_eq!(done.due_at, Some(t(1030)));
        // A batch at the very start of the run counts as missed.
        let edge = SceneTimer {
            last_l1_at: Some(t(100)),
            ..SceneTimer::default()
        };
        assert_eq!(on_run_finished(edge, t(100), t(130), &settings()).due_at, Some(t(1030)));
    }

    #[test]
    fn a_failure_retries_even_later_than_the_pending_due_time() {
        let state = SceneTimer {
            due_at: Some(t(90)),
            last_run_at: Some(t(-5000)),
            last_l1_at: Some(t(0)),
        };
        let failed = on_run_failed(state, t(100), Duration::from_secs(60));
        assert_eq!(failed.due_at, Some(t(160)));
        assert_eq!(failed.last_run_at, Some(t(-5000)));
        assert_eq!(failed.last_l1_at, Some(t(0)));
    }

    #[test]
    fn huge_durations_saturate() {
        let never = SceneTimerSettings {
            after_l1: Duration::MAX,
            ..settings()
        };
        let state = on_l1_batch(SceneTimer::default(), t(0), &never);
        assert_eq!(state.due_at, Some(DateTime::<Utc>::MAX_UTC));
    }

    /// Drives the timer second by second: L1 batches at `batches`, a run starting whenever it
    /// is due and lasting `run_seconds`. Returns the (start, finish) of every run.
    fn simulate(settings: &SceneTimerSettings, batches: &[i64], run_seconds: i64, until: i64) -> Vec<(i64, i64)> {
        let mut state = SceneTimer::default();
        let mut runs = Vec::new();
        let mut running: Option<i64> = None;
        let mut next_batch = batches.iter().peekable();
        for now in 0..=until {
            while next_batch.next_if(|b| **b == now).is_some() {
                state = on_l1_batch(state, t(now), settings);
            }
            if let Some(started) = running.filter(|started| now - started >= run_seconds) {
                state = on_run_finished(state, t(started), t(now), settings);
                runs.push((started, now));
                running = None;
            }
            if running.is_none() && is_due(&state, t(now)) {
                running = Some(now);
            }
        }
        runs
    }

    /// Batch times with pseudo-random gaps of 1–`max_gap` seconds.
    fn batches(count: usize, max_gap: u64) -> Vec<i64> {
        let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
        let mut at = 0i64;
        (0..count)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                at += 1 + (seed % max_gap) as i64;
                at
            })
            .collect()
    }

    #[test]
    fn two_runs_are_never_closer_than_the_gap() {
        for max_gap in [5, 60, 400, 2000] {
            let batches = batches(300, max_gap);
            let runs = simulate(&settings(), &batches, 20, batches[batches.len() - 1] + 4000);
            assert!(runs.len() >= 2, "max gap {max_gap}");
            for pair in runs.windows(2) {
                assert!(pair[1].0 - pair[0].1 >= 900, "max gap {max_gap}: {pair:?}");
            }
        }
    }

    #[test]
    fn an_active_owner_runs_at_least_once_per_max_wait() {
        let misconfigured = SceneTimerSettings {
            min_gap: Duration::from_secs(7200),
            ..settings()
        };
        for settings in [settings(), misconfigured] {
            let max_wait = settings.max_wait.as_secs() as i64;
            for max_gap in [5, 60, 400, 2000] {
                let batches = batches(300, max_gap);
                let end = batches[batches.len() - 1] + 2 * max_wait;
                let runs = simulate(&settings, &batches, 20, end);
                for batch in &batches {
                    // The first run starting after the batch covers it.
                    let covered = runs.iter().find(|(start, _)| start > batch);
                    let start = covered.map(|(start, _)| *start).unwrap_or(i64::MAX);
                    assert!(start - batch <= max_wait, "batch at {batch} waited until {start}");
                }
            }
        }
    }
}
