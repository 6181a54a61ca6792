//! Blocking work that requests seldom wait for, at a lower CPU priority.
//!
//! The embedded index writes and optimizes in the process that serves the API, on the same
//! cores. At equal priority, a burst of indexing takes its share of the CPU from the requests,
//! and ingest latency grows with the index's backlog. Run at a higher nice value, indexing
//! gets whatever the requests leave: all of it while they are few, less while they are many,
//! when the backlog then waits a little longer instead of the callers. (Qdrant lowers its
//! HNSW builds to nice 10 for the same reason.)
//!
//! Linux keeps a nice value per thread, so each pool's threads set theirs once, at start, and
//! run nothing else. Raising the value back needs privileges, which is why a pool never lends
//! its threads to other work. Elsewhere the value is not applied.
//!
//! A nice value ranks threads only within their scheduling group: with autogroup or cgroups,
//! the whole process competes with Postgres as one, index threads included. A pool can
//! therefore also move its threads into a cgroup the operator prepared (one with a low
//! `cpu.weight` or `cpu.shares`, or with `cpu.idle` set), which competes with the other groups
//! on its own.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// The highest nice value, the lowest priority; 0 is that of everything else.
pub const MAX_NICE: i32 = 19;

/// Where a pool's threads run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Nice value, clamped to `0..=19`.
    pub nice: i32,
    /// A cgroup directory each thread joins at start (cgroup v2: `cgroup.threads`, which
    /// needs a threaded cgroup; v1: `tasks`).
    pub cgroup: Option<PathBuf>,
}

impl Placement {
    /// At nice value `nice`, in the process's own cgroup.
    pub fn nice(nice: i32) -> Self {
        Self { nice, cgroup: None }
    }
}

/// Runs `f` on a blocking thread placed as `placement` says. At nice 0 in the process's own
/// cgroup this is `tokio::task::spawn_blocking`.
pub fn spawn_blocking<F, T>(placement: &Placement, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let nice = placement.nice.clamp(0, MAX_NICE);
    let cgroup = placement.cgroup.as_deref();
    if nice == 0 && cgroup.is_none() {
        return tokio::task::spawn_blocking(f);
    }
    pool(nice, cgroup).spawn_blocking(f)
}

/// The pool of threads at `nice` in `cgroup`, started on first use and kept for the life of
/// the process: at most one per placement, and its idle threads exit after tokio's keep-alive
/// (10 s). There are as many pools as placements configured (two for an index), so they are
/// found by a scan that, unlike a map keyed by an owned path, allocates nothing on an index
/// write.
fn pool(nice: i32, cgroup: Option<&Path>) -> Handle {
    type Pool = (i32, Option<PathBuf>, &'static Runtime);
    static POOLS: OnceLock<Mutex<Vec<Pool>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let found = pools.iter().find(|(n, c, _)| *n == nice && c.as_deref() == cgroup);
    if let Some((_, _, runtime)) = found {
        return runtime.handle().clone();
    }
    let cgroup = cgroup.map(Path::to_path_buf);
    let joins = cgroup.clone();
    // Leaked on purpose: dropping a runtime inside async code panics, and a pool outlives
    // every index that uses it anyway.
    let runtime: &'static Runtime = Box::leak(Box::new(
        tokio::runtime::Builder::new_current_thread()
            .thread_name(format!("sediment-nice{nice}"))
            .on_thread_start(move || {
                lower_priority(nice);
                if let Some(cgroup) = &joins {
                    join_cgroup(cgroup);
                }
            })
            .build()
            .expect("a runtime without drivers builds"),
    ));
    pools.push((nice, cgroup, runtime));
    runtime.handle().clone()
}

/// The file of cgroup directory `dir` that takes a thread id: `cgroup.threads` (v2) or
/// `tasks` (v1). An error names what is missing, for a setting that points elsewhere.
pub fn cgroup_threads_file(dir: &Path) -> Result<PathBuf, String> {
    ["cgroup.threads", "tasks"]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|file| file.is_file())
        .ok_or_else(|| {
            format!(
                "{} is not a cgroup directory: it has neither cgroup.threads (v2) nor tasks (v1)",
                dir.display()
            )
        })
}

/// Moves the calling thread into cgroup `dir`. A failure costs only the placement, so it is
/// logged.
#[cfg(target_os = "linux")]
fn join_cgroup(dir: &Path) {
    let tid = rustix::thread::gettid().as_raw_nonzero();
    let joined = cgroup_threads_file(dir).and_then(|file| {
        // Appended, never truncated: a pool's threads start together, and a file that only
        // looks like a cgroup's (the tests') must keep every id written to it.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{tid}\n").as_bytes()))
            .map_err(|e| format!("write {}: {e}", file.display()))
    });
    if let Err(error) = joined {
        tracing::warn!(cgroup = %dir.display(), %error, "failed to move a background thread into its cgroup");
    }
}

#[cfg(not(target_os = "linux"))]
fn join_cgroup(dir: &Path) {
    tracing::warn!(cgroup = %dir.display(), "cgroups exist only on Linux; the thread stays where it is");
}

