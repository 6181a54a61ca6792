//! Faults under load (issue 39): each [`Scenario`] starts a real deployment as processes,
//! drives a bounded open-loop append load at it ([`load`]), injects one kind of fault while
//! the load runs, measures how long the system takes to catch up after each fault, and then
//! checks the invariants ([`checks`]): every accepted turn stored once, indexed once, and no
//! memory duplicated by a replayed batch.
//!
//! A scenario owns everything it breaks: its server processes, data directories, databases,
//! Postgres cluster ([`PrivatePostgres`]), broker node ([`PrivateBroker`]), S3 server
//! ([`PrivateS3`]) and model (the scripted one of `chaos/llm.rs`) are its own and go away
//! when it ends, also on panic (drop guards). The machine's Postgres and RabbitMQ only host
//! fresh databases and prefixes and are never stopped or restarted, so scenarios run in
//! parallel with the rest of the suite. Each has a short form (seconds, for CI) and a long
//! form (`--long` of the `chaos` binary).

mod broker;
mod burst;
pub mod checks;
mod kill;
mod llm;
pub mod load;
mod pause;
mod postgres;
mod rolling;
mod s3;

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

pub use broker::PrivateBroker;
use checks::Checks;
use llm::{Phase, ScriptedModel};
use load::{Load, Plan, Reads, Tally};
pub use postgres::PrivatePostgres;
pub use s3::PrivateS3;
use shared::domain::Tenant;
use shared::store::memory::EXTRACT_CONSUMER;
use shared::store::INDEX_CONSUMER;

use crate::amqp::TestBroker;
use crate::pg::TestDb;
use crate::process::{free_port, metric_sum, ApiProcess, WorkerProcess};
use crate::rng::Rng;

/// Longest wait for lag to return to zero after a fault, or for everything to drain after
/// the load: a liveness bound, generous because a loaded 2-core machine indexes slowly.
const LIVENESS: Duration = Duration::from_secs(180);
/// The seed of every random choice (arrival times, kill points), unless `CHAOS_SEED` is set.
const DEFAULT_SEED: u64 = 39;
/// How long after Postgres is back appends may still fail while the pools replace their
/// broken connections.
const POOL_GRACE: Duration = Duration::from_secs(5);
/// What most faults recover to.
const INDEX_LAG_ZERO: &str = "index lag 0";
/// The LLM client's timeout in `llm-faults`, and how long a hung call waits: well past it.
const LLM_TIMEOUT: Duration = Duration::from_secs(1);
const LLM_HANG: Duration = Duration::from_secs(5);

/// How long a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Seconds of load and faults, for CI.
    Short,
    /// Minutes, with longer and more faults.
    Long,
}

/// A named fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The embedded deployment SIGKILLed mid-write several times and restarted on its data.
    EmbeddedKill,
    /// The cluster deployment's broker stopped under load, then started again.
    RabbitmqOutage,
    /// The cluster deployment's Postgres stopped under load, then started again.
    PostgresRestart,
    /// The embedded deployment's LLM failing every call (5xx, hangs, garbage) under load.
    LlmFaults,
    /// The cluster deployment's S3 server stopped under load, then started again.
    S3Outage,
    /// The embedded deployment appended to at ten times what its extraction drains.
    Backpressure,
    /// The cluster deployment's scene, persona and compact workers SIGKILLed at random points,
    /// several times each, and the API (with the index and extract workers) once.
    WorkerKill,
    /// The cluster deployment with two scene, persona and compact worker processes, one of a
    /// pair SIGSTOPped mid-run past its lease while the other takes over, then SIGCONTed.
    WorkerPause,
    /// The cluster deployment's API and scene, persona and compact workers restarted one
    /// after another with SIGTERM, as a rollout does, under load.
    RollingRestart,
}

