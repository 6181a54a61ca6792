//! The scene editor's sandbox: an owner's scene folder seen through five tools (read, create,
//! update, merge, soft-delete), whichever engine drives them (the LLM agent or the rules
//! planner).
//!
//! # What the sandbox guarantees
//! - **Only the owner's scene folder.** Tools name scenes by the refs of this run (`s1`, `s2`,
//!   …), never by key or path, so an editor cannot reach the persona, the snapshots, another
//!   owner's folder or any system file, whatever it writes.
//! - **Only valid documents.** Content must parse as a scene document; it is stored re-rendered
//!   in the canonical shape, with the created/updated times the system keeps.
//! - **The cap.** Every tool call is checked with `cap::check` before it writes; a refused call
//!   writes nothing and tells the editor why (the LLM reads the reason and adapts).
//! - **The lease.** Writes stop at the run's deadline, half a lease after the last renewal of
//!   its lease that the store took ([`WriteDeadline`]), so a stalled run cannot write after
//!   another worker took the owner over.
//!
//! Edits go to the file store at once (the folder is the editor's working copy); every first
//! write to an object is journaled before it happens (`journal`), so the runner can put the
//! folder back as it was if the run fails.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::cap::{self, SceneOp, MERGE_SOURCES};
use super::doc::SceneDoc;
use super::journal::Journal;
use super::paths;
use crate::domain::Tenant;
use crate::files::{FileError, FileStore};
use crate::store::scene::{SceneRow, SceneStatus};

/// Longest one-line overview kept in a scene's index row (the navigation list).
pub const OVERVIEW_CHARS: usize = 160;

/// What happened to a scene during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    Created,
    Updated,
    /// The scene is the result of a merge (it keeps the id of the first source).
    Merged,
    /// Soft-deleted by the editor, or absorbed by a merge.
    Deleted,
}

impl Touch {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "create",
            Self::Updated => "update",
            Self::Merged => "merge",
            Self::Deleted => "delete",
        }
    }
}

/// One scene as the run sees it.
#[derive(Debug, Clone)]
pub struct SceneEntry {
    /// The run's short ref, `s1`, `s2`, …
    pub reference: String,
    pub row: SceneRow,
    pub doc: SceneDoc,
    /// The document before the run (`None` for a scene this run created).
    pub before: Option<SceneDoc>,
    pub touch: Option<Touch>,
    /// For a merge: the scenes it absorbed.
    pub merged_from: Vec<Uuid>,
}

impl SceneEntry {
    pub fn is_active(&self) -> bool {
        self.row.status == SceneStatus::Active
    }
}

/// Why a tool call did nothing: a reason the editor can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Cap(String),
}

/// Why a run must stop (and be rolled back).
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("file store failed")]
    Files(#[from] FileError),
    #[error("the run passed its deadline; it stops writing so a newer run cannot be overwritten")]
    Deadline,
}

/// When a run stops writing. Its lease is safe until half a lease after the last renewal the
/// store took: another run can claim the owner one lease after that renewal, and the other half
/// covers a write already under way (and clocks that differ between workers). A run that stalls
/// (a paused process, a store that stopped taking renewals) finds its deadline passed when it
/// wakes. Edits also stop at the run's longest time; a rollback may still go after that, while
/// the lease is safe. Clones share one deadline: the renewals move it, the workspace and the
/// rollback read it.
#[derive(Debug, Clone)]
pub struct WriteDeadline {
    lease_safe_until: Arc<Mutex<Instant>>,
    half_lease: Duration,
    last_edit: Instant,
}

impl WriteDeadline {
    /// The deadline of a lease of `lease` claimed no later than `claimed`, for a run that may
    /// edit for `max_run` from then.
    pub fn new(claimed: Instant, lease: Duration, max_run: Duration) -> Self {
        let half_lease = lease / 2;
        Self {
            lease_safe_until: Arc::new(Mutex::new(claimed + half_lease)),
            half_lease,
            last_edit: claimed + max_run,
        }
    }

    /// The store took a renewal sent at `sent`: the lease holds one lease from then.
    pub fn renewed(&self, sent: Instant) {
        let mut until = self.lock();
        *until = (*until).max(sent + self.half_lease);
    }

    /// Stops every write at once: the lease is another run's.
    pub fn end_now(&self) {
        *self.lock() = Instant::now();
    }

    /// When the run stops renewing: it may not edit any more.
    pub fn last_edit(&self) -> Instant {
        self.last_edit
    }

