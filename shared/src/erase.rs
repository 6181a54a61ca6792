//! Erasing an owner (team, agent, user): every turn, session, memory with its history and
//! provenance, compaction, scene, persona, index point and file, in every store of either
//! deployment, as a resumable job.
//!
//! A job is a row (`store::erase`) moved through its steps by whichever run holds its lease:
//! `Rows` (one database transaction), `Index`, `Files`, then `Verify`, which counts what is
//! left in each store. Every step is idempotent, so a run that dies anywhere is simply taken
//! over after its lease by [`Eraser::resume_stalled`], which repeats the step it was in.
//!
//! Nothing in flight can bring the owner back into the database: an L1 batch checks its
//! session and source turns under lock at commit (`CommitOutcome::SourcesGone`), and scene,
//! persona and compaction runs find their lease rows gone. The index and the file store have
//! no transactions, so a writer that read the owner's turns just before the erasure may still
//! land a point or a file after those steps: `Verify` finds it and sends the job round again,
//! up to [`MAX_PASSES`] times per run. When nothing is left, the job writes one audit record
//! with the counts per store (never content) and is done.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::domain::Tenant;
use crate::files::FileStore;
use crate::index::{PointKind, SearchIndex};
use crate::metrics;
use crate::scene::paths::owner_prefix;
use crate::store::audit::{AuditEntry, AuditLog};
use crate::store::erase::{EraseStore, Erasure, ErasureStep};
use crate::store::StoreResult;

/// Rounds of delete-then-verify one run makes before it leaves the job for a later run.
pub const MAX_PASSES: u32 = 3;
/// Points deleted per index call.
const INDEX_BATCH: usize = 512;
/// The store name of index points and files in an erasure's counts.
pub const INDEX_STORE: &str = "index_points";
pub const FILE_STORE: &str = "files";

/// Runs erasure jobs.
#[derive(Clone)]
pub struct Eraser {
    store: Arc<dyn EraseStore>,
    index: Arc<dyn SearchIndex>,
    files: Arc<dyn FileStore>,
    audit: Arc<dyn AuditLog>,
    /// How long a run owns a job before another may take it over.
    lease: Duration,
    /// How long a job whose run failed waits before the next try.
    retry_after: Duration,
}

impl Eraser {
    pub fn new(
        store: Arc<dyn EraseStore>,
        index: Arc<dyn SearchIndex>,
        files: Arc<dyn FileStore>,
        audit: Arc<dyn AuditLog>,
    ) -> Self {
        Self {
            store,
            index,
            files,
            audit,
            lease: Duration::from_secs(300),
            retry_after: Duration::from_secs(30),
        }
    }

    pub fn with_lease(mut self, lease: Duration, retry_after: Duration) -> Self {
        self.lease = lease;
        self.retry_after = retry_after;
        self
    }

    /// Records an erasure of `tenant` (or finds the one already running) without running it.
    pub async fn request(&self, tenant: &Tenant, requested_by: &str) -> StoreResult<Erasure> {
        let new = Erasure::new(tenant.clone(), requested_by.to_owned(), now());
        self.store.start_erasure(&new).await
    }

    /// Runs the job to its end if no other run holds it. Returns the job as this run left it,
    /// `None` when another run holds it or it is done.
    pub async fn run(&self, id: Uuid) -> anyhow::Result<Option<Erasure>> {
        let token = Uuid::new_v4();
        let claimed_at = now();
        let Some(mut job) = self
            .store
            .claim_erasure(id, token, claimed_at, claimed_at + self.lease)
            .await?
        else {
            return Ok(None);
        };
        let started = Instant::now();
        tracing::info!(erasure = %job.id, step = job.step.as_str(), attempt = job.attempts, "erasure running");
        match self.passes(&mut job, token).await {
            Ok(true) => {
                ::metrics::counter!(metrics::ERASURES, "result" => "done").increment(1);
                ::metrics::histogram!(metrics::ERASURE_SECONDS).record(started.elapsed().as_secs_f64());
                tracing::info!(erasure = %job.id, deleted = ?job.deleted, "erasure done; nothing left");
            }
            Ok(false) => {
                ::metrics::counter!(metrics::ERASURES, "result" => "residue").increment(1);
                tracing::warn!(erasure = %job.id, residue = ?job.residue, "erasure left residue; it will run again");
            }
            Err(e) => {
                ::metrics::counter!(metrics::ERASURES, "result" => "failed").increment(1);
                let error = format!("{e:#}");
                tracing::warn!(erasure = %job.id, step = job.step.as_str(), error, "erasure pass failed; it will run again");
                job.error = Some(error);
                job.updated_at = now();
                let retry = now() + self.retry_after;
                if let Err(e) = self.store.save_erasure(&job, token, Some(retry)).await {
                    // The lease runs out by itself; the job is taken over then.
                    tracing::warn!(erasure = %job.id, error = %e, "could not record the failure");
                }
            }
        }
        Ok(Some(job))
    }

