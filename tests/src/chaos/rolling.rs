//! `rolling-restart`: the cluster deployment of `worker-kill` restarted process by process, the
//! way an operator's rollout upgrades it, while the load runs: SIGTERM, wait for the process to
//! exit by itself, start the new one with the same settings, wait for its `/readyz`, go on to
//! the next. Nothing is killed, so nothing may be lost, redone or left held: every graceful
//! stop drains what it holds within its bound and exits 0.
//!
//! The API is one process (its Edge index is one process's; two APIs cannot share it), so its
//! restart is a gap in service. The load's client treats a request that gets no answer, or a
//! 503 from the new process before it is ready, as not accepted and sends it again (with the
//! same `client_id`s, so a request that was stored after all is not stored twice), and counts
//! it; only a request that is never accepted would be a loss.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use shared::domain::Tenant;
use tokio::task::{JoinHandle, JoinSet};

use super::kill::{self, Kind, Worker};
use super::load::{self, Outcome, Plan, Read, Sent, Tally};
use super::{check_layers_built, examples, keep_log_tail, verify, Form, Recovery, Report, LIVENESS};
use crate::amqp::TestBroker;
use crate::app::TenantHeaders as _;
use crate::pg::TestDb;
use crate::process::{free_port, metric_sum, ApiProcess, Stopped, WorkerProcess};
use crate::rng::Rng;
use crate::stats::poisson_arrivals_seeded;

/// The drain deadline of every process (`SEDIMENT_SHUTDOWN_DEADLINE_MS`), set rather than
/// left at its default so the bounds below follow from it.
const DRAIN: Duration = Duration::from_secs(8);
/// How long a SIGTERMed worker may take to exit: its consumer's drain, the telemetry flush
/// (2 s) and slack for a loaded machine. Past it the stop hangs, which is a bug.
const WORKER_EXIT: Duration = Duration::from_secs(15);
/// The API drains twice in a row (its in-process consumers, then the pending extraction's
/// flush), each within the deadline, before the same flush and slack.
const API_EXIT: Duration = Duration::from_secs(23);
/// The load runs this long before the first SIGTERM, so every worker has work in hand.
const LEAD: Duration = Duration::from_secs(5);
/// The pause after one process is ready before the next one is stopped, as a rollout's
/// `minReadySeconds`: the new process takes traffic before its neighbour goes.
const SETTLE: Duration = Duration::from_secs(1);
/// The pause between two rollouts of the long form.
const BETWEEN_ROLLOUTS: Duration = Duration::from_secs(5);
/// The longest a stop waits for its process to hold a run (and the API's for an append in
/// flight) before it is sent anyway.
const BUSY_WAIT: Duration = Duration::from_secs(2);
/// How long one append is sent again while it is not accepted: far past an API restart.
const RETRY_FOR: Duration = Duration::from_secs(60);
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// The load's arrivals are drawn this far ahead; it ends when the scenario says so.
const HORIZON: f64 = 900.0;
/// The pause between two reads (recall, search, alternately) and two readiness probes.
const READ_EVERY: Duration = Duration::from_millis(250);
const PROBE_EVERY: Duration = Duration::from_millis(25);
/// Longest wait for one answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One process's restart.
#[derive(Debug, Clone)]
struct Restart {
    rollout: usize,
    kind: Kind,
    /// When the SIGTERM went out, from the load's start.
    at: Duration,
    /// The leases (jobs) the process held when it was told to stop: it was mid-run.
    held: usize,
    /// Appends in flight when the API was told to stop (0 for a worker).
    in_flight: usize,
    /// The leases of its kind still held once it had exited: work a graceful stop abandoned.
    left: Vec<String>,
    stopped: Stopped,
    /// From the new process's start to its `/readyz` answering 200.
    ready: Duration,
}

/// How long a SIGTERMed process of `kind` may take to exit.
fn exit_bound(kind: Kind) -> Duration {
    match kind {
        Kind::Api => API_EXIT,
        Kind::Scene | Kind::Persona | Kind::Compact => WORKER_EXIT,
    }
}

