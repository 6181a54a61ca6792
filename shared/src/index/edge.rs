//! The embedded `SearchIndex` backend: one Qdrant Edge shard (`qdrant-edge` 0.7.2) in a directory.
//!
//! Point schema (the same as the Qdrant-server backend's collection):
//! - a sparse vector `bm25` with the IDF modifier, computed client side by [`Bm25`];
//! - payload `scope` (tenant and kind), `session_id`, `tags` and `task`, each with a keyword index
//!   (filtered queries are ~100× slower without them);
//! - a dense vector `dense` (cosine) of the embedder's dimension, when one is configured. A
//!   shard records its dense dimension when it is created; `open` refuses a shard whose
//!   dimension differs from the configured one (a different embedding model), since its vectors
//!   could not be compared with the new model's. Rebuilding means removing the directory: the
//!   caller then re-indexes from the store (see `EdgeIndex::created`).
//!
//! # Concurrency
//! Every `EdgeShard` call blocks, so each runs on `spawn_blocking` with the shard behind an
//! `Arc`. Searches and counts run in parallel with anything, and so do writes with an optimizer
//! run (as in the Qdrant server). Two hazards of edge's `flush`, which *panics* instead of
//! waiting when a lock is taken:
//! - the WAL mutex, held by `update`: updates and flushes are serialized by `write_gate`, and
//!   concurrent writers share one flush (group commit, see `Inner::write`). Concurrent
//!   upserts go further and share one update too (see `Inner::upsert`);
//! - the segment-holder lock, write-locked for a moment each time the optimizer swaps
//!   segments: `flush` first waits for that lock to be free (a blocking read through `info`),
//!   and if the optimizer still wins the race, the panic is caught (nothing has changed
//!   yet when it fires) and the flush retried.
//!
//! Optimizer runs are serialized by `optimize_lock`.
//!
//! # Priority
//! Writes and optimizer runs run at nice [`DEFAULT_BACKGROUND_NICE`] (see `crate::background`;
//! `with_background` changes it and can put each in a cgroup), searches and counts at the
//! priority of the requests that wait for them. Under a load that fills the cores, ingest and
//! queries keep their latency and the index's backlog grows instead, to be worked off as the
//! load falls. The one request that waits for a write, a memory edited through the API,
//! answers later then. So does a query that needs a lock a write holds (the segment it updates;
//! the segment holder during an optimizer's swap): it waits for that write at the write's
//! priority.
//!
//! # Durability
//! `upsert` and `delete` return after `EdgeShard::flush` (WAL and every segment, fsynced).
//! `update` alone is not enough: it writes the WAL to an unsynced mmap, and `EdgeShard::load` in
//! 0.7.2 never replays the WAL — after a crash only flushed segment data exists.
//! `upsert_unsynced` returns after the update, and `sync` flushes once for every write before
//! it: a flush costs about as much however many writes it covers (fsync and msync of the WAL
//! and the appendable segment), so the L0 indexer, which keeps its own record of what is
//! durable, pays for one per sync interval instead of one per round.
//!
//! # Optimization
//! Edge never optimizes by itself. After at least `optimize_every` upserted points, the upsert
//! that crosses the threshold starts one background run (on a blocking thread, at most one at
//! a time) and returns without waiting for it. Edge's `optimize` plans again after each
//! optimization until it finds nothing to do, so under sustained ingest one run lasts as
//! long as the ingest (`sediment_index_optimizing` stays 1): it keeps turning the appendable
//! segment into an indexed one and merging the small segments that makes.
//!
//! Two settings keep a run cheap enough to happen while queries are served:
//! - segments are capped at [`DEFAULT_MAX_SEGMENT_KB`], or [`KEYWORD_MAX_SEGMENT_KB`] in a
//!   shard without dense vectors. Edge's default cap (hundreds of MB) lets the indexing
//!   optimizer fold every new batch into the one big indexed segment and rebuild its HNSW
//!   graph from scratch, so each run grew with the whole index (about a minute at 100k points
//!   on 2 cores, with queries at 35 ms p50 meanwhile). Capped, a run rebuilds at most one
//!   segment's worth.
//! - an HNSW build uses [`index_build_threads`]: half the cores, so the other half keep
//!   answering queries and taking writes.
//!
//! Both are applied on every open, so shards created by older versions adopt them too.
//!
//! # Known limits of qdrant-edge 0.7.2
//! - The WAL is never truncated while the shard is open (edge does not acknowledge flushed
//!   operations), so `wal/` grows by about the size of every write the process makes. Nor is
//!   it ever read back, so each open deletes all but its newest closed segment before loading
//!   ([`prune_wal`]): what a restart keeps is one segment, not every write ever made.
//! - The directory is held with an exclusive file lock while open: two processes (or two
//!   `EdgeIndex`es) on one shard would corrupt it.

