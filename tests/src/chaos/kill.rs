//! `worker-kill`: the cluster deployment with the workers that run as processes of their own
//! (scene, persona, compact), each SIGKILLed at random points of the load, several times, and
//! restarted with the same settings and log. The index and extract workers cannot run apart
//! from the API without a Qdrant server (the Edge index is one process's), so they are killed
//! with the API, once.
//!
//! A kill waits (a little) for the worker to hold a run, read from the lease columns of the
//! database, so most kills land mid-run; what the dead process still holds after the kill is
//! what it abandoned, and what the next process of its kind must wait out.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shared::domain::Tenant;
use tokio::task::JoinHandle;

use super::load::{self, Load, Tally};
use super::{
    between, check_layers_built, cluster_env, examples, keep_log_tail, layer_env, plan, verify, Form, LayerRuns,
    Recovery, Report, LIVENESS,
};
use crate::amqp::TestBroker;
use crate::app::TenantHeaders as _;
use crate::fake_openai::FakeOpenAi;
use crate::pg::TestDb;
use crate::process::{free_port, ApiProcess, WorkerProcess};
use crate::rng::Rng;

/// How long the compaction model takes to answer: long enough that a compact worker killed at
/// a random moment is usually waiting on it, holding a job.
pub(super) const SUMMARY_LATENCY: Duration = Duration::from_secs(1);
/// The longest a kill waits for its worker to hold a run before it kills it anyway.
const BUSY_WAIT: Duration = Duration::from_secs(2);
/// The window of the context calls: small, so that nearly every call finds a compaction due.
const CONTEXT_WINDOW: u64 = 256;
/// The pause between two context calls (each on the next session).
const CONTEXT_EVERY: Duration = Duration::from_millis(400);

/// What gets killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Scene,
    Persona,
    Compact,
    /// The API process, with its in-process index and extract workers.
    Api,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Scene => "scene",
            Kind::Persona => "persona",
            Kind::Compact => "compact",
            Kind::Api => "API",
        }
    }

    /// The leases of this kind's runs held right now: a run in progress, or one whose process
    /// died in it.
    fn held_sql(self) -> &'static str {
        match self {
            Kind::Scene => "SELECT lease_token::text FROM scene_schedule WHERE lease_token IS NOT NULL",
            Kind::Persona => "SELECT lease_token::text FROM personas WHERE lease_token IS NOT NULL",
            Kind::Compact => {
                "SELECT claim_token::text FROM session_compactions WHERE status = 'pending' AND claim_token IS NOT NULL"
            }
            // Extraction leases are not cleared on expiry, only on release.
            Kind::Api => {
                "SELECT lease_owner::text || session_id FROM extract_schedule WHERE lease_owner IS NOT NULL AND lease_until > now()"
            }
        }
    }
}

/// A worker process and how to start it again.
pub(super) struct Worker {
    pub(super) kind: Kind,
    pub(super) process: WorkerProcess,
    pub(super) bin: PathBuf,
    pub(super) args: &'static [&'static str],
    pub(super) env: Vec<(&'static str, String)>,
    pub(super) log: PathBuf,
}

impl Worker {
    pub(super) async fn start(
        kind: Kind,
        bin: PathBuf,
        args: &'static [&'static str],
        env: Vec<(&'static str, String)>,
        log: PathBuf,
    ) -> Self {
        let process = WorkerProcess::start(&bin, args, &env, &log).await;
        Self {
            kind,
            process,
            bin,
            args,
            env,
            log,
        }
    }
}

/// One kill and what it left behind.
#[derive(Debug, Clone)]
struct Kill {
    kind: Kind,
    at: Duration,
    /// Leases (jobs, for compaction) the dead process still held: it died mid-run.
    abandoned: Vec<String>,
    down: Duration,
    ready: Duration,
}

