//! Rules mode of L2: scene plans from new L1 memories with no LLM, deterministically.
//!
//! # Grouping
//! Only active memories count. A memory with a `scene` joins the group of that name
//! (normalized: case, width, spacing and punctuation ignored). A memory without one joins the
//! group or existing scene whose tokens cover at least [`ATTACH_COVERAGE`] of its own topic
//! tokens, sharing at least [`ATTACH_MIN_SHARED`] of them (the best one wins); failing that,
//! it joins a group named after its category ("Work facts"), which a later run finds again by
//! name. Coverage rather than Jaccard, because a memory is a sentence and a scene a document;
//! and a low bar, because two Chinese sentences on one topic share few character bigrams (a
//! 15-character sentence has 14 of them, and "报表任务的慢查询原因是没走索引" shares 5 with a
//! scene about the report job's slow queries). The three shared tokens keep one common word
//! from deciding.
//!
//! A group then joins an existing scene with the same normalized name, or one whose name has a
//! token Jaccard of at least [`NAME_JACCARD`] with the group's, or one whose tokens cover at
//! least [`CONTENT_COVERAGE`] of the group's (with [`CONTENT_MIN_SHARED`] shared). Otherwise it
//! becomes a new scene, if the cap allows.
//!
//! # Content
//! Appended, never rewritten: existing bullets stay as they are and a bullet whose normalized
//! text is already in its section is not added again. Episodic and work-artifact memories
//! become events (`when` is `occurred_at`), ordered by `occurred_at`, then `created_at`; work
//! facts and methods become conclusions; work tasks open questions; persona and instruction
//! memories persona impact. Each memory lands in one section only, so a dated task is not also
//! an event; its date still goes to `key_times`. A new scene's overview is the content of its
//! highest-priority memory; an existing overview is kept. Tags gain the category names and the
//! words of the scene names; key times gain the distinct `occurred_at` values.
//!
//! # The cap
//! The planner obeys [`cap::check`] like the LLM editor. At or above the cap it first merges
//! the two most similar scenes (token Jaccard over the whole documents), again and again until
//! updates are allowed. A group that may not become a new scene is added to the most similar
//! live scene instead. Rules mode never uses the "one create after a merge" allowance: it
//! would bring the owner back to the cap and force another merge on the next run.
//!
//! # Output
//! Merges first, in the order they must be applied; then updates by id; then creates by name.
//! A merge keeps the id of its first source and deletes the others; a scene merged and then
//! given new content appears in its merge and again in an update. Plans that would change
//! nothing are not emitted, so a second run over the same memories plans nothing.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::cap::{self, CapLevel, SceneOp};
use super::doc::{SceneDoc, SceneEvent};
use super::text::{coverage, jaccard, normalize, one_line, tokens, Tokens};
use crate::memory::{Category, Memory, MemoryStatus};

/// Share of a scene-less memory's tokens a group or scene must contain for it to join.
pub const ATTACH_COVERAGE: f32 = 0.3;
/// Tokens a scene-less memory must share with a group or scene to join it.
pub const ATTACH_MIN_SHARED: usize = 3;
/// Token Jaccard of two scene names from which they name the same topic.
pub const NAME_JACCARD: f32 = 0.5;
/// Share of a group's tokens an existing scene must contain for the group to join it.
pub const CONTENT_COVERAGE: f32 = 0.6;
/// Tokens a group must share with an existing scene to join it by content.
pub const CONTENT_MIN_SHARED: usize = 3;

/// An existing active scene, as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneSummary {
    pub id: Uuid,
    /// The index row's name; the planner reads `doc.name`, which is what the file says.
    pub name: String,
    pub doc: SceneDoc,
}

/// One change to write.
#[derive(Debug, Clone, PartialEq)]
pub enum ScenePlan {
    Create {
        doc: SceneDoc,
    },
    Update {
        id: Uuid,
        doc: SceneDoc,
    },
    /// `sources[0]` becomes `doc`; the other sources are deleted.
    Merge {
        sources: Vec<Uuid>,
        doc: SceneDoc,
    },
}