use std::collections::HashMap;
use std::fs::{File, TryLockError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use qdrant_edge::{
    Condition, CountRequest, EdgeConfig, EdgeOptimizersConfig, EdgeShard, EdgeSparseVectorParams, FieldCondition,
    FieldIndexOperations, Filter, JsonPath, Match, Modifier, NamedQuery, PayloadFieldSchema, PayloadSchemaType,
    PointId, PointInsertOperations, PointOperations, PointStruct, QueryEnum, QueryRequest, ScoringQuery,
    UpdateOperation, Vector, VectorInternal, Vectors, WithPayloadInterface, WithVector,
};
use qdrant_edge::{
    Distance, EdgeVectorParams, Fusion as EdgeFusion, HnswIndexConfig, Prefetch, ScrollRequest, WalOptions,
};
use uuid::Uuid;

use super::{
    check_dense, index_version, payload_terms, scope_terms, Bm25, IndexError, IndexHit, IndexPoint, IndexQuery,
    IndexResult, PayloadValue, Plan, PointKind, Ranking, SearchIndex, SparseVector, BM25_VECTOR, DENSE_VECTOR,
    KEYWORD_FIELDS, TAGS,
};
use crate::background::{self, Placement};
use crate::domain::Tenant;
use crate::metrics as m;
use crate::runtime::error_chain;
// Poison is ignored: the guarded state (nothing, or the durable-write mark, which only moves
// after a successful flush) is consistent even if a holder panicked.
use crate::sync::lock;

/// Size (KB) at which the optimizer turns the appendable segment into an indexed one. Edge's
/// flush rewrites state proportional to the appendable segment, so a small one keeps every
/// durable write cheap: measured with `bench_index`, 100-point upserts at 30k points cost
/// 25 ms at 500 KB against 50 ms at edge's default, and queries got faster too (p50 0.85 ms
/// against 2.0 ms). Persisted with the shard, and applied to existing shards on open.
pub const DEFAULT_INDEXING_THRESHOLD_KB: usize = 500;

/// Largest segment (KB of vector data) the optimizer builds in a shard with dense vectors:
/// about 20k points with 384-dim dense vectors. Bounds the work of one optimizer run; see the
/// module docs.
pub const DEFAULT_MAX_SEGMENT_KB: usize = 32 * 1024;

/// The same for a keyword-only shard. Edge measures a segment by its largest vector, and a
/// BM25 vector takes a few hundred bytes where a 384-dim dense one takes 1.5 KB, so at the
/// dense cap a keyword-only segment would hold several times the points. Edge merges the small
/// segments each optimizer run makes into the smallest others, until the sum reaches the cap:
/// the larger the cap, the more often each point is rewritten, and under sustained ingest
/// the optimizer fell ever further behind. Measured with `bench embedded mixed` over 60 s at
/// 5,000 turns/s on 2 cores (medians of 6 rounds each): append p99 43 ms at 32 MB against
/// 20 ms at 4 MB, commit-to-indexed p99 9.2 s against 2.8 s.
pub const KEYWORD_MAX_SEGMENT_KB: usize = 4 * 1024;

/// The optimizer settings of a shard with dense vectors or of a keyword-only one.
fn default_optimizers(dense: bool) -> EdgeOptimizersConfig {
    EdgeOptimizersConfig {
        indexing_threshold: Some(DEFAULT_INDEXING_THRESHOLD_KB),
        max_segment_size: Some(if dense {
            DEFAULT_MAX_SEGMENT_KB
        } else {
            KEYWORD_MAX_SEGMENT_KB
        }),
        ..EdgeOptimizersConfig::default()
    }
}

/// Free space (MB) the index volume must keep for a write or an optimizer run to start. Edge
/// writes its WAL and segments through memory maps, and a page that cannot be allocated on a
/// full volume is a SIGBUS: an embedded server whose index volume filled died of signal 7 on
/// its next index write, taking recall and ingest down with it. Refused before it starts, the
/// write is a retryable error, searches go on, and indexing catches up once space is freed.
/// 128 MB holds what one optimizer run builds (a segment of [`DEFAULT_MAX_SEGMENT_KB`] of vectors
/// with its graph and payload) and a WAL segment.
pub const DEFAULT_MIN_FREE_MB: u64 = 128;

/// Threads one HNSW build may use: half the machine's cores, at least one.
pub fn index_build_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Edge persists its config under this name (`EDGE_CONFIG_FILE`, crate-private in 0.7.2); its
/// presence means the shard was created before.
const EDGE_CONFIG_FILE: &str = "edge_config.json";
/// The nice value writes and optimizer runs get by default: their threads get a tenth of the
/// CPU share of a request's or a query's while both want the cores (Linux weights nice 10 at
/// 110 against 1024 at 0), and all of it when requests leave the cores idle.
pub const DEFAULT_BACKGROUND_NICE: i32 = 10;
/// Our exclusive lock on the directory.
const LOCK_FILE: &str = "sediment.lock";
/// Records the text analysis and payload layout the shard's points were made with
/// (`index_version`). Shards from before it (which recorded the text analysis alone, in
/// `sediment-text-version`) have none, and are rebuilt.
const INDEX_VERSION_FILE: &str = "sediment-index-version";
/// How long `open` waits for a previous holder of the directory lock (e.g. a dropped
/// `EdgeIndex` whose background optimizer run is still finishing).
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// The panic message of `EdgeShard::flush` when the segment holder is write-locked (its
/// `try_read().expect(..)`); any other panic there is an I/O error.
const FLUSH_CONTENDED: &str = "segment holder lock acquired";
/// Retries of a contended flush (backing off 2 ms .. 64 ms, about 1 s in all).
const FLUSH_ATTEMPTS: u32 = 20;

/// Upserts queued by concurrent writers. One of them, the leader, applies everything queued
/// as one update (and one flush, if any of them waits for durability), and records each
/// writer's outcome under its ticket.
#[derive(Default)]
struct Combiner {
    /// Per writer: its ticket, whether it waits for durability, its points.
    queue: Vec<(u64, bool, Vec<qdrant_edge::PointStructPersisted>)>,
    next_ticket: u64,
    leading: bool,
    /// Outcomes not yet picked up: `None` for success, else whether it is retryable and why.
    done: HashMap<u64, Option<(bool, String)>>,
}

/// Ends a leader's turn if its update panicked: fails the tickets it held and lets a waiting
/// writer lead, rather than leaving them all waiting for an outcome that never comes.
struct LeaderGuard<'a> {
    inner: &'a Inner,
    tickets: Vec<u64>,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut combiner = lock(&self.inner.combiner);
        for ticket in self.tickets.drain(..) {
            combiner
                .done
                .insert(ticket, Some((true, "the edge update panicked".to_owned())));
        }
        combiner.leading = false;
        self.inner.combined.notify_all();
    }
}

/// The Qdrant Edge implementation of [`SearchIndex`].
pub struct EdgeIndex {
    inner: Arc<Inner>,
    /// Where writes run.
    writes: Placement,
    /// Where optimizer runs run.
    optimizer: Placement,
}

struct Inner {
    // Field order is drop order: the shard flushes on drop, then the directory is unlocked.
    /// Always `Some` until `Drop` takes it out.
    shard: Option<EdgeShard>,
    _dir_lock: File,
    dir: PathBuf,
    /// Bytes the volume must keep free for a write to start; 0: not checked.
    min_free: AtomicU64,
    bm25: Bm25,
    dense_dimension: Option<usize>,
    /// Whether `open` created the shard (rather than loading one).
    created: bool,
    /// Held by each `update` and each flush; see the module docs.
    write_gate: Mutex<()>,
    /// Updates applied so far (a sequence, bumped under `write_gate`).
    written: AtomicU64,
    /// The highest `written` value known durable. Held while flushing, so concurrent writers
    /// line up behind one flush and most find their update already covered (group commit).
    flushed: Mutex<u64>,
    /// Upserts waiting to be applied as one update (see `Inner::upsert`), and its wake-up.
    combiner: Mutex<Combiner>,
    combined: Condvar,
    /// Held by each optimizer run.
    optimize_lock: Mutex<()>,
    optimize_every: usize,
    upserted_since_optimize: AtomicUsize,
    optimizing: AtomicBool,
    optimizations: AtomicU64,
}