    /// Moves the job through its steps, saving after each. `true` when done; `false` when
    /// residue outlived [`MAX_PASSES`] (saved with a retry time).
    async fn passes(&self, job: &mut Erasure, token: Uuid) -> anyhow::Result<bool> {
        let mut passes = 0;
        loop {
            match job.step {
                ErasureStep::Rows => {
                    let deleted = self.store.erase_owner_rows(&job.tenant).await?;
                    add(&mut job.deleted, deleted);
                    job.step = ErasureStep::Index;
                }
                ErasureStep::Index => {
                    let n = self.delete_points(&job.tenant).await?;
                    add(&mut job.deleted, BTreeMap::from([(INDEX_STORE.to_owned(), n)]));
                    job.step = ErasureStep::Files;
                }
                ErasureStep::Files => {
                    let n = self.files.delete_prefix(&owner_prefix(&job.tenant)).await?;
                    add(&mut job.deleted, BTreeMap::from([(FILE_STORE.to_owned(), n as u64)]));
                    job.step = ErasureStep::Verify;
                }
                ErasureStep::Verify => {
                    passes += 1;
                    job.residue = self.residue(&job.tenant).await?;
                    if job.residue.values().all(|n| *n == 0) {
                        self.audit(job).await?;
                        job.step = ErasureStep::Done;
                        job.finished_at = Some(now());
                    } else if passes < MAX_PASSES {
                        job.step = ErasureStep::Rows;
                    } else {
                        job.error = Some("residue remained after every pass".into());
                        job.updated_at = now();
                        self.save(job, token, Some(now() + self.retry_after)).await?;
                        return Ok(false);
                    }
                }
                ErasureStep::Done => return Ok(true),
            }
            job.error = None;
            job.updated_at = now();
            let lease_until = (!job.is_done()).then(|| now() + self.lease);
            self.save(job, token, lease_until).await?;
        }
    }

    async fn save(&self, job: &Erasure, token: Uuid, lease_until: Option<chrono::DateTime<Utc>>) -> anyhow::Result<()> {
        if !self.store.save_erasure(job, token, lease_until).await? {
            anyhow::bail!("lost the lease of erasure {}: another run took it over", job.id);
        }
        Ok(())
    }

    /// Deletes the owner's points of every kind, a page of ids at a time.
    async fn delete_points(&self, tenant: &Tenant) -> anyhow::Result<u64> {
        let mut deleted = 0;
        for kind in [PointKind::Turn, PointKind::Memory] {
            loop {
                let ids = self.index.scope_ids(tenant, kind, None, None, INDEX_BATCH).await?;
                if ids.is_empty() {
                    break;
                }
                self.index.delete(&ids).await?;
                deleted += ids.len() as u64;
            }
        }
        Ok(deleted)
    }

    /// What the owner still has in every store.
    pub async fn residue(&self, tenant: &Tenant) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut residue = self.store.owner_rows(tenant).await?;
        let mut points = 0;
        for kind in [PointKind::Turn, PointKind::Memory] {
            points += self.index.count(tenant, kind).await?;
        }
        residue.insert(INDEX_STORE.to_owned(), points);
        let files = self.files.list(&owner_prefix(tenant)).await?.len() as u64;
        residue.insert(FILE_STORE.to_owned(), files);
        Ok(residue)
    }

    /// The job's record in the owner's audit log: the counts per store, no content.
    async fn audit(&self, job: &Erasure) -> anyhow::Result<()> {
        let at = now();
        let entry = AuditEntry {
            // One record per job however often this step repeats.
            id: Uuid::new_v5(&job.id, b"erasure.audit"),
            at,
            tenant: job.tenant.clone(),
            actor: job.requested_by.clone(),
            action: "user.erase".into(),
            target: Some(job.id.to_string()),
            outcome: "ok".into(),
            duration_ms: (at - job.requested_at).num_milliseconds().max(0),
            detail: serde_json::json!({
                "deleted": job.deleted,
                "residue": job.residue,
                "attempts": job.attempts,
            }),
        };
        self.audit.record(&entry).await?;
        Ok(())
    }

    /// Takes over every job that no run holds (a crash, a failed pass) and runs it.
    pub async fn resume_stalled(&self) -> anyhow::Result<usize> {
        let stalled = self.store.stalled_erasures(now(), 16).await?;
        let mut resumed = 0;
        for id in stalled {
            if self.run(id).await?.is_some() {
                resumed += 1;
            }
        }
        Ok(resumed)
    }

    /// Resumes stalled jobs now and every `every` until `shutdown`.
    pub fn spawn_resumer(self, every: Duration, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                match self.resume_stalled().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(resumed = n, "resumed erasures"),
                    Err(e) => tracing::warn!(error = format!("{e:#}"), "could not resume erasures"),
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
            }
        })
    }
}

fn add(total: &mut BTreeMap<String, u64>, more: BTreeMap<String, u64>) {
    for (store, n) in more {
        *total.entry(store).or_default() += n;
    }
}

/// Now, to the microsecond both stores keep.
fn now() -> chrono::DateTime<Utc> {
    crate::store::truncate_to_micros(Utc::now())
}