/// Plans the scene changes for `memories` over the owner's `existing` active scenes, under
/// `cap` (see the module docs). Apply the plans in order.
pub fn plan_scenes(existing: &[SceneSummary], memories: &[Memory], cap: usize, now: DateTime<Utc>) -> Vec<ScenePlan> {
    let mut active: Vec<&Memory> = memories.iter().filter(|m| m.status == MemoryStatus::Active).collect();
    if active.is_empty() {
        return Vec::new();
    }
    active.sort_by_key(|m| (m.created_at, m.id));

    let mut board = Board::new(existing);
    let groups = group(&active, &board);
    let (joined, new_groups) = resolve(groups, &board);

    let mut plans = board.merge_until_updatable(cap, now);
    for (index, group) in joined {
        board.add(index, group);
    }
    let mut count = board.live_count();
    for group in new_groups {
        // Rules mode never takes the create-after-merge allowance (see the module docs).
        if cap::check(SceneOp::Create, count, cap, false).is_ok() {
            board.create(group, now);
            count += 1;
        } else if let Some(index) = board.most_similar(&group.tokens) {
            board.add(index, group);
        }
    }
    plans.extend(board.finish(now));
    plans
}

/// Memories that go to one scene, with the scene names they came under.
#[derive(Debug, Default)]
struct Group<'m> {
    name: String,
    memories: Vec<&'m Memory>,
    tokens: Tokens,
}

impl<'m> Group<'m> {
    fn push(&mut self, memory: &'m Memory) {
        self.tokens.extend(tokens(&memory.content));
        self.memories.push(memory);
    }

    fn top_priority(&self) -> u8 {
        self.memories.iter().map(|m| m.priority).max().unwrap_or(0)
    }
}

/// The display name of the group a scene-less, unmatched memory falls back to.
fn category_scene(category: Category) -> &'static str {
    match category {
        Category::Persona => "Persona",
        Category::Episodic => "Events",
        Category::Instruction => "Instructions",
        Category::WorkFact => "Work facts",
        Category::WorkTask => "Work tasks",
        Category::WorkMethod => "Work methods",
        Category::WorkArtifact => "Work artifacts",
    }
}

/// Where a scene-less memory goes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Home {
    Group(String),
    Scene(usize),
}

/// Groups keyed by normalized scene name, plus the memories that attach straight to an
/// existing scene (under the key of that scene's own normalized name).
fn group<'m>(memories: &[&'m Memory], board: &Board) -> BTreeMap<String, Group<'m>> {
    let mut groups: BTreeMap<String, Group<'m>> = BTreeMap::new();
    let mut loose = Vec::new();
    for memory in memories {
        let name = memory.scene.as_deref().map(one_line).unwrap_or_default();
        let key = normalize(&name);
        if key.is_empty() {
            loose.push(*memory);
            continue;
        }
        let group = groups.entry(key).or_insert_with(|| Group {
            tokens: tokens(&name),
            name,
            ..Group::default()
        });
        group.push(memory);
    }
    // Scene-less memories are matched against the named groups as they are, so the result does
    // not depend on the order of the scene-less memories themselves.
    let named: Vec<(String, Tokens)> = groups.iter().map(|(k, g)| (k.clone(), g.tokens.clone())).collect();
    for memory in loose {
        let own = tokens(&memory.content);
        let home = named
            .iter()
            .map(|(key, tokens)| (Home::Group(key.clone()), tokens))
            .chain(
                board
                    .scenes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (Home::Scene(i), &s.tokens)),
            )
            .filter_map(|(home, tokens)| {
                let (share, shared) = coverage(&own, tokens);
                (share >= ATTACH_COVERAGE && shared >= ATTACH_MIN_SHARED).then_some((share, shared, home))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(b.2.cmp(&a.2)))
            .map(|(_, _, home)| home);
        let (key, name) = match home {
            Some(Home::Group(key)) => (key, String::new()),
            Some(Home::Scene(index)) => {
                let name = board.scenes[index].doc.name.clone();
                (normalize(&name), name)
            }
            None => {
                let name = category_scene(memory.category).to_owned();
                (normalize(&name), name)
            }
        };
        let group = groups.entry(key).or_insert_with(|| Group {
            tokens: tokens(&name),
            name,
            ..Group::default()
        });
        group.push(memory);
    }
    groups
}