impl std::fmt::Debug for EdgeIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeIndex")
            .field("path", &self.inner.shard().path())
            .field("optimize_every", &self.inner.optimize_every)
            .finish_non_exhaustive()
    }
}

impl EdgeIndex {
    /// Opens the shard in `dir`, creating the directory and the shard if they do not exist.
    ///
    /// Blocks (call it at startup, or from `spawn_blocking`): it waits up to 30 s for the
    /// directory lock, loads the segments and ensures the payload indexes. A background
    /// optimizer run starts after every `optimize_every` upserted points; 0 disables it.
    /// `dense_dimension` is the embedder's (`None`: keyword only); an existing shard built with
    /// another dimension is refused.
    pub fn open(dir: &Path, optimize_every: usize, dense_dimension: Option<usize>) -> IndexResult<Self> {
        Self::open_with(dir, optimize_every, dense_dimension, default_optimizers, None)
    }

    /// Like `open`, but a shard created here gets tiny optimizer thresholds (50 KB to index a
    /// segment, 400 KB per segment, 2 segments) and 8 KiB WAL segments, so that a few thousand
    /// points go through real optimizations and WAL rotations. For tests; the settings persist
    /// with the shard.
    #[cfg(feature = "testing")]
    pub fn open_with_small_segments(
        dir: &Path,
        optimize_every: usize,
        dense_dimension: Option<usize>,
    ) -> IndexResult<Self> {
        let small = |_dense| EdgeOptimizersConfig {
            indexing_threshold: Some(50),
            max_segment_size: Some(400),
            default_segment_number: Some(2),
            ..EdgeOptimizersConfig::default()
        };
        let wal = WalOptions {
            segment_capacity: 8 * 1024,
            ..WalOptions::default()
        };
        Self::open_with(dir, optimize_every, dense_dimension, small, Some(wal))
    }

    /// `optimizers` gives the optimizer settings for a shard with dense vectors (`true`) or
    /// a keyword-only one; `wal`, the WAL settings of a shard created here (`None`: edge's).
    fn open_with(
        dir: &Path,
        optimize_every: usize,
        dense_dimension: Option<usize>,
        optimizers: fn(bool) -> EdgeOptimizersConfig,
        wal: Option<WalOptions>,
    ) -> IndexResult<Self> {
        std::fs::create_dir_all(dir).map_err(io)?;
        let dir_lock = lock_dir(dir)?;

        let mut created = !dir.join(EDGE_CONFIG_FILE).exists();
        if !created && !index_version_matches(dir)? {
            // The index is derived data: rebuilding it from the store is always safe, and its
            // keyword vectors or filters no longer match what queries compute.
            tracing::warn!(
                dir = %dir.display(),
                version = %index_version(),
                "the index was built with another text analysis or payload layout: rebuilding it from the store"
            );
            clear_shard(dir)?;
            created = true;
        }
        if !created {
            prune_wal(dir)?;
        }
        let shard = if created {
            EdgeShard::new(
                dir,
                shard_config(optimizers(dense_dimension.is_some()), dense_dimension, wal),
            )
        } else {
            EdgeShard::load(dir, None)
        }
        .map_err(backend)?;
        check_config(dir, &shard.config(), dense_dimension)?;
        // What the shard holds decides, not this process: a keyword-only process may open a
        // shard with dense vectors, whose segments must keep their size.
        let dense = shard.config().vectors.contains_key(DENSE_VECTOR);
        adopt_optimizer_settings(&shard, optimizers(dense))?;
        if created {
            std::fs::write(dir.join(INDEX_VERSION_FILE), index_version()).map_err(io)?;
        }

        let inner = Inner {
            shard: Some(shard),
            _dir_lock: dir_lock,
            dir: dir.to_owned(),
            min_free: AtomicU64::new(DEFAULT_MIN_FREE_MB << 20),
            bm25: Bm25::new(),
            dense_dimension,
            created,
            write_gate: Mutex::new(()),
            written: AtomicU64::new(0),
            flushed: Mutex::new(0),
            combiner: Mutex::default(),
            combined: Condvar::new(),
            optimize_lock: Mutex::new(()),
            optimize_every,
            upserted_since_optimize: AtomicUsize::new(0),
            optimizing: AtomicBool::new(false),
            optimizations: AtomicU64::new(0),
        };
        inner.ensure_payload_indexes()?;
        Ok(Self {
            inner: Arc::new(inner),
            writes: Placement::nice(DEFAULT_BACKGROUND_NICE),
            optimizer: Placement::nice(DEFAULT_BACKGROUND_NICE),
        })
    }

    /// Keeps `mb` MB free on the index volume instead of [`DEFAULT_MIN_FREE_MB`]: writes and
    /// optimizer runs that would start with less free are refused as unavailable. 0 turns the
    /// check off.
    pub fn with_min_free_mb(self, mb: u64) -> Self {
        self.inner.min_free.store(mb << 20, Ordering::Relaxed);
        self
    }

    /// Places writes and optimizer runs instead of at nice [`DEFAULT_BACKGROUND_NICE`] in the
    /// process's cgroup; nice 0 runs them at the priority of queries and requests.
    pub fn with_background(mut self, writes: Placement, optimizer: Placement) -> Self {
        self.writes = writes;
        self.optimizer = optimizer;
        self
    }

    /// Runs the optimizer now and waits for it (after a background run in progress, if any).
    /// Returns whether it changed any segment.
    pub async fn optimize(&self) -> IndexResult<bool> {
        self.blocking_at(&self.optimizer, Inner::optimize).await
    }