impl Scenario {
    pub const ALL: [Scenario; 9] = [
        Scenario::EmbeddedKill,
        Scenario::RabbitmqOutage,
        Scenario::PostgresRestart,
        Scenario::LlmFaults,
        Scenario::S3Outage,
        Scenario::Backpressure,
        Scenario::WorkerKill,
        Scenario::RollingRestart,
        Scenario::WorkerPause,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::EmbeddedKill => "embedded-kill",
            Scenario::RabbitmqOutage => "rabbitmq-outage",
            Scenario::PostgresRestart => "postgres-restart",
            Scenario::LlmFaults => "llm-faults",
            Scenario::S3Outage => "s3-outage",
            Scenario::Backpressure => "backpressure",
            Scenario::WorkerKill => "worker-kill",
            Scenario::WorkerPause => "worker-pause",
            Scenario::RollingRestart => "rolling-restart",
        }
    }

    /// The scenario called `name`, if there is one.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Runs the scenario against the API binary `server` (`sediment-api`; `s3-outage`,
    /// `worker-kill` and `rolling-restart` also run `sediment-test-layers`, and the last two
    /// `sediment-test-compact`, from beside it) and reports what it measured. Panics when it
    /// cannot set up (a service of the machine is missing).
    pub async fn run(self, server: &Path, form: Form) -> Report {
        let seed = crate::env_or("CHAOS_SEED", DEFAULT_SEED);
        let mut report = Report {
            scenario: self,
            form,
            seed,
            tally: Tally::default(),
            recoveries: Vec::new(),
            checks: Checks::default(),
            log_tail: String::new(),
        };
        match self {
            Scenario::EmbeddedKill => embedded_kill(server, &mut report).await,
            Scenario::RabbitmqOutage => rabbitmq_outage(server, &mut report).await,
            Scenario::PostgresRestart => postgres_restart(server, &mut report).await,
            Scenario::LlmFaults => llm_faults(server, &mut report).await,
            Scenario::S3Outage => s3_outage(server, &mut report).await,
            Scenario::Backpressure => burst::backpressure(server, &mut report).await,
            Scenario::WorkerKill => kill::worker_kill(server, &mut report).await,
            Scenario::WorkerPause => pause::worker_pause(server, &mut report).await,
            Scenario::RollingRestart => rolling::rolling_restart(server, &mut report).await,
        }
        report
    }
}

/// One fault and how long after its end the system was back: its lag at zero, or what else
/// `back` says.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub fault: String,
    /// What counts as recovered (`index lag 0`).
    pub back: &'static str,
    /// `None`: not within [`LIVENESS`].
    pub after: Option<Duration>,
}

/// What one scenario run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: Scenario,
    pub form: Form,
    pub seed: u64,
    pub tally: Tally,
    pub recoveries: Vec<Recovery>,
    pub checks: Checks,
    /// The end of the server's log, kept when a check failed.
    pub log_tail: String,
}

impl Report {
    /// Every invariant held and every fault was recovered from.
    pub fn passed(&self) -> bool {
        self.checks.0.iter().all(checks::Check::passes) && self.recoveries.iter().all(|r| r.after.is_some())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let form = match self.form {
            Form::Short => "short",
            Form::Long => "long",
        };
        writeln!(f, "== {} ({form}, seed {}) ==", self.scenario.name(), self.seed)?;
        writeln!(f, "load: {}", self.tally)?;
        for r in &self.recoveries {
            match r.after {
                Some(after) => writeln!(f, "{}: {} after {:.1} s", r.fault, r.back, after.as_secs_f64())?,
                None => writeln!(f, "{}: NOT {} within {} s", r.fault, r.back, LIVENESS.as_secs())?,
            }
        }
        for check in &self.checks.0 {
            writeln!(f, "{check}")?;
        }
        if !self.log_tail.is_empty() {
            writeln!(f, "server log, last lines:\n{}", self.log_tail)?;
        }
        write!(f, "{}", if self.passed() { "PASSED" } else { "FAILED" })
    }
}

/// Settings shared by both deployments: no auth, keyword search only (the local model would
/// slow every restart), and a short idle flush so extraction drains soon after the load.
fn common_env() -> Vec<(&'static str, String)> {
    vec![
        ("AUTH", "off".into()),
        ("EMBEDDING", "none".into()),
        ("EXTRACT_IDLE_FLUSH_MS", "300".into()),
        ("LOG", "warn".into()),
    ]
}

/// The cluster deployment on `database_url` and `amqp_url`, its Edge index and files under
/// `dir`.
fn cluster_env(database_url: &str, amqp_url: &str, amqp_prefix: &str, dir: &Path) -> Vec<(&'static str, String)> {
    let mut env = common_env();
    env.extend([
        ("DATABASE_URL", database_url.to_owned()),
        ("AMQP_URL", amqp_url.to_owned()),
        ("AMQP_PREFIX", amqp_prefix.to_owned()),
        ("INDEX_DIR", dir.join("index").display().to_string()),
        ("FILES_DIR", dir.join("files").display().to_string()),
        // The sweep is what finds the turns whose wake-ups were lost; every 5 s rather than
        // every 30 s keeps the short form short.
        ("WORKER_SWEEP_INTERVAL_MS", "5000".into()),
    ]);
    env
}