/// Splits the groups into those that join an existing scene (by index) and new ones, the new
/// ones in the order they get to claim a free slot: highest priority, then most memories.
fn resolve<'m>(groups: BTreeMap<String, Group<'m>>, board: &Board) -> (Vec<(usize, Group<'m>)>, Vec<Group<'m>>) {
    let mut joined = Vec::new();
    let mut new = Vec::new();
    for (key, group) in groups {
        match board.matching_scene(&key, &group) {
            Some(index) => joined.push((index, group)),
            None => new.push(group),
        }
    }
    new.sort_by(|a, b| {
        b.top_priority()
            .cmp(&a.top_priority())
            .then(b.memories.len().cmp(&a.memories.len()))
            .then(normalize(&a.name).cmp(&normalize(&b.name)))
    });
    (joined, new)
}

/// One scene on the planning board.
#[derive(Debug)]
struct Slot {
    /// `None` for a scene this run creates.
    id: Option<Uuid>,
    doc: SceneDoc,
    tokens: Tokens,
    name_tokens: Tokens,
    /// Merged into another scene: no longer live.
    gone: bool,
    /// Changed since the last plan that carries its doc.
    dirty: bool,
}

impl Slot {
    fn new(id: Option<Uuid>, doc: SceneDoc) -> Self {
        let mut slot = Self {
            id,
            tokens: Tokens::new(),
            name_tokens: tokens(&doc.name),
            doc,
            gone: false,
            dirty: false,
        };
        slot.retokenize();
        slot
    }

    fn retokenize(&mut self) {
        let doc = &self.doc;
        let mut all = tokens(&doc.name);
        for text in std::iter::once(&doc.overview)
            .chain(&doc.tags)
            .chain(doc.events.iter().map(|e| &e.what))
            .chain(&doc.conclusions)
            .chain(&doc.open_questions)
            .chain(&doc.persona_impact)
        {
            all.extend(tokens(text));
        }
        self.tokens = all;
    }
}

/// The owner's scenes as the plan changes them.
#[derive(Debug)]
struct Board {
    scenes: Vec<Slot>,
}

impl Board {
    fn new(existing: &[SceneSummary]) -> Self {
        let mut sorted: Vec<&SceneSummary> = existing.iter().collect();
        sorted.sort_by_key(|s| s.id);
        Self {
            scenes: sorted
                .into_iter()
                .map(|s| Slot::new(Some(s.id), s.doc.clone()))
                .collect(),
        }
    }

    fn live(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.scenes.iter().enumerate().filter(|(_, s)| !s.gone)
    }

    fn live_count(&self) -> usize {
        self.live().count()
    }

    /// The existing scene a group belongs to: same name, a similar name, or similar content.
    fn matching_scene(&self, key: &str, group: &Group) -> Option<usize> {
        let name_tokens = tokens(&group.name);
        self.live()
            .filter_map(|(index, slot)| {
                let same_name = normalize(&slot.doc.name) == key;
                let name = jaccard(&name_tokens, &slot.name_tokens);
                let (share, shared) = coverage(&group.tokens, &slot.tokens);
                let content = if share >= CONTENT_COVERAGE && shared >= CONTENT_MIN_SHARED {
                    share
                } else {
                    0.0
                };
                let name = if name >= NAME_JACCARD { name } else { 0.0 };
                (same_name || name > 0.0 || content > 0.0).then_some((same_name, name, content, index))
            })
            .max_by(|a, b| {
                a.0.cmp(&b.0)
                    .then(a.1.total_cmp(&b.1))
                    .then(a.2.total_cmp(&b.2))
                    .then(b.3.cmp(&a.3))
            })
            .map(|(_, _, _, index)| index)
    }

    /// The live scene whose tokens cover most of `wanted` (then by Jaccard, then the earliest).
    fn most_similar(&self, wanted: &Tokens) -> Option<usize> {
        self.live()
            .map(|(index, slot)| (coverage(wanted, &slot.tokens).0, jaccard(wanted, &slot.tokens), index))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)).then(b.2.cmp(&a.2)))
            .map(|(_, _, index)| index)
    }

    /// Merges the two most similar scenes until updates are allowed again; the merges to apply.
    fn merge_until_updatable(&mut self, cap: usize, now: DateTime<Utc>) -> Vec<ScenePlan> {
        let mut plans = Vec::new();
        while CapLevel::of(self.live_count(), cap) == CapLevel::MustMerge {
            let Some((keep, drop)) = self.most_similar_pair() else {
                break;
            };
            let (Some(keep_id), Some(drop_id)) = (self.scenes[keep].id, self.scenes[drop].id) else {
                break;
            };
            let merged = merge_docs(&self.scenes[keep].doc, &self.scenes[drop].doc, now);
            self.scenes[drop].gone = true;
            let slot = &mut self.scenes[keep];
            slot.doc = merged;
            slot.retokenize();
            slot.dirty = false;
            plans.push(ScenePlan::Merge {
                sources: vec![keep_id, drop_id],
                doc: slot.doc.clone(),
            });
        }
        plans
    }

    /// The most similar pair of live scenes, the older one first (it survives the merge).
    fn most_similar_pair(&self) -> Option<(usize, usize)> {
        let live: Vec<(usize, &Slot)> = self.live().collect();
        let mut best: Option<(f32, usize, usize)> = None;
        for (i, (a, slot_a)) in live.iter().enumerate() {
            for (b, slot_b) in &live[i + 1..] {
                let score = jaccard(&slot_a.tokens, &slot_b.tokens);
                if best.is_none_or(|(top, _, _)| score > top) {
                    best = Some((score, *a, *b));
                }
            }
        }
        let (_, a, b) = best?;
        let age = |index: usize| (self.scenes[index].doc.created, self.scenes[index].id);
        Some(if age(b) < age(a) { (b, a) } else { (a, b) })
    }

    fn add(&mut self, index: usize, group: Group) {
        let slot = &mut self.scenes[index];
        if absorb(&mut slot.doc, &group.memories, &[group.name.as_str()], false) {
            slot.dirty = true;
            slot.retokenize();
        }
    }

    fn create(&mut self, group: Group, now: DateTime<Utc>) {
        let mut doc = SceneDoc::new(&group.name, now);
        absorb(&mut doc, &group.memories, &[group.name.as_str()], true);
        let mut slot = Slot::new(None, doc);
        slot.dirty = true;
        self.scenes.push(slot);
    }

    /// Updates by id, then creates by name, for every scene changed since its last plan.
    fn finish(self, now: DateTime<Utc>) -> Vec<ScenePlan> {
        let mut updates = Vec::new();
        let mut creates = Vec::new();
        for slot in self.scenes.into_iter().filter(|s| s.dirty && !s.gone) {
            let mut doc = slot.doc;
            doc.updated = now;
            match slot.id {
                Some(id) => updates.push(ScenePlan::Update { id, doc }),
                None => creates.push((normalize(&doc.name), ScenePlan::Create { doc })),
            }
        }
        creates.sort_by(|a, b| a.0.cmp(&b.0));
        updates.extend(creates.into_iter().map(|(_, plan)| plan));
        updates
    }
}