    /// The shard's segment count, points and indexed vectors, for benchmarks.
    #[cfg(feature = "testing")]
    pub fn shard_summary(&self) -> String {
        let info = self.inner.shard().info();
        format!(
            "{} segments, {} points, {} indexed vectors, optimizing: {}",
            info.segments_count,
            info.points_count,
            info.indexed_vectors_count,
            self.inner.optimizing.load(Ordering::Acquire)
        )
    }

    /// Updates (upserts and deletes, after combining) applied since `open`, for tests.
    #[cfg(feature = "testing")]
    pub fn writes(&self) -> u64 {
        self.inner.written.load(Ordering::Acquire)
    }

    /// Points in the shard, for benchmarks.
    #[cfg(feature = "testing")]
    pub fn shard_points(&self) -> usize {
        self.inner.shard().info().points_count
    }

    /// Whether a background optimizer run is in progress, for benchmarks.
    #[cfg(feature = "testing")]
    pub fn optimizing(&self) -> bool {
        self.inner.optimizing.load(Ordering::Acquire)
    }

    /// Returns how many optimizer runs (background or explicit) changed segments since `open`.
    pub fn optimizations(&self) -> u64 {
        self.inner.optimizations.load(Ordering::Acquire)
    }

    /// Runs `f` on a blocking thread at the priority of requests: for searches and counts.
    async fn blocking<T, F>(&self, f: F) -> IndexResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> IndexResult<T> + Send + 'static,
    {
        self.blocking_at(&Placement::default(), f).await
    }

    /// Like `blocking`, placed for writes (see the module docs).
    async fn background<T, F>(&self, f: F) -> IndexResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> IndexResult<T> + Send + 'static,
    {
        self.blocking_at(&self.writes, f).await
    }

    async fn blocking_at<T, F>(&self, placement: &Placement, f: F) -> IndexResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> IndexResult<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        background::spawn_blocking(placement, move || f(&inner))
            .await
            .map_err(|e| IndexError::Backend(Box::new(e)))?
    }

    async fn upsert_with(&self, points: &[IndexPoint], durable: bool) -> IndexResult<()> {
        if points.is_empty() {
            return Ok(());
        }
        let count = points.len();
        let points = points.to_vec();
        self.background(move |inner| inner.upsert(&points, durable)).await?;
        self.note_upserted(count);
        Ok(())
    }

    /// Counts upserted points and starts a background optimizer run when due.
    fn note_upserted(&self, points: usize) {
        let inner = &self.inner;
        if inner.optimize_every == 0 {
            return;
        }
        let pending = inner.upserted_since_optimize.fetch_add(points, Ordering::AcqRel) + points;
        if pending < inner.optimize_every {
            return;
        }
        if inner
            .optimizing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        // Points upserted while the run is planned count toward the next one.
        inner.upserted_since_optimize.fetch_sub(pending, Ordering::AcqRel);
        let inner = Arc::clone(inner);
        metrics::gauge!(m::INDEX_OPTIMIZING).set(1.0);
        background::spawn_blocking(&self.optimizer, move || {
            let started = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| inner.optimize()));
            let elapsed = started.elapsed();
            inner.optimizing.store(false, Ordering::Release);
            metrics::gauge!(m::INDEX_OPTIMIZING).set(0.0);
            metrics::histogram!(m::INDEX_OPTIMIZER_SECONDS).record(elapsed.as_secs_f64());
            metrics::gauge!(m::INDEX_SEGMENTS).set(inner.shard().info().segments_count as f64);
            let outcome = match result {
                Ok(Ok(changed)) => {
                    tracing::debug!(
                        changed,
                        elapsed_ms = elapsed.as_millis() as u64,
                        "search index optimizer ran"
                    );
                    if changed {
                        "changed"
                    } else {
                        "unchanged"
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %error_chain(&e), "failed to optimize search index");
                    "failed"
                }
                Err(_) => {
                    tracing::error!("search index optimizer panicked");
                    "failed"
                }
            };
            metrics::counter!(m::INDEX_OPTIMIZER_RUNS, "result" => outcome).increment(1);
        });
    }
}

impl Drop for Inner {
    /// Edge's own drop flushes and panics on failure (say, the directory was removed under a
    /// process that is exiting); contain it, so dropping an index never aborts the process.
    fn drop(&mut self) {
        if let Some(shard) = self.shard.take() {
            if catch_unwind(AssertUnwindSafe(move || drop(shard))).is_err() {
                tracing::error!("failed to flush the search index on close");
            }
        }
    }
}

impl Inner {
    fn shard(&self) -> &EdgeShard {
        self.shard.as_ref().expect("the shard is only taken out on drop")
    }

    /// Applies one write, visible at once, and makes it durable if `durable`.
    fn write(&self, operation: UpdateOperation, durable: bool) -> IndexResult<()> {
        self.check_space()?;
        let mine = {
            let _gate = lock(&self.write_gate);
            let started = Instant::now();
            self.shard().update(operation).map_err(backend)?;
            metrics::histogram!(m::INDEX_UPDATE_SECONDS).record(started.elapsed().as_secs_f64());
            self.written.fetch_add(1, Ordering::AcqRel) + 1
        };
        if durable {
            self.make_durable(mine)?;
        }
        Ok(())
    }

    /// Makes every write up to number `through` durable, and whatever came after it.
    /// Writers that arrive while a flush runs apply their updates after it, and the next flush
    /// covers all of them at once.
    fn make_durable(&self, through: u64) -> IndexResult<()> {
        let mut flushed = lock(&self.flushed);
        if *flushed >= through {
            return Ok(());
        }
        let _gate = lock(&self.write_gate);
        let target = self.written.load(Ordering::Acquire);
        self.flush()?;
        *flushed = target;
        Ok(())
    }

    /// Flushes the WAL and all segments, fsynced; the caller holds the write gate.
    fn flush(&self) -> IndexResult<()> {
        let started = Instant::now();
        let flushed = self.flush_retrying();
        metrics::histogram!(m::INDEX_FLUSH_SECONDS).record(started.elapsed().as_secs_f64());
        flushed
    }