    /// Whether an edit must not be written any more.
    pub fn passed(&self) -> bool {
        self.lease_passed() || Instant::now() >= self.last_edit
    }

    /// Whether nothing may be written any more, a rollback included.
    pub fn lease_passed(&self) -> bool {
        Instant::now() >= *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.lease_safe_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The owner's scene folder during one run.
pub struct Workspace {
    tenant: Tenant,
    files: std::sync::Arc<dyn FileStore>,
    cap: usize,
    now: DateTime<Utc>,
    deadline: WriteDeadline,
    entries: Vec<SceneEntry>,
    merged_this_run: bool,
    writes: usize,
    journal: Journal,
}

impl Workspace {
    /// A workspace over the owner's active scenes (rows and their parsed documents); every
    /// write is journaled in `journal` first.
    pub fn new(
        tenant: Tenant,
        files: std::sync::Arc<dyn FileStore>,
        scenes: Vec<(SceneRow, SceneDoc)>,
        cap: usize,
        now: DateTime<Utc>,
        deadline: WriteDeadline,
        journal: Journal,
    ) -> Self {
        let entries = scenes
            .into_iter()
            .enumerate()
            .map(|(i, (row, doc))| SceneEntry {
                reference: scene_ref(i),
                row,
                before: Some(doc.clone()),
                doc,
                touch: None,
                merged_from: Vec::new(),
            })
            .collect();
        Self {
            tenant,
            files,
            cap,
            now,
            deadline,
            entries,
            merged_this_run: false,
            writes: 0,
            journal,
        }
    }

    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// Every scene the run has seen, in ref order (deleted ones included).
    pub fn entries(&self) -> &[SceneEntry] {
        &self.entries
    }

    pub fn active_count(&self) -> usize {
        self.entries.iter().filter(|e| e.is_active()).count()
    }

    /// Object writes so far (puts and deletes, journal entries included): the S3 round trips
    /// of the run's edits.
    pub fn writes(&self) -> usize {
        self.writes + self.journal.entries()
    }

    /// The entry with this ref (active or not).
    pub fn find(&self, reference: &str) -> Option<&SceneEntry> {
        self.entries.iter().find(|e| e.reference == reference)
    }

    /// The entry of this scene id.
    pub fn find_id(&self, id: Uuid) -> Option<&SceneEntry> {
        self.entries.iter().find(|e| e.row.id == id)
    }

    /// The cap advice for the editor's prompt at the current count.
    pub fn advice(&self) -> Option<String> {
        cap::prompt_advice(self.active_count(), self.cap)
    }

    /// `read`: the current document of an active scene.
    pub fn read(&self, reference: &str) -> Result<String, Refusal> {
        Ok(self.active(reference)?.doc.render())
    }

    /// `create`: a new scene. Returns its ref.
    pub async fn create(&mut self, mut doc: SceneDoc) -> Result<Result<String, Refusal>, WorkspaceError> {
        if let Err(refusal) = self.check(SceneOp::Create).and_then(|()| valid(&doc)) {
            return Ok(Err(refusal));
        }
        doc.created = self.now;
        doc.updated = self.now;
        let id = Uuid::new_v4();
        let row = SceneRow {
            id,
            tenant: self.tenant.clone(),
            name: doc.name.clone(),
            overview: doc.one_line_overview(OVERVIEW_CHARS),
            tags: doc.tags.clone(),
            object_key: paths::scene_key(&self.tenant, id),
            version: 1,
            status: SceneStatus::Active,
            created_at: self.now,
            updated_at: self.now,
        };
        self.put(&row.object_key, &doc).await?;
        let reference = scene_ref(self.entries.len());
        self.entries.push(SceneEntry {
            reference: reference.clone(),
            row,
            doc,
            before: None,
            touch: Some(Touch::Created),
            merged_from: Vec::new(),
        });
        Ok(Ok(reference))
    }

    /// `update`: replaces an active scene's document.
    pub async fn update(&mut self, reference: &str, doc: SceneDoc) -> Result<Result<(), Refusal>, WorkspaceError> {
        let index = match self
            .check(SceneOp::Update)
            .and_then(|()| valid(&doc))
            .and_then(|()| self.index(reference))
        {
            Ok(index) => index,
            Err(refusal) => return Ok(Err(refusal)),
        };
        self.rewrite(index, doc, Touch::Updated).await?;
        Ok(Ok(()))
    }

    /// `merge`: 2–4 active scenes become one, written into the first of them; the others are
    /// soft-deleted.
    pub async fn merge(&mut self, references: &[String], doc: SceneDoc) -> Result<Result<(), Refusal>, WorkspaceError> {
        let indexes = match self.merge_sources(references).and_then(|indexes| {
            self.check(SceneOp::Merge { sources: indexes.len() })?;
            valid(&doc)?;
            Ok(indexes)
        }) {
            Ok(indexes) => indexes,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let (&target, rest) = indexes.split_first().expect("merge_sources returns at least two");
        let mut doc = doc;
        // The merged scene began when its earliest source did.
        doc.created = indexes
            .iter()
            .map(|&i| self.entries[i].row.created_at)
            .min()
            .unwrap_or(self.now);
        for &index in rest {
            self.soft_delete(index).await?;
        }
        let absorbed: Vec<Uuid> = rest.iter().map(|&i| self.entries[i].row.id).collect();
        self.rewrite(target, doc, Touch::Merged).await?;
        self.entries[target].merged_from.extend(absorbed);
        self.merged_this_run = true;
        Ok(Ok(()))
    }

    /// `delete`: soft-deletes an active scene (its document moves to the owner's trash, its
    /// row stays, marked deleted).
    pub async fn delete(&mut self, reference: &str) -> Result<Result<(), Refusal>, WorkspaceError> {
        let index = match self.check(SceneOp::Delete).and_then(|()| self.index(reference)) {
            Ok(index) => index,
            Err(refusal) => return Ok(Err(refusal)),
        };
        self.soft_delete(index).await?;
        Ok(Ok(()))
    }

    fn check(&self, op: SceneOp) -> Result<(), Refusal> {
        cap::check(op, self.active_count(), self.cap, self.merged_this_run).map_err(|r| Refusal::Cap(r.to_string()))
    }

    fn index(&self, reference: &str) -> Result<usize, Refusal> {
        match self.entries.iter().position(|e| e.reference == reference) {
            Some(index) if self.entries[index].is_active() => Ok(index),
            Some(_) => Err(Refusal::Invalid(format!("scene {reference} was deleted in this run"))),
            None => Err(Refusal::Invalid(format!(
                "no scene {reference}: use a ref from the scene list"
            ))),
        }
    }

    fn active(&self, reference: &str) -> Result<&SceneEntry, Refusal> {
        self.index(reference).map(|i| &self.entries[i])
    }

    fn merge_sources(&self, references: &[String]) -> Result<Vec<usize>, Refusal> {
        if !MERGE_SOURCES.contains(&references.len()) {
            return Err(Refusal::Invalid(format!(
                "a merge takes 2 to 4 scenes, got {}",
                references.len()
            )));
        }
        let mut indexes = Vec::with_capacity(references.len());
        for reference in references {
            let index = self.index(reference)?;
            if indexes.contains(&index) {
                return Err(Refusal::Invalid(format!(
                    "scene {reference} is named twice in the merge"
                )));
            }
            indexes.push(index);
        }
        Ok(indexes)
    }

    async fn rewrite(&mut self, index: usize, mut doc: SceneDoc, touch: Touch) -> Result<(), WorkspaceError> {
        let entry = &self.entries[index];
        if touch != Touch::Merged {
            doc.created = entry.row.created_at;
        }
        doc.updated = self.now;
        let key = entry.row.object_key.clone();
        self.put(&key, &doc).await?;
        let entry = &mut self.entries[index];
        // A scene touched twice in one run is still one new version.
        if entry.touch.is_none() {
            entry.row.version += 1;
        }
        entry.row.name.clone_from(&doc.name);
        entry.row.overview = doc.one_line_overview(OVERVIEW_CHARS);
        entry.row.tags.clone_from(&doc.tags);
        entry.row.updated_at = self.now;
        entry.touch = Some(match (entry.touch, touch) {
            (Some(Touch::Created), _) => Touch::Created,
            (Some(Touch::Merged), _) | (_, Touch::Merged) => Touch::Merged,
            _ => Touch::Updated,
        });
        entry.doc = doc;
        Ok(())
    }

    async fn soft_delete(&mut self, index: usize) -> Result<(), WorkspaceError> {
        let entry = &self.entries[index];
        let trash = paths::scene_trash_key(&self.tenant, entry.row.id);
        let key = entry.row.object_key.clone();
        let body = entry.doc.render().into_bytes();
        self.write(&trash, Some(body)).await?;
        self.write(&key, None).await?;
        let entry = &mut self.entries[index];
        if entry.touch.is_none() {
            entry.row.version += 1;
        }
        entry.row.status = SceneStatus::Deleted;
        entry.row.updated_at = self.now;
        entry.touch = Some(Touch::Deleted);
        Ok(())
    }

    async fn put(&mut self, key: &str, doc: &SceneDoc) -> Result<(), WorkspaceError> {
        self.write(key, Some(doc.render().into_bytes())).await
    }

    /// Journals `key`, then writes `body` to it (`None`: deletes it). The deadline is checked
    /// again right before the write, so a stall that slips past it (the process paused once
    /// the check passed) has only the write request's own time, not the journal's too.
    async fn write(&mut self, key: &str, body: Option<Vec<u8>>) -> Result<(), WorkspaceError> {
        self.guard()?;
        self.journal.before_write(key).await?;
        self.guard()?;
        match body {
            Some(body) => self.files.put(key, body).await?,
            None => self.files.delete(key).await?,
        }
        self.writes += 1;
        Ok(())
    }

    fn guard(&self) -> Result<(), WorkspaceError> {
        if self.deadline.passed() {
            return Err(WorkspaceError::Deadline);
        }
        Ok(())
    }
}

fn valid(doc: &SceneDoc) -> Result<(), Refusal> {
    if doc.name.trim().is_empty() {
        return Err(Refusal::Invalid("the scene has no name (a `# title` line)".into()));
    }
    if doc.overview.trim().is_empty() && doc.events.is_empty() {
        return Err(Refusal::Invalid(
            "the scene has neither an overview nor any event: write what the topic is about".into(),
        ));
    }
    Ok(())
}

fn scene_ref(index: usize) -> String {
    format!("s{}", index + 1)
}

/// Whether an edit destroyed what a scene is about (seed 001: "误删了一个话题的核心内容"):
/// its overview emptied, or more than half of its event chain gone. Merges and deletes are
/// explicit and not judged here.
pub fn core_content_lost(before: &SceneDoc, after: &SceneDoc) -> Option<String> {
    if !before.overview.trim().is_empty() && after.overview.trim().is_empty() {
        return Some(format!("the overview of \"{}\" was emptied", before.name));
    }
    if before.events.len() >= 2 && after.events.len() * 2 < before.events.len() {
        return Some(format!(
            "\"{}\" lost {} of its {} events",
            before.name,
            before.events.len() - after.events.len(),
            before.events.len()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::scene::doc::SceneEvent;

    fn doc(overview: &str, events: usize) -> SceneDoc {
        let mut doc = SceneDoc::new("topic", Utc::now());
        doc.overview = overview.to_owned();
        doc.events = (0..events)
            .map(|i| SceneEvent {
                when: None,
                what: format!("event {i}"),
            })
            .collect();
        doc
    }

    #[test]
    fn a_write_deadline_follows_the_renewals_and_stops_edits_at_the_longest_run() {
        let s = Duration::from_secs;
        let claimed = Instant::now();
        let deadline = WriteDeadline::new(claimed, s(30), s(100));
        assert_eq!(*deadline.lock(), claimed + s(15), "half the first lease");
        let shared = deadline.clone();
        shared.renewed(claimed + s(10));
        assert_eq!(*deadline.lock(), claimed + s(25), "a renewal moves every clone");
        shared.renewed(claimed + s(5));
        assert_eq!(
            *deadline.lock(),
            claimed + s(25),
            "a renewal sent earlier moves nothing"
        );
        assert!(!deadline.passed() && !deadline.lease_passed());

        let long_ago = Instant::now() - s(1);
        let past_its_time = WriteDeadline::new(long_ago, s(30), Duration::from_millis(500));
        assert!(past_its_time.passed(), "no edit past the longest run");
        assert!(!past_its_time.lease_passed(), "but a rollback while the lease is safe");
        shared.end_now();
        assert!(deadline.lease_passed(), "a lost lease stops every write");
    }

    #[test]
    fn core_content_is_the_overview_and_most_of_the_event_chain() {
        assert_eq!(core_content_lost(&doc("about", 4), &doc("about, longer", 5)), None);
        assert_eq!(
            core_content_lost(&doc("about", 4), &doc("about", 2)),
            None,
            "half may go"
        );
        assert!(core_content_lost(&doc("about", 4), &doc("about", 1)).is_some());
        assert!(core_content_lost(&doc("about", 1), &doc("", 1)).is_some());
        // A scene that had no overview loses nothing by still having none.
        assert_eq!(core_content_lost(&doc("", 1), &doc("", 1)), None);
        // One event replaced by another is an edit, not a loss.
        assert_eq!(core_content_lost(&doc("about", 1), &doc("about", 0)), None);
    }
}