/// Which section of a scene a memory's content goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Events,
    Conclusions,
    OpenQuestions,
    PersonaImpact,
}

fn section(category: Category) -> Section {
    match category {
        Category::Episodic | Category::WorkArtifact => Section::Events,
        Category::WorkFact | Category::WorkMethod => Section::Conclusions,
        Category::WorkTask => Section::OpenQuestions,
        Category::Persona | Category::Instruction => Section::PersonaImpact,
    }
}

/// Appends what `memories` add to `doc` (see the module docs); whether anything changed.
fn absorb(doc: &mut SceneDoc, memories: &[&Memory], scene_names: &[&str], is_new: bool) -> bool {
    let before = doc.clone();
    let mut by_time: Vec<&Memory> = memories.to_vec();
    by_time.sort_by(|a, b| {
        event_time(a)
            .cmp(&event_time(b))
            .then(a.created_at.cmp(&b.created_at))
            .then(a.id.cmp(&b.id))
    });
    for memory in &by_time {
        let content = one_line(&memory.content);
        if content.is_empty() {
            continue;
        }
        match section(memory.category) {
            Section::Events => {
                if !doc.events.iter().any(|e| normalize(&e.what) == normalize(&content)) {
                    let when = memory.occurred_at.as_deref().map(one_line).filter(|w| !w.is_empty());
                    doc.events.push(SceneEvent { when, what: content });
                }
            }
            Section::Conclusions => push_new(&mut doc.conclusions, content),
            Section::OpenQuestions => push_new(&mut doc.open_questions, content),
            Section::PersonaImpact => push_new(&mut doc.persona_impact, content),
        }
    }
    if doc.overview.trim().is_empty() {
        let top = memories
            .iter()
            .filter(|m| !m.content.trim().is_empty())
            .min_by_key(|m| (std::cmp::Reverse(m.priority), m.created_at, m.id));
        if let Some(top) = top {
            doc.overview = one_line(&top.content);
        }
    }
    let mut tags: Vec<String> = Category::ALL
        .iter()
        .filter(|c| memories.iter().any(|m| m.category == **c))
        .map(|c| c.as_str().to_owned())
        .collect();
    let mut words: Vec<String> = scene_names.iter().flat_map(|name| tag_words(name)).collect();
    if is_new {
        words.extend(tag_words(&doc.name));
    }
    words.sort();
    tags.extend(words);
    for tag in tags {
        push_new(&mut doc.tags, tag);
    }
    let mut times: Vec<String> = memories
        .iter()
        .filter_map(|m| m.occurred_at.as_deref().map(one_line))
        .filter(|t| !t.is_empty())
        .collect();
    times.sort();
    for time in times {
        push_new(&mut doc.key_times, time);
    }
    *doc != before
}

