//! The local-directory backend of the file store: the embedded deployment's, and the cluster's
//! fallback when no bucket is configured (then each replica has its own files).
//!
//! Layout under the root: `objects/{key}` holds the objects, one file per key, so an operator
//! can read them with any tool; `tmp/` holds files being written. A put writes and fsyncs a
//! temp file, then renames it over the target (atomic on POSIX file systems within one
//! directory tree), then fsyncs the target's directory: a reader or a crash sees the old or the
//! new object, never part of one. Keeping temp files outside `objects/` keeps them out of
//! listings whatever their names, and they are on the same file system as their targets.
//!
//! The key rules (no `..`, no leading `/`, no backslash) make every key a path inside
//! `objects/`. Blocking file I/O runs on tokio's blocking pool.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    observe, validate_key, validate_prefix, validate_prefix_pair, FileError, FileResult, FileStore, ObjectMeta,
};

const BACKEND: &str = "local";
const OBJECTS_DIR: &str = "objects";
const TMP_DIR: &str = "tmp";
/// Temp files older than this when a store opens were left by a crash. Younger ones may
/// belong to another process writing the same directory right now.
const STALE_TMP_AGE: Duration = Duration::from_secs(3600);
/// Renames retried when a concurrent delete pruned the target's freshly created folder.
const RENAME_ATTEMPTS: usize = 3;

/// A file store in a local directory.
#[derive(Debug, Clone)]
pub struct LocalFileStore {
    objects: PathBuf,
    tmp: PathBuf,
}

/// An I/O error with the action and path it happened on.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}", path.display())]
struct IoFailure {
    action: &'static str,
    path: PathBuf,
    #[source]
    source: io::Error,
}

fn io_error(action: &'static str, path: &Path, source: io::Error) -> FileError {
    let transient = matches!(
        source.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::ResourceBusy
    );
    let failure = Box::new(IoFailure {
        action,
        path: path.to_owned(),
        source,
    });
    if transient {
        FileError::Unavailable(failure)
    } else {
        FileError::Backend(failure)
    }
}

/// Errors that mean "no object here": nothing at the path, the path is a folder of other keys,
/// or one of its parents is an object.
fn is_absent(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::IsADirectory | io::ErrorKind::NotADirectory
    )
}

impl LocalFileStore {
    /// Opens the store in `root`, creating the directory if needed, and removes temp files
    /// that a crash left behind.
    pub fn open(root: &Path) -> FileResult<Self> {
        let store = Self {
            objects: root.join(OBJECTS_DIR),
            tmp: root.join(TMP_DIR),
        };
        for dir in [&store.objects, &store.tmp] {
            fs::create_dir_all(dir).map_err(|e| io_error("create directory", dir, e))?;
        }
        store.remove_stale_temp_files();
        Ok(store)
    }