impl Restart {
    /// When the new process was ready, from the load's start.
    fn up(&self) -> Duration {
        self.at + self.stopped.after + self.ready
    }
}

/// One rollout (short) or four (long), each restarting the API and the scene, persona and
/// compact workers one after another, the first in that order and the others in a random one,
/// each stop waiting up to 2 s for the process to hold a run so that its drain has something
/// to finish. Then, as in `worker-kill`: every turn stored, indexed and extracted once, the
/// layers built, every compaction job done; and besides: every append accepted in the end,
/// refused only while the API restarted, and every stop clean and within its bound.
pub(super) async fn rolling_restart(bin: &Path, report: &mut Report) {
    let rollouts = match report.form {
        Form::Short => 1,
        Form::Long => 4,
    };
    let db = TestDb::create().await;
    let broker = TestBroker::start("chaos-rolling-restart").await;
    let amqp = broker.settings();
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    // As in `worker-kill`, a job whose worker died would be taken again after 5 s; here none
    // should need to be.
    let mut env = kill::scenario_env(&db.url, &amqp.url, &amqp.prefix, dir.path());
    env.push(("SHUTDOWN_DEADLINE_MS", DRAIN.as_millis().to_string()));
    let (model, compact_env) = kill::summarizer(&env).await;

    let port = free_port();
    let (mut server, _) = ApiProcess::start_at(bin, port, &env, &log).await;
    let mut workers = kill::start_workers(bin, &env, compact_env, dir.path()).await;
    let pg = db.client().await;

    let tenant = crate::app::tenant();
    let plan = Plan {
        rate: 6.0,
        seconds: HORIZON,
        sessions: 4,
        turns: 3,
        seed: report.seed,
    };
    let start = Instant::now();
    let stop_load = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let appends = appends(
        server.base.clone(),
        tenant.clone(),
        plan,
        start,
        stop_load.clone(),
        in_flight.clone(),
    );
    let reads = reads(server.base.clone(), tenant.clone(), start, stop_load.clone());
    let probes = probe_ready(server.base.clone(), start, stop_load.clone());
    let stop_contexts = Arc::new(AtomicBool::new(false));
    let contexts = kill::context_calls(
        server.base.clone(),
        tenant.clone(),
        load::sessions(&plan),
        start,
        stop_contexts.clone(),
    );

    tokio::time::sleep(LEAD).await;
    let mut rng = Rng::new(report.seed);
    let mut restarts = Vec::new();
    let none_dead = HashSet::new();
    for rollout in 1..=rollouts {
        let mut order = [Kind::Api, Kind::Scene, Kind::Persona, Kind::Compact];
        if rollout > 1 {
            tokio::time::sleep(BETWEEN_ROLLOUTS).await;
            rng.shuffle(&mut order);
        }
        for kind in order {
            kill::wait_busy(&pg, kind, &none_dead).await;
            if kind == Kind::Api {
                // So that the server's drain has a request to finish, not only its workers.
                mid_request(&in_flight, BUSY_WAIT).await;
            }
            let held = kill::held(&pg, kind).await.len();
            let appending = in_flight.load(Ordering::SeqCst);
            let at = start.elapsed();
            let bound = exit_bound(kind);
            let (stopped, left, ready) = match kind {
                Kind::Api => {
                    let stopped = server.terminate(bound).await;
                    // Nothing of this kind runs now: whatever is held, the stopped one left.
                    let left = kill::held(&pg, kind).await;
                    let (restarted, ready) = ApiProcess::start_at(bin, port, &env, &log).await;
                    server = restarted;
                    (stopped, left, ready)
                }
                Kind::Scene | Kind::Persona | Kind::Compact => {
                    let w = kill::worker(&mut workers, kind);
                    let stopped = w.process.terminate(bound).await;
                    let left = kill::held(&pg, kind).await;
                    let starting = Instant::now();
                    w.process = WorkerProcess::start(&w.bin, w.args, &w.env, &w.log).await;
                    (stopped, left, starting.elapsed())
                }
            };
            restarts.push(Restart {
                rollout,
                kind,
                at,
                held,
                in_flight: if kind == Kind::Api { appending } else { 0 },
                left,
                stopped,
                ready,
            });
            tokio::time::sleep(SETTLE).await;
        }
    }
    // Back: each new worker process has done its work (its counters start at 0: a scene run
    // edited, a persona built, a compaction job done), and then, the context calls stopped,
    // no compaction job is left undone; the appends go on meanwhile.
    let last_restart = Instant::now();
    let (mut edited, mut built, mut compacted, mut caught_up) = (None, None, None, None);
    let after = loop {
        let work = NewWork::read(&workers).await;
        let first = |seen: &mut Option<Duration>, yes: bool| {
            if yes && seen.is_none() {
                *seen = Some(last_restart.elapsed());
            }
        };
        first(&mut edited, work.edited > 0.0);
        first(&mut built, work.built > 0.0);
        first(&mut compacted, work.compacted > 0.0);
        if compacted.is_some() {
            stop_contexts.store(true, Ordering::SeqCst);
            first(&mut caught_up, kill::undone_compactions(&pg).await == Some(0));
        }
        if let (Some(a), Some(b), Some(c)) = (edited, built, caught_up) {
            break Some(a.max(b).max(c));
        }
        if last_restart.elapsed() > LIVENESS {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    stop_contexts.store(true, Ordering::SeqCst);
    stop_load.store(true, Ordering::SeqCst);
    let appended = appends.await.expect("the appends' task");
    let reads = reads.await.expect("the reads' task");
    let probes = probes.await.expect("the readiness probes' task");
    let calls = contexts.await.expect("the context calls' task");

    for r in &restarts {
        let gap = match r.kind {
            Kind::Api => {
                let straddling: Vec<&Attempt> = appended
                    .iter()
                    .flat_map(|a| a.attempts.iter())
                    .filter(|a| a.sent < r.at && a.answered > r.at)
                    .collect();
                let answered = straddling.iter().filter(|a| a.outcome == Outcome::Accepted).count();
                format!(
                    "; {} appends in flight at the SIGTERM ({} seen), {answered} of them answered 201; /readyz unanswered for {:.1} s",
                    r.in_flight,
                    straddling.len(),
                    unanswered(&probes, r.at, r.up()).as_secs_f64()
                )
            }
            Kind::Scene | Kind::Persona | Kind::Compact => String::new(),
        };
        report.recoveries.push(Recovery {
            fault: format!(
                "rollout {}: {} SIGTERM at {:.1} s{}, {} after {:.1} s, the new one ready {:.1} s after its start{gap}",
                r.rollout,
                r.kind.name(),
                r.at.as_secs_f64(),
                if r.held > 0 { " mid-run" } else { "" },
                match r.stopped.status.map(|s| s.code()) {
                    Some(Some(code)) => format!("exited {code}"),
                    Some(None) => "killed by a signal".to_owned(),
                    None => "NO exit, SIGKILLed".to_owned(),
                },
                r.stopped.after.as_secs_f64(),
                r.ready.as_secs_f64()
            ),
            back: "ready again",
            after: Some(r.stopped.after + r.ready),
        });
    }
    let since = |seen: Option<Duration>| seen.map_or("never".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
    report.recoveries.push(Recovery {
        fault: format!(
            "{rollouts} rollout(s) of {} restarts, the last one ready at {:.1} s; from then, the new scene worker had edited within {}, the new persona worker built within {}, the new compact worker compacted within {}, and no job was left within {}",
            restarts.len(),
            restarts.last().map_or(0.0, |r| r.up().as_secs_f64()),
            since(edited),
            since(built),
            since(compacted),
            since(caught_up)
        ),
        back: "the new workers each did their work and no compaction job pending",
        after,
    });

    let sent: Vec<Sent> = appended.iter().map(|a| a.request.clone()).collect();
    report.tally = Tally::of(&sent);
    let api_restarts: Vec<(Duration, Duration)> = restarts
        .iter()
        .filter(|r| r.kind == Kind::Api)
        .map(|r| (r.at, r.up()))
        .collect();
    let overlaps_restart =
        |sent: Duration, answered: Duration| api_restarts.iter().any(|(down, up)| sent < *up && answered > *down);
    check_stops(report, &restarts);
    check_appends(report, &appended, &overlaps_restart);
    check_reads(report, &reads, &overlaps_restart);
    kill::check_contexts(report, &calls, &overlaps_restart, &server, &tenant, &plan).await;
    kill::check_compactions(report, &pg, plan.sessions, &model).await;
    kill::check_external_workers(report, &server, &workers).await;
    let (scene, persona) = (&workers[0].process, &workers[1].process);
    check_layers_built(&mut report.checks, &server, &tenant, scene, persona).await;
    verify(server, &tenant, &plan, &sent, &dir.path().join("index"), report).await;
    for w in workers {
        w.process.stop().await;
    }
    broker.cleanup().await;
    keep_log_tail(report, &log);
}

/// Every SIGTERMed process exited by itself with status 0 within its bound, and left nothing
/// held that the next process of its kind would have to wait out or redo.
fn check_stops(report: &mut Report, restarts: &[Restart]) {
    let mut times = String::new();
    let mut unclean = Vec::new();
    for r in restarts {
        let _ = write!(
            times,
            "{}{} {:.1} s",
            if times.is_empty() { "" } else { ", " },
            r.kind.name(),
            r.stopped.after.as_secs_f64()
        );
        if !r.stopped.clean() || r.stopped.after > exit_bound(r.kind) {
            unclean.push(format!(
                "{} in rollout {}: {:?} after {:.1} s (bound {} s)",
                r.kind.name(),
                r.rollout,
                r.stopped.status,
                r.stopped.after.as_secs_f64(),
                exit_bound(r.kind).as_secs()
            ));
        }
    }
    report.checks.push(
        "every SIGTERMed process exits 0 within its bound",
        unclean.is_empty() && !restarts.is_empty(),
        format!(
            "{} stops, {} not clean{}; SIGTERM to exit: {times}",
            restarts.len(),
            unclean.len(),
            examples(&unclean)
        ),
    );
    let mid_run = restarts.iter().filter(|r| r.held > 0).count();
    let left: Vec<String> = restarts
        .iter()
        .filter(|r| !r.left.is_empty())
        .map(|r| format!("{} in rollout {} left {} held", r.kind.name(), r.rollout, r.left.len()))
        .collect();
    report.checks.push(
        "a graceful stop leaves no lease held",
        left.is_empty(),
        format!(
            "{mid_run} of {} stops came mid-run (a lease or job held at the SIGTERM), {} left one held{}",
            restarts.len(),
            left.len(),
            examples(&left)
        ),
    );
}

/// Every append was accepted in the end, and one was ever refused (no answer, or a 503 from a
/// server not ready yet) only while the API restarted.
fn check_appends(report: &mut Report, appended: &[Append], overlaps_restart: &dyn Fn(Duration, Duration) -> bool) {
    let given_up: Vec<String> = appended
        .iter()
        .filter(|a| a.request.outcome != Outcome::Accepted)
        .map(|a| format!("{:?} at {:.1} s", a.request.outcome, a.request.sent.as_secs_f64()))
        .collect();
    let retried = appended.iter().filter(|a| !a.refused().is_empty()).count();
    let mut why = Tally::default();
    for a in appended {
        let refused: Vec<Sent> = a
            .refused()
            .iter()
            .map(|r| Sent {
                outcome: r.outcome.clone(),
                sent: r.sent,
                answered: r.answered,
                ..a.request.clone()
            })
            .collect();
        for (what, n) in Tally::of(&refused).other {
            *why.other.entry(what).or_default() += n;
        }
    }
    let longest = appended
        .iter()
        .filter(|a| !a.refused().is_empty())
        .map(|a| (a.request.answered - a.request.sent).as_secs_f64())
        .fold(0.0, f64::max);
    report.checks.push(
        "every append is accepted, retried through the API's restart",
        given_up.is_empty() && !appended.is_empty(),
        format!(
            "{} appends, {} not accepted within {} s{}; {retried} needed more than one attempt ({} attempts refused:{}), the longest took {longest:.1} s",
            appended.len(),
            given_up.len(),
            RETRY_FOR.as_secs(),
            examples(&given_up),
            why.other.values().sum::<usize>(),
            why.other
                .iter()
                .map(|(what, n)| format!(" {n} {what}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
    );
    let outside: Vec<String> = appended
        .iter()
        .flat_map(|a| a.refused().iter())
        .filter(|r| !overlaps_restart(r.sent, r.answered))
        .map(|r| format!("{:?} at {:.1} s", r.outcome, r.sent.as_secs_f64()))
        .collect();
    report.checks.push(
        "appends are refused only while the API restarts",
        outside.is_empty(),
        format!(
            "{} attempts refused while the API was up{}",
            outside.len(),
            examples(&outside)
        ),
    );
}

/// Recalls and searches answered 200 whenever the API was up.
fn check_reads(report: &mut Report, reads: &[Read], overlaps_restart: &dyn Fn(Duration, Duration) -> bool) {
    let while_up: Vec<&Read> = reads.iter().filter(|r| !overlaps_restart(r.sent, r.answered)).collect();
    let not_ok: Vec<String> = while_up
        .iter()
        .filter(|r| r.status != Some(200))
        .map(|r| format!("{} at {:.1} s: {:?}", r.what, r.sent.as_secs_f64(), r.status))
        .collect();
    report.checks.push(
        "recall and search answer 200 while the API is up",
        not_ok.is_empty() && !while_up.is_empty(),
        format!(
            "{} reads, {} while the API was up, {} not 200{}",
            reads.len(),
            while_up.len(),
            not_ok.len(),
            examples(&not_ok)
        ),
    );
}

/// The longest stretch between two `/readyz` answers of 200 that overlaps `from..to`.
fn unanswered(probes: &[(Duration, bool)], from: Duration, to: Duration) -> Duration {
    let ok: Vec<Duration> = probes.iter().filter(|(_, ok)| *ok).map(|(at, _)| *at).collect();
    ok.windows(2)
        .filter(|w| w[0] < to && w[1] > from)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(to - from)
}

/// One append of the load: how it ended (its last attempt; `sent` is its first attempt's),
/// and every attempt, with when it went out and was answered.
struct Append {
    request: Sent,
    attempts: Vec<Attempt>,
}

#[derive(Debug, Clone)]
struct Attempt {
    outcome: Outcome,
    sent: Duration,
    answered: Duration,
}

impl Append {
    /// The attempts not accepted: all but the last.
    fn refused(&self) -> &[Attempt] {
        &self.attempts[..self.attempts.len().saturating_sub(1)]
    }
}

/// The load of `load::Load` (Poisson arrivals at `plan.rate`, round-robin over the sessions,
/// a unique word per turn) until `stop`, each turn with its word as `client_id`, each request
/// sent again while it gets no answer or a 503, for up to [`RETRY_FOR`].
fn appends(
    base: String,
    tenant: Tenant,
    plan: Plan,
    start: Instant,
    stop: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
) -> JoinHandle<Vec<Append>> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("build the appends' client");
        let sessions = load::sessions(&plan);
        let mut requests = JoinSet::new();
        for (i, at) in poisson_arrivals_seeded(plan.rate, plan.seconds, plan.seed)
            .into_iter()
            .enumerate()
        {
            tokio::time::sleep_until((start + at).into()).await;
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let session = sessions[i % sessions.len()].clone();
            let words: Vec<String> = (0..plan.turns).map(|j| load::word(i * plan.turns + j)).collect();
            let (client, base, tenant, in_flight) = (client.clone(), base.clone(), tenant.clone(), in_flight.clone());
            requests.spawn(async move {
                let mut attempts: Vec<Attempt> = Vec::new();
                loop {
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    let sent = start.elapsed();
                    let outcome = append(&client, &base, &tenant, &session, &words).await;
                    let answered = start.elapsed();
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    let again = match &outcome {
                        Outcome::Accepted => false,
                        Outcome::Refused { status, .. } => *status == 503,
                        Outcome::NoAnswer(_) => true,
                    };
                    let first = attempts.first().map_or(sent, |a| a.sent);
                    attempts.push(Attempt {
                        outcome: outcome.clone(),
                        sent,
                        answered,
                    });
                    if !again || answered - first > RETRY_FOR {
                        return Append {
                            request: Sent {
                                session,
                                words,
                                outcome,
                                at,
                                sent: first,
                                answered,
                            },
                            attempts,
                        };
                    }
                    tokio::time::sleep(RETRY_EVERY).await;
                }
            });
        }
        let mut appended = requests.join_all().await;
        appended.sort_by_key(|a| a.request.at);
        appended
    })
}

/// Waits, for at most `within`, until an append is in flight.
async fn mid_request(in_flight: &AtomicUsize, within: Duration) {
    let since = Instant::now();
    while in_flight.load(Ordering::SeqCst) == 0 && since.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `load`'s append, each turn keyed by its word: a retried request whose first attempt was
/// stored after all returns the stored turns instead of writing them again.
async fn append(client: &reqwest::Client, base: &str, tenant: &Tenant, session: &str, words: &[String]) -> Outcome {
    let mut turns = load::turns(words);
    for (turn, word) in turns.iter_mut().zip(words) {
        turn["client_id"] = json!(word);
    }
    load::append_turns(client, base, tenant, session, turns).await
}

/// `load::Reads` until `stop`: a recall and a search in turn every [`READ_EVERY`].
fn reads(base: String, tenant: Tenant, start: Instant, stop: Arc<AtomicBool>) -> JoinHandle<Vec<Read>> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("build the reads' client");
        let mut reads = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let (what, path, body) = load::read_request(reads.len());
            let sent = start.elapsed();
            let status = client
                .post(format!("{base}{path}"))
                .tenant_headers(&tenant)
                .json(&body)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .ok();
            reads.push(Read {
                what,
                sent,
                answered: start.elapsed(),
                status,
                errors: Vec::new(),
                scene_list: false,
            });
            tokio::time::sleep(READ_EVERY).await;
        }
        reads
    })
}