/// The embedded deployment on `dir`, extracting with `model`. Scenes and the persona would
/// call the model too, and these scenarios are about extraction, so they are off. The sweep,
/// which redoes what the retried or dropped wake-ups did not, runs every 5 s rather than 30 s.
fn embedded_llm_env(model: &ScriptedModel, dir: &Path) -> Vec<(&'static str, String)> {
    let mut env = common_env();
    env.extend([
        ("DATA_DIR", dir.join("data").display().to_string()),
        ("LLM_URL", model.base_url()),
        ("LLM_MODEL", "chaos-model".into()),
        ("LAYERS", "false".into()),
        ("WORKER_SWEEP_INTERVAL_MS", "5000".into()),
    ]);
    env
}

fn plan(form: Form, seed: u64, seconds: (f64, f64)) -> Plan {
    Plan {
        rate: 6.0,
        seconds: match form {
            Form::Short => seconds.0,
            Form::Long => seconds.1,
        },
        sessions: 4,
        turns: 3,
        seed,
    }
}

/// SIGKILL at random points of the load (3 times short, 10 long), each time restarted on the
/// same data directory and port after a random pause, while requests keep arriving.
async fn embedded_kill(bin: &Path, report: &mut Report) {
    let kills = match report.form {
        Form::Short => 3,
        Form::Long => 10,
    };
    let plan = plan(report.form, report.seed, (30.0, 120.0));
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let mut env = common_env();
    env.push(("DATA_DIR", dir.path().join("data").display().to_string()));
    let port = free_port();
    let (mut server, _) = ApiProcess::start_at(bin, port, &env, &log).await;

    let tenant = crate::app::tenant();
    let load = Load::start(server.base.clone(), tenant.clone(), plan);
    let start = load.started;
    let mut rng = Rng::new(report.seed);
    // Kills spread over the load, each at a random point of its own stretch of it (later, if
    // the recovery from the one before took longer).
    let stretch = plan.seconds / (kills as f64 + 1.0);
    for kill in 1..=kills {
        let due = Duration::from_secs_f64(stretch * (kill - 1) as f64) + between(&mut rng, 0.3 * stretch, stretch);
        tokio::time::sleep_until((start + due).into()).await;
        let mid_request = load.mid_request(Duration::from_secs(2)).await;
        let at = start.elapsed();
        server.kill().await;
        tokio::time::sleep(between(&mut rng, 0.2, 1.0)).await;
        let restarted = Instant::now();
        let (restarted_server, ready) = ApiProcess::start_at(bin, port, &env, &log).await;
        server = restarted_server;
        report.recoveries.push(Recovery {
            fault: format!(
                "SIGKILL {kill} at {:.1} s{}, down {:.1} s, ready {:.1} s after restart",
                at.as_secs_f64(),
                if mid_request { " mid-request" } else { "" },
                (restarted - start).saturating_sub(at).as_secs_f64(),
                ready.as_secs_f64()
            ),
            back: INDEX_LAG_ZERO,
            after: checks::lag_zero(&server, INDEX_CONSUMER, restarted, LIVENESS).await,
        });
    }
    let sent = load.finish().await;
    report.tally = Tally::of(&sent);
    report.checks.push(
        "the load was accepted between the faults",
        report.tally.accepted > 0,
        format!(
            "{} of {} requests answered 201",
            report.tally.accepted, report.tally.sent
        ),
    );
    verify(server, &tenant, &plan, &sent, &dir.path().join("data/index"), report).await;
    keep_log_tail(report, &log);
}