    /// Best effort: a leftover temp file wastes space but breaks nothing.
    fn remove_stale_temp_files(&self) {
        let Ok(entries) = fs::read_dir(&self.tmp) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let modified = entry.metadata().and_then(|m| m.modified());
            let stale = modified.is_ok_and(|at| now.duration_since(at).unwrap_or_default() > STALE_TMP_AGE);
            if stale {
                if let Err(error) = fs::remove_file(entry.path()) {
                    tracing::warn!(path = %entry.path().display(), %error, "failed to remove a stale temp file");
                }
            }
        }
    }

    /// The path of a validated key or folder (its trailing `/` dropped).
    fn path(&self, key: &str) -> PathBuf {
        let mut path = self.objects.clone();
        path.extend(key.split('/').filter(|segment| !segment.is_empty()));
        path
    }

    fn put_blocking(&self, key: &str, write: impl FnOnce(&Path) -> io::Result<()>) -> FileResult<()> {
        let target = self.path(key);
        let tmp = self.tmp.join(format!("{}.tmp", Uuid::new_v4().simple()));
        if let Err(e) = write(&tmp) {
            let _ = fs::remove_file(&tmp);
            return Err(io_error("write temp file", &tmp, e));
        }
        let result = self.rename_into_place(&tmp, &target);
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    fn rename_into_place(&self, tmp: &Path, target: &Path) -> FileResult<()> {
        let parent = target.parent().unwrap_or(&self.objects);
        let mut attempt = 1;
        loop {
            fs::create_dir_all(parent).map_err(|e| io_error("create folder", parent, e))?;
            match fs::rename(tmp, target) {
                Ok(()) => break,
                // `delete` prunes empty folders; it may have removed `parent` just now.
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < RENAME_ATTEMPTS => attempt += 1,
                Err(e) => return Err(io_error("move object into place", target, e)),
            }
        }
        // The rename is durable only once its directory entry is.
        fs::File::open(parent)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| io_error("sync folder", parent, e))
    }

    fn get_blocking(&self, key: &str) -> FileResult<Option<Vec<u8>>> {
        let path = self.path(key);
        match fs::read(&path) {
            Ok(body) => Ok(Some(body)),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(io_error("read object", &path, e)),
        }
    }

    fn list_blocking(&self, prefix: &str) -> FileResult<Vec<ObjectMeta>> {
        let mut found = Vec::new();
        let mut folders = vec![(self.path(prefix), prefix.to_owned())];
        while let Some((dir, key_prefix)) = folders.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                // The folder is gone (a concurrent delete), or the prefix names an object.
                Err(e) if is_absent(&e) => continue,
                Err(e) => return Err(io_error("list folder", &dir, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| io_error("list folder", &dir, e))?;
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    tracing::warn!(path = %entry.path().display(), "skipping a file whose name is not UTF-8");
                    continue;
                };
                let key = format!("{key_prefix}{name}");
                let file_type = match entry.file_type() {
                    Ok(file_type) => file_type,
                    Err(e) if is_absent(&e) => continue,
                    Err(e) => return Err(io_error("inspect", &entry.path(), e)),
                };
                if file_type.is_dir() {
                    folders.push((entry.path(), format!("{key}/")));
                } else if file_type.is_file() && validate_key(&key).is_ok() {
                    let size = match entry.metadata() {
                        Ok(metadata) => metadata.len(),
                        Err(e) if is_absent(&e) => continue,
                        Err(e) => return Err(io_error("inspect", &entry.path(), e)),
                    };
                    found.push(ObjectMeta { key, size });
                } else {
                    tracing::warn!(path = %entry.path().display(), "skipping a file that is not an object (a link, or a name that is not a valid key)");
                }
            }
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    fn delete_blocking(&self, key: &str) -> FileResult<()> {
        let path = self.path(key);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if is_absent(&e) => return Ok(()),
            Err(e) => return Err(io_error("delete object", &path, e)),
        }
        // Empty folders would block an object of the same name later (`a` after `a/b`).
        let mut folder = path.parent();
        while let Some(dir) = folder.filter(|dir| *dir != self.objects) {
            if fs::remove_dir(dir).is_err() {
                break; // not empty, or already gone: either way the pruning is done
            }
            folder = dir.parent();
        }
        Ok(())
    }

    fn copy_prefix_blocking(&self, from: &str, to: &str) -> FileResult<usize> {
        let mut copied = 0;
        for object in self.list_blocking(from)? {
            let relative = object.key.strip_prefix(from).unwrap_or(&object.key);
            let source = self.path(&object.key);
            let result = self.put_blocking(&format!("{to}{relative}"), |tmp| {
                fs::copy(&source, tmp)?;
                fs::File::open(tmp)?.sync_all()
            });
            match result {
                Ok(()) => copied += 1,
                // Deleted since the listing: like an object that was never there.
                Err(FileError::Backend(e)) if !source.exists() => {
                    tracing::debug!(key = %object.key, error = %e, "object vanished during a copy")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(copied)
    }

    fn check_blocking(&self) -> FileResult<()> {
        for dir in [&self.objects, &self.tmp] {
            let metadata = fs::metadata(dir).map_err(|e| io_error("inspect directory", dir, e))?;
            if !metadata.is_dir() {
                let source = io::Error::new(io::ErrorKind::NotADirectory, "not a directory");
                return Err(io_error("inspect directory", dir, source));
            }
        }
        Ok(())
    }
}

/// Runs blocking file I/O on tokio's blocking pool.
async fn blocking<T: Send + 'static>(call: impl FnOnce() -> FileResult<T> + Send + 'static) -> FileResult<T> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| FileError::Backend(Box::new(e)))?
}

fn write_synced(path: &Path, body: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(body)?;
    file.sync_all()
}

