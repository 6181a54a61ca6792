//! `worker-pause`: the cluster deployment with two processes of each worker kind that runs
//! apart from the API (scene, persona, compact), one of a pair SIGSTOPped while it holds a
//! run, for longer than the run's lease, so that the other process takes the owner (or the
//! job) over; then SIGCONT. A stopped process is a stalled one (a long GC pause, a frozen VM,
//! a starved container): unlike a killed one it wakes up in the middle of its run, believing
//! it still holds what it held, and goes on writing. Only the fencing by the lease's token,
//! and the scene editor's write deadline, keep it from writing over the newer run.
//!
//! Which process holds a lease is not in the database, so a pause is aimed: the harness waits
//! for a lease of the kind to be held, stops one process, and follows every lease held at that
//! moment. A lease the other (running) process held ends before it runs out; a lease the
//! stopped process held stays until it runs out and the other process takes it. A pause that
//! stopped nothing mid-run is resumed at once and tried again.
//!
//! What must hold, besides the suite's invariants ([`super::verify`]): each scene version,
//! persona version and compaction summary is committed once (sampled from the database all
//! along: a stale commit would give a version a second content, or move a summary back); the
//! owner's scene documents are the committed ones once the stale run has ended (each active
//! scene's file says it was updated when its row says); every lease the stopped process held
//! is taken over within about one lease; and the resumed process works again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::files::{FileStore as _, LocalFileStore};
use shared::scene::paths::scenes_prefix;
use shared::scene::SceneDoc;
use tokio::task::JoinHandle;

use super::kill::context_calls;
use super::load::{self, Load, Tally};
use super::{
    between, check_layers_built, cluster_env, examples, keep_log_tail, layer_env, plan, verify, Form, Recovery, Report,
    LIVENESS,
};
use crate::amqp::TestBroker;
use crate::fake_openai::FakeOpenAi;
use crate::pg::TestDb;
use crate::process::{free_port, metric_sum, ApiProcess, WorkerProcess};
use crate::rng::Rng;

/// The scenario's own scene lease rather than `layer_env`'s, which other scenarios tune for
/// themselves: a pause must outlast it, and at 5 s two pauses of a kind fit in the first half
/// of the short load.
const SCENE_LEASE: Duration = Duration::from_secs(5);
/// `layer_env`'s.
const PERSONA_LEASE: Duration = Duration::from_secs(3);
const COMPACTION_LEASE: Duration = Duration::from_secs(5);
/// `cluster_env`'s `WORKER_SWEEP_INTERVAL_MS`: when nothing else wakes the other process for
/// an owner or job whose lease ran out, its sweep does.
const SWEEP: Duration = Duration::from_secs(5);
/// Beyond lease and sweep, before a takeover counts as late: the other process's claim and a
/// loaded 2-core machine.
const TAKEOVER_SLACK: Duration = Duration::from_secs(3);
/// The compaction model's answer time: a compact worker holds each job at least this long,
/// so most pauses of it land mid-job.
const SUMMARY_LATENCY: Duration = Duration::from_secs(1);
/// A scene run stopped between its deadline check and the write it guards writes after a
/// newer run took the owner over, and nothing undoes it: the write deadline narrows the window
/// to the check-to-write gap, but only a write the file store itself fences (an object per
/// run, which the row points to at commit) closes it. Seen in 1 of 5 short runs.
const STALE_SCENE_WRITE: &str = "a scene run paused between its write deadline check and the write lands that write after the newer run's (issue 39)";
/// How often the lease columns are read while waiting for a run to pause or following one.
const POLL: Duration = Duration::from_millis(5);
/// The longest one attempt waits for a lease to be held before it tries again.
const BUSY_WAIT: Duration = Duration::from_secs(3);
/// The longest the harness waits for the newer run to commit before it resumes the stale one
/// (resuming after the commit is the harder case: a stale write would then overwrite
/// committed work).
const NEWER_COMMIT_WAIT: Duration = Duration::from_secs(5);
/// The longest the resumed process takes to end its stale run and count it.
const STALE_END_WAIT: Duration = Duration::from_secs(15);