/// Sets the calling thread's nice value. A failure costs only priority, so it is logged.
#[cfg(target_os = "linux")]
fn lower_priority(nice: i32) {
    let thread = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(thread), nice) {
        tracing::warn!(nice, error = %e, "failed to lower a background thread's CPU priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority(_nice: i32) {}

/// The calling thread's nice value.
#[cfg(all(test, target_os = "linux"))]
fn current_nice() -> i32 {
    rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("read the thread's nice value")
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_at_the_pools_nice_value_and_leaves_other_threads_alone() {
        let before = current_nice();
        let at = |nice| spawn_blocking(&Placement::nice(nice), current_nice);
        assert_eq!(at(10).await.unwrap(), 10);
        assert_eq!(at(19).await.unwrap(), 19);
        // Values past the range are clamped to it.
        assert_eq!(at(40).await.unwrap(), 19);
        // Again on the same pool: its threads keep their value.
        assert_eq!(at(10).await.unwrap(), 10);
        // 0 is the ordinary blocking pool, and the caller's thread is untouched.
        assert_eq!(at(0).await.unwrap(), before);
        assert_eq!(current_nice(), before);
    }

    #[tokio::test]
    async fn a_panic_is_the_callers_error_and_the_pool_keeps_working() {
        let failed = spawn_blocking(&Placement::nice(7), || panic!("boom")).await;
        assert!(failed.unwrap_err().is_panic());
        assert_eq!(spawn_blocking(&Placement::nice(7), current_nice).await.unwrap(), 7);
    }

    fn tid() -> String {
        rustix::thread::gettid().as_raw_nonzero().to_string()
    }

    #[tokio::test]
    async fn threads_write_their_id_to_the_cgroups_threads_file() {
        // Directories shaped like cgroups, so the test runs anywhere; the kernel's side is
        // checked below where a writable hierarchy exists.
        let v1 = tempfile::tempdir().unwrap();
        std::fs::write(v1.path().join("tasks"), "").unwrap();
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("tasks"), "").unwrap();
        std::fs::write(v2.path().join("cgroup.threads"), "").unwrap();
        let placed = |dir: &Path, nice| Placement {
            nice,
            cgroup: Some(dir.to_path_buf()),
        };

        let ids = |file: &Path| -> Vec<String> {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        };
        let in_v1 = spawn_blocking(&placed(v1.path(), 4), tid).await.unwrap();
        assert!(ids(&v1.path().join("tasks")).contains(&in_v1));
        assert_eq!(spawn_blocking(&placed(v1.path(), 4), current_nice).await.unwrap(), 4);
        let in_v2 = spawn_blocking(&placed(v2.path(), 4), tid).await.unwrap();
        assert!(ids(&v2.path().join("cgroup.threads")).contains(&in_v2));
        assert_eq!(std::fs::read_to_string(v2.path().join("tasks")).unwrap(), "");
        // Another cgroup at the same nice value is another pool.
        assert_ne!(in_v1, in_v2);
        // Even at nice 0 a cgroup takes a pool of its own, not tokio's blocking threads.
        let at_zero = spawn_blocking(&placed(v1.path(), 0), tid).await.unwrap();
        assert!(ids(&v1.path().join("tasks")).contains(&at_zero));
        assert!(!ids(&v2.path().join("cgroup.threads")).contains(&at_zero));
    }

    #[tokio::test]
    async fn a_cgroup_that_cannot_be_joined_leaves_the_work_running() {
        let missing = tempfile::tempdir().unwrap().path().join("gone");
        let placement = Placement {
            nice: 5,
            cgroup: Some(missing.clone()),
        };
        assert_eq!(spawn_blocking(&placement, current_nice).await.unwrap(), 5);
        let err = cgroup_threads_file(&missing).unwrap_err();
        assert!(err.contains("is not a cgroup directory"), "{err}");
    }

    /// The kernel's side: where this process may create a cgroup in a v1 `cpu` hierarchy (as
    /// root on the CI machine), a pool thread really lands in it.
    #[tokio::test]
    async fn a_thread_joins_a_real_cgroup() {
        let root = Path::new("/sys/fs/cgroup/cpu");
        let name = format!("sediment-test-{}", std::process::id());
        let dir = root.join(&name);
        if std::fs::create_dir(&dir).is_err() {
            println!("skipped: cannot create a cgroup under {}", root.display());
            return;
        }
        let placement = Placement {
            nice: 6,
            cgroup: Some(dir.clone()),
        };
        let own = spawn_blocking(&placement, || std::fs::read_to_string("/proc/thread-self/cgroup"))
            .await
            .unwrap()
            .unwrap();
        // Move the pool's threads back so the cgroup can be removed.
        for tid in std::fs::read_to_string(dir.join("tasks")).unwrap().lines() {
            let _ = std::fs::write(root.join("tasks"), tid);
        }
        std::fs::remove_dir(&dir).unwrap();
        assert!(own.lines().any(|l| l.ends_with(&format!(":cpu:/{name}"))), "{own}");
    }
}
