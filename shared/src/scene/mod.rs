//! L2 scenes: the pure logic (seed 001, 第三层). No I/O here: the scene worker reads and
//! writes the files and rows, and calls these functions to decide what to write and when.
//!
//! # What a scene is
//! One Markdown document per topic (`话题册`): a header (name, created, updated, tags, key
//! times), an overview, the event chain in time order, conclusions, open questions, and the
//! topic's impact on the persona ([`doc`]). Scenes bind related L1 memories into a narrative
//! that recall can point to from the stable part of the prompt (the scene navigation list
//! uses [`SceneDoc::one_line_overview`]).
//!
//! # Who writes them
//! In LLM mode an editor model edits the owner's scene files through tool calls, confined to
//! [`paths::scenes_prefix`] (it never sees the persona or scheduling state), after a snapshot
//! of the folder ([`paths::scene_snapshot_prefix`]) so a bad run can be rolled back. Every tool
//! call that creates, updates, merges or deletes a scene goes through [`cap::check`], and a
//! refusal's reason goes back to the model. In rules mode ([`rules`]) the planner groups new
//! memories by their `scene` field and appends them to scenes, under the same cap. Both modes
//! produce documents in the [`doc`] format; the parser is lenient because a model writes them.
//!
//! # How many
//! At most `cap` (default 15) active scenes per owner, with warnings three and one short of
//! it and a forced merge at it ([`cap`]): a long list of topics helps recall less than a short
//! one. Which scenes to merge is the editor's judgement in LLM mode, token similarity in rules
//! mode.
//!
//! # When
//! The scene timer ([`timer`]) runs an owner's scenes 90 s after an L1 batch at the earliest,
//! no sooner than 15 minutes after the previous run, and within an hour of new memories; its
//! due-time only moves earlier. Its state is a database row; these are its transitions.
//!
//! After a run, the affected owner's persona is marked dirty and [`crate::persona`] decides
//! whether to rebuild it.

pub mod cap;
pub mod doc;
pub mod editor;
pub mod journal;
pub mod paths;
pub mod rules;
pub mod run;
pub(crate) mod text;
pub mod timer;
pub mod workspace;

pub use cap::{CapLevel, CapRefusal, SceneOp, DEFAULT_CAP};
pub use doc::{DocError, SceneDoc, SceneEvent};
pub use rules::{plan_scenes, ScenePlan, SceneSummary};
pub use timer::{SceneTimer, SceneTimerSettings};