/// A worker kind that runs as processes of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Scene,
    Persona,
    Compact,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Scene, Kind::Persona, Kind::Compact];

    fn name(self) -> &'static str {
        match self {
            Kind::Scene => "scene",
            Kind::Persona => "persona",
            Kind::Compact => "compact",
        }
    }

    fn lease(self) -> Duration {
        match self {
            Kind::Scene => SCENE_LEASE,
            Kind::Persona => PERSONA_LEASE,
            Kind::Compact => COMPACTION_LEASE,
        }
    }

    /// The leases held now: what they cover (an owner, a session's job), their token and when
    /// they run out (epoch seconds).
    fn held_sql(self) -> &'static str {
        match self {
            Kind::Scene => {
                "SELECT team_id || '/' || agent_id || '/' || user_id, lease_token::text, coalesce(extract(epoch FROM lease_until)::float8, 0) FROM scene_schedule WHERE lease_token IS NOT NULL"
            }
            Kind::Persona => {
                "SELECT team_id || '/' || agent_id || '/' || user_id, lease_token::text, coalesce(extract(epoch FROM lease_until)::float8, 0) FROM personas WHERE lease_token IS NOT NULL"
            }
            Kind::Compact => {
                "SELECT session_id, claim_token::text, coalesce(extract(epoch FROM lease_until)::float8, 0) FROM session_compactions WHERE status = 'pending' AND claim_token IS NOT NULL"
            }
        }
    }

    /// The counter of this kind's runs in the worker's metrics, and the results that did work.
    fn runs_metric(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Kind::Scene => ("sediment_scene_runs_total", &["edited", "nothing"]),
            Kind::Persona => ("sediment_persona_builds_total", &["built"]),
            Kind::Compact => ("sediment_compactions_total", &["success"]),
        }
    }
}

/// A held lease as read from the database.
#[derive(Debug, Clone)]
struct Held {
    what: String,
    token: String,
    until: f64,
}