    fn flush_retrying(&self) -> IndexResult<()> {
        let mut attempt = 0;
        loop {
            // A blocking read of the segment holder: returns once no optimizer swap holds it.
            // Its segment count keeps the gauge fresh while one optimizer run lasts as long
            // as a sustained ingest (see the module docs).
            let info = self.shard().info();
            metrics::gauge!(m::INDEX_SEGMENTS).set(info.segments_count as f64);
            // `EdgeShard::flush` panics where it should wait or fail: on lock contention and on
            // an I/O error. Catch it rather than lose the blocking thread.
            let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.shard().flush())) else {
                return Ok(());
            };
            let detail = panic_detail(&*panic);
            if detail != FLUSH_CONTENDED || attempt == FLUSH_ATTEMPTS {
                // Retryable: the update is in the WAL and re-applying it is idempotent; the
                // failures seen are transient (a segment the optimizer just replaced).
                return Err(IndexError::Unavailable(
                    format!("edge shard flush panicked: {detail}").into(),
                ));
            }
            // The WAL part is flushed and nothing else was touched: safe to run again.
            attempt += 1;
            tracing::warn!(attempt, "edge flush met an optimizer segment swap, retrying");
            std::thread::sleep(Duration::from_millis(1 << attempt.min(6)));
        }
    }

    fn optimize(&self) -> IndexResult<bool> {
        let _running = lock(&self.optimize_lock);
        // A run writes a whole new segment before it drops the old ones.
        self.check_space()?;
        let optimized = self.shard().optimize().map_err(backend)?;
        if optimized {
            let _gate = lock(&self.write_gate);
            self.flush()?;
            self.optimizations.fetch_add(1, Ordering::AcqRel);
        }
        Ok(optimized)
    }

    /// Refuses to start a write while the index volume has less than `min_free` free (see
    /// [`DEFAULT_MIN_FREE_MB`]), and keeps the free-space gauge fresh.
    fn check_space(&self) -> IndexResult<()> {
        let min_free = self.min_free.load(Ordering::Relaxed);
        if min_free == 0 {
            return Ok(());
        }
        // Not knowing is not full: a write that fails for real reports its own error.
        let Ok(stat) = rustix::fs::statvfs(&self.dir) else {
            return Ok(());
        };
        let free = stat.f_bavail.saturating_mul(stat.f_frsize);
        metrics::gauge!(m::INDEX_VOLUME_FREE_BYTES).set(free as f64);
        if free >= min_free {
            return Ok(());
        }
        metrics::counter!(m::INDEX_WRITES_REFUSED).increment(1);
        Err(IndexError::Unavailable(
            format!(
                "the index volume ({}) has {} MB free, less than the {} MB it keeps in reserve (SEDIMENT_INDEX_MIN_FREE_MB): index writes wait until space is freed",
                self.dir.display(),
                free >> 20,
                min_free >> 20
            )
            .into(),
        ))
    }

    /// Creates the keyword payload indexes. Idempotent: segments that have one skip it. Runs
    /// on every open, because edge 0.7.2 does not record field indexes in the shard's schema
    /// file, which it reads when it creates a fresh appendable segment.
    fn ensure_payload_indexes(&self) -> IndexResult<()> {
        let _gate = lock(&self.write_gate);
        for field in KEYWORD_FIELDS {
            let create = qdrant_edge::CreateIndex {
                field_name: field_path(field),
                field_schema: Some(PayloadFieldSchema::FieldType(PayloadSchemaType::Keyword)),
            };
            let operation = UpdateOperation::FieldIndexOperation(FieldIndexOperations::CreateIndex(create));
            self.shard().update(operation).map_err(backend)?;
        }
        self.flush()
    }

    /// Upserts and makes durable. Concurrent upserts are combined: whoever finds no leader
    /// applies everything queued as one update and one flush, again until the queue is empty;
    /// the others wait for their outcome. Under load (many sessions indexed at once, each with
    /// a few turns) this turns many small writes into few large ones, where the per-write
    /// cost of edge (its update and flush are serialized) would otherwise cap throughput.
    fn upsert(&self, points: &[IndexPoint], durable: bool) -> IndexResult<()> {
        // BM25 and payloads are computed here, by each writer, in parallel.
        let points = points
            .iter()
            .map(|point| self.point(point))
            .collect::<IndexResult<Vec<_>>>()?;
        let mut combiner = lock(&self.combiner);
        let ticket = combiner.next_ticket;
        combiner.next_ticket += 1;
        combiner.queue.push((ticket, durable, points));
        while combiner.leading {
            combiner = self.combined.wait(combiner).unwrap_or_else(PoisonError::into_inner);
            if let Some(outcome) = combiner.done.remove(&ticket) {
                return outcome_result(outcome);
            }
        }
        combiner.leading = true;
        loop {
            let batch = std::mem::take(&mut combiner.queue);
            if batch.is_empty() {
                combiner.leading = false;
                break;
            }
            drop(combiner);
            let mut guard = LeaderGuard {
                inner: self,
                tickets: batch.iter().map(|(ticket, _, _)| *ticket).collect(),
            };
            let durable = batch.iter().any(|(_, durable, _)| *durable);
            let points = last_of_each(batch.into_iter().flat_map(|(_, _, points)| points), |p| p.id);
            metrics::histogram!(m::INDEX_WRITE_POINTS).record(points.len() as f64);
            let result = self.write(
                UpdateOperation::PointOperation(PointOperations::UpsertPoints(PointInsertOperations::PointsList(
                    points,
                ))),
                durable,
            );
            let outcome = result.err().map(|e| (e.is_retryable(), error_chain(&e)));
            combiner = lock(&self.combiner);
            for ticket in guard.tickets.drain(..) {
                combiner.done.insert(ticket, outcome.clone());
            }
            self.combined.notify_all();
        }
        // Our ticket was queued before we led, so the first round recorded it.
        let outcome = combiner
            .done
            .remove(&ticket)
            .unwrap_or_else(|| Some((true, "the combined upsert lost its outcome".to_owned())));
        drop(combiner);
        outcome_result(outcome)
    }

    fn point(&self, point: &IndexPoint) -> IndexResult<qdrant_edge::PointStructPersisted> {
        let vector = sparse(self.bm25.embed_document(&point.text))?;
        let payload: serde_json::Map<String, serde_json::Value> = payload_terms(point)
            .into_iter()
            .map(|(k, v)| {
                let value = match v {
                    PayloadValue::One(one) => one.into(),
                    PayloadValue::Many(many) => many.into(),
                };
                (k.to_owned(), value)
            })
            .collect();
        let mut vectors = vec![(BM25_VECTOR, vector)];
        if let Some(dense) = &point.dense {
            check_dense(dense, self.dense_dimension)?;
            vectors.push((DENSE_VECTOR, Vector::new_dense(dense.clone())));
        }
        let vectors = Vectors::new_named(vectors);
        Ok(PointStruct::new(PointId::Uuid(point.id), vectors, serde_json::Value::Object(payload)).into())
    }

    /// Runs the query's [`Plan`]: one channel ranked directly, or several fused.
    fn search(&self, query: &IndexQuery, keyword: Option<SparseVector>) -> IndexResult<Vec<IndexHit>> {
        let scoring = |ranking: Ranking<'_>| -> IndexResult<ScoringQuery> {
            let (vector, name) = match ranking {
                Ranking::Keyword(v) => (sparse(v)?, BM25_VECTOR),
                Ranking::Semantic(dense) => (Vector::new_dense(dense.to_vec()), DENSE_VECTOR),
            };
            Ok(ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery::new(
                VectorInternal::from(vector),
                name,
            ))))
        };
        let (prefetches, scoring) = match query.plan(keyword, self.dense_dimension)? {
            Plan::Nothing => return Ok(Vec::new()),
            Plan::Direct(ranking) => (Vec::new(), scoring(ranking)?),
            Plan::Fused {
                channels,
                rrf_k,
                weights,
            } => {
                let prefetches = channels
                    .into_iter()
                    .map(|channel| {
                        Ok(Prefetch {
                            prefetches: Vec::new(),
                            query: Some(scoring(channel.ranking)?),
                            limit: channel.limit,
                            params: None,
                            // The request's tenant filter applies to every prefetch as well.
                            filter: (!channel.tags.is_empty()).then(|| tags_filter(channel.tags)),
                            score_threshold: None,
                        })
                    })
                    .collect::<IndexResult<_>>()?;
                let weights = weights.map(|w| w.into_iter().map(Into::into).collect());
                (prefetches, ScoringQuery::Fusion(EdgeFusion::Rrf { k: rrf_k, weights }))
            }
        };
        let request = QueryRequest {
            prefetches,
            query: Some(scoring),
            filter: Some(tenant_filter(
                &query.tenant,
                query.kind,
                query.session_id.as_deref(),
                query.task.as_deref(),
            )),
            score_threshold: None,
            limit: query.limit,
            offset: 0,
            params: None,
            with_vector: WithVector::Bool(false),
            with_payload: WithPayloadInterface::Bool(false),
        };
        self.shard()
            .query(request)
            .map_err(backend)?
            .into_iter()
            .map(|point| {
                Ok(IndexHit {
                    id: uuid_of(point.id)?,
                    score: point.score,
                })
            })
            .collect()
    }
}

