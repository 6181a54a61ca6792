//! A [`SearchIndex`] wrapper for failure-path tests: a real index behind switches that make
//! reads, writes or syncs fail as an unreachable server would, delays, and counts of upserts,
//! upserted points and syncs. Everything else goes to the real index unchanged.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shared::domain::Tenant;
use shared::index::{IndexError, IndexHit, IndexPoint, IndexQuery, IndexResult, PointKind, SearchIndex};
use uuid::Uuid;

pub struct FaultyIndex {
    inner: Arc<dyn SearchIndex>,
    reads_down: AtomicBool,
    writes_down: AtomicBool,
    syncs_down: AtomicBool,
    syncs: AtomicUsize,
    syncs_begun: AtomicUsize,
    search_delay: Duration,
    upsert_delay: Duration,
    sync_delay: Duration,
    upserted: AtomicUsize,
    upserts: AtomicUsize,
    upserts_begun: AtomicUsize,
}

impl FaultyIndex {
    /// Passes everything through until a switch is thrown.
    pub fn new(inner: Arc<dyn SearchIndex>) -> Self {
        Self {
            inner,
            reads_down: AtomicBool::new(false),
            writes_down: AtomicBool::new(false),
            syncs_down: AtomicBool::new(false),
            syncs: AtomicUsize::new(0),
            syncs_begun: AtomicUsize::new(0),
            search_delay: Duration::ZERO,
            upsert_delay: Duration::ZERO,
            sync_delay: Duration::ZERO,
            upserted: AtomicUsize::new(0),
            upserts: AtomicUsize::new(0),
            upserts_begun: AtomicUsize::new(0),
        }
    }

    /// Every search waits `delay` first (and then fails, if reads are down).
    pub fn with_search_delay(mut self, delay: Duration) -> Self {
        self.search_delay = delay;
        self
    }

    /// Every upsert waits `delay` first.
    pub fn with_upsert_delay(mut self, delay: Duration) -> Self {
        self.upsert_delay = delay;
        self
    }

    /// Every sync waits `delay` first.
    pub fn with_sync_delay(mut self, delay: Duration) -> Self {
        self.sync_delay = delay;
        self
    }

    /// While down, searches fail with `Unavailable`.
    pub fn set_reads_down(&self, down: bool) {
        self.reads_down.store(down, Ordering::SeqCst);
    }

    /// While down, upserts and deletes fail with `Unavailable`.
    pub fn set_writes_down(&self, down: bool) {
        self.writes_down.store(down, Ordering::SeqCst);
    }

    /// While down, `sync` fails with `Unavailable` (writes still succeed, unsynced), as a
    /// disk that stops taking flushes would.
    pub fn set_syncs_down(&self, down: bool) {
        self.syncs_down.store(down, Ordering::SeqCst);
    }

    /// Syncs that succeeded.
    pub fn syncs(&self) -> usize {
        self.syncs.load(Ordering::SeqCst)
    }

    /// Syncs called, finished or not.
    pub fn syncs_begun(&self) -> usize {
        self.syncs_begun.load(Ordering::SeqCst)
    }

    /// Points passed to upserts that succeeded.
    pub fn upserted(&self) -> usize {
        self.upserted.load(Ordering::SeqCst)
    }

    /// Upserts that succeeded.
    pub fn upserts(&self) -> usize {
        self.upserts.load(Ordering::SeqCst)
    }

    /// Upserts called, finished or not.
    pub fn upserts_begun(&self) -> usize {
        self.upserts_begun.load(Ordering::SeqCst)
    }
}

impl FaultyIndex {
    /// An upsert, synced or not, through the switches and counts.
    async fn write(&self, points: &[IndexPoint], synced: bool) -> IndexResult<()> {
        self.upserts_begun.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.upsert_delay).await;
        if self.writes_down.load(Ordering::SeqCst) {
            return Err(refused());
        }
        if synced {
            self.inner.upsert(points).await?;
        } else {
            self.inner.upsert_unsynced(points).await?;
        }
        self.upserted.fetch_add(points.len(), Ordering::SeqCst);
        self.upserts.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn refused() -> IndexError {
    IndexError::Unavailable("connection refused".into())
}

#[async_trait]
impl SearchIndex for FaultyIndex {
    async fn upsert(&self, points: &[IndexPoint]) -> IndexResult<()> {
        self.write(points, true).await
    }
    async fn upsert_unsynced(&self, points: &[IndexPoint]) -> IndexResult<()> {
        self.write(points, false).await
    }
    async fn sync(&self) -> IndexResult<()> {
        self.syncs_begun.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.sync_delay).await;
        if self.syncs_down.load(Ordering::SeqCst) {
            return Err(refused());
        }
        self.inner.sync().await?;
        self.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn defers_sync(&self) -> bool {
        self.inner.defers_sync()
    }
    async fn search(&self, query: &IndexQuery) -> IndexResult<Vec<IndexHit>> {
        tokio::time::sleep(self.search_delay).await;
        if self.reads_down.load(Ordering::SeqCst) {
            return Err(refused());
        }
        self.inner.search(query).await
    }
    async fn scope_ids(
        &self,
        tenant: &Tenant,
        kind: PointKind,
        session_id: Option<&str>,
        task: Option<&str>,
        limit: usize,
    ) -> IndexResult<Vec<Uuid>> {
        self.inner.scope_ids(tenant, kind, session_id, task, limit).await
    }
    fn dense_dimension(&self) -> Option<usize> {
        self.inner.dense_dimension()
    }
    fn created(&self) -> bool {
        self.inner.created()
    }
    async fn delete(&self, ids: &[Uuid]) -> IndexResult<()> {
        if self.writes_down.load(Ordering::SeqCst) {
            return Err(refused());
        }
        self.inner.delete(ids).await
    }
    async fn count(&self, tenant: &Tenant, kind: PointKind) -> IndexResult<u64> {
        self.inner.count(tenant, kind).await
    }
    async fn ping(&self) -> IndexResult<()> {
        self.inner.ping().await
    }
}
