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

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// The highest nice value, the lowest priority; 0 is that of everything else.
pub const MAX_NICE: i32 = 19;

/// Runs `f` on a blocking thread at nice value `nice` (clamped to `0..=19`). At 0 this is
/// `tokio::task::spawn_blocking`.
pub fn spawn_blocking<F, T>(nice: i32, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let nice = nice.clamp(0, MAX_NICE);
    if nice == 0 {
        return tokio::task::spawn_blocking(f);
    }
    pool(nice).spawn_blocking(f)
}

/// The pool of threads at `nice`, started on first use and kept for the life of the process:
/// at most one per value, and its idle threads exit after tokio's keep-alive (10 s).
fn pool(nice: i32) -> Handle {
    static POOLS: OnceLock<Mutex<HashMap<i32, &'static Runtime>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let runtime = pools.entry(nice).or_insert_with(|| {
        // Leaked on purpose: dropping a runtime inside async code panics, and a pool outlives
        // every index that uses it anyway.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .thread_name(format!("sediment-nice{nice}"))
            .on_thread_start(move || lower_priority(nice))
            .build()
            .expect("a runtime without drivers builds");
        Box::leak(Box::new(runtime))
    });
    runtime.handle().clone()
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
        assert_eq!(spawn_blocking(10, current_nice).await.unwrap(), 10);
        assert_eq!(spawn_blocking(19, current_nice).await.unwrap(), 19);
        // Values past the range are clamped to it.
        assert_eq!(spawn_blocking(40, current_nice).await.unwrap(), 19);
        // Again on the same pool: its threads keep their value.
        assert_eq!(spawn_blocking(10, current_nice).await.unwrap(), 10);
        // 0 is the ordinary blocking pool, and the caller's thread is untouched.
        assert_eq!(spawn_blocking(0, current_nice).await.unwrap(), before);
        assert_eq!(current_nice(), before);
    }

    #[tokio::test]
    async fn a_panic_is_the_callers_error_and_the_pool_keeps_working() {
        let failed = spawn_blocking(7, || panic!("boom")).await;
        assert!(failed.unwrap_err().is_panic());
        assert_eq!(spawn_blocking(7, current_nice).await.unwrap(), 7);
    }
}
