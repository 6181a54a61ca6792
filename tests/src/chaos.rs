//! Faults under load (issue 39): each [`Scenario`] starts a real deployment as processes,
//! drives a bounded open-loop append load at it ([`load`]), injects one kind of fault while
//! the load runs, measures how long the system takes to catch up after each fault, and then
//! checks the invariants ([`checks`]): every accepted turn stored once, indexed once, and no
//! memory duplicated by a replayed batch.
//!
//! A scenario owns everything it breaks: its server processes, data directories, databases,
//! Postgres cluster ([`PrivatePostgres`]) and broker node ([`PrivateBroker`]) are its own and
//! go away when it ends, also on panic (drop guards). The machine's Postgres and RabbitMQ only
//! host fresh databases and prefixes and are never stopped or restarted, so scenarios run in
//! parallel with the rest of the suite. Each has a short form (seconds, for CI) and a long
//! form (`--long` of the `chaos` binary).

mod broker;
pub mod checks;
pub mod load;
mod postgres;

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

pub use broker::PrivateBroker;
use checks::Checks;
use load::{Load, Plan, Tally};
pub use postgres::PrivatePostgres;
use shared::domain::Tenant;

use crate::amqp::TestBroker;
use crate::pg::TestDb;
use crate::process::{free_port, ApiProcess};
use crate::rng::Rng;

/// Longest wait for lag to return to zero after a fault, or for everything to drain after
/// the load: a liveness bound, generous because a loaded 2-core machine indexes slowly.
const LIVENESS: Duration = Duration::from_secs(180);
/// The seed of every random choice (arrival times, kill points), unless `CHAOS_SEED` is set.
const DEFAULT_SEED: u64 = 39;
/// How long after Postgres is back appends may still fail while the pools replace their
/// broken connections.
const POOL_GRACE: Duration = Duration::from_secs(5);

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
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [
        Scenario::EmbeddedKill,
        Scenario::RabbitmqOutage,
        Scenario::PostgresRestart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::EmbeddedKill => "embedded-kill",
            Scenario::RabbitmqOutage => "rabbitmq-outage",
            Scenario::PostgresRestart => "postgres-restart",
        }
    }

    /// The scenario called `name`, if there is one.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Runs the scenario against the API binary `server` (`sediment-api`) and reports what it
    /// measured. Panics when it cannot set up (a service of the machine is missing).
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
        }
        report
    }
}

/// One fault and how long after its end the index lag was back to zero.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub fault: String,
    /// `None`: not within [`LIVENESS`].
    pub lag_zero_after: Option<Duration>,
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
        self.checks.0.iter().all(|c| c.ok) && self.recoveries.iter().all(|r| r.lag_zero_after.is_some())
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
            match r.lag_zero_after {
                Some(after) => writeln!(f, "{}: index lag 0 after {:.1} s", r.fault, after.as_secs_f64())?,
                None => writeln!(
                    f,
                    "{}: index lag NOT back to 0 within {} s",
                    r.fault,
                    LIVENESS.as_secs()
                )?,
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
            lag_zero_after: checks::index_lag_zero(&server, restarted, LIVENESS).await,
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
    let peak = checks::peak_index_lag(&server, outage).await;
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
        lag_zero_after: checks::index_lag_zero(&server, back, LIVENESS).await,
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
    let lag_zero_after = checks::index_lag_zero(&server, back, LIVENESS).await;
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
        lag_zero_after,
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