#[async_trait]
impl SearchIndex for EdgeIndex {
    async fn upsert(&self, points: &[IndexPoint]) -> IndexResult<()> {
        self.upsert_with(points, true).await
    }

    async fn upsert_unsynced(&self, points: &[IndexPoint]) -> IndexResult<()> {
        self.upsert_with(points, false).await
    }

    async fn sync(&self) -> IndexResult<()> {
        let through = self.inner.written.load(Ordering::Acquire);
        self.background(move |inner| inner.make_durable(through)).await
    }

    fn defers_sync(&self) -> bool {
        true
    }

    async fn search(&self, query: &IndexQuery) -> IndexResult<Vec<IndexHit>> {
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        query.validate()?;
        let query = query.clone();
        self.blocking(move |inner| {
            let keyword = query.uses_keyword().then(|| inner.bm25.embed_query(&query.text));
            inner.search(&query, keyword)
        })
        .await
    }

    async fn scope_ids(
        &self,
        tenant: &Tenant,
        kind: PointKind,
        session_id: Option<&str>,
        task: Option<&str>,
        limit: usize,
    ) -> IndexResult<Vec<Uuid>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let filter = tenant_filter(tenant, kind, session_id, task);
        self.blocking(move |inner| {
            let request = ScrollRequest {
                offset: None,
                limit: Some(limit),
                filter: Some(filter),
                with_payload: Some(WithPayloadInterface::Bool(false)),
                with_vector: WithVector::Bool(false),
                order_by: None,
            };
            let (records, _next) = inner.shard().scroll(request).map_err(backend)?;
            records.into_iter().map(|record| uuid_of(record.id)).collect()
        })
        .await
    }

    fn dense_dimension(&self) -> Option<usize> {
        self.inner.dense_dimension
    }

    fn created(&self) -> bool {
        self.inner.created
    }

    async fn delete(&self, ids: &[Uuid]) -> IndexResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        // Each id once: edge refuses a point deleted twice by one operation while an optimizer
        // runs (see `last_of_each`); callers pass lists that may repeat (an outbox batch that
        // names a memory twice).
        let ids = last_of_each(ids.iter().copied(), |id| *id)
            .into_iter()
            .map(PointId::Uuid)
            .collect();
        self.background(move |inner| {
            inner.write(
                UpdateOperation::PointOperation(PointOperations::DeletePoints { ids }),
                true,
            )
        })
        .await
    }

    async fn count(&self, tenant: &Tenant, kind: PointKind) -> IndexResult<u64> {
        let filter = tenant_filter(tenant, kind, None, None);
        self.blocking(move |inner| {
            let request = CountRequest {
                filter: Some(filter),
                exact: true,
            };
            let count = inner.shard().count(request).map_err(backend)?;
            Ok(count as u64)
        })
        .await
    }

    async fn ping(&self) -> IndexResult<()> {
        // The shard lives in this process and stays open as long as `self` does.
        Ok(())
    }
}

/// One item per key, the last: writers combined into one update may name the same point (a
/// memory synced by the API and by the extract worker at once), and edge's proxy segments,
/// while an optimizer runs, refuse a point moved twice by one operation (a debug assertion in
/// qdrant-edge 0.7.2, `Overriding deleted flag … with older op_num`, hit by `bench_erase`).
/// The last is what applying them in order would have left.
fn last_of_each<T, K: std::hash::Hash + Eq>(items: impl Iterator<Item = T>, key: impl Fn(&T) -> K) -> Vec<T> {
    let mut items: Vec<T> = items.collect();
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    let mut keep: Vec<bool> = items.iter().rev().map(|item| seen.insert(key(item))).collect();
    keep.reverse();
    let mut keep = keep.into_iter();
    items.retain(|_| keep.next().unwrap_or(true));
    items
}

