//! The scene cap (seed 001, 第三层 ③): an owner has at most `cap` active scenes (default 15),
//! because too many topics make the navigation list useless for recall.
//!
//! Four levels, by the number of active scenes `count`:
//! - [`CapLevel::Open`] (`count < cap − 3`): anything goes.
//! - [`CapLevel::AdviseMerge`] (`cap − 3 ≤ count < cap − 1`): creates are allowed; the prompt
//!   advises merging similar scenes first.
//! - [`CapLevel::UpdateOnly`] (`count = cap − 1`): no new scene; update, merge or delete.
//! - [`CapLevel::MustMerge`] (`count ≥ cap`): a merge of 2–4 scenes comes first; nothing else is
//!   allowed until `count < cap`. `count > cap` happens when an operator lowers the cap.
//!
//! One exception makes the merge worth doing: once a run has merged, it may create one scene
//! in the slot it freed (`count = cap − 1` → `cap`). That is the seed's "merge to free a slot,
//! then handle the new content"; without it a forced merge at the cap could never make room for
//! a new topic. The count still never exceeds the cap: the create brings it to exactly `cap`,
//! where only merges are allowed.
//!
//! [`check`] is what the LLM editor's tool calls go through; its refusal text is written for
//! the model to read and act on. The rules planner obeys the very same function.

/// Default maximum number of active scenes per owner.
pub const DEFAULT_CAP: usize = 15;
/// Smallest cap that still allows a scene to exist: with a cap of 1, `cap − 1 = 0` scenes
/// would already forbid creating the first one. Smaller configured caps are raised to this.
pub const MIN_CAP: usize = 2;
/// How many scenes one merge combines.
pub const MERGE_SOURCES: std::ops::RangeInclusive<usize> = 2..=4;

/// How close an owner is to the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CapLevel {
    Open,
    AdviseMerge,
    UpdateOnly,
    MustMerge,
}

impl CapLevel {
    /// The level of `count` active scenes under `cap`.
    pub fn of(count: usize, cap: usize) -> Self {
        let cap = effective_cap(cap);
        if count >= cap {
            Self::MustMerge
        } else if count + 1 == cap {
            Self::UpdateOnly
        } else if count + 3 >= cap {
            Self::AdviseMerge
        } else {
            Self::Open
        }
    }
}

/// The cap actually enforced: `cap`, raised to [`MIN_CAP`].
pub fn effective_cap(cap: usize) -> usize {
    cap.max(MIN_CAP)
}

/// One change to an owner's scenes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SceneOp {
    Create,
    Update,
    /// `sources` existing scenes become one.
    Merge {
        sources: usize,
    },
    /// A soft delete.
    Delete,
}

impl SceneOp {
    /// The number of active scenes after this op, from `count`; `None` if it cannot apply
    /// (nothing to update or delete, a merge of more scenes than exist).
    pub fn count_after(self, count: usize) -> Option<usize> {
        match self {
            Self::Create => count.checked_add(1),
            Self::Update => (count >= 1).then_some(count),
            Self::Merge { sources } => (sources >= 1 && sources <= count).then(|| count - (sources - 1)),
            Self::Delete => count.checked_sub(1),
        }
    }
}

/// A refused scene op, with the reason the editor gets back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct CapRefusal {
    pub level: CapLevel,
    /// Written for the model: what is wrong and what to do instead.
    pub reason: String,
}