/// The cluster deployment (the API with its in-process index and extract workers, a fresh
/// database of the machine's Postgres, a private broker): the broker's application stopped
/// for 5 s (short) or 30 s (long) a quarter into the load, then started. Ingest must answer
/// 201 throughout, since the broker only carries wake-ups.
async fn rabbitmq_outage(bin: &Path, report: &mut Report) {
    let outage = match report.form {
        Form::Short => Duration::from_secs(5),
        Form::Long => Duration::from_secs(30),
    };
    let plan = plan(report.form, report.seed, (20.0, 75.0));
    let broker = PrivateBroker::start("rabbitmq-outage")
        .await
        .unwrap_or_else(|e| panic!("start a private RabbitMQ node: {e:#}"));
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let env = cluster_env(&db.url, &broker.url(), "chaos", dir.path());
    let (server, _) = ApiProcess::start_at(bin, free_port(), &env, &log).await;

    let tenant = crate::app::tenant();
    let load = Load::start(server.base.clone(), tenant.clone(), plan);
    let start = load.started;
    tokio::time::sleep(Duration::from_secs_f64(plan.seconds / 4.0)).await;
    let down = start.elapsed();
    broker.stop_app().await.expect("stop the broker's application");
    // The store and the index are up: the sweep can keep indexing without wake-ups.
    let peak = checks::peak_lag(&server, INDEX_CONSUMER, outage).await;
    broker.start_app().await.expect("start the broker's application");
    let back = Instant::now();
    let up = start.elapsed();
    report.recoveries.push(Recovery {
        fault: format!(
            "broker stopped at {:.1} s, started again at {:.1} s, index lag peaked at {} turns while it was down",
            down.as_secs_f64(),
            up.as_secs_f64(),
            peak.map_or("(unread)".to_owned(), |p| p.to_string())
        ),
        back: INDEX_LAG_ZERO,
        after: checks::lag_zero(&server, INDEX_CONSUMER, back, LIVENESS).await,
    });
    // The sweep brings the lag back without the broker; the wake-ups need the consumers.
    report.recoveries.push(Recovery {
        fault: "the broker back".into(),
        back: "every in-process worker consuming",
        after: checks::consuming(&server, back, LIVENESS).await,
    });
    let sent = load.finish().await;
    report.tally = Tally::of(&sent);
    let during: Vec<&load::Sent> = sent.iter().filter(|s| s.sent >= down && s.answered < up).collect();
    let accepted_during = during.iter().filter(|s| s.outcome == load::Outcome::Accepted).count();
    report.checks.push(
        "ingest answers 201 throughout",
        report.tally.accepted == report.tally.sent,
        format!(
            "{} of {} requests answered 201, {accepted_during} of {} while the broker was down",
            report.tally.accepted,
            report.tally.sent,
            during.len()
        ),
    );
    verify(server, &tenant, &plan, &sent, &dir.path().join("index"), report).await;
    keep_log_tail(report, &log);
}

/// The cluster deployment on a private Postgres cluster (and the machine's broker, under a
/// prefix of its own): Postgres stopped (fast shutdown) for 5 s (short) or 30 s (long) a
/// quarter into the load, then started. While it is down ingest must refuse with 503
/// `backend_unavailable`, never another status and never a 201; the pools must reconnect by
/// themselves.
async fn postgres_restart(bin: &Path, report: &mut Report) {
    let outage = match report.form {
        Form::Short => Duration::from_secs(5),
        Form::Long => Duration::from_secs(30),
    };
    // The load goes on long enough after the restart to show the pools recovered.
    let plan = plan(report.form, report.seed, (30.0, 90.0));
    let postgres = PrivatePostgres::start()
        .await
        .unwrap_or_else(|e| panic!("start a private Postgres cluster: {e:#}"));
    let broker = TestBroker::start("chaos-postgres-restart").await;
    let amqp = broker.settings();
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let env = cluster_env(&postgres.url(), &amqp.url, &amqp.prefix, dir.path());
    let (server, _) = ApiProcess::start_at(bin, free_port(), &env, &log).await;

    let tenant = crate::app::tenant();
    let load = Load::start(server.base.clone(), tenant.clone(), plan);
    let start = load.started;
    tokio::time::sleep(Duration::from_secs_f64(plan.seconds / 4.0)).await;
    let stopping = start.elapsed();
    postgres.stop_server().await.expect("stop the private Postgres");
    let down = start.elapsed();
    tokio::time::sleep(outage).await;
    let starting = start.elapsed();
    postgres.start_server().await.expect("start the private Postgres");
    let back = Instant::now();
    let up = start.elapsed();
    let after = checks::lag_zero(&server, INDEX_CONSUMER, back, LIVENESS).await;
    let sent = load.finish().await;
    report.tally = Tally::of(&sent);
    let first_accepted = sent
        .iter()
        .find(|s| s.sent >= up && s.outcome == load::Outcome::Accepted)
        .map_or("none".to_owned(), |s| {
            format!("{:.1} s", (s.answered - up).as_secs_f64())
        });
    report.recoveries.push(Recovery {
        fault: format!(
            "Postgres stopped at {:.1} s, down from {:.1} s to {:.1} s, first append accepted after the restart: {first_accepted}",
            stopping.as_secs_f64(),
            down.as_secs_f64(),
            up.as_secs_f64()
        ),
        back: INDEX_LAG_ZERO,
        after,
    });
    let unavailable = load::Outcome::Refused {
        status: 503,
        code: "backend_unavailable".into(),
    };
    let other: usize = sent
        .iter()
        .filter(|s| s.outcome != load::Outcome::Accepted && s.outcome != unavailable)
        .count();
    report.checks.push(
        "ingest answers 201 or 503 backend_unavailable",
        other == 0,
        format!("{other} requests ended otherwise"),
    );
    // Sent after it was down and answered before it was started again.
    let during: Vec<&load::Sent> = sent
        .iter()
        .filter(|s| s.sent >= down && s.answered < starting)
        .collect();
    let accepted_during = during.iter().filter(|s| s.outcome == load::Outcome::Accepted).count();
    report.checks.push(
        "no 201 while Postgres is down",
        accepted_during == 0 && !during.is_empty(),
        format!(
            "{accepted_during} of {} requests sent while it was down answered 201",
            during.len()
        ),
    );
    // The pools reconnect by themselves: a few seconds after the restart, appends succeed again.
    let settled = up + POOL_GRACE;
    let after: Vec<&load::Sent> = sent.iter().filter(|s| s.sent >= settled).collect();
    let accepted_after = after.iter().filter(|s| s.outcome == load::Outcome::Accepted).count();
    report.checks.push(
        "ingest recovers after Postgres is back",
        accepted_after == after.len() && !after.is_empty(),
        format!(
            "{accepted_after} of {} requests sent from {} s after the restart answered 201",
            after.len(),
            POOL_GRACE.as_secs()
        ),
    );
    verify(server, &tenant, &plan, &sent, &dir.path().join("index"), report).await;
    broker.cleanup().await;
    keep_log_tail(report, &log);
}