fn outcome_result(outcome: Option<(bool, String)>) -> IndexResult<()> {
    match outcome {
        None => Ok(()),
        Some((true, reason)) => Err(IndexError::Unavailable(reason.into())),
        Some((false, reason)) => Err(IndexError::Backend(reason.into())),
    }
}

fn shard_config(
    optimizers: EdgeOptimizersConfig,
    dense_dimension: Option<usize>,
    wal: Option<WalOptions>,
) -> EdgeConfig {
    let mut config = EdgeConfig::builder()
        .sparse_vector(
            BM25_VECTOR,
            EdgeSparseVectorParams::builder().modifier(Modifier::Idf).build(),
        )
        .hnsw_config(HnswIndexConfig {
            max_indexing_threads: index_build_threads(),
            ..HnswIndexConfig::default()
        });
    if let Some(size) = dense_dimension {
        config = config.vector(DENSE_VECTOR, EdgeVectorParams::builder(size, Distance::Cosine).build());
    }
    if let Some(wal) = wal {
        config = config.wal_options(wal);
    }
    config.optimizers(optimizers).build()
}

/// Brings a loaded shard's optimizer thresholds and HNSW build threads to this version's.
/// Neither changes the data (`max_indexing_threads` is not part of edge's rebuild check), so
/// existing segments are kept; the next optimizer run follows the new settings.
fn adopt_optimizer_settings(shard: &EdgeShard, optimizers: EdgeOptimizersConfig) -> IndexResult<()> {
    let (current_optimizers, current_hnsw) = {
        let config = shard.config();
        (config.optimizers.clone(), config.hnsw_config)
    };
    if current_optimizers != optimizers {
        shard.set_optimizers_config(optimizers).map_err(backend)?;
    }
    let threads = index_build_threads();
    if current_hnsw.max_indexing_threads != threads {
        let hnsw = HnswIndexConfig {
            max_indexing_threads: threads,
            ..current_hnsw
        };
        shard.set_hnsw_config(hnsw).map_err(backend)?;
    }
    Ok(())
}

fn check_config(dir: &Path, config: &EdgeConfig, dense_dimension: Option<usize>) -> IndexResult<()> {
    match config.sparse_vectors.get(BM25_VECTOR) {
        Some(params) if params.modifier == Some(Modifier::Idf) => {}
        Some(_) | None => {
            return Err(IndexError::Backend(
                format!("edge shard has no sparse vector {BM25_VECTOR:?} with the idf modifier").into(),
            ))
        }
    }
    let found = config.vectors.get(DENSE_VECTOR).map(|params| params.size);
    match (found, dense_dimension) {
        (Some(found), Some(wanted)) if found == wanted => Ok(()),
        // A keyword-only process may read a shard that has dense vectors.
        (_, None) => Ok(()),
        (found, Some(wanted)) => Err(IndexError::Backend(
            format!(
                "the index in {} holds {} but the embedder gives {wanted}-dimensional vectors; \
                 remove that directory to rebuild the index from the stored turns",
                dir.display(),
                match found {
                    Some(found) => format!("{found}-dimensional dense vectors"),
                    None => "no dense vectors".to_owned(),
                }
            )
            .into(),
        )),
    }
}

fn tenant_filter(tenant: &Tenant, kind: PointKind, session_id: Option<&str>, task: Option<&str>) -> Filter {
    let keyword =
        |key: &str, value: String| Condition::Field(FieldCondition::new_match(field_path(key), Match::from(value)));
    let must = scope_terms(tenant, kind, session_id, task)
        .into_iter()
        .map(|(k, v)| keyword(k, v))
        .collect();
    Filter {
        should: None,
        min_should: None,
        must: Some(must),
        must_not: None,
    }
}

/// Points carrying any of `tags`.
fn tags_filter(tags: &[String]) -> Filter {
    Filter {
        should: None,
        min_should: None,
        must: Some(vec![Condition::Field(FieldCondition::new_match(
            field_path(TAGS),
            Match::from(tags.to_vec()),
        ))]),
        must_not: None,
    }
}

/// A top-level payload key as a path (built directly: parsing is fallible, these are constants).
fn field_path(key: &str) -> JsonPath {
    JsonPath {
        first_key: key.to_owned(),
        rest: Vec::new(),
    }
}

fn sparse(vector: SparseVector) -> IndexResult<Vector> {
    Vector::new_sparse(vector.indices, vector.values).map_err(backend)
}

fn uuid_of(id: PointId) -> IndexResult<Uuid> {
    match id {
        PointId::Uuid(uuid) => Ok(uuid),
        PointId::NumId(n) => Err(IndexError::Backend(
            format!("edge shard holds a numeric point id {n}; only uuids are written").into(),
        )),
    }
}

fn backend(error: qdrant_edge::OperationError) -> IndexError {
    IndexError::Backend(Box::new(error))
}

/// A file-system error on the shard's directory: the index is unavailable, as when edge fails.
fn io(error: std::io::Error) -> IndexError {
    IndexError::Unavailable(Box::new(error))
}

/// Whether the shard in `dir` was built with this build's text analysis and payload layout. A
/// shard from before the version was recorded has no file and does not match.
fn index_version_matches(dir: &Path) -> IndexResult<bool> {
    match std::fs::read_to_string(dir.join(INDEX_VERSION_FILE)) {
        Ok(found) => Ok(found.trim() == index_version()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(e)),
    }
}

/// Removes the shard's files from `dir`, keeping our lock file (we hold it).
fn clear_shard(dir: &Path) -> IndexResult<()> {
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if entry.file_name() == LOCK_FILE {
            continue;
        }
        let path = entry.path();
        if entry.file_type().map_err(io)?.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io)?;
        } else {
            std::fs::remove_file(&path).map_err(io)?;
        }
    }
    Ok(())
}

