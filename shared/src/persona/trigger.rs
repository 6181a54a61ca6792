//! When an owner's persona is (re)built (seed 001, 第四层 and 调度 "画像").
//!
//! The persona worker calls [`decide`] after a scene run marks the owner dirty, and from its
//! sweep. Any trigger runs the build at once; what the trigger decides is why (for metrics)
//! and how much the build reads ([`PersonaTrigger::full_rebuild`]).
//!
//! # The paths, in the seed's priority order
//! 1. **Signal**: a scene edit flagged content as persona-worthy. Important changes take
//!    effect without waiting for a threshold.
//! 2. **Cold start**: scenes exist but no persona was ever built. A new user gets a first
//!    persona without waiting for the threshold.
//! 3. **Self-heal** (2b): the database says a persona was built, but the stored object is gone
//!    or empty (a lost object, an operator's mistake). It is rebuilt from all scenes. With no
//!    scene there is nothing to heal from; the threshold path rebuilds it from memories later.
//! 4. **First scene**: the persona was built before any scene existed (from memories) and now
//!    there is one: a persona grounded in a scene should not wait for the threshold.
//! 5. **Threshold**: `memory_threshold` (default 20) memories since the last build, the
//!    periodic backstop when nothing above fires. It is also how an owner with memories but no
//!    scene gets a first persona.
//!
//! # Which one wins
//! The seed's order, with one change: when a full rebuild is needed (cold start, self-heal), it
//! is chosen over a pending signal. A signal's build is incremental, reading only the scenes
//! changed since the last build; on a persona that is missing or was never built that would
//! throw away everything the other scenes say. A full rebuild reads every scene, the signalling
//! one included, so the signal is served too. Cold start and self-heal exclude each other
//! (`built` is false for one and true for the other).
//!
//! No trigger means no build: no scenes and too few memories, or a healthy persona with
//! nothing new. The build itself must not record an empty persona as built: that would make
//! self-heal rebuild it on every check.

/// What the trigger decision looks at, read from the database and the file store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PersonaState {
    /// The database says a persona was built.
    pub built: bool,
    /// The stored persona object exists and is not empty.
    pub object_nonempty: bool,
    /// A scene edit flagged persona-worthy content since the last build.
    pub signal_pending: bool,
    /// Active scenes now.
    pub scene_count: usize,
    /// Active scenes when the persona was last built (0 if never built).
    pub scenes_at_build: usize,
    /// Memories stored since the last build (all of them if never built).
    pub memories_since_build: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonaTriggerSettings {
    /// Memories since the last build that force a rebuild; 0 is treated as 1.
    pub memory_threshold: u64,
}

impl Default for PersonaTriggerSettings {
    fn default() -> Self {
        Self { memory_threshold: 20 }
    }
}

/// Why a persona build runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PersonaTrigger {
    Signal,
    ColdStart,
    SelfHeal,
    FirstScene,
    Threshold,
}

impl PersonaTrigger {
    /// Whether the build reads every scene (cold start, self-heal) rather than only the scenes
    /// changed since the last build.
    pub fn full_rebuild(&self) -> bool {
        match self {
            Self::ColdStart | Self::SelfHeal => true,
            Self::Signal | Self::FirstScene | Self::Threshold => false,
        }
    }

    /// The seed's priority: 1 is the most urgent (self-heal shares 2 with cold start).
    pub fn priority(&self) -> u8 {
        match self {
            Self::Signal => 1,
            Self::ColdStart | Self::SelfHeal => 2,
            Self::FirstScene => 3,
            Self::Threshold => 4,
        }
    }

    /// The label used in metrics and provenance.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Signal => "signal",
            Self::ColdStart => "cold_start",
            Self::SelfHeal => "self_heal",
            Self::FirstScene => "first_scene",
            Self::Threshold => "threshold",
        }
    }
}