/// Each worker process SIGKILLed at random points of the load (3 times each in 40 s short, 10
/// times in 180 s long) and the API once, each restarted after 0.2 to 1 s; meanwhile context
/// calls keep compaction jobs running. Then: every turn stored, indexed and extracted once, the
/// layers built, every compaction job done.
pub(super) async fn worker_kill(bin: &Path, report: &mut Report) {
    let per_kind = match report.form {
        Form::Short => 3,
        Form::Long => 10,
    };
    let plan = plan(report.form, report.seed, (40.0, 180.0));
    let db = TestDb::create().await;
    let broker = TestBroker::start("chaos-worker-kill").await;
    let amqp = broker.settings();
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let env = scenario_env(&db.url, &amqp.url, &amqp.prefix, dir.path());
    let (model, compact_env) = summarizer(&env).await;

    let port = free_port();
    let (mut server, _) = ApiProcess::start_at(bin, port, &env, &log).await;
    let mut workers = start_workers(bin, &env, compact_env, dir.path()).await;
    let pg = db.client().await;
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = sample_leases(db.client().await, stop_sampler.clone());

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

    let mut rng = Rng::new(report.seed);
    let seconds = plan.seconds;
    // The kills end a fifth before the load does, so that memories still come after the last
    // restart for a scene run to edit and a persona to be built from.
    let mut schedule: Vec<(Duration, Kind)> = [Kind::Scene, Kind::Persona, Kind::Compact]
        .into_iter()
        .flat_map(|kind| std::iter::repeat_n(kind, per_kind))
        .map(|kind| (between(&mut rng, 0.05 * seconds, 0.8 * seconds), kind))
        .collect();
    // Once, early enough that its extraction leases (30 s) run out within the short form.
    schedule.push((between(&mut rng, 0.2 * seconds, 0.5 * seconds), Kind::Api));
    schedule.sort_by_key(|(due, _)| *due);

    let mut dead: HashSet<String> = HashSet::new();
    let mut kills = Vec::new();
    for (due, kind) in schedule {
        tokio::time::sleep_until((start + due).into()).await;
        wait_busy(&pg, kind, &dead).await;
        let at = start.elapsed();
        let (abandoned, ready) = match kind {
            Kind::Api => {
                server.kill().await;
                let abandoned = left_held(&pg, kind, &dead, &mut rng).await;
                let (restarted, ready) = ApiProcess::start_at(bin, port, &env, &log).await;
                server = restarted;
                (abandoned, ready)
            }
            Kind::Scene | Kind::Persona | Kind::Compact => {
                let w = worker(&mut workers, kind);
                w.process.kill().await;
                let abandoned = left_held(&pg, kind, &dead, &mut rng).await;
                let restarting = Instant::now();
                w.process = WorkerProcess::start(&w.bin, w.args, &w.env, &w.log).await;
                (abandoned, restarting.elapsed())
            }
        };
        let down = start.elapsed().saturating_sub(at + ready);
        kills.push(Kill {
            kind,
            at,
            abandoned: abandoned.clone(),
            down,
            ready,
        });
        dead.extend(abandoned);
    }
    let last_restart = Instant::now();
    let last_restart_at = start.elapsed();
    stop_contexts.store(true, Ordering::SeqCst);

    // Back: since the last restart a scene run has edited, a persona has been built, and no
    // compaction job is left undone (the killed workers' jobs taken again after their lease).
    let (scene, persona) = (&workers[0].process, &workers[1].process);
    let before = LayerRuns::read(scene, persona).await;
    let (mut edited, mut built, mut compacted) = (None, None, None);
    let after = loop {
        let now = LayerRuns::read(scene, persona).await;
        let first = |seen: &mut Option<Duration>, yes: bool| {
            if yes && seen.is_none() {
                *seen = Some(last_restart.elapsed());
            }
        };
        first(&mut edited, now.edited > before.edited);
        first(&mut built, now.built > before.built);
        first(&mut compacted, undone_compactions(&pg).await == Some(0));
        if let (Some(a), Some(b), Some(c)) = (edited, built, compacted) {
            break Some(a.max(b).max(c));
        }
        if last_restart.elapsed() > LIVENESS {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let since = |seen: Option<Duration>| seen.map_or("never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
    report.recoveries.push(Recovery {
        fault: format!(
            "{}; last restart at {:.1} s; since then a scene run edited after {}, a persona built after {}, every compaction done after {}",
            describe(&kills),
            last_restart_at.as_secs_f64(),
            since(edited),
            since(built),
            since(compacted)
        ),
        back: "a scene run edited, a persona built and no compaction job pending",
        after,
    });

    let sent = load.finish().await;
    let calls = contexts.await.expect("the context calls' task");
    report.tally = Tally::of(&sent);
    let api_down: Vec<(Duration, Duration)> = kills
        .iter()
        .filter(|k| k.kind == Kind::Api)
        .map(|k| (k.at, k.at + k.down + k.ready))
        .collect();
    let overlaps_down =
        |sent: Duration, answered: Duration| api_down.iter().any(|(down, up)| sent < *up && answered > *down);
    let while_up: Vec<&load::Sent> = sent.iter().filter(|s| !overlaps_down(s.sent, s.answered)).collect();
    let refused: Vec<String> = while_up
        .iter()
        .filter(|s| s.outcome != load::Outcome::Accepted)
        .map(|s| format!("{:?} at {:.1} s", s.outcome, s.sent.as_secs_f64()))
        .collect();
    report.checks.push(
        "ingest answers 201 while the API is up",
        refused.is_empty() && !while_up.is_empty(),
        format!(
            "{} of {} requests sent and answered while the API was up, {} not 201{}",
            while_up.len(),
            sent.len(),
            refused.len(),
            examples(&refused)
        ),
    );
    check_contexts(report, &calls, &overlaps_down, &server, &tenant, &plan).await;
    check_compactions(report, &pg, plan.sessions, &model).await;
    check_external_workers(report, &server, &workers).await;
    let (scene, persona) = (&workers[0].process, &workers[1].process);
    check_layers_built(&mut report.checks, &server, &tenant, scene, persona).await;
    verify(server, &tenant, &plan, &sent, &dir.path().join("index"), report).await;
    stop_sampler.store(true, Ordering::SeqCst);
    let leases = sampler.await.expect("the lease sampler's task");
    report.recoveries.push(Recovery {
        fault: format!(
            "what the kills left held (the owner, job or session waits for it): {}",
            waits(&kills, &leases, start)
        ),
        back: "every lease a killed process held given up or taken over, the longest",
        after: taken_over(&kills, &leases, start),
    });
    for w in workers {
        w.process.stop().await;
    }
    broker.cleanup().await;
    keep_log_tail(report, &log);
}

/// The settings of the API and of every worker process: the cluster's and the layers', and a
/// compaction lease of 5 s rather than 2 min (the summarizer's timeout below it, as the
/// settings require), so that a job whose worker died is taken again soon.
pub(super) fn scenario_env(
    database_url: &str,
    amqp_url: &str,
    amqp_prefix: &str,
    dir: &Path,
) -> Vec<(&'static str, String)> {
    let mut env = cluster_env(database_url, amqp_url, amqp_prefix, dir);
    env.extend(layer_env());
    env.extend([
        ("COMPACTION_LEASE_MS", "5000".into()),
        ("COMPACTION_TIMEOUT_MS", "4000".into()),
    ]);
    env
}

/// The compaction model, answering [`summary_answer`] after [`SUMMARY_LATENCY`], and the
/// compact worker's settings: `env` and the model's.
pub(super) async fn summarizer(env: &[(&'static str, String)]) -> (FakeOpenAi, Vec<(&'static str, String)>) {
    let model = FakeOpenAi::start(8).await;
    model.set_latency(SUMMARY_LATENCY);
    let summary = summary_answer().to_string();
    model.set_chat_responder(move |_| Some(summary.clone()));
    let mut compact_env = env.to_vec();
    compact_env.extend([("LLM_URL", model.base_url()), ("LLM_MODEL", "chaos-summarizer".into())]);
    (model, compact_env)
}

/// The scene, persona and compact workers, a process each, logging into `dir`.
pub(super) async fn start_workers(
    bin: &Path,
    env: &[(&'static str, String)],
    compact_env: Vec<(&'static str, String)>,
    dir: &Path,
) -> Vec<Worker> {
    let layers = bin.with_file_name("sediment-test-layers");
    vec![
        Worker::start(
            Kind::Scene,
            layers.clone(),
            &["scene"],
            env.to_vec(),
            dir.join("scene.log"),
        )
        .await,
        Worker::start(
            Kind::Persona,
            layers,
            &["persona"],
            env.to_vec(),
            dir.join("persona.log"),
        )
        .await,
        Worker::start(
            Kind::Compact,
            bin.with_file_name("sediment-test-compact"),
            &[],
            compact_env,
            dir.join("compact.log"),
        )
        .await,
    ]
}

pub(super) fn worker(workers: &mut [Worker], kind: Kind) -> &mut Worker {
    workers
        .iter_mut()
        .find(|w| w.kind == kind)
        .expect("a worker of every kind but the API")
}

/// What the compaction model answers: a summary with something in most dimensions.
pub(super) fn summary_answer() -> Value {
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

/// After a kill: waits 0.2 to 1 s (the restart's delay) and returns the leases of `kind` that
/// the dead process left held.
async fn left_held(pg: &tokio_postgres::Client, kind: Kind, dead: &HashSet<String>, rng: &mut Rng) -> Vec<String> {
    tokio::time::sleep(between(rng, 0.2, 1.0)).await;
    held(pg, kind).await.into_iter().filter(|t| !dead.contains(t)).collect()
}

/// The leases of `kind` held now; empty when the database does not answer.
pub(super) async fn held(pg: &tokio_postgres::Client, kind: Kind) -> Vec<String> {
    match pg.query(kind.held_sql(), &[]).await {
        Ok(rows) => rows.iter().map(|r| r.get::<_, String>(0)).collect(),
        Err(_) => Vec::new(),
    }
}

/// Waits, for at most [`BUSY_WAIT`], until a live process of `kind` holds a run (a lease that
/// no killed process left). Whether the kill then landed mid-run is what the dead process
/// leaves held, not this: the run may end between the look and the kill.
pub(super) async fn wait_busy(pg: &tokio_postgres::Client, kind: Kind, dead: &HashSet<String>) {
    let since = Instant::now();
    while since.elapsed() < BUSY_WAIT {
        if held(pg, kind).await.iter().any(|t| !dead.contains(t)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Compaction jobs not `success` (queued, running, abandoned or failed); `None` when the
/// database does not answer.
pub(super) async fn undone_compactions(pg: &tokio_postgres::Client) -> Option<i64> {
    let row = pg
        .query_one(
            "SELECT count(*) FROM session_compactions WHERE status <> 'success'",
            &[],
        )
        .await
        .ok()?;
    Some(row.get(0))
}

/// `scene killed 3 times (2 mid-run), ...; kills: 3.1 s scene mid-run (down 0.5 s, ready 0.3 s), ...`
fn describe(kills: &[Kill]) -> String {
    let per_kind: Vec<String> = [Kind::Scene, Kind::Persona, Kind::Compact, Kind::Api]
        .into_iter()
        .map(|kind| {
            let of: Vec<&Kill> = kills.iter().filter(|k| k.kind == kind).collect();
            let mid = of.iter().filter(|k| !k.abandoned.is_empty()).count();
            let held: usize = of.iter().map(|k| k.abandoned.len()).sum();
            let what = match kind {
                Kind::Compact => format!("{mid} mid-job, {held} jobs left held"),
                Kind::Api => format!("{held} extraction leases left held"),
                Kind::Scene | Kind::Persona => format!("{mid} mid-run"),
            };
            let times = match of.len() {
                1 => "once".to_owned(),
                n => format!("{n} times"),
            };
            format!("{} killed {times} ({what})", kind.name())
        })
        .collect();
    let each: Vec<String> = kills
        .iter()
        .map(|k| {
            format!(
                "{:.1} s {}{} (down {:.1} s, ready {:.1} s after restart)",
                k.at.as_secs_f64(),
                k.kind.name(),
                if k.abandoned.is_empty() { "" } else { " mid-run" },
                k.down.as_secs_f64(),
                k.ready.as_secs_f64()
            )
        })
        .collect();
    format!("{}; kills: {}", per_kind.join(", "), each.join(", "))
}

/// One context call beside the load.
#[derive(Debug, Clone)]
pub(super) struct ContextCall {
    pub(super) sent: Duration,
    pub(super) answered: Duration,
    pub(super) status: Option<u16>,
    /// The call queued a compaction job.
    pub(super) queued: bool,
}

/// Context calls with a small window on each session in turn, every [`CONTEXT_EVERY`], until
/// `stop`: each finds a compaction due and queues a job unless one is live, so the compact
/// worker always has work when it is killed or paused.
pub(super) fn context_calls(
    base: String,
    tenant: Tenant,
    sessions: Vec<String>,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Vec<ContextCall>> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("build the context calls' client");
        // The first appends create the sessions.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut calls = Vec::new();
        for session in sessions.iter().cycle() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let sent = start.elapsed();
            let response = client
                .get(format!(
                    "{base}/v1/sessions/{session}/context?window_tokens={CONTEXT_WINDOW}"
                ))
                .tenant_headers(&tenant)
                .send()
                .await;
            let (status, body) = match response {
                Ok(response) => {
                    let status = response.status().as_u16();
                    (Some(status), response.json::<Value>().await.unwrap_or(Value::Null))
                }
                Err(_) => (None, Value::Null),
            };
            calls.push(ContextCall {
                sent,
                answered: start.elapsed(),
                status,
                queued: body["compaction"]["queued"] == true,
            });
            tokio::time::sleep(CONTEXT_EVERY).await;
        }
        calls
    })
}

/// Every context call made while the API was up answered 200, some of them queued jobs, and
/// each session's context answers now.
pub(super) async fn check_contexts(
    report: &mut Report,
    calls: &[ContextCall],
    overlaps_down: &dyn Fn(Duration, Duration) -> bool,
    server: &ApiProcess,
    tenant: &Tenant,
    plan: &load::Plan,
) {
    let while_up: Vec<&ContextCall> = calls.iter().filter(|c| !overlaps_down(c.sent, c.answered)).collect();
    let not_ok: Vec<String> = while_up
        .iter()
        .filter(|c| c.status != Some(200))
        .map(|c| format!("{:?} at {:.1} s", c.status, c.sent.as_secs_f64()))
        .collect();
    let mut after: Vec<String> = Vec::new();
    for session in load::sessions(plan) {
        // A window the whole session fits in: this call must not queue another job.
        let status = server
            .client
            .get(format!(
                "{}/v1/sessions/{session}/context?window_tokens=100000",
                server.base
            ))
            .tenant_headers(tenant)
            .send()
            .await
            .map(|r| r.status().as_u16());
        if status.as_ref().ok() != Some(&200) {
            after.push(format!("{session}: {status:?}"));
        }
    }
    let queued = calls.iter().filter(|c| c.queued).count();
    report.checks.push(
        "the session context answers and queues compactions",
        not_ok.is_empty() && !while_up.is_empty() && queued > 0 && after.is_empty(),
        format!(
            "{} context calls, {} while the API was up, {} not 200{}, {queued} queued a compaction; after the load {} sessions did not answer 200{}",
            calls.len(),
            while_up.len(),
            not_ok.len(),
            examples(&not_ok),
            after.len(),
            examples(&after)
        ),
    );
}

/// Every session's compaction job ended `success` with a summary, none left held, failed or
/// queued; the model's answers say how much summarizing the kills threw away.
pub(super) async fn check_compactions(
    report: &mut Report,
    pg: &tokio_postgres::Client,
    sessions: usize,
    model: &FakeOpenAi,
) {
    let rows = pg
        .query(
            "SELECT session_id, status, attempts, claim_token IS NOT NULL, last_seq FROM session_compactions ORDER BY session_id",
            &[],
        )
        .await
        .unwrap_or_default();
    let mut undone = Vec::new();
    let mut summarized = 0;
    for row in &rows {
        let (session, status, attempts, claimed, last_seq): (String, String, i32, bool, Option<i64>) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        if last_seq.is_some() {
            summarized += 1;
        }
        if status != "success" || claimed || last_seq.is_none() {
            undone.push(format!(
                "{session} {status} after {attempts} attempts{}",
                if claimed { ", claimed" } else { "" }
            ));
        }
    }
    report.checks.push(
        "every compaction job ends done",
        undone.is_empty() && rows.len() == sessions && summarized == sessions,
        format!(
            "{} sessions, {} with a job, {summarized} with a summary, {} not done{}; the model answered {} summaries",
            sessions,
            rows.len(),
            undone.len(),
            examples(&undone),
            model.chat_usage().completions
        ),
    );
}

/// The restarted workers subscribe again: the broker sees a consumer on each one's queue, and
/// the compact worker is ready (the layers' readiness is [`check_layers_built`]'s).
pub(super) async fn check_external_workers(report: &mut Report, server: &ApiProcess, workers: &[Worker]) {
    let state = server.ops_state().await.unwrap_or(Value::Null);
    let rows = state["workers"].as_array().cloned().unwrap_or_default();
    let idle: Vec<String> = workers
        .iter()
        .filter_map(|w| {
            let row = rows.iter().find(|r| r["worker"] == w.kind.name());
            match row {
                Some(r) if r["status"] == "consuming" => None,
                Some(r) => Some(format!("{} {}", w.kind.name(), r["status"])),
                None => Some(format!("{} not listed", w.kind.name())),
            }
        })
        .collect();
    let compact_ready = worker_ready(workers, Kind::Compact).await;
    report.checks.push(
        "the restarted workers consume again",
        idle.is_empty() && compact_ready == Some(200),
        format!(
            "{} of {} external workers not consuming{}; compact worker /readyz {compact_ready:?}",
            idle.len(),
            workers.len(),
            examples(&idle)
        ),
    );
}

async fn worker_ready(workers: &[Worker], kind: Kind) -> Option<u16> {
    let w = workers.iter().find(|w| w.kind == kind)?;
    w.process.probe("/readyz").await
}

/// Every lease of every kind held, and when each was last seen held, sampled every 100 ms
/// until `stop`: a lease a killed process left is held until another process takes the owner
/// (or the job, or the session) over, which it may do only once the lease has run out.
/// Returns when each was last seen, and those held at the last sample.
fn sample_leases(pg: tokio_postgres::Client, stop: Arc<AtomicBool>) -> JoinHandle<Leases> {
    tokio::spawn(async move {
        let mut leases = Leases::default();
        loop {
            // Read before the flag, so that the last sample comes after everything drained.
            let stopping = stop.load(Ordering::SeqCst);
            leases.held_at_end.clear();
            for kind in [Kind::Scene, Kind::Persona, Kind::Compact, Kind::Api] {
                for token in held(&pg, kind).await {
                    leases.last_seen.insert(token.clone(), Instant::now());
                    leases.held_at_end.insert(token);
                }
            }
            if stopping {
                return leases;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// What [`sample_leases`] saw.
#[derive(Debug, Default)]
struct Leases {
    last_seen: HashMap<String, Instant>,
    held_at_end: HashSet<String>,
}

/// When the lease `token` that `kill` left was last seen held, from the load's start.
fn held_until(kill: &Kill, token: &str, leases: &Leases, start: Instant) -> Duration {
    leases
        .last_seen
        .get(token)
        .map_or(kill.at, |seen| seen.duration_since(start))
        .max(kill.at)
}

/// `scene killed at 13.2 s: 20.1 s, ...`: how long after each kill what it left stayed held.
fn waits(kills: &[Kill], leases: &Leases, start: Instant) -> String {
    let waits: Vec<String> = kills
        .iter()
        .filter(|k| !k.abandoned.is_empty())
        .map(|k| {
            let longest = k
                .abandoned
                .iter()
                .map(|t| held_until(k, t, leases, start))
                .max()
                .unwrap_or(k.at);
            format!(
                "{} killed at {:.1} s: {:.1} s after the kill",
                k.kind.name(),
                k.at.as_secs_f64(),
                (longest - k.at).as_secs_f64()
            )
        })
        .collect();
    if waits.is_empty() {
        "no kill left a lease".to_owned()
    } else {
        waits.join(", ")
    }
}

/// The longest any kill's leases stayed held after it; `None` if one still was when sampling
/// stopped, after everything had drained: the work it stood for was never taken over.
fn taken_over(kills: &[Kill], leases: &Leases, start: Instant) -> Option<Duration> {
    let mut longest = Duration::ZERO;
    for kill in kills {
        for token in &kill.abandoned {
            if leases.held_at_end.contains(token) {
                return None;
            }
            longest = longest.max(held_until(kill, token, leases, start) - kill.at);
        }
    }
    Some(longest)
}
