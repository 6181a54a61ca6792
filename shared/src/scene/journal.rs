//! The snapshot of a scene run, taken copy-on-write: before the run first writes an object, the
//! object's previous content (or a note that it did not exist) goes into the run's journal,
//! `snapshots/scenes/{token}/`. Restoring the journal puts every touched object back as it was
//! before the run, which is the folder as it was before the run.
//!
//! Why not copy the whole folder up front: a run usually edits one or two of up to 15 scenes,
//! and on S3 a folder copy costs a request per object twice (copy, then delete), every run.
//!
//! # Crash safety
//! Each journal entry is durable before the write it covers, so whatever a run wrote has its
//! entry. Restoring an entry whose write never happened writes the original back: harmless.
//! Restoring is idempotent and the journal is deleted last, so a restore that dies is redone by
//! the next one.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use uuid::Uuid;

use super::paths;
use crate::domain::Tenant;
use crate::files::{FileError, FileResult, FileStore};

/// The suffix of an entry that says "this object did not exist before the run".
const ABSENT: &str = ".absent";

/// One run's journal.
pub struct Journal {
    files: Arc<dyn FileStore>,
    owner: String,
    prefix: String,
    /// Contents the run has already read, so that journaling them costs no extra read.
    known: HashMap<String, Option<Vec<u8>>>,
    saved: HashSet<String>,
}

impl Journal {
    pub fn new(files: Arc<dyn FileStore>, tenant: &Tenant, token: Uuid) -> Self {
        Self {
            files,
            owner: paths::owner_prefix(tenant),
            prefix: prefix(tenant, token),
            known: HashMap::new(),
            saved: HashSet::new(),
        }
    }

    /// Records what `key` held when the run read it (`None`: no such object).
    pub fn know(&mut self, key: &str, content: Option<Vec<u8>>) {
        self.known.insert(key.to_owned(), content);
    }

    /// Saves `key`'s content before the run's first write to it. Keys outside the owner's
    /// folder are refused: the journal could not put them back.
    pub async fn before_write(&mut self, key: &str) -> FileResult<()> {
        if self.saved.contains(key) {
            return Ok(());
        }
        let Some(relative) = key.strip_prefix(&self.owner) else {
            return Err(FileError::InvalidKey(format!(
                "{key} is outside the owner's folder {}",
                self.owner
            )));
        };
        let original = match self.known.remove(key) {
            Some(content) => content,
            None => self.files.get(key).await?,
        };
        match original {
            Some(bytes) => self.files.put(&format!("{}{relative}", self.prefix), bytes).await?,
            None => {
                self.files
                    .put(&format!("{}{relative}{ABSENT}", self.prefix), Vec::new())
                    .await?
            }
        }
        self.saved.insert(key.to_owned());
        Ok(())
    }

    /// Object writes the journal made.
    pub fn entries(&self) -> usize {
        self.saved.len()
    }
}

fn prefix(tenant: &Tenant, token: Uuid) -> String {
    paths::scene_snapshot_prefix(tenant, &token.to_string())
}

/// Puts every object the run with `token` touched back as it was before the run, then deletes
/// the journal. Returns how many objects were restored.
pub async fn restore(files: &dyn FileStore, tenant: &Tenant, token: Uuid) -> FileResult<usize> {
    let owner = paths::owner_prefix(tenant);
    let prefix = prefix(tenant, token);
    let entries = files.list(&prefix).await?;
    for entry in &entries {
        let relative = &entry.key[prefix.len()..];
        match relative.strip_suffix(ABSENT) {
            Some(created) => files.delete(&format!("{owner}{created}")).await?,
            None => {
                // A journal entry listed a moment ago is gone only if another restore of the
                // same journal finished first; then there is nothing left to do for it.
                if let Some(bytes) = files.get(&entry.key).await? {
                    files.put(&format!("{owner}{relative}"), bytes).await?;
                }
            }
        }
    }
    discard(files, tenant, token).await?;
    Ok(entries.len())
}

/// Deletes the journal of `token` (after its run committed, or was restored).
pub async fn discard(files: &dyn FileStore, tenant: &Tenant, token: Uuid) -> FileResult<usize> {
    files.delete_prefix(&prefix(tenant, token)).await
}
