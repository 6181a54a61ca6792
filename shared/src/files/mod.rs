//! The file store port: named byte objects under `/`-separated keys, for the Markdown
//! documents of L2 scenes, the L3 persona and skill versions.
//!
//! Backends: `s3` (any S3-protocol server: AWS, MinIO, COS; cluster) and `local` (a directory;
//! embedded). Both pass the conformance suite in `testsuite`.
//!
//! # Contract
//! - An object is written whole: a reader sees the old or the new bytes, never a mix or a
//!   prefix. There is no transaction across objects.
//! - Every call returns only once its effect is visible to every later call on any replica
//!   sharing the bucket or directory (S3 is strongly read-after-write consistent).
//! - Keys and prefixes are checked before any I/O (see [`validate_key`], [`validate_prefix`]);
//!   a bad one fails with [`FileError::InvalidKey`] and touches nothing.
//! - A prefix is a folder: it ends with `/`, so `scenes/` never matches `scenes-old/x`.
//! - A key that is also a folder of other keys (`a` and `a/b`) is a conflict: S3 stores both,
//!   the local directory refuses the second with [`FileError::Backend`]. Callers name their
//!   objects so that this never happens (documents end in `.md`, folders do not).

mod local;
mod s3;
#[cfg(any(test, feature = "testing"))]
pub mod testsuite;

use std::collections::HashSet;
use std::future::Future;
use std::time::Instant;

use async_trait::async_trait;

pub use local::LocalFileStore;
pub use s3::{S3Credentials, S3FileStore, S3Settings};

/// Longest key, in bytes: S3's own limit.
pub const MAX_KEY_BYTES: usize = 1024;

pub type FileResult<T> = Result<T, FileError>;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The key or prefix breaks the key rules; nothing was read or written.
    #[error("invalid file key {0:?}")]
    InvalidKey(String),
    /// The store could not be reached, timed out, or is overloaded; may succeed later.
    #[error("file store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store refused the call in a way a retry will not fix (no such bucket, access
    /// denied, a full disk, a key that is a folder).
    #[error("file store failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl FileError {
    /// Whether the same call may succeed later; drives retry and readiness decisions.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::InvalidKey(_) | Self::Backend(_) => false,
        }
    }

    /// The metric label of the error's kind.
    fn kind(&self) -> &'static str {
        match self {
            Self::InvalidKey(_) => "invalid_key",
            Self::Unavailable(_) => "unavailable",
            Self::Backend(_) => "backend",
        }
    }
}

/// One object as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The full key, including the listed prefix.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
}

#[async_trait]
pub trait FileStore: Send + Sync + 'static {
    /// The backend's name for logs and metrics: `s3` or `local`.
    fn backend(&self) -> &'static str;

    /// Stores `body` under `key`, replacing any object there. Atomic per object: a concurrent
    /// or later reader gets the old bytes or the new ones, never part of them. Once it
    /// returns, the object is durable (fsynced, or acknowledged by S3).
    async fn put(&self, key: &str, body: Vec<u8>) -> FileResult<()>;

    /// Reads the object under `key`; `None` when there is none.
    async fn get(&self, key: &str) -> FileResult<Option<Vec<u8>>>;

    /// Lists every object whose key starts with `prefix`, at any depth, sorted by key (byte
    /// order). `prefix` ends with `/`, or is empty for the whole store. Not a snapshot: objects
    /// written during the call may or may not show.
    async fn list(&self, prefix: &str) -> FileResult<Vec<ObjectMeta>>;

    /// Deletes the object under `key`. Returns `Ok(())` when there was none.
    async fn delete(&self, key: &str) -> FileResult<()>;

    /// Deletes every object under `prefix` (which ends with `/`) and returns how many there
    /// were. Not atomic: after a failure some are gone; calling again finishes the job.
    async fn delete_prefix(&self, prefix: &str) -> FileResult<usize>;

    /// Copies every object under `from` to the same relative key under `to` (both end with
    /// `/`, neither inside the other), overwriting what is there, and returns how many were
    /// copied. Objects under `to` with no counterpart are left alone. Not atomic; idempotent.
    async fn copy_prefix(&self, from: &str, to: &str) -> FileResult<usize>;

    /// Checks that the bucket or directory is reachable, for readiness probes.
    async fn check(&self) -> FileResult<()>;

    /// Makes `snapshot_prefix` a copy of `prefix`: whatever was under `snapshot_prefix` before
    /// is replaced, so the snapshot holds exactly the objects of `prefix`. Returns how many
    /// objects the snapshot holds.
    ///
    /// The snapshot is complete only when the call returns: record it (e.g. as a version row)
    /// after that, never before. Writers to `prefix` should be held off (the owner's lease)
    /// while it runs, or the snapshot mixes states.
    async fn snapshot(&self, prefix: &str, snapshot_prefix: &str) -> FileResult<usize> {
        mirror(self, prefix, snapshot_prefix).await
    }

    /// Makes `prefix` exactly equal to the snapshot under `snapshot_prefix`: objects of the
    /// snapshot are written back (re-created if deleted, overwritten if changed) and objects
    /// not in the snapshot are deleted. Returns how many objects `prefix` holds afterwards.
    ///
    /// Not atomic across objects: a reader during the call, or after a crash in the middle,
    /// may see a mix of the two states. It is idempotent, so such a mix is repaired by
    /// restoring again.
    async fn restore(&self, snapshot_prefix: &str, prefix: &str) -> FileResult<usize> {
        mirror(self, snapshot_prefix, prefix).await
    }
}