/// The embedded deployment extracting with an LLM (the scripted model of [`llm`]), which fails
/// every call for 10 s (short) or 60 s (long) after a lead of 5 s / 15 s: a third of the
/// time with 500s, a third hanging past the client's timeout, a third with garbage JSON. The
/// load ends with the fault, so the recovery is the time to extract the fault's backlog
/// (under load the extraction lag is never zero: a session's turns wait for their batch).
/// Ingest must answer 201 throughout, since it only writes the transcript.
async fn llm_faults(bin: &Path, report: &mut Report) {
    let (lead, fault) = match report.form {
        Form::Short => (5.0, 10.0),
        Form::Long => (15.0, 60.0),
    };
    let plan = plan(report.form, report.seed, (lead + fault, lead + fault));
    let model = ScriptedModel::start(LLM_HANG).await;
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let mut env = embedded_llm_env(&model, dir.path());
    env.extend([
        // One retry inside a call, then the batch fails and its delivery is retried: the
        // service's defaults (60 s, 2 retries) would make one hung call outlast the short form.
        ("LLM_TIMEOUT_MS", LLM_TIMEOUT.as_millis().to_string()),
        ("LLM_MAX_RETRIES", "1".into()),
    ]);
    let (server, _) = ApiProcess::start_at(bin, free_port(), &env, &log).await;

    let tenant = crate::app::tenant();
    let load = Load::start(server.base.clone(), tenant.clone(), plan);
    let start = load.started;
    tokio::time::sleep(Duration::from_secs_f64(lead)).await;
    let down = start.elapsed();
    let calls_before = model.calls();
    let mut failed = Vec::new();
    let mut peak = None;
    for phase in Phase::ALL {
        let calls = model.calls();
        model.set(Some(phase));
        peak = peak.max(checks::peak_lag(&server, EXTRACT_CONSUMER, Duration::from_secs_f64(fault / 3.0)).await);
        failed.push((phase, model.calls() - calls));
    }
    model.set(None);
    let back = Instant::now();
    let up = start.elapsed();
    let failed_calls = model.calls() - calls_before;
    let after = checks::lag_zero(&server, EXTRACT_CONSUMER, back, LIVENESS).await;
    let metrics = server.metrics().await;
    let failures = |kind: &str| {
        metric_sum(
            &metrics,
            "sediment_extract_failures_total",
            &[&format!("kind=\"{kind}\"")],
        )
    };
    let by_phase: Vec<String> = failed.iter().map(|(p, n)| format!("{n} {}", p.label())).collect();
    report.recoveries.push(Recovery {
        fault: format!(
            "LLM failing from {:.1} s to {:.1} s: {failed_calls} calls failed ({}); {} batches failed unavailable, {} malformed; extraction lag peaked at {} turns",
            down.as_secs_f64(),
            up.as_secs_f64(),
            by_phase.join(", "),
            failures("unavailable"),
            failures("malformed"),
            peak.map_or("(unread)".to_owned(), |p| p.to_string())
        ),
        back: "extraction lag 0",
        after,
    });
    let sent = load.finish().await;
    report.tally = Tally::of(&sent);
    report.checks.push(
        "ingest answers 201 throughout",
        report.tally.accepted == report.tally.sent,
        format!(
            "{} of {} requests answered 201",
            report.tally.accepted, report.tally.sent
        ),
    );
    // Each way of failing was met by calls, and extraction saw it fail and retried.
    let unmet: Vec<&str> = failed.iter().filter(|(_, n)| *n == 0).map(|(p, _)| p.label()).collect();
    report.checks.push(
        "every phase of the fault failed calls",
        unmet.is_empty() && failures("unavailable") + failures("malformed") > 0.0,
        format!("phases without a call: {unmet:?}"),
    );
    verify(server, &tenant, &plan, &sent, &dir.path().join("data/index"), report).await;
    keep_log_tail(report, &log);
}