async fn held(pg: &tokio_postgres::Client, kind: Kind) -> Vec<Held> {
    match pg.query(kind.held_sql(), &[]).await {
        Ok(rows) => rows
            .iter()
            .map(|r| Held {
                what: r.get(0),
                token: r.get(1),
                until: r.get(2),
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn epoch_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// A process's runs of its kind, from its metrics: all of them, and those that did work.
async fn runs(process: &WorkerProcess, kind: Kind) -> (f64, f64) {
    runs_of(&process.metrics().await, kind)
}

/// One pause that stopped a process mid-run.
#[derive(Debug, Clone)]
struct Pause {
    kind: Kind,
    /// Which process of the pair (0: `a`, 1: `b`).
    process: usize,
    /// When it was stopped, from the load's start.
    at: Duration,
    /// Leases it held when it was stopped.
    held: usize,
    /// From the stop to the last of them taken over; `None`: one was not by the bound.
    takeover: Option<Duration>,
    /// How long it stayed stopped.
    stopped_for: Duration,
    /// When it was resumed, from the load's start.
    resumed_at: Duration,
    /// From the resume until its runs counter moved (the stale run ended); `None`: not within
    /// [`STALE_END_WAIT`].
    stale_ended: Option<Duration>,
    /// Its results since just before the pause, by result (the stale run is among them).
    results: String,
    /// Runs that did work, as it counted them once its stale run had ended: it must count more
    /// by the end.
    worked_after: f64,
    /// Scene pauses: the owner's documents against the committed rows once the stale run ended.
    files: Option<FilesVerdict>,
    /// When a lease was not taken over by the bound: the database sessions then in an open
    /// transaction or waiting for a lock.
    stuck: Vec<String>,
}

/// The longest a pause of `kind` may wait for its leases to be taken over.
fn takeover_bound(kind: Kind) -> Duration {
    kind.lease() + SWEEP + TAKEOVER_SLACK
}

/// Pauses of one kind: `pauses` of them, alternating between the two processes, each aimed at
/// a run in progress, until `until` (from `start`). Returns the pauses that stopped a process
/// mid-run and how many attempts stopped nothing.
#[allow(clippy::too_many_arguments)]
async fn pause_kind(
    kind: Kind,
    pair: &[WorkerProcess; 2],
    pg: &tokio_postgres::Client,
    files: &LocalFileStore,
    tenant: &Tenant,
    pauses: usize,
    start: Instant,
    until: Duration,
    seed: u64,
) -> (Vec<Pause>, usize) {
    let mut rng = Rng::new(seed);
    let mut done = Vec::new();
    let mut misses = 0;
    // The first runs come once extraction has made memories.
    tokio::time::sleep(between(&mut rng, 2.0, 4.0)).await;
    while done.len() < pauses && start.elapsed() < until {
        let victim = done.len() % 2;
        let process = &pair[victim];
        let Some(before) = wait_held(pg, kind, process).await else {
            continue;
        };
        process.pause();
        let stopped = Instant::now();
        let at = start.elapsed();
        let followed = follow(pg, kind, stopped).await;
        // Read while the process is still stopped.
        let stuck = if followed.iter().any(|f| f.gone.is_none()) {
            stuck_sessions(pg).await
        } else {
            Vec::new()
        };
        let mine: Vec<&Followed> = followed.iter().filter(|f| f.taken_over).collect();
        if mine.is_empty() {
            // Every lease held at the stop was the other process's (or ended before the signal
            // landed): this pause stopped nothing mid-run.
            process.resume();
            misses += 1;
            continue;
        }
        let takeover = if followed.iter().all(|f| f.gone.is_some()) {
            mine.iter().filter_map(|f| f.gone).max()
        } else {
            None
        };
        // The newer run commits (its lease on what the stopped process held ends) before the
        // stale one wakes.
        let covered: HashSet<&str> = mine.iter().map(|f| f.what.as_str()).collect();
        let waiting = Instant::now();
        while waiting.elapsed() < NEWER_COMMIT_WAIT
            && held(pg, kind).await.iter().any(|h| covered.contains(h.what.as_str()))
        {
            tokio::time::sleep(POLL).await;
        }
        process.resume();
        let resumed = Instant::now();
        let resumed_at = start.elapsed();
        let stopped_for = stopped.elapsed();
        let (total_before, _) = runs_of(&before, kind);
        let mut stale_ended = None;
        let mut after = String::new();
        while resumed.elapsed() < STALE_END_WAIT {
            let metrics = process.metrics().await;
            if runs_of(&metrics, kind).0 > total_before {
                stale_ended = Some(resumed.elapsed());
                after = metrics;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let files = match kind {
            Kind::Scene => Some(scene_files(pg, files, tenant).await),
            Kind::Persona | Kind::Compact => None,
        };
        done.push(Pause {
            kind,
            process: victim,
            at,
            held: mine.len(),
            takeover,
            stopped_for,
            resumed_at,
            stale_ended,
            results: results_since(&before, &after, kind),
            worked_after: runs_of(&after, kind).1,
            files,
            stuck,
        });
    }
    (done, misses)
}

fn runs_of(metrics: &str, kind: Kind) -> (f64, f64) {
    let (name, working) = kind.runs_metric();
    let worked = working
        .iter()
        .map(|r| metric_sum(metrics, name, &[&format!("result=\"{r}\"")]))
        .sum();
    (metric_sum(metrics, name, &[]), worked)
}

/// `lease_lost 1, edited 2`: the results a process counted between two readings of its metrics.
fn results_since(before: &str, after: &str, kind: Kind) -> String {
    let (name, _) = kind.runs_metric();
    let mut by_result: BTreeMap<String, f64> = BTreeMap::new();
    for (text, sign) in [(after, 1.0), (before, -1.0)] {
        for line in text.lines().filter(|l| l.starts_with(name)) {
            let Some(result) = line.split("result=\"").nth(1).and_then(|r| r.split('"').next()) else {
                continue;
            };
            let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            *by_result.entry(result.to_owned()).or_default() += sign * value;
        }
    }
    let moved: Vec<String> = by_result
        .iter()
        .filter(|(_, n)| **n > 0.0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    if moved.is_empty() {
        "none".to_owned()
    } else {
        moved.join(", ")
    }
}

/// Waits, for at most [`BUSY_WAIT`], until a lease of `kind` is held; returns `process`'s
/// metrics as read just before, so that the runs it counts after its resume are the stale
/// run and later ones.
async fn wait_held(pg: &tokio_postgres::Client, kind: Kind, process: &WorkerProcess) -> Option<String> {
    let since = Instant::now();
    while since.elapsed() < BUSY_WAIT {
        let metrics = process.metrics().await;
        if !held(pg, kind).await.is_empty() {
            return Some(metrics);
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// A lease held when a process was stopped, followed until it ended.
#[derive(Debug, Clone)]
struct Followed {
    what: String,
    /// From the stop until it was no longer held; `None`: still held at the bound.
    gone: Option<Duration>,
    /// It ended only once it had run out: nobody renewed or released it, so the stopped
    /// process held it, and another took it over.
    taken_over: bool,
}

/// Follows every lease of `kind` held right after the stop until each has ended, or for at
/// most the takeover bound.
async fn follow(pg: &tokio_postgres::Client, kind: Kind, stopped: Instant) -> Vec<Followed> {
    let mut open: HashMap<String, Held> = held(pg, kind).await.into_iter().map(|h| (h.token.clone(), h)).collect();
    let mut followed = Vec::new();
    let bound = takeover_bound(kind);
    while !open.is_empty() && stopped.elapsed() < bound {
        tokio::time::sleep(POLL).await;
        let now: HashMap<String, Held> = held(pg, kind).await.into_iter().map(|h| (h.token.clone(), h)).collect();
        let at = epoch_now();
        open.retain(|token, lease| match now.get(token) {
            Some(renewed) => {
                lease.until = renewed.until;
                true
            }
            None => {
                followed.push(Followed {
                    what: lease.what.clone(),
                    gone: Some(stopped.elapsed()),
                    taken_over: at >= lease.until,
                });
                false
            }
        });
    }
    followed.extend(open.into_values().map(|lease| Followed {
        what: lease.what,
        gone: None,
        taken_over: true,
    }));
    followed
}

/// The sessions of the scenario's database that sit in an open transaction or wait for a
/// lock, with their last statement: why a lease that ran out was not taken over.
async fn stuck_sessions(pg: &tokio_postgres::Client) -> Vec<String> {
    let rows = pg
        .query(
            "SELECT coalesce(state, ''), coalesce(wait_event_type, ''), left(regexp_replace(coalesce(query, ''), '\\s+', ' ', 'g'), 90), \
                    coalesce(extract(epoch FROM now() - state_change)::float8, 0) \
             FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND (state = 'idle in transaction' OR wait_event_type = 'Lock')",
            &[],
        )
        .await
        .unwrap_or_default();
    rows.iter()
        .map(|r| {
            let (state, wait, query, for_s): (String, String, String, f64) = (r.get(0), r.get(1), r.get(2), r.get(3));
            let state = if wait == "Lock" {
                "waiting for a lock".to_owned()
            } else {
                state
            };
            format!("{state} for {for_s:.1} s: {query}")
        })
        .collect()
}

/// The owner's scene documents against the committed rows.
#[derive(Debug, Clone)]
struct FilesVerdict {
    /// Active scenes compared.
    scenes: usize,
    /// What does not match: a document missing, unreadable, or updated at another time than
    /// its row says (an older one: a stale run wrote it), or a document with no active row.
    wrong: Vec<String>,
    /// No moment without a run in progress was found to compare at.
    unsettled: bool,
}

/// Compares the owner's scene documents with the committed scene rows at a moment when no run
/// holds the owner (a run in progress writes its documents before it commits its rows): each
/// active scene's document says it was updated when its row does, and every document has an
/// active row. The schedule row is read before and after the documents; if it moved, a run
/// came in between, and the comparison is made again.
async fn scene_files(pg: &tokio_postgres::Client, files: &LocalFileStore, tenant: &Tenant) -> FilesVerdict {
    let schedule = "SELECT lease_token IS NULL, updated_at::text FROM scene_schedule";
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(10) {
        let Ok(first) = pg.query_one(schedule, &[]).await else {
            return FilesVerdict {
                scenes: 0,
                wrong: vec!["no scene schedule row".into()],
                unsettled: false,
            };
        };
        if !first.get::<_, bool>(0) {
            tokio::time::sleep(POLL).await;
            continue;
        }
        let rows = pg
            .query(
                "SELECT id::text, object_key, (extract(epoch FROM updated_at) * 1000000)::bigint FROM scenes WHERE status = 'active'",
                &[],
            )
            .await
            .unwrap_or_default();
        let mut wrong = Vec::new();
        let mut keys = HashSet::new();
        for row in &rows {
            let (id, key, updated): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
            keys.insert(key.clone());
            match files.get(&key).await {
                Ok(Some(bytes)) => match SceneDoc::parse(&String::from_utf8_lossy(&bytes)) {
                    Ok(doc) if doc.updated.timestamp_micros() == updated => {}
                    Ok(doc) => wrong.push(format!(
                        "{id}: document updated {}, row {}",
                        doc.updated.timestamp_micros(),
                        updated
                    )),
                    Err(e) => wrong.push(format!("{id}: unreadable ({e})")),
                },
                Ok(None) => wrong.push(format!("{id}: no document")),
                Err(e) => wrong.push(format!("{id}: {e}")),
            }
        }
        for object in files.list(&scenes_prefix(tenant)).await.unwrap_or_default() {
            if !keys.contains(&object.key) {
                wrong.push(format!("{}: a document with no active scene", object.key));
            }
        }
        let settled = pg
            .query_one(schedule, &[])
            .await
            .is_ok_and(|second| second.get::<_, bool>(0) && second.get::<_, String>(1) == first.get::<_, String>(1));
        if settled {
            return FilesVerdict {
                scenes: rows.len(),
                wrong,
                unsettled: false,
            };
        }
    }
    FilesVerdict {
        scenes: 0,
        wrong: Vec::new(),
        unsettled: true,
    }
}

/// What the committed rows looked like over the scenario, sampled every 100 ms: a stale commit
/// that got through would give a scene or persona version a second content, or move a
/// session's summary back to a range it had already folded in.
#[derive(Debug, Default)]
struct Commits {
    /// Scene id and version: the update times seen.
    scene_versions: HashMap<(String, i64), HashSet<i64>>,
    /// Scenes seen at a lower version after a higher one.
    scene_rewound: Vec<String>,
    /// Persona version: the objects seen.
    persona_versions: HashMap<i64, HashSet<String>>,
    persona_rewound: Vec<String>,
    /// Session: the summaries seen, in order, as (compressed at, last seq).
    summaries: HashMap<String, Vec<(String, i64)>>,
    samples: usize,
}

fn sample_commits(pg: tokio_postgres::Client, stop: Arc<AtomicBool>) -> JoinHandle<Commits> {
    tokio::spawn(async move {
        let mut commits = Commits::default();
        let mut scene_latest: HashMap<String, i64> = HashMap::new();
        let mut persona_latest: Option<i64> = None;
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            commits.samples += 1;
            let scenes = pg
                .query(
                    "SELECT id::text, version, (extract(epoch FROM updated_at) * 1000000)::bigint FROM scenes",
                    &[],
                )
                .await
                .unwrap_or_default();
            for row in &scenes {
                let (id, version, updated): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
                commits
                    .scene_versions
                    .entry((id.clone(), version))
                    .or_default()
                    .insert(updated);
                let latest = scene_latest.entry(id.clone()).or_insert(version);
                if version < *latest {
                    commits.scene_rewound.push(format!("{id} v{latest} then v{version}"));
                }
                *latest = (*latest).max(version);
            }
            if let Ok(Some(row)) = pg
                .query_opt("SELECT version, coalesce(object_key, '') FROM personas", &[])
                .await
            {
                let (version, key): (i64, String) = (row.get(0), row.get(1));
                commits.persona_versions.entry(version).or_default().insert(key);
                if persona_latest.is_some_and(|latest| version < latest) {
                    commits
                        .persona_rewound
                        .push(format!("v{} then v{version}", persona_latest.unwrap_or_default()));
                }
                persona_latest = persona_latest.max(Some(version));
            }
            let summaries = pg
                .query(
                    "SELECT session_id, coalesce(compressed_at::text, ''), last_seq FROM session_compactions WHERE last_seq IS NOT NULL",
                    &[],
                )
                .await
                .unwrap_or_default();
            for row in &summaries {
                let (session, at, last): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
                let seen = commits.summaries.entry(session).or_default();
                if seen.last().is_none_or(|(prev, _)| *prev != at) {
                    seen.push((at, last));
                }
            }
            if stopping {
                return commits;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

fn check_commits(report: &mut Report, commits: &Commits) {
    let twice: Vec<String> = commits
        .scene_versions
        .iter()
        .filter(|(_, times)| times.len() > 1)
        .map(|((id, version), times)| format!("{id} v{version} committed {} times", times.len()))
        .collect();
    report.checks.push(
        "each scene version is committed once",
        twice.is_empty() && commits.scene_rewound.is_empty() && !commits.scene_versions.is_empty(),
        format!(
            "{} scene versions seen in {} samples, {} with two contents{}, {} scenes moved back{}",
            commits.scene_versions.len(),
            commits.samples,
            twice.len(),
            examples(&twice),
            commits.scene_rewound.len(),
            examples(&commits.scene_rewound)
        ),
    );
    let twice: Vec<String> = commits
        .persona_versions
        .iter()
        .filter(|(version, keys)| **version > 0 && keys.len() > 1)
        .map(|(version, keys)| format!("v{version} with {} objects", keys.len()))
        .collect();
    let built = commits.persona_versions.keys().filter(|v| **v > 0).count();
    report.checks.push(
        "each persona version is committed once",
        twice.is_empty() && commits.persona_rewound.is_empty() && built > 0,
        format!(
            "{built} persona versions seen, {} with two objects{}, moved back {} times{}",
            twice.len(),
            examples(&twice),
            commits.persona_rewound.len(),
            examples(&commits.persona_rewound)
        ),
    );
    // Each summary folds in turns past the last one's: a range summarized twice, or a stale
    // summary committed over a newer one, shows as a last seq that does not grow.
    let mut not_growing = Vec::new();
    let mut seen = 0;
    for (session, summaries) in &commits.summaries {
        seen += summaries.len();
        for pair in summaries.windows(2) {
            if pair[1].1 <= pair[0].1 {
                not_growing.push(format!("{session}: up to seq {} then up to {}", pair[0].1, pair[1].1));
            }
        }
    }
    report.checks.push(
        "no compaction range is committed twice",
        not_growing.is_empty() && seen > 0,
        format!(
            "{seen} summaries seen over {} sessions, {} not past the one before{}",
            commits.summaries.len(),
            not_growing.len(),
            examples(&not_growing)
        ),
    );
}

/// The pairs of worker processes and the two binaries' settings.
struct Pairs {
    scene: [WorkerProcess; 2],
    persona: [WorkerProcess; 2],
    compact: [WorkerProcess; 2],
}

impl Pairs {
    fn of(&self, kind: Kind) -> &[WorkerProcess; 2] {
        match kind {
            Kind::Scene => &self.scene,
            Kind::Persona => &self.persona,
            Kind::Compact => &self.compact,
        }
    }
}

async fn start_pair(
    bin: &Path,
    args: &[&str],
    env: &[(&'static str, String)],
    dir: &Path,
    kind: Kind,
) -> [WorkerProcess; 2] {
    let a = WorkerProcess::start(bin, args, env, &dir.join(format!("{}-a.log", kind.name()))).await;
    let b = WorkerProcess::start(bin, args, env, &dir.join(format!("{}-b.log", kind.name()))).await;
    [a, b]
}

/// Two processes of each kind under load, each paused mid-run (2 times a kind in 40 s short,
/// 6 times in 150 s long, alternating between the pair) until its leases are taken over, then
/// resumed; context calls keep compaction jobs running. Then: nothing committed twice or over
/// a newer commit, the scene documents the committed ones, every takeover within about a
/// lease, every paused process working again, and the suite's invariants.
pub(super) async fn worker_pause(bin: &Path, report: &mut Report) {
    let per_kind = match report.form {
        Form::Short => 2,
        Form::Long => 6,
    };
    let plan = plan(report.form, report.seed, (40.0, 150.0));
    let db = TestDb::create().await;
    let broker = TestBroker::start("chaos-worker-pause").await;
    let amqp = broker.settings();
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let mut env = cluster_env(&db.url, &amqp.url, &amqp.prefix, dir.path());
    env.extend(layer_env());
    env.retain(|(k, _)| *k != "SCENE_LEASE_MS");
    env.extend([
        ("SCENE_LEASE_MS", SCENE_LEASE.as_millis().to_string()),
        // A build every few memories rather than every 20: more builds to pause.
        ("PERSONA_MEMORY_THRESHOLD", "4".into()),
        ("COMPACTION_LEASE_MS", COMPACTION_LEASE.as_millis().to_string()),
        ("COMPACTION_TIMEOUT_MS", "4000".into()),
    ]);
    let model = FakeOpenAi::start(8).await;
    model.set_latency(SUMMARY_LATENCY);
    let summary = summary_answer().to_string();
    model.set_chat_responder(move |_| Some(summary.clone()));
    let mut compact_env = env.clone();
    compact_env.extend([("LLM_URL", model.base_url()), ("LLM_MODEL", "chaos-summarizer".into())]);

    let (server, _) = ApiProcess::start_at(bin, free_port(), &env, &log).await;
    let layers = bin.with_file_name("sediment-test-layers");
    let compact = bin.with_file_name("sediment-test-compact");
    let pairs = Pairs {
        scene: start_pair(&layers, &["scene"], &env, dir.path(), Kind::Scene).await,
        persona: start_pair(&layers, &["persona"], &env, dir.path(), Kind::Persona).await,
        compact: start_pair(&compact, &[], &compact_env, dir.path(), Kind::Compact).await,
    };
    let files = LocalFileStore::open(&dir.path().join("files")).expect("open the scenario's file store");
    let pg = db.client().await;
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = sample_commits(db.client().await, stop_sampler.clone());

    let tenant = crate::app::tenant();
    let load = Load::start(server.base.clone(), tenant.clone(), plan);
    let start = load.started;
    let stop_contexts = Arc::new(AtomicBool::new(false));
    let contexts = context_calls(
        server.base.clone(),
        tenant.clone(),
        load::sessions(&plan),
        start,
        stop_contexts.clone(),
    );

    // Pauses start in the first half of the load, so that work still comes for the resumed
    // processes to do.
    let until = Duration::from_secs_f64(plan.seconds * 0.5);
    let clients = [db.client().await, db.client().await, db.client().await];
    let [(scene, scene_misses), (persona, persona_misses), (compact, compact_misses)] = {
        let run = |i: usize| {
            let kind = Kind::ALL[i];
            pause_kind(
                kind,
                pairs.of(kind),
                &clients[i],
                &files,
                &tenant,
                per_kind,
                start,
                until,
                report.seed + i as u64,
            )
        };
        let (a, b, c) = tokio::join!(run(0), run(1), run(2));
        [a, b, c]
    };
    let misses = [scene_misses, persona_misses, compact_misses];
    let pauses: Vec<Pause> = [scene, persona, compact].concat();

    let sent = load.finish().await;
    stop_contexts.store(true, Ordering::SeqCst);
    let calls = contexts.await.expect("the context calls' task");
    report.tally = Tally::of(&sent);
    for p in &pauses {
        report.recoveries.push(Recovery {
            fault: describe(p),
            back: "what it held taken over by the other process",
            after: p.takeover,
        });
    }
    check_pauses(report, &pauses, &misses, per_kind);
    check_worked_again(report, &pairs, &pauses, Duration::from_secs_f64(plan.seconds)).await;
    let accepted = report.tally.accepted == report.tally.sent;
    report.checks.push(
        "ingest answers 201 throughout",
        accepted,
        format!(
            "{} of {} requests answered 201",
            report.tally.accepted, report.tally.sent
        ),
    );
    let not_ok: Vec<String> = calls
        .iter()
        .filter(|c| c.status != Some(200))
        .map(|c| format!("{:?} at {:.1} s", c.status, c.sent.as_secs_f64()))
        .collect();
    report.checks.push(
        "the session context answers and queues compactions",
        not_ok.is_empty() && calls.iter().any(|c| c.queued),
        format!(
            "{} context calls, {} not 200{}, {} queued a compaction",
            calls.len(),
            not_ok.len(),
            examples(&not_ok),
            calls.iter().filter(|c| c.queued).count()
        ),
    );
    let compacted = compactions_done(&pg, LIVENESS).await;
    report.checks.push(
        "every compaction job ends done",
        compacted.is_some(),
        match compacted {
            Some(after) => format!("no job left undone {:.1} s after the load", after.as_secs_f64()),
            None => format!("jobs still undone {} s after the load", LIVENESS.as_secs()),
        },
    );
    let end = scene_files(&pg, &files, &tenant).await;
    report.checks.push(
        "the scene documents are the committed ones at the end",
        end.wrong.is_empty() && !end.unsettled && end.scenes > 0,
        files_detail(&end),
    );
    check_layers_built(&mut report.checks, &server, &tenant, &pairs.scene[0], &pairs.persona[0]).await;
    let mut not_ready = Vec::new();
    for kind in Kind::ALL {
        for (i, process) in pairs.of(kind).iter().enumerate() {
            let ready = process.probe("/readyz").await;
            if ready != Some(200) {
                not_ready.push(format!("{} {}: {ready:?}", kind.name(), process_name(i)));
            }
        }
    }
    report.checks.push(
        "every worker process is ready at the end",
        not_ready.is_empty(),
        format!("{} of 6 not ready{}", not_ready.len(), examples(&not_ready)),
    );
    verify(server, &tenant, &plan, &sent, &dir.path().join("index"), report).await;
    stop_sampler.store(true, Ordering::SeqCst);
    let commits = sampler.await.expect("the commit sampler's task");
    check_commits(report, &commits);
    for [a, b] in [pairs.scene, pairs.persona, pairs.compact] {
        a.stop().await;
        b.stop().await;
    }
    broker.cleanup().await;
    keep_log_tail(report, &log);
    keep_worker_errors(report, dir.path());
}

/// When a check failed: the last errors each worker process logged (a parked message's, say).
fn keep_worker_errors(report: &mut Report, dir: &Path) {
    if report.passed() {
        return;
    }
    for kind in Kind::ALL {
        for i in 0..2 {
            let name = format!("{}-{}.log", kind.name(), process_name(i));
            let text = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
            for line in &errors[errors.len().saturating_sub(3)..] {
                report.log_tail.push_str(&format!("\n{name}: {line}"));
            }
        }
    }
}

fn process_name(i: usize) -> &'static str {
    ["a", "b"][i]
}

fn describe(p: &Pause) -> String {
    let stale = match p.stale_ended {
        Some(after) => format!("its stale run ended {:.2} s after the resume", after.as_secs_f64()),
        None => format!(
            "its stale run not ended {} s after the resume",
            STALE_END_WAIT.as_secs()
        ),
    };
    let files = p
        .files
        .as_ref()
        .map_or(String::new(), |f| format!("; then {}", files_detail(f)));
    let stuck = if p.stuck.is_empty() {
        String::new()
    } else {
        format!(
            "; not taken over by the bound, the database then had {} sessions in an open transaction or waiting for a lock: {}",
            p.stuck.len(),
            p.stuck.join(" | ")
        )
    };
    format!(
        "{} {} paused at {:.1} s holding {} lease{} ({} s each), stopped {:.1} s; {stale}; its results since: {}{files}{stuck}",
        p.kind.name(),
        process_name(p.process),
        p.at.as_secs_f64(),
        p.held,
        if p.held == 1 { "" } else { "s" },
        p.kind.lease().as_secs(),
        p.stopped_for.as_secs_f64(),
        p.results
    )
}

fn files_detail(f: &FilesVerdict) -> String {
    if f.unsettled {
        return "no moment without a scene run to compare the documents at".to_owned();
    }
    format!(
        "{} active scenes, {} documents not the committed ones{}",
        f.scenes,
        f.wrong.len(),
        examples(&f.wrong)
    )
}

/// Every kind was paused mid-run as often as planned, each pause's leases were taken over
/// within a lease and a sweep, each stale run ended, and the documents matched after each
/// scene pause.
fn check_pauses(report: &mut Report, pauses: &[Pause], misses: &[usize; 3], per_kind: usize) {
    let per: Vec<String> = Kind::ALL
        .iter()
        .zip(misses)
        .map(|(kind, missed)| {
            let of: Vec<&Pause> = pauses.iter().filter(|p| p.kind == *kind).collect();
            let takeovers: Vec<String> = of
                .iter()
                .map(|p| {
                    p.takeover
                        .map_or("never".into(), |t| format!("{:.1} s", t.as_secs_f64()))
                })
                .collect();
            format!(
                "{} paused mid-run {} times ({missed} pauses stopped nothing), taken over after {} (lease {} s)",
                kind.name(),
                of.len(),
                takeovers.join(", "),
                kind.lease().as_secs()
            )
        })
        .collect();
    let short: Vec<&str> = Kind::ALL
        .iter()
        .filter(|k| pauses.iter().filter(|p| p.kind == **k).count() < per_kind)
        .map(|k| k.name())
        .collect();
    report.checks.push(
        "each kind is paused mid-run as planned",
        short.is_empty(),
        format!("{}; short of {per_kind}: {short:?}", per.join("; ")),
    );
    let late: Vec<String> = pauses
        .iter()
        .filter(|p| p.takeover.is_none_or(|t| t > takeover_bound(p.kind)))
        .map(|p| format!("{} at {:.1} s", p.kind.name(), p.at.as_secs_f64()))
        .collect();
    report.checks.push(
        "the other process takes over within a lease and a sweep",
        late.is_empty(),
        format!(
            "{} pauses, {} not taken over within lease + {} s sweep + {} s{}",
            pauses.len(),
            late.len(),
            SWEEP.as_secs(),
            TAKEOVER_SLACK.as_secs(),
            examples(&late)
        ),
    );
    let unended: Vec<String> = pauses
        .iter()
        .filter(|p| p.stale_ended.is_none())
        .map(|p| format!("{} at {:.1} s", p.kind.name(), p.at.as_secs_f64()))
        .collect();
    report.checks.push(
        "a resumed process ends its stale run",
        unended.is_empty(),
        format!(
            "{} of {} stale runs not ended{}",
            unended.len(),
            pauses.len(),
            examples(&unended)
        ),
    );
    let scene: Vec<&Pause> = pauses.iter().filter(|p| p.kind == Kind::Scene).collect();
    let wrong: Vec<String> = scene
        .iter()
        .filter_map(|p| {
            let f = p.files.as_ref()?;
            (!f.wrong.is_empty() || f.unsettled)
                .then(|| format!("after the pause at {:.1} s: {}", p.at.as_secs_f64(), files_detail(f)))
        })
        .collect();
    report.checks.push_known(
        "a stale scene run leaves the newer documents alone",
        wrong.is_empty() && !scene.is_empty(),
        STALE_SCENE_WRITE,
        format!(
            "{} scene pauses, {} left documents other than the committed ones{}",
            scene.len(),
            wrong.len(),
            examples(&wrong)
        ),
    );
}

/// Each process that was paused did work after its last stale run ended, if it was resumed
/// while the load still had seconds to go (one held stopped past the takeover bound may come
/// back after it: that failure is the takeover's).
async fn check_worked_again(report: &mut Report, pairs: &Pairs, pauses: &[Pause], load: Duration) {
    let mut idle = Vec::new();
    let mut seen = 0;
    let mut late = 0;
    for kind in Kind::ALL {
        for (i, process) in pairs.of(kind).iter().enumerate() {
            let Some(last) = pauses.iter().rfind(|p| p.kind == kind && p.process == i) else {
                continue;
            };
            if last.resumed_at + Duration::from_secs(5) > load {
                late += 1;
                continue;
            }
            seen += 1;
            let (_, worked) = runs(process, kind).await;
            if worked <= last.worked_after {
                idle.push(format!("{} {}", kind.name(), process_name(i)));
            }
        }
    }
    report.checks.push(
        "a resumed process works again",
        idle.is_empty() && seen > 0,
        format!(
            "{seen} processes paused and resumed at least 5 s before the load's end, {} did no work after their last pause{}; {late} resumed later",
            idle.len(),
            examples(&idle)
        ),
    );
}

/// Waits, for at most `bound`, until no compaction job is left undone.
async fn compactions_done(pg: &tokio_postgres::Client, bound: Duration) -> Option<Duration> {
    let since = Instant::now();
    loop {
        let undone: Option<i64> = pg
            .query_one(
                "SELECT count(*) FROM session_compactions WHERE status <> 'success' OR last_seq IS NULL",
                &[],
            )
            .await
            .ok()
            .map(|r| r.get(0));
        if undone == Some(0) {
            return Some(since.elapsed());
        }
        if since.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the compaction model answers: a summary with something in most dimensions.
fn summary_answer() -> Value {
    json!({
        "requests_and_intent": ["pick the deploy tools the user prefers"],
        "decisions": ["deploys use the tools the user named"],
        "objects_changed": [],
        "schema_changes": [],
        "data_operations": [],
        "errors_and_fixes": [],
        "todos": ["keep the preferred deploy tools in mind"],
        "user_preferences": ["names one deploy tool per message"],
        "tool_calls": [],
        "other_context": []
    })
}