/// Whether `op` is allowed with `active_count` scenes under `cap`; `merged_this_run` says
/// whether this run has already merged (see the module docs).
pub fn check(op: SceneOp, active_count: usize, cap: usize, merged_this_run: bool) -> Result<(), CapRefusal> {
    let level = CapLevel::of(active_count, cap);
    let cap = effective_cap(cap);
    let refuse = |reason: String| Err(CapRefusal { level, reason });
    let state = format!("There are {active_count} scenes and the cap is {cap}.");
    match op {
        SceneOp::Merge { sources } if !MERGE_SOURCES.contains(&sources) => refuse(format!(
            "Refused: a merge combines 2 to 4 scenes, not {sources}. Pick 2 to 4 similar scenes."
        )),
        SceneOp::Merge { sources } if sources > active_count => refuse(format!(
            "Refused: a merge of {sources} scenes, but only {active_count} exist. {state}"
        )),
        SceneOp::Merge { .. } => Ok(()),
        SceneOp::Update | SceneOp::Delete if active_count == 0 => {
            refuse("Refused: there are no scenes yet. Create one instead.".to_owned())
        }
        SceneOp::Create | SceneOp::Update | SceneOp::Delete if level == CapLevel::MustMerge => refuse(format!(
            "Refused: {state} Before anything else, merge 2 to 4 similar scenes into one{}.",
            if active_count > cap {
                format!(" (repeat until fewer than {cap} remain)")
            } else {
                String::new()
            }
        )),
        SceneOp::Create if level == CapLevel::UpdateOnly && !merged_this_run => refuse(format!(
            "Refused: {state} No new scene may be created now: add this content to the most \
             similar existing scene (update), or first merge 2 to 4 similar scenes to free a slot."
        )),
        SceneOp::Create | SceneOp::Update | SceneOp::Delete => Ok(()),
    }
}