/// Makes `to` equal to `from`: copies first and deletes the leftovers after, so that no object
/// of `from` is ever missing from `to` for longer than its own copy takes.
async fn mirror<S: FileStore + ?Sized>(store: &S, from: &str, to: &str) -> FileResult<usize> {
    validate_prefix_pair(from, to)?;
    let copied = store.copy_prefix(from, to).await?;
    let source: HashSet<String> = store
        .list(from)
        .await?
        .into_iter()
        .filter_map(|object| object.key.strip_prefix(from).map(str::to_owned))
        .collect();
    for object in store.list(to).await? {
        let relative = object.key.strip_prefix(to).unwrap_or(&object.key);
        if !source.contains(relative) {
            store.delete(&object.key).await?;
        }
    }
    Ok(copied)
}

/// Checks a key against the rules every backend enforces: non-empty, at most
/// [`MAX_KEY_BYTES`] bytes, no leading `/`, no empty, `.` or `..` segment, no control
/// character and no backslash. They make a key a plain relative path on every file system
/// (no way out of a local root) and a portable S3 key.
pub fn validate_key(key: &str) -> FileResult<()> {
    let bad = key.is_empty()
        || key.len() > MAX_KEY_BYTES
        || key.contains('\\')
        || key.chars().any(char::is_control)
        || key
            .split('/')
            .any(|segment| segment.is_empty() || segment == "." || segment == "..");
    if bad {
        return Err(FileError::InvalidKey(key.to_owned()));
    }
    Ok(())
}

/// Checks a folder prefix: a valid key followed by `/`. The trailing `/` is what keeps
/// `scenes/` from also matching `scenes-old/`. The empty prefix (the whole store) is allowed
/// only where `allow_empty` says so (listing).
pub fn validate_prefix(prefix: &str, allow_empty: bool) -> FileResult<()> {
    if prefix.is_empty() && allow_empty {
        return Ok(());
    }
    match prefix.strip_suffix('/') {
        Some(folder) if validate_key(folder).is_ok() => Ok(()),
        _ => Err(FileError::InvalidKey(prefix.to_owned())),
    }
}

/// Checks the two prefixes of a copy: both valid, and neither inside the other (a copy into
/// its own subtree would copy its own output).
pub(crate) fn validate_prefix_pair(from: &str, to: &str) -> FileResult<()> {
    validate_prefix(from, false)?;
    validate_prefix(to, false)?;
    if to.starts_with(from) {
        return Err(FileError::InvalidKey(to.to_owned()));
    }
    if from.starts_with(to) {
        return Err(FileError::InvalidKey(from.to_owned()));
    }
    Ok(())
}

/// Runs one backend operation, recording its latency and, when it fails, its error kind.
pub(crate) async fn observe<T>(
    backend: &'static str,
    op: &'static str,
    call: impl Future<Output = FileResult<T>>,
) -> FileResult<T> {
    let started = Instant::now();
    let result = call.await;
    metrics::histogram!(crate::metrics::FILE_STORE_LATENCY, "backend" => backend, "op" => op)
        .record(started.elapsed().as_secs_f64());
    if let Err(error) = &result {
        metrics::counter!(
            crate::metrics::FILE_STORE_ERRORS,
            "backend" => backend,
            "op" => op,
            "kind" => error.kind()
        )
        .increment(1);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_rules() {
        for good in ["a", "scenes/北京.md", "a/b/c.txt", ".hidden/x", "a..b/c", "x y/z"] {
            assert!(validate_key(good).is_ok(), "{good:?}");
        }
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "./a",
            "a/./b",
            "a/..",
            "../a",
            "a\\b",
            "a\nb",
            "a\u{0}b",
            "a\u{7f}b",
            long.as_str(),
        ] {
            assert!(matches!(validate_key(bad), Err(FileError::InvalidKey(_))), "{bad:?}");
        }
        // The limit is in bytes: 342 three-byte characters are over it.
        assert!(validate_key(&"场".repeat(341)).is_ok());
        assert!(validate_key(&"场".repeat(342)).is_err());
    }

    #[test]
    fn prefixes_are_folders() {
        assert!(validate_prefix("a/", false).is_ok());
        assert!(validate_prefix("场景/北京/", false).is_ok());
        assert!(validate_prefix("", true).is_ok());
        for bad in ["", "a", "/", "a//", "/a/", "../"] {
            assert!(validate_prefix(bad, false).is_err(), "{bad:?}");
        }
        assert!(validate_prefix("a", true).is_err());
    }

    #[test]
    fn copies_never_nest() {
        assert!(validate_prefix_pair("a/", "b/").is_ok());
        assert!(validate_prefix_pair("a/", "ab/").is_ok());
        for (from, to) in [("a/", "a/"), ("a/", "a/b/"), ("a/b/", "a/")] {
            assert!(validate_prefix_pair(from, to).is_err(), "{from} -> {to}");
        }
    }

    #[test]
    fn only_unavailable_is_retryable() {
        assert!(FileError::Unavailable("timeout".into()).is_retryable());
        assert!(!FileError::Backend("denied".into()).is_retryable());
        assert!(!FileError::InvalidKey("a//b".into()).is_retryable());
    }
}