/// `/readyz` every [`PROBE_EVERY`] until `stop`: when each probe went out and whether it was
/// answered 200, from which the API's gap is read.
fn probe_ready(base: String, start: Instant, stop: Arc<AtomicBool>) -> JoinHandle<Vec<(Duration, bool)>> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .expect("build the probes' client");
        let mut probes = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let at = start.elapsed();
            let ok = client
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            probes.push((at, ok));
            tokio::time::sleep(PROBE_EVERY).await;
        }
        probes
    })
}

/// What the worker processes running now have done since they started.
struct NewWork {
    edited: f64,
    built: f64,
    compacted: f64,
}

impl NewWork {
    async fn read(workers: &[Worker]) -> Self {
        let of = |kind: Kind| {
            workers
                .iter()
                .find(|w| w.kind == kind)
                .map(|w| &w.process)
                .expect("a worker of every kind but the API")
        };
        let (scene, persona, compact) = (
            of(Kind::Scene).metrics().await,
            of(Kind::Persona).metrics().await,
            of(Kind::Compact).metrics().await,
        );
        Self {
            edited: metric_sum(&scene, "sediment_scene_runs_total", &["result=\"edited\""]),
            built: metric_sum(&persona, "sediment_persona_builds_total", &["result=\"built\""]),
            compacted: metric_sum(&compact, "sediment_compactions_total", &["result=\"success\""]),
        }
    }
}