/// Cap guidance for the editor's prompt, `None` while there is plenty of room.
pub fn prompt_advice(count: usize, cap: usize) -> Option<String> {
    let cap = effective_cap(cap);
    let state = format!("There are {count} scenes; at most {cap} may exist.");
    match CapLevel::of(count, cap) {
        CapLevel::Open => None,
        CapLevel::AdviseMerge => Some(format!(
            "{state} Prefer updating an existing scene over creating a new one, and merge similar \
             scenes (2 to 4 into one) where you can."
        )),
        CapLevel::UpdateOnly => Some(format!(
            "{state} You may not create a new scene: add new content to the most similar existing \
             scene, or merge 2 to 4 similar scenes into one first, which frees a slot for one new scene."
        )),
        CapLevel::MustMerge => Some(format!(
            "{state} The cap is reached. Before anything else, merge 2 to 4 similar scenes into one \
             (for example two rounds of load testing into one \"load testing\" scene); nothing else is \
             allowed until there are fewer than {cap} scenes."
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, VecDeque};

    use super::*;

    const ALL_OPS: [SceneOp; 7] = [
        SceneOp::Create,
        SceneOp::Update,
        SceneOp::Delete,
        SceneOp::Merge { sources: 1 },
        SceneOp::Merge { sources: 2 },
        SceneOp::Merge { sources: 4 },
        SceneOp::Merge { sources: 5 },
    ];

    #[test]
    fn levels_at_the_default_cap() {
        let levels: Vec<CapLevel> = (10..=17).map(|n| CapLevel::of(n, DEFAULT_CAP)).collect();
        assert_eq!(
            levels,
            [
                CapLevel::Open,
                CapLevel::Open,
                CapLevel::AdviseMerge,
                CapLevel::AdviseMerge,
                CapLevel::UpdateOnly,
                CapLevel::MustMerge,
                CapLevel::MustMerge,
                CapLevel::MustMerge,
            ]
        );
        assert_eq!(CapLevel::of(0, 0), CapLevel::AdviseMerge);
        assert_eq!(CapLevel::of(1, 1), CapLevel::UpdateOnly);
    }

    #[test]
    fn checks_each_op_by_level() {
        assert_eq!(check(SceneOp::Create, 11, 15, false), Ok(()));
        assert_eq!(check(SceneOp::Create, 13, 15, false), Ok(()));
        let refused = check(SceneOp::Create, 14, 15, false).unwrap_err();
        assert_eq!(refused.level, CapLevel::UpdateOnly);
        assert!(refused.reason.contains("No new scene"), "{refused}");
        assert_eq!(check(SceneOp::Create, 14, 15, true), Ok(()));
        assert_eq!(check(SceneOp::Update, 14, 15, false), Ok(()));
        for op in [SceneOp::Create, SceneOp::Update, SceneOp::Delete] {
            let refused = check(op, 15, 15, true).unwrap_err();
            assert_eq!(refused.level, CapLevel::MustMerge);
            assert!(refused.reason.contains("merge 2 to 4"), "{refused}");
        }
        assert!(check(SceneOp::Create, 20, 15, false)
            .unwrap_err()
            .reason
            .contains("repeat until"));
        assert_eq!(check(SceneOp::Merge { sources: 4 }, 15, 15, false), Ok(()));
        assert!(check(SceneOp::Merge { sources: 5 }, 15, 15, false).is_err());
        assert!(check(SceneOp::Merge { sources: 1 }, 15, 15, false).is_err());
        assert!(check(SceneOp::Merge { sources: 3 }, 2, 15, false).is_err());
        assert!(check(SceneOp::Update, 0, 15, false).is_err());
        assert!(check(SceneOp::Delete, 0, 15, false).is_err());
    }

    #[test]
    fn advice_follows_the_level() {
        assert_eq!(prompt_advice(11, 15), None);
        assert!(prompt_advice(12, 15).unwrap().contains("Prefer updating"));
        assert!(prompt_advice(14, 15).unwrap().contains("may not create"));
        assert!(prompt_advice(15, 15).unwrap().contains("cap is reached"));
    }

    /// Every `(count, merged_this_run)` state reachable from `start` through allowed ops, and
    /// the largest count seen along the way. Exhaustive over op sequences of any length,
    /// because `check` depends on nothing else.
    fn reachable(start: usize, cap: usize) -> (BTreeSet<(usize, bool)>, usize) {
        let mut seen = BTreeSet::from([(start, false)]);
        let mut queue = VecDeque::from([(start, false)]);
        let mut highest = start;
        while let Some((count, merged)) = queue.pop_front() {
            for op in ALL_OPS {
                if check(op, count, cap, merged).is_err() {
                    continue;
                }
                let next_count = op.count_after(count).expect("an allowed op applies");
                let next = (next_count, merged || matches!(op, SceneOp::Merge { .. }));
                highest = highest.max(next_count);
                if seen.insert(next) {
                    queue.push_back(next);
                }
            }
        }
        (seen, highest)
    }

    #[test]
    fn the_count_never_exceeds_the_cap() {
        for cap in 0..=20 {
            for start in 0..=effective_cap(cap) {
                let (_, highest) = reachable(start, cap);
                assert!(
                    highest <= effective_cap(cap),
                    "cap {cap}, start {start}: reached {highest}"
                );
            }
        }
    }

    #[test]
    fn above_the_cap_the_count_never_grows() {
        for cap in 0..=20 {
            for start in effective_cap(cap) + 1..=effective_cap(cap) + 10 {
                let (states, highest) = reachable(start, cap);
                assert_eq!(highest, start, "cap {cap}, start {start}");
                // And merging always leads back under the cap, where work can go on.
                assert!(states.iter().any(|(count, _)| *count < effective_cap(cap)));
            }
        }
    }

    #[test]
    fn random_walks_respect_the_cap() {
        // A second, independent check: long pseudo-random runs, the merged flag reset per run.
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let cap = (next() % 20) as usize;
            let mut count = (next() % 25) as usize;
            let ceiling = count.max(effective_cap(cap));
            for _run in 0..20 {
                let mut merged = false;
                for _step in 0..10 {
                    let op = ALL_OPS[(next() % ALL_OPS.len() as u64) as usize];
                    if check(op, count, cap, merged).is_ok() {
                        count = op.count_after(count).unwrap();
                        merged |= matches!(op, SceneOp::Merge { .. });
                    }
                    assert!(count <= ceiling);
                }
            }
        }
    }
}