/// The trigger that fires for `state`, if any (see the module docs for the order).
pub fn decide(state: &PersonaState, settings: &PersonaTriggerSettings) -> Option<PersonaTrigger> {
    let has_scenes = state.scene_count > 0;
    if has_scenes && !state.built {
        return Some(PersonaTrigger::ColdStart);
    }
    if has_scenes && state.built && !state.object_nonempty {
        return Some(PersonaTrigger::SelfHeal);
    }
    if state.signal_pending {
        return Some(PersonaTrigger::Signal);
    }
    if has_scenes && state.built && state.scenes_at_build == 0 {
        return Some(PersonaTrigger::FirstScene);
    }
    if state.memories_since_build >= settings.memory_threshold.max(1) {
        return Some(PersonaTrigger::Threshold);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(
        built: bool,
        object_nonempty: bool,
        signal_pending: bool,
        scene_count: usize,
        scenes_at_build: usize,
        memories_since_build: u64,
    ) -> PersonaState {
        PersonaState {
            built,
            object_nonempty,
            signal_pending,
            scene_count,
            scenes_at_build,
            memories_since_build,
        }
    }

    #[test]
    fn decides_by_table() {
        use PersonaTrigger::*;
        #[rustfmt::skip]
        let table: &[(&str, PersonaState, Option<PersonaTrigger>)] = &[
            // (why, built, object, signal, scenes, scenes at build, memories) → trigger
            ("nothing at all", state(false, false, false, 0, 0, 0), None),
            ("a few memories, no scene", state(false, false, false, 0, 0, 19), None),
            ("enough memories, no scene", state(false, false, false, 0, 0, 20), Some(Threshold)),
            ("healthy, nothing new", state(true, true, false, 3, 3, 0), None),
            ("healthy, a new scene, few memories", state(true, true, false, 4, 3, 5), None),
            ("explicit signal", state(true, true, true, 3, 3, 0), Some(Signal)),
            ("signal beats first scene and threshold", state(true, true, true, 1, 0, 50), Some(Signal)),
            ("cold start", state(false, false, false, 1, 0, 0), Some(ColdStart)),
            ("cold start with a stale object", state(false, true, false, 2, 0, 3), Some(ColdStart)),
            ("cold start beats a signal", state(false, false, true, 1, 0, 0), Some(ColdStart)),
            ("self-heal", state(true, false, false, 5, 5, 0), Some(SelfHeal)),
            ("self-heal beats a signal", state(true, false, true, 5, 4, 0), Some(SelfHeal)),
            ("self-heal beats first scene", state(true, false, false, 1, 0, 0), Some(SelfHeal)),
            ("lost object, no scene to heal from", state(true, false, false, 0, 0, 3), None),
            ("lost object, no scene, threshold", state(true, false, false, 0, 0, 20), Some(Threshold)),
            ("first scene", state(true, true, false, 1, 0, 0), Some(FirstScene)),
            ("first scene beats threshold", state(true, true, false, 2, 0, 40), Some(FirstScene)),
            ("threshold", state(true, true, false, 3, 3, 20), Some(Threshold)),
            ("below threshold", state(true, true, false, 3, 3, 19), None),
            ("scenes all deleted since build", state(true, true, false, 0, 2, 0), None),
        ];
        let settings = PersonaTriggerSettings::default();
        for (why, state, expected) in table {
            assert_eq!(decide(state, &settings), *expected, "{why}");
        }
    }

    #[test]
    fn a_zero_threshold_still_needs_one_memory() {
        let settings = PersonaTriggerSettings { memory_threshold: 0 };
        assert_eq!(decide(&state(true, true, false, 1, 1, 0), &settings), None);
        assert_eq!(
            decide(&state(true, true, false, 1, 1, 1), &settings),
            Some(PersonaTrigger::Threshold)
        );
    }

    #[test]
    fn only_cold_start_and_self_heal_read_every_scene() {
        let full: Vec<PersonaTrigger> = [
            PersonaTrigger::Signal,
            PersonaTrigger::ColdStart,
            PersonaTrigger::SelfHeal,
            PersonaTrigger::FirstScene,
            PersonaTrigger::Threshold,
        ]
        .into_iter()
        .filter(PersonaTrigger::full_rebuild)
        .collect();
        assert_eq!(full, [PersonaTrigger::ColdStart, PersonaTrigger::SelfHeal]);
        assert_eq!(PersonaTrigger::SelfHeal.priority(), 2);
        assert_eq!(PersonaTrigger::FirstScene.as_str(), "first_scene");
    }
}