#[async_trait]
impl FileStore for LocalFileStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn put(&self, key: &str, body: Vec<u8>) -> FileResult<()> {
        observe(BACKEND, "put", async {
            validate_key(key)?;
            let (store, key) = (self.clone(), key.to_owned());
            blocking(move || store.put_blocking(&key, |tmp| write_synced(tmp, &body))).await
        })
        .await
    }

    async fn get(&self, key: &str) -> FileResult<Option<Vec<u8>>> {
        observe(BACKEND, "get", async {
            validate_key(key)?;
            let (store, key) = (self.clone(), key.to_owned());
            blocking(move || store.get_blocking(&key)).await
        })
        .await
    }

    async fn list(&self, prefix: &str) -> FileResult<Vec<ObjectMeta>> {
        observe(BACKEND, "list", async {
            validate_prefix(prefix, true)?;
            let (store, prefix) = (self.clone(), prefix.to_owned());
            blocking(move || store.list_blocking(&prefix)).await
        })
        .await
    }

    async fn delete(&self, key: &str) -> FileResult<()> {
        observe(BACKEND, "delete", async {
            validate_key(key)?;
            let (store, key) = (self.clone(), key.to_owned());
            blocking(move || store.delete_blocking(&key)).await
        })
        .await
    }

    async fn delete_prefix(&self, prefix: &str) -> FileResult<usize> {
        observe(BACKEND, "delete_prefix", async {
            validate_prefix(prefix, false)?;
            let (store, prefix) = (self.clone(), prefix.to_owned());
            blocking(move || {
                let objects = store.list_blocking(&prefix)?;
                for object in &objects {
                    store.delete_blocking(&object.key)?;
                }
                Ok(objects.len())
            })
            .await
        })
        .await
    }

    async fn copy_prefix(&self, from: &str, to: &str) -> FileResult<usize> {
        observe(BACKEND, "copy_prefix", async {
            validate_prefix_pair(from, to)?;
            let (store, from, to) = (self.clone(), from.to_owned(), to.to_owned());
            blocking(move || store.copy_prefix_blocking(&from, &to)).await
        })
        .await
    }

    async fn check(&self) -> FileResult<()> {
        observe(BACKEND, "check", async {
            let store = self.clone();
            blocking(move || store.check_blocking()).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::testsuite;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_suite() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalFileStore::open(&dir.path().join("files")).unwrap();
        testsuite::file_store_suite(&store).await;
    }

    #[tokio::test]
    async fn keys_never_escape_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let store = LocalFileStore::open(&root).unwrap();
        let outside = dir.path().join("escaped");
        let attempts = [
            "../escaped",
            "../../escaped",
            "a/../../escaped",
            "a/../../../escaped",
            "/escaped",
            "..\\escaped",
            "a\\..\\..\\escaped",
            "..",
            "./../escaped",
        ];
        for key in attempts {
            let err = store.put(key, b"x".to_vec()).await.unwrap_err();
            assert!(matches!(err, FileError::InvalidKey(_)), "{key}: {err:?}");
            assert!(matches!(store.get(key).await, Err(FileError::InvalidKey(_))), "{key}");
            assert!(
                matches!(store.delete(key).await, Err(FileError::InvalidKey(_))),
                "{key}"
            );
        }
        for prefix in ["../", "../../", "a/../../", "/"] {
            assert!(
                matches!(store.list(prefix).await, Err(FileError::InvalidKey(_))),
                "{prefix}"
            );
            assert!(matches!(
                store.delete_prefix(prefix).await,
                Err(FileError::InvalidKey(_))
            ));
            assert!(matches!(
                store.copy_prefix("a/", prefix).await,
                Err(FileError::InvalidKey(_))
            ));
        }
        assert!(!outside.exists());
        let mut names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["root"], "something was written outside the root");
        assert!(store.list("").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn objects_are_plain_files_and_temp_files_stay_out_of_listings() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalFileStore::open(dir.path()).unwrap();
        store.put("场景/北京.md", "# 北京".as_bytes().to_vec()).await.unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("objects/场景/北京.md")).unwrap(),
            "# 北京"
        );
        // A temp file a crashed writer left: never listed; removed at the next open once old.
        fs::write(dir.path().join("tmp/left-over.tmp"), b"partial").unwrap();
        let keys: Vec<_> = store.list("").await.unwrap().into_iter().map(|o| o.key).collect();
        assert_eq!(keys, ["场景/北京.md"]);
        let old = SystemTime::now() - STALE_TMP_AGE - Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(dir.path().join("tmp/left-over.tmp"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        fs::write(dir.path().join("tmp/in-flight.tmp"), b"young").unwrap();
        LocalFileStore::open(dir.path()).unwrap();
        assert!(!dir.path().join("tmp/left-over.tmp").exists());
        assert!(dir.path().join("tmp/in-flight.tmp").exists());
    }

    #[tokio::test]
    async fn deleting_the_last_object_of_a_folder_frees_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalFileStore::open(dir.path()).unwrap();
        store.put("a/b/c", b"1".to_vec()).await.unwrap();
        // `a` is a folder now: an object of that name is refused, and nothing breaks.
        let err = store.put("a", b"2".to_vec()).await.unwrap_err();
        assert!(matches!(err, FileError::Backend(_)), "{err:?}");
        assert_eq!(store.get("a").await.unwrap(), None);
        assert_eq!(store.get("a/b/c").await.unwrap().as_deref(), Some(&b"1"[..]));
        store.delete("a/b/c").await.unwrap();
        assert!(!dir.path().join("objects/a").exists());
        store.put("a", b"2".to_vec()).await.unwrap();
        assert_eq!(store.get("a").await.unwrap().as_deref(), Some(&b"2"[..]));
        assert!(fs::read_dir(dir.path().join("tmp")).unwrap().next().is_none());
    }

    #[tokio::test]
    async fn check_fails_when_the_directory_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalFileStore::open(&dir.path().join("files")).unwrap();
        store.check().await.unwrap();
        fs::remove_dir_all(dir.path().join("files")).unwrap();
        assert!(store.check().await.is_err());
    }
}