/// Deletes every closed WAL segment of the shard in `dir` but the newest, as the WAL's own
/// `prefix_truncate` does once operations are acknowledged. Safe because edge 0.7.2 never
/// replays its WAL (durability comes from flushing the segments, and what a crash loses before
/// a flush is indexed again from the store), and the newest closed segment stays: it is where
/// the WAL takes the next operation number from, and segments ignore operations numbered below
/// their points' versions. Called with the directory lock held and before `EdgeShard::load`,
/// which maps the segments it finds.
fn prune_wal(dir: &Path) -> IndexResult<()> {
    let wal = dir.join("wal");
    let mut closed = Vec::new();
    let entries = match std::fs::read_dir(&wal) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if let Some(start) = name
            .to_str()
            .and_then(|n| n.strip_prefix("closed-"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            closed.push((start, entry.path(), entry.metadata().map_err(io)?.len()));
        }
    }
    closed.sort_unstable_by_key(|(start, _, _)| *start);
    closed.pop();
    let bytes: u64 = closed.iter().map(|(_, _, len)| len).sum();
    for (_, path, _) in &closed {
        std::fs::remove_file(path).map_err(io)?;
    }
    if !closed.is_empty() {
        File::open(&wal).and_then(|d| d.sync_all()).map_err(io)?;
        tracing::info!(
            dir = %dir.display(),
            segments = closed.len(),
            mib = bytes / (1 << 20),
            "deleted WAL segments that edge never reads back"
        );
    }
    Ok(())
}

/// Takes the exclusive lock on `dir`, waiting up to `LOCK_WAIT` for a previous holder.
fn lock_dir(dir: &Path) -> IndexResult<File> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))
        .map_err(io)?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(IndexError::Unavailable(
                    format!("index directory {} is in use by another index", dir.display()).into(),
                ))
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
    }
}

fn panic_detail(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("unknown panic")
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn owner() -> Tenant {
        Tenant {
            team: "t".into(),
            agent: "a".into(),
            user: "u".into(),
        }
    }

    /// A turn point of `tenant`'s, with a fresh id.
    fn heron(tenant: &Tenant) -> IndexPoint {
        IndexPoint {
            id: Uuid::new_v4(),
            kind: PointKind::Turn,
            tenant: tenant.clone(),
            session_id: "s1".into(),
            text: "the blue heron".into(),
            tags: Vec::new(),
            task: None,
            dense: None,
        }
    }

    /// The nice value of each live thread of this process named `name`, from `/proc`.
    fn nice_of_threads_named(name: &str) -> Vec<i32> {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").expect("list threads").flatten() {
            let path = task.path();
            let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
                continue;
            };
            if comm.trim_end() != name {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
                continue;
            };
            // After the parenthesised name, nice is the 17th field.
            let after_name = &stat[stat.rfind(')').expect("stat has a name") + 2..];
            let nice = after_name.split(' ').nth(16).expect("stat has a nice field");
            found.push(nice.parse().expect("nice is a number"));
        }
        found
    }

    #[tokio::test]
    async fn writes_and_optimizer_runs_run_where_they_are_placed() {
        let dir = tempfile::tempdir().unwrap();
        // Directories shaped like v1 cgroups (`background` checks a real one).
        let cgroup = |name: &str| {
            let cgroup = dir.path().join(name);
            std::fs::create_dir(&cgroup).unwrap();
            std::fs::write(cgroup.join("tasks"), "").unwrap();
            cgroup
        };
        let (writes, optimizer) = (cgroup("writes"), cgroup("optimizer"));
        let index_dir = tempfile::tempdir().unwrap();
        // Nice values no other test in this process uses, so the threads found are this index's.
        let index = EdgeIndex::open(index_dir.path(), 0, None).unwrap().with_background(
            Placement {
                nice: 13,
                cgroup: Some(writes.clone()),
            },
            Placement {
                nice: 14,
                cgroup: Some(optimizer.clone()),
            },
        );
        // The names of the threads whose ids were written to the cgroup, one per line.
        let thread_in = |cgroup: &std::path::Path| -> Vec<String> {
            let tasks = std::fs::read_to_string(cgroup.join("tasks")).unwrap();
            tasks
                .lines()
                .map(|tid| std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap())
                .collect()
        };
        index.upsert(&[heron(&owner())]).await.unwrap();
        // Idle pool threads live on for tokio's keep-alive (10 s), long after these checks.
        assert_eq!(nice_of_threads_named("sediment-nice13"), vec![13]);
        assert_eq!(thread_in(&writes), ["sediment-nice13\n"]);
        assert!(nice_of_threads_named("sediment-nice14").is_empty());
        index.optimize().await.unwrap();
        assert_eq!(nice_of_threads_named("sediment-nice14"), vec![14]);
        assert_eq!(thread_in(&optimizer), ["sediment-nice14\n"]);
    }

    #[tokio::test]
    async fn writes_wait_while_the_volume_keeps_less_than_the_reserve_free() {
        let dir = tempfile::tempdir().unwrap();
        // A reserve larger than any volume: every write finds too little free.
        let index = EdgeIndex::open(dir.path(), 0, None)
            .unwrap()
            .with_min_free_mb(u64::MAX >> 20);
        let tenant = owner();
        let point = heron(&tenant);
        let refused = index.upsert(std::slice::from_ref(&point)).await.expect_err("refused");
        assert!(refused.is_retryable(), "{refused:?}");
        assert!(
            error_chain(&refused).contains("SEDIMENT_INDEX_MIN_FREE_MB"),
            "{}",
            error_chain(&refused)
        );
        assert!(index.delete(&[point.id]).await.is_err(), "a delete writes too");
        assert!(index.optimize().await.is_err(), "an optimizer run writes a segment");
        assert_eq!(index.count(&tenant, PointKind::Turn).await.unwrap(), 0);

        let index = index.with_min_free_mb(0);
        index.upsert(&[point]).await.unwrap();
        assert_eq!(index.count(&tenant, PointKind::Turn).await.unwrap(), 1);
    }

    #[test]
    fn a_combined_write_keeps_the_last_of_each_point() {
        let items = [(1, "a"), (2, "b"), (1, "c"), (3, "d"), (2, "e")];
        assert_eq!(
            last_of_each(items.into_iter(), |(id, _)| *id),
            vec![(1, "c"), (3, "d"), (2, "e")]
        );
    }
}