/// What orders events: `occurred_at` as written (ISO dates sort as text), else creation time.
fn event_time(memory: &Memory) -> String {
    memory
        .occurred_at
        .clone()
        .unwrap_or_else(|| memory.created_at.to_rfc3339())
}

/// Appends `item` unless its normalized text is already there.
fn push_new(items: &mut Vec<String>, item: String) {
    let key = normalize(&item);
    if key.is_empty() || items.iter().any(|existing| normalize(existing) == key) {
        return;
    }
    items.push(item);
}

/// The words of a scene name, as tags: split on anything not a letter or digit, lowercase,
/// function words and single Latin letters dropped.
fn tag_words(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| !(w.is_empty() || (w.len() == 1 && w.is_ascii()) || tokens(w).is_empty()))
        .collect()
}

/// `keep` with `other`'s content appended: the older scene's name and id survive.
fn merge_docs(keep: &SceneDoc, other: &SceneDoc, now: DateTime<Utc>) -> SceneDoc {
    let mut doc = keep.clone();
    doc.created = keep.created.min(other.created);
    doc.updated = now;
    let overview = other.overview.trim();
    if doc.overview.trim().is_empty() {
        doc.overview = overview.to_owned();
    } else if !overview.is_empty() && normalize(overview) != normalize(&doc.overview) {
        doc.overview = format!("{}\n\n{overview}", doc.overview.trim());
    }
    for event in &other.events {
        let seen = doc
            .events
            .iter()
            .any(|e| normalize(&e.what) == normalize(&event.what) && e.when == event.when);
        if !seen {
            doc.events.push(event.clone());
        }
    }
    for (into, from) in [
        (&mut doc.tags, &other.tags),
        (&mut doc.key_times, &other.key_times),
        (&mut doc.conclusions, &other.conclusions),
        (&mut doc.open_questions, &other.open_questions),
        (&mut doc.persona_impact, &other.persona_impact),
    ] {
        for item in from {
            push_new(into, item.clone());
        }
    }
    doc
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::domain::Tenant;

    fn at(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 10, minute, 0).unwrap()
    }

    fn memory(n: u128, content: &str, category: Category, scene: Option<&str>) -> Memory {
        Memory {
            id: Uuid::from_u128(n),
            tenant: Tenant {
                team: "t".into(),
                agent: "a".into(),
                user: "u".into(),
            },
            session_id: "s".into(),
            content: content.into(),
            category,
            priority: 60,
            scene: scene.map(str::to_owned),
            occurred_at: None,
            source_message_ids: vec![Uuid::from_u128(1000 + n)],
            status: MemoryStatus::Active,
            superseded_by: None,
            task: None,
            created_at: at(n as u32 % 60),
            updated_at: at(n as u32 % 60),
        }
    }

    fn dated(mut m: Memory, when: &str) -> Memory {
        m.occurred_at = Some(when.into());
        m
    }

    fn prioritized(mut m: Memory, priority: u8) -> Memory {
        m.priority = priority;
        m
    }

    fn summary(n: u128, doc: SceneDoc) -> SceneSummary {
        SceneSummary {
            id: Uuid::from_u128(n),
            name: doc.name.clone(),
            doc,
        }
    }

    fn scene(name: &str, conclusions: &[&str]) -> SceneDoc {
        SceneDoc {
            conclusions: conclusions.iter().map(|s| s.to_string()).collect(),
            overview: format!("About {name}."),
            ..SceneDoc::new(name, at(0))
        }
    }

    fn created(plans: &[ScenePlan]) -> Vec<&SceneDoc> {
        plans
            .iter()
            .filter_map(|p| match p {
                ScenePlan::Create { doc } => Some(doc),
                ScenePlan::Update { .. } | ScenePlan::Merge { .. } => None,
            })
            .collect()
    }

    fn updated(plans: &[ScenePlan]) -> Vec<(Uuid, &SceneDoc)> {
        plans
            .iter()
            .filter_map(|p| match p {
                ScenePlan::Update { id, doc } => Some((*id, doc)),
                ScenePlan::Create { .. } | ScenePlan::Merge { .. } => None,
            })
            .collect()
    }

    /// Applies plans to a scene list the way the scene worker would.
    fn apply(mut scenes: Vec<SceneSummary>, plans: &[ScenePlan], next_id: &mut u128) -> Vec<SceneSummary> {
        for plan in plans {
            match plan {
                ScenePlan::Create { doc } => {
                    *next_id += 1;
                    scenes.push(summary(*next_id, doc.clone()));
                }
                ScenePlan::Update { id, doc } => {
                    let slot = scenes.iter_mut().find(|s| s.id == *id).unwrap();
                    slot.doc = doc.clone();
                }
                ScenePlan::Merge { sources, doc } => {
                    scenes.retain(|s| !sources[1..].contains(&s.id));
                    let slot = scenes.iter_mut().find(|s| s.id == sources[0]).unwrap();
                    slot.doc = doc.clone();
                }
            }
        }
        scenes
    }

    #[test]
    fn groups_english_memories_by_scene_into_a_new_scene() {
        let memories = vec![
            dated(
                memory(
                    1,
                    "Alert fired for slow queries on instance A",
                    Category::Episodic,
                    Some("Slow queries"),
                ),
                "2025-08-20 02:10",
            ),
            dated(
                memory(
                    2,
                    "Found the report job's new SQL missing an index",
                    Category::Episodic,
                    Some("slow  QUERIES"),
                ),
                "2025-08-20 02:30",
            ),
            prioritized(
                memory(
                    3,
                    "Use CONCURRENTLY for DDL on big tables",
                    Category::WorkMethod,
                    Some("Slow queries"),
                ),
                75,
            ),
            memory(
                4,
                "Check why the planner changed",
                Category::WorkTask,
                Some("Slow queries"),
            ),
            memory(5, "Prefers online DDL", Category::Instruction, Some("Slow queries")),
            dated(
                memory(
                    6,
                    "Found the report job's new SQL missing an index.",
                    Category::Episodic,
                    Some("Slow queries"),
                ),
                "x",
            ),
        ];
        let plans = plan_scenes(&[], &memories, 15, at(59));
        let docs = created(&plans);
        assert_eq!(plans.len(), 1);
        let doc = docs[0];
        assert_eq!(doc.name, "Slow queries");
        assert_eq!((doc.created, doc.updated), (at(59), at(59)));
        assert_eq!(doc.overview, "Use CONCURRENTLY for DDL on big tables");
        let events: Vec<(Option<&str>, &str)> = doc
            .events
            .iter()
            .map(|e| (e.when.as_deref(), e.what.as_str()))
            .collect();
        assert_eq!(
            events,
            [
                (Some("2025-08-20 02:10"), "Alert fired for slow queries on instance A"),
                (
                    Some("2025-08-20 02:30"),
                    "Found the report job's new SQL missing an index"
                ),
            ]
        );
        assert_eq!(doc.conclusions, ["Use CONCURRENTLY for DDL on big tables"]);
        assert_eq!(doc.open_questions, ["Check why the planner changed"]);
        assert_eq!(doc.persona_impact, ["Prefers online DDL"]);
        assert_eq!(
            doc.tags,
            ["episodic", "instruction", "work_task", "work_method", "queries", "slow"]
        );
        assert_eq!(doc.key_times, ["2025-08-20 02:10", "2025-08-20 02:30", "x"]);
    }

    #[test]
    fn updates_a_chinese_scene_and_attaches_scene_less_memories() {
        let existing = vec![summary(
            7,
            SceneDoc {
                events: vec![SceneEvent {
                    when: Some("02:10".into()),
                    what: "实例A出现慢查询告警".into(),
                }],
                ..scene("实例A慢查询", &["大表 DDL 优先 CONCURRENTLY"])
            },
        )];
        let memories = vec![
            dated(
                memory(
                    1,
                    "实例A 慢查询已定位到报表任务",
                    Category::Episodic,
                    Some("实例A 慢查询"),
                ),
                "02:30",
            ),
            memory(2, "报表任务的慢查询原因是没走索引", Category::WorkFact, None),
            memory(
                3,
                "大表DDL优先CONCURRENTLY。",
                Category::WorkMethod,
                Some("实例A慢查询"),
            ),
            memory(4, "Kubernetes 集群升级到 1.30", Category::WorkFact, None),
        ];
        let plans = plan_scenes(&existing, &memories, 15, at(59));
        let updates = updated(&plans);
        assert_eq!(updates.len(), 1);
        let (id, doc) = updates[0];
        assert_eq!(id, Uuid::from_u128(7));
        assert_eq!(doc.overview, "About 实例A慢查询.");
        assert_eq!(doc.events.len(), 2);
        assert_eq!(doc.events[0].what, "实例A出现慢查询告警");
        assert_eq!(doc.events[1].when.as_deref(), Some("02:30"));
        assert_eq!(
            doc.conclusions,
            ["大表 DDL 优先 CONCURRENTLY", "报表任务的慢查询原因是没走索引"]
        );
        assert_eq!(doc.updated, at(59));
        assert_eq!(doc.created, at(0));
        // The unrelated fact has no scene and matches nothing: its category names one.
        let docs = created(&plans);
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].name, "Work facts");
        assert_eq!(docs[0].conclusions, ["Kubernetes 集群升级到 1.30"]);
    }

    #[test]
    fn a_second_run_over_the_same_memories_plans_nothing() {
        let memories = vec![
            memory(
                1,
                "Deploys go out on Tuesdays",
                Category::WorkFact,
                Some("Release process"),
            ),
            memory(
                2,
                "Never deploy on Fridays",
                Category::Instruction,
                Some("Release process"),
            ),
            memory(
                3,
                "We shipped v2.1 of the billing service",
                Category::WorkArtifact,
                None,
            ),
        ];
        let mut next_id = 100;
        let scenes = apply(Vec::new(), &plan_scenes(&[], &memories, 15, at(10)), &mut next_id);
        assert_eq!(scenes.len(), 2);
        assert_eq!(plan_scenes(&scenes, &memories, 15, at(20)), []);
    }

    #[test]
    fn ignores_archived_memories_and_empty_input() {
        let mut archived = memory(1, "Old fact about billing", Category::WorkFact, Some("Billing"));
        archived.status = MemoryStatus::Archived;
        assert_eq!(plan_scenes(&[], &[archived], 15, at(0)), []);
        assert_eq!(plan_scenes(&[], &[], 15, at(0)), []);
    }

    #[test]
    fn similar_names_join_the_existing_scene() {
        let existing = vec![summary(3, scene("Load testing for the 618 sale", &[]))];
        let memories = vec![memory(
            1,
            "Peak reached 40k QPS",
            Category::WorkFact,
            Some("618 sale load testing"),
        )];
        let plans = plan_scenes(&existing, &memories, 15, at(5));
        assert_eq!(updated(&plans).len(), 1);
        assert!(created(&plans).is_empty());
    }

    /// `n` unrelated existing scenes, ids 1..=n.
    fn many_scenes(n: u128) -> Vec<SceneSummary> {
        let topics = [
            "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo",
            "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
        ];
        (1..=n)
            .map(|i| {
                let topic = topics[(i as usize - 1) % topics.len()];
                summary(
                    i,
                    scene(&format!("Project {topic}"), &[&format!("{topic} uses postgres {i}")]),
                )
            })
            .collect()
    }

    fn three_new_topics() -> Vec<Memory> {
        vec![
            memory(
                1,
                "The kafka cluster has six brokers",
                Category::WorkFact,
                Some("Kafka cluster"),
            ),
            memory(
                2,
                "Grafana dashboards live in the ops repo",
                Category::WorkFact,
                Some("Dashboards"),
            ),
            memory(
                3,
                "Project mike moves to kotlin",
                Category::WorkFact,
                Some("Kotlin migration"),
            ),
        ]
    }

    #[test]
    fn at_twelve_of_fifteen_two_scenes_are_created_and_the_third_is_folded_in() {
        let plans = plan_scenes(&many_scenes(12), &three_new_topics(), 15, at(30));
        let names: Vec<&str> = created(&plans).iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names.len(), 2, "{plans:#?}");
        let updates = updated(&plans);
        assert_eq!(updates.len(), 1);
        assert!(plans.iter().all(|p| !matches!(p, ScenePlan::Merge { .. })));
        let mut next_id = 100;
        assert_eq!(apply(many_scenes(12), &plans, &mut next_id).len(), 14);
    }

    #[test]
    fn at_fourteen_of_fifteen_nothing_is_created() {
        let plans = plan_scenes(&many_scenes(14), &three_new_topics(), 15, at(30));
        assert!(created(&plans).is_empty());
        assert!(plans.iter().all(|p| !matches!(p, ScenePlan::Merge { .. })));
        // "Project mike moves to kotlin" lands in the mike scene, the most similar one.
        let mike = updated(&plans)
            .into_iter()
            .find(|(id, _)| *id == Uuid::from_u128(13))
            .unwrap();
        assert!(mike.1.conclusions.contains(&"Project mike moves to kotlin".to_owned()));
        let mut next_id = 100;
        assert_eq!(apply(many_scenes(14), &plans, &mut next_id).len(), 14);
    }

    #[test]
    fn at_fifteen_of_fifteen_the_two_most_similar_scenes_merge_first() {
        let mut existing = many_scenes(14);
        existing.push(summary(15, scene("Project alpha rollout", &["alpha uses postgres 1"])));
        let plans = plan_scenes(&existing, &three_new_topics(), 15, at(30));
        match &plans[0] {
            ScenePlan::Merge { sources, doc } => {
                assert_eq!(sources, &[Uuid::from_u128(1), Uuid::from_u128(15)]);
                assert_eq!(doc.name, "Project alpha");
                assert_eq!(doc.overview, "About Project alpha.\n\nAbout Project alpha rollout.");
            }
            other @ (ScenePlan::Create { .. } | ScenePlan::Update { .. }) => {
                panic!("expected a merge first, got {other:?}")
            }
        }
        assert!(created(&plans).is_empty());
        let mut next_id = 100;
        assert_eq!(apply(existing, &plans, &mut next_id).len(), 14);
    }

    #[test]
    fn above_a_lowered_cap_merges_until_updates_are_allowed() {
        let plans = plan_scenes(&many_scenes(12), &three_new_topics(), 10, at(30));
        let merges = plans.iter().filter(|p| matches!(p, ScenePlan::Merge { .. })).count();
        assert_eq!(merges, 3);
        assert!(created(&plans).is_empty());
        let mut next_id = 100;
        assert_eq!(apply(many_scenes(12), &plans, &mut next_id).len(), 9);
    }

    #[test]
    fn output_is_deterministic() {
        let memories = three_new_topics();
        let mut reversed = memories.clone();
        reversed.reverse();
        let mut existing = many_scenes(13);
        let a = plan_scenes(&existing, &memories, 15, at(1));
        existing.reverse();
        assert_eq!(plan_scenes(&existing, &reversed, 15, at(1)), a);
    }
}