/// Scene runs every few hundred milliseconds while memories come, a failed one retried after
/// 2 s, and a lease short enough that a run whose rollback failed too (S3 gone mid-run) is
/// taken over within the scenario rather than after the default 10 minutes. A persona build
/// renews its lease while it works, so that lease can be shorter still: a killed builder
/// holds its owner 3 s.
fn layer_env() -> Vec<(&'static str, String)> {
    vec![
        ("SCENE_AFTER_L1_MS", "100".into()),
        ("SCENE_MIN_GAP_MS", "300".into()),
        ("SCENE_MAX_WAIT_MS", "5000".into()),
        ("SCENE_RETRY_MS", "2000".into()),
        ("SCENE_LEASE_MS", "3000".into()),
        ("PERSONA_LEASE_MS", "3000".into()),
    ]
}

/// The cluster deployment with its files on a private S3 server, and the scene and persona
/// workers as processes of their own: the server stops serving for 10 s (short) or 30 s
/// (long) a third into the load (30 s / 90 s), then serves again with its objects. Appends
/// must answer 201 and recalls and searches 200 throughout; scene and persona runs fail and
/// are retried, and succeed again once the server is back.
async fn s3_outage(bin: &Path, report: &mut Report) {
    let outage = match report.form {
        Form::Short => Duration::from_secs(10),
        Form::Long => Duration::from_secs(30),
    };
    let plan = plan(report.form, report.seed, (30.0, 90.0));
    let s3 = PrivateS3::start()
        .await
        .unwrap_or_else(|e| panic!("start a private S3 server: {e:#}"));
    let db = TestDb::create().await;
    let broker = TestBroker::start("chaos-s3-outage").await;
    let amqp = broker.settings();
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let mut env = cluster_env(&db.url, &amqp.url, &amqp.prefix, dir.path());
    env.retain(|(k, _)| *k != "FILES_DIR");
    env.extend(s3.env());
    env.extend(layer_env());
    let (server, _) = ApiProcess::start_at(bin, free_port(), &env, &log).await;
    let layers = bin.with_file_name("sediment-test-layers");
    let scene = WorkerProcess::start(&layers, &["scene"], &env, &dir.path().join("scene.log")).await;
    let persona = WorkerProcess::start(&layers, &["persona"], &env, &dir.path().join("persona.log")).await;

    let tenant = crate::app::tenant();
    let load = Load::start(server.base.clone(), tenant.clone(), plan);
    let start = load.started;
    let reads = Reads::start(server.base.clone(), tenant.clone(), start, plan.seconds);
    tokio::time::sleep(Duration::from_secs_f64(plan.seconds / 3.0)).await;
    let before = LayerRuns::read(&scene, &persona).await;
    let down = start.elapsed();
    s3.stop_server().await.expect("stop the private S3 server");
    tokio::time::sleep(outage).await;
    let during = LayerRuns::read(&scene, &persona).await;
    let ready_during = (scene.probe("/readyz").await, persona.probe("/readyz").await);
    s3.start_server().await.expect("start the private S3 server");
    let back = Instant::now();
    let up = start.elapsed();
    // Back: a scene run has edited and a persona has been built since the server returned.
    let after = loop {
        let now = LayerRuns::read(&scene, &persona).await;
        if now.edited > during.edited && now.built > during.built {
            break Some(back.elapsed());
        }
        if back.elapsed() > LIVENESS {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    report.recoveries.push(Recovery {
        fault: format!(
            "S3 stopped at {:.1} s, started again at {:.1} s; while it was down {} scene runs failed ({} rolled back, {} found the owner busy), {} persona builds failed, {} file store errors, workers' /readyz {:?}",
            down.as_secs_f64(),
            up.as_secs_f64(),
            during.failed - before.failed,
            during.rolled_back - before.rolled_back,
            during.busy - before.busy,
            during.persona_failed - before.persona_failed,
            during.file_errors - before.file_errors,
            ready_during
        ),
        back: "a scene run edited and a persona built",
        after,
    });
    let sent = load.finish().await;
    let reads = reads.finish().await;
    report.tally = Tally::of(&sent);
    let during_sent = sent.iter().filter(|s| s.sent >= down && s.answered < up).count();
    report.checks.push(
        "ingest answers 201 throughout",
        report.tally.accepted == report.tally.sent && during_sent > 0,
        format!(
            "{} of {} requests answered 201, {during_sent} sent and answered while S3 was down",
            report.tally.accepted, report.tally.sent
        ),
    );
    check_reads(&mut report.checks, &reads, down, up);
    report.checks.push(
        "scene and persona runs fail while S3 is down",
        during.failed + during.rolled_back > before.failed + before.rolled_back
            && during.file_errors > before.file_errors,
        format!(
            "scene runs failed or rolled back: {} before, {} at the end of the outage; file store errors {} before, {} at its end",
            before.failed + before.rolled_back,
            during.failed + during.rolled_back,
            before.file_errors,
            during.file_errors
        ),
    );
    check_layers_built(&mut report.checks, &server, &tenant, &scene, &persona).await;
    verify(server, &tenant, &plan, &sent, &dir.path().join("index"), report).await;
    scene.stop().await;
    persona.stop().await;
    broker.cleanup().await;
    keep_log_tail(report, &log);
}

/// Scene runs and persona builds so far, from the two workers' metrics.
#[derive(Debug, Clone, Copy, Default)]
struct LayerRuns {
    edited: f64,
    /// Runs that found the owner's lease held by another (or by a failed run that could not
    /// roll back, until the lease expires).
    busy: f64,
    failed: f64,
    rolled_back: f64,
    built: f64,
    persona_failed: f64,
    /// Failed file store calls of both workers.
    file_errors: f64,
}

impl LayerRuns {
    async fn read(scene: &WorkerProcess, persona: &WorkerProcess) -> Self {
        let (scene, persona) = (scene.metrics().await, persona.metrics().await);
        let runs = |result: &str| metric_sum(&scene, "sediment_scene_runs_total", &[&format!("result=\"{result}\"")]);
        let builds = |result: &str| {
            metric_sum(
                &persona,
                "sediment_persona_builds_total",
                &[&format!("result=\"{result}\"")],
            )
        };
        Self {
            edited: runs("edited"),
            busy: runs("busy"),
            failed: runs("failed"),
            rolled_back: runs("rolled_back"),
            built: builds("built"),
            persona_failed: builds("failed"),
            file_errors: metric_sum(&scene, "sediment_file_store_errors_total", &[])
                + metric_sum(&persona, "sediment_file_store_errors_total", &[]),
        }
    }
}

/// Recalls and searches answered 200 before, during and after the outage, and recalls kept
/// the scene list, which the store holds, while S3 was down. A recall that lost the persona
/// (`store_unavailable`: not read by the API before the outage) is reported, not failed.
fn check_reads(checks: &mut Checks, reads: &[load::Read], down: Duration, up: Duration) {
    let during: Vec<&load::Read> = reads.iter().filter(|r| r.sent >= down && r.answered < up).collect();
    let not_ok: Vec<String> = reads
        .iter()
        .filter(|r| r.status != Some(200))
        .map(|r| format!("{} at {:.1} s: {:?}", r.what, r.sent.as_secs_f64(), r.status))
        .collect();
    let slowest = |reads: &mut dyn Iterator<Item = &load::Read>| {
        reads.map(|r| (r.answered - r.sent).as_secs_f64()).fold(0.0, f64::max)
    };
    checks.push(
        "recall and search answer 200 throughout",
        not_ok.is_empty() && !during.is_empty(),
        format!(
            "{} reads, {} while S3 was down, {} not 200{}; slowest {:.2} s while it was down, {:.2} s otherwise",
            reads.len(),
            during.len(),
            not_ok.len(),
            examples(&not_ok),
            slowest(&mut during.iter().copied()),
            slowest(&mut reads.iter().filter(|r| !(r.sent >= down && r.answered < up))),
        ),
    );
    let recalls: Vec<&&load::Read> = during.iter().filter(|r| r.what == "recall").collect();
    let without_scenes = recalls.iter().filter(|r| !r.scene_list).count();
    let without_persona = recalls
        .iter()
        .filter(|r| r.errors.iter().any(|e| e == "store_unavailable"))
        .count();
    checks.push(
        "recall keeps the scene list while S3 is down",
        without_scenes == 0 && !recalls.is_empty(),
        format!(
            "{} recalls while S3 was down, {without_scenes} without the scene list, {without_persona} without the persona (store_unavailable)",
            recalls.len()
        ),
    );
}

fn examples(items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    format!(
        " (e.g. {})",
        items.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
    )
}

/// After the outage: the scenes exist and their documents read back from S3, the persona is
/// built and reads back, and both workers are ready again.
async fn check_layers_built(
    checks: &mut Checks,
    server: &ApiProcess,
    tenant: &Tenant,
    scene: &WorkerProcess,
    persona: &WorkerProcess,
) {
    use crate::app::TenantHeaders as _;

    let get = |path: String| {
        server
            .client
            .get(format!("{}{path}", server.base))
            .tenant_headers(tenant)
            .send()
    };
    let scenes: serde_json::Value = match get("/v1/scenes".into()).await {
        Ok(response) => response.json().await.unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    let ids: Vec<String> = scenes["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|s| s["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut unreadable = Vec::new();
    for id in &ids {
        let status = get(format!("/v1/scenes/{id}")).await.map(|r| r.status().as_u16());
        if status.as_ref().ok() != Some(&200) {
            unreadable.push(format!("{id}: {status:?}"));
        }
    }
    checks.push(
        "scenes exist and read back",
        !ids.is_empty() && unreadable.is_empty(),
        format!("{} scenes, {} unreadable {unreadable:?}", ids.len(), unreadable.len()),
    );
    let persona_doc: Option<serde_json::Value> = match get("/v1/persona".into()).await {
        Ok(response) if response.status() == 200 => response.json().await.ok(),
        _ => None,
    };
    let version = persona_doc.as_ref().and_then(|p| p["version"].as_i64());
    let content = persona_doc
        .as_ref()
        .and_then(|p| p["content"].as_str())
        .map_or(0, str::len);
    checks.push(
        "the persona is built and reads back",
        version.is_some() && content > 0,
        format!("version {version:?}, {content} bytes"),
    );
    let ready = (scene.probe("/readyz").await, persona.probe("/readyz").await);
    checks.push(
        "the scene and persona workers are ready again",
        ready == (Some(200), Some(200)),
        format!("/readyz {ready:?}"),
    );
}

/// The invariants after the last fault: waits for everything to drain, reads back through
/// the API, then stops the server cleanly and counts the points in its Edge index.
async fn verify(
    server: ApiProcess,
    tenant: &Tenant,
    plan: &Plan,
    sent: &[load::Sent],
    index_dir: &Path,
    report: &mut Report,
) {
    let verdicts = &mut report.checks;
    let drained = checks::drained(&server, LIVENESS).await;
    verdicts.push(
        "index and extraction drain after the load",
        drained.is_some(),
        match drained {
            Some(after) => format!("lag 0 within {:.1} s of the end of the load", after.as_secs_f64()),
            None => format!("lag not 0 within {} s", LIVENESS.as_secs()),
        },
    );
    let stored = checks::stored_turns(&server, tenant, &load::sessions(plan)).await;
    checks::check_transcript(verdicts, sent, &stored);
    checks::check_search(verdicts, &server, tenant, sent).await;
    checks::check_memories(verdicts, &server, tenant, sent, &stored).await;
    checks::check_parked(verdicts, &server).await;
    checks::check_consumers(verdicts, &server).await;
    server.stop().await;
    checks::check_index_points(verdicts, index_dir, tenant, stored.len()).await;
}

fn keep_log_tail(report: &mut Report, log: &Path) {
    if report.passed() {
        return;
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    report.log_tail = lines[lines.len().saturating_sub(40)..].join("\n");
}

/// Runs `program` to its end; fails with its stderr when it exits non-zero.
async fn command(program: &str, args: &[&str]) -> anyhow::Result<()> {
    use anyhow::Context as _;

    let output = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("run {program}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{program} {} exited with {}: {}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// A duration drawn uniformly between `low` and `high` seconds.
fn between(rng: &mut Rng, low: f64, high: f64) -> Duration {
    Duration::from_secs_f64(low + rng.unit() * (high - low))
}
