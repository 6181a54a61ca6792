//! A steady load for a long time (issue 39, "Soak"): a deployment runs as real processes under
//! an open-loop mix of appends and recalls, and the run samples each process's memory, open
//! files, sockets and threads (and, in the cluster, its Postgres connections) from `/proc`.
//! What leaks shows as a slope: the report gives each resource's trend over the run after a
//! warm-up, and compares the latency of the first window with the last.
//!
//! The CI form is 3 minutes with 30-second windows; `soak --minutes 30` is the long one
//! (tests/BENCHMARKS.md, "Soak").

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use shared::domain::Tenant;

use crate::amqp::TestBroker;
use crate::app::TenantHeaders as _;
use crate::chaos::checks::{self, Checks};
use crate::pg::TestDb;
use crate::process::{free_port, ApiProcess, ProcStatus};
use crate::rng::Rng;
use crate::stats::{percentile, poisson_arrivals_seeded};

/// Longest wait for one answer: far above any latency of a healthy run, so only a hang hits it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the index and extraction to catch up after the load.
const DRAIN: Duration = Duration::from_secs(180);
/// Open files and sockets a process may hold at the end beyond the most it held during the
/// first window: connection pools and keep-alive connections open and close with the load.
const FD_SLACK: f64 = 16.0;
/// Threads beyond the first window's most: blocking-pool threads come and go.
const THREAD_SLACK: f64 = 8.0;
/// Postgres connections beyond the first window's most: pools open connections lazily, up to
/// their size, as requests overlap.
const CONNECTION_SLACK: f64 = 2.0;
/// The steepest heap trend (MB a minute, upper 95 % bound) the CI form accepts. The index's
/// own growth at this load is a fraction of a MB a minute; a leak of a few kB per request is
/// above this.
const RSS_SLOPE_LIMIT: f64 = 8.0;

/// Which deployment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// One process on a data directory.
    Embedded,
    /// The API with its in-process workers, a fresh database of the machine's Postgres and the
    /// machine's RabbitMQ under a prefix of its own.
    Cluster,
}

impl Deployment {
    pub fn name(self) -> &'static str {
        match self {
            Deployment::Embedded => "embedded",
            Deployment::Cluster => "cluster",
        }
    }

    pub fn named(name: &str) -> Option<Self> {
        [Deployment::Embedded, Deployment::Cluster]
            .into_iter()
            .find(|d| d.name() == name)
    }
}

/// The load and how it is watched.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub duration: Duration,
    /// Append requests a second, each of `turns` turns, round-robin over `sessions` sessions.
    pub appends: f64,
    pub turns: usize,
    pub sessions: usize,
    /// Recall requests a second.
    pub recalls: f64,
    /// The first and the last window whose latencies are compared; the first is also the
    /// warm-up left out of the trends.
    pub window: Duration,
    pub sample_every: Duration,
    pub seed: u64,
}

impl Plan {
    /// `minutes` of load: 4 appends of 5 turns and 4 recalls a second, windows of a sixth of
    /// the run and at most 5 minutes (5 of 30, 30 s of 3).
    pub fn minutes(minutes: f64, seed: u64) -> Self {
        let duration = Duration::from_secs_f64(minutes * 60.0);
        Plan {
            duration,
            appends: 4.0,
            turns: 5,
            sessions: 16,
            recalls: 4.0,
            window: (duration / 6).min(Duration::from_secs(300)),
            sample_every: if minutes > 10.0 {
                Duration::from_secs(5)
            } else {
                Duration::from_secs(1)
            },
            seed,
        }
    }
}

/// One reading of a process.
#[derive(Debug, Clone, Copy)]
struct Reading {
    at: Duration,
    rss_mb: f64,
    anon_mb: f64,
    fds: f64,
    sockets: f64,
    threads: f64,
}

/// Reads `/proc/<pid>`; `None` once the process is gone.
fn read(pid: &str, at: Duration) -> Option<Reading> {
    let status = ProcStatus::read(pid)?;
    let mut fds = 0.0;
    let mut sockets = 0.0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        fds += 1.0;
        if std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:")) {
            sockets += 1.0;
        }
    }
    Some(Reading {
        at,
        rss_mb: status.mb("VmRSS:")?,
        anon_mb: status.mb("RssAnon:")?,
        fds,
        sockets,
        threads: status.field("Threads:")?,
    })
}

/// A least-squares trend with the half-width of its 95 % interval. Readings a few seconds apart
/// are not independent, so the interval is narrower than the truth: it tells noise from a trend,
/// not more.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Per minute.
    pub slope: f64,
    pub half_width: f64,
}

impl Trend {
    /// The trend of `points` (minutes, value); `None` with fewer than three points.
    pub fn fit(points: &[(f64, f64)]) -> Option<Self> {
        let n = points.len() as f64;
        if points.len() < 3 {
            return None;
        }
        let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
        if sxx == 0.0 {
            return None;
        }
        let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
        let slope = sxy / sxx;
        let intercept = mean_y - slope * mean_x;
        let residual: f64 = points.iter().map(|p| (p.1 - intercept - slope * p.0).powi(2)).sum();
        let standard_error = (residual / (n - 2.0) / sxx).sqrt();
        Some(Trend {
            slope,
            half_width: 1.96 * standard_error,
        })
    }

    pub fn upper(&self) -> f64 {
        self.slope + self.half_width
    }
}

impl fmt::Display for Trend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:+.3} ± {:.3} /min", self.slope, self.half_width)
    }
}

/// What a run measured of one watched process (the server, or the cluster's Postgres backends
/// taken together).
#[derive(Debug, Clone)]
pub struct Watched {
    pub name: String,
    pub first: Summary,
    pub last: Summary,
    pub rss_trend: Option<Trend>,
    pub anon_trend: Option<Trend>,
    pub fd_trend: Option<Trend>,
    pub thread_trend: Option<Trend>,
    /// The most open files, sockets and threads of the first window.
    pub first_max: (f64, f64, f64),
}

/// Medians of the readings in a window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub rss_mb: f64,
    pub anon_mb: f64,
    pub fds: f64,
    pub sockets: f64,
    pub threads: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

impl Watched {
    fn of(name: &str, readings: &[Reading], window: Duration, end: Duration) -> Self {
        let first: Vec<&Reading> = readings.iter().filter(|r| r.at < window).collect();
        let last: Vec<&Reading> = readings.iter().filter(|r| r.at + window >= end).collect();
        let summary = |rs: &[&Reading]| Summary {
            rss_mb: median(rs.iter().map(|r| r.rss_mb).collect()),
            anon_mb: median(rs.iter().map(|r| r.anon_mb).collect()),
            fds: median(rs.iter().map(|r| r.fds).collect()),
            sockets: median(rs.iter().map(|r| r.sockets).collect()),
            threads: median(rs.iter().map(|r| r.threads).collect()),
        };
        let max = |f: fn(&Reading) -> f64| first.iter().map(|r| f(r)).fold(f64::NAN, f64::max);
        // After the warm-up: allocator arenas, caches and pools fill in the first minutes.
        let settled: Vec<&Reading> = readings.iter().filter(|r| r.at >= window).collect();
        let trend = |f: fn(&Reading) -> f64| {
            let points: Vec<(f64, f64)> = settled.iter().map(|r| (r.at.as_secs_f64() / 60.0, f(r))).collect();
            Trend::fit(&points)
        };
        Watched {
            name: name.to_owned(),
            first: summary(&first),
            last: summary(&last),
            rss_trend: trend(|r| r.rss_mb),
            anon_trend: trend(|r| r.anon_mb),
            fd_trend: trend(|r| r.fds),
            thread_trend: trend(|r| r.threads),
            first_max: (max(|r| r.fds), max(|r| r.sockets), max(|r| r.threads)),
        }
    }
}

/// How one request of the load ended.
#[derive(Debug, Clone, Copy)]
struct Answer {
    kind: Kind,
    at: Duration,
    latency: Duration,
    ok: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Append,
    Recall,
}

/// Latencies of one kind of request in a window.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
}

impl Latency {
    fn of(answers: &[Answer], kind: Kind, from: Duration, to: Duration) -> Self {
        let mut latencies: Vec<Duration> = answers
            .iter()
            .filter(|a| a.kind == kind && a.ok && a.at >= from && a.at < to)
            .map(|a| a.latency)
            .collect();
        latencies.sort();
        Latency {
            count: latencies.len(),
            p50: percentile(&latencies, 0.5),
            p99: percentile(&latencies, 0.99),
        }
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p50 {:.1} ms, p99 {:.1} ms (n={})",
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.count
        )
    }
}

/// What a soak measured and whether it held.
#[derive(Debug, Clone)]
pub struct Report {
    pub deployment: Deployment,
    pub plan: Plan,
    pub sent: usize,
    pub failed: usize,
    /// Appends and recalls, first window and last.
    pub appends: (Latency, Latency),
    pub recalls: (Latency, Latency),
    pub turns_stored: usize,
    pub watched: Vec<Watched>,
    /// The cluster's Postgres connections of this deployment, first window's median and last.
    pub pg_connections: Option<(f64, f64)>,
    pub cpu_seconds: f64,
    pub checks: Checks,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.checks.0.iter().all(|c| c.ok)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let minutes = self.plan.duration.as_secs_f64() / 60.0;
        let window = match self.plan.window.as_secs() {
            s if s % 60 == 0 => format!("{} min", s / 60),
            s => format!("{s} s"),
        };
        writeln!(
            f,
            "== soak {} ({minutes:.0} min, seed {}) ==",
            self.deployment.name(),
            self.plan.seed
        )?;
        writeln!(
            f,
            "load: {} requests ({} appends of {} turns and {} recalls a second), {} failed; {} turns stored; server CPU {:.1} s ({:.0} % of a core)",
            self.sent,
            self.plan.appends,
            self.plan.turns,
            self.plan.recalls,
            self.failed,
            self.turns_stored,
            self.cpu_seconds,
            100.0 * self.cpu_seconds / self.plan.duration.as_secs_f64()
        )?;
        writeln!(
            f,
            "append, first {window}: {}; last: {}",
            self.appends.0, self.appends.1
        )?;
        writeln!(
            f,
            "recall, first {window}: {}; last: {}",
            self.recalls.0, self.recalls.1
        )?;
        for w in &self.watched {
            let trend = |t: &Option<Trend>| t.map_or("n/a".to_owned(), |t| t.to_string());
            writeln!(
                f,
                "{}: rss {:.0} → {:.0} MB (trend {}), anonymous {:.0} → {:.0} MB (trend {}); open files {:.0} → {:.0} (trend {}), sockets {:.0} → {:.0}, threads {:.0} → {:.0} (trend {})",
                w.name,
                w.first.rss_mb,
                w.last.rss_mb,
                trend(&w.rss_trend),
                w.first.anon_mb,
                w.last.anon_mb,
                trend(&w.anon_trend),
                w.first.fds,
                w.last.fds,
                trend(&w.fd_trend),
                w.first.sockets,
                w.last.sockets,
                w.first.threads,
                w.last.threads,
                trend(&w.thread_trend),
            )?;
        }
        if let Some((first, last)) = self.pg_connections {
            writeln!(f, "postgres connections of this deployment: {first:.0} → {last:.0}")?;
        }
        for check in &self.checks.0 {
            writeln!(f, "{check}")?;
        }
        write!(f, "{}", if self.passed() { "PASSED" } else { "FAILED" })
    }
}

/// Words the load's turns and questions are made of: a small vocabulary, so that recalls match
/// and the rules extractor keeps the preferences.
const TOPICS: [&str; 12] = [
    "billing",
    "deploys",
    "postgres",
    "dashboards",
    "alerts",
    "invoices",
    "backups",
    "tracing",
    "queues",
    "caching",
    "migrations",
    "on-call",
];
const TOOLS: [&str; 10] = [
    "terraform",
    "grafana",
    "rust",
    "python",
    "kafka",
    "redis",
    "helm",
    "vim",
    "sqlite",
    "nginx",
];

fn turn_text(rng: &mut Rng, user: bool) -> String {
    let topic = *rng.pick(&TOPICS);
    let tool = *rng.pick(&TOOLS);
    if user {
        format!("I prefer {tool} for the {topic} work, and the team reviews it every week.")
    } else {
        format!("Noted: {tool} for {topic}. I will keep that in mind when we plan the next step.")
    }
}

/// Runs the soak on the API binary `server` and reports it. Panics when it cannot set up.
pub async fn run(server: &Path, deployment: Deployment, plan: Plan) -> Report {
    let dir = tempfile::tempdir().expect("make the soak's directory");
    let log = dir.path().join("server.log");
    let mut env: Vec<(&str, String)> = vec![
        ("AUTH", "off".into()),
        ("EMBEDDING", "none".into()),
        ("EXTRACT_IDLE_FLUSH_MS", "2000".into()),
        ("LOG", "warn".into()),
    ];
    let mut cluster = None;
    match deployment {
        Deployment::Embedded => env.push(("DATA_DIR", dir.path().join("data").display().to_string())),
        Deployment::Cluster => {
            let db = TestDb::create().await;
            let broker = TestBroker::start("soak").await;
            let amqp = broker.settings();
            env.extend([
                ("DATABASE_URL", db.url.clone()),
                ("AMQP_URL", amqp.url.clone()),
                ("AMQP_PREFIX", amqp.prefix.clone()),
                ("INDEX_DIR", dir.path().join("index").display().to_string()),
                ("FILES_DIR", dir.path().join("files").display().to_string()),
            ]);
            cluster = Some((db, broker));
        }
    }
    let (api, _) = ApiProcess::start_at(server, free_port(), &env, &log).await;
    let tenant = crate::app::tenant();
    let cpu_before = api.cpu_seconds();

    let started = Instant::now();
    let answers = Arc::new(Mutex::new(Vec::new()));
    let load = tokio::spawn(drive(api.base.clone(), tenant.clone(), plan, started, answers.clone()));
    let pg = match &cluster {
        Some((db, _)) => Some(db.client().await),
        None => None,
    };
    let db_name = cluster.as_ref().map(|(db, _)| db.name().to_owned());
    let mut server_readings = Vec::new();
    let mut pg_readings = Vec::new();
    let mut pg_connections = Vec::new();
    let mut tick = tokio::time::interval(plan.sample_every);
    while started.elapsed() < plan.duration {
        tick.tick().await;
        let at = started.elapsed();
        if let Some(r) = read(api.pid(), at) {
            server_readings.push(r);
        }
        if let (Some(pg), Some(name)) = (&pg, &db_name) {
            // The backends serving this deployment, taken together, less the one asking.
            let rows = pg
                .query(
                    "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                    &[name],
                )
                .await
                .expect("read pg_stat_activity");
            let pids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
            pg_connections.push((at, pids.len() as f64));
            let backends: Vec<Reading> = pids.iter().filter_map(|p| read(&p.to_string(), at)).collect();
            pg_readings.push(Reading {
                at,
                rss_mb: backends.iter().map(|r| r.rss_mb).sum(),
                anon_mb: backends.iter().map(|r| r.anon_mb).sum(),
                fds: backends.iter().map(|r| r.fds).sum(),
                sockets: backends.iter().map(|r| r.sockets).sum(),
                threads: backends.iter().map(|r| r.threads).sum(),
            });
        }
    }
    load.await.expect("the load task");
    let end = plan.duration;
    let cpu_seconds = api.cpu_seconds() - cpu_before;
    let answers = std::mem::take(&mut *answers.lock().expect("answers"));

    let mut checks = Checks::default();
    let failed = answers.iter().filter(|a| !a.ok).count();
    checks.push(
        "every request answered",
        failed == 0 && !answers.is_empty(),
        format!("{failed} of {} failed or timed out", answers.len()),
    );
    let drained = checks::drained(&api, DRAIN).await;
    checks.push(
        "index and extraction keep up",
        drained.is_some(),
        match drained {
            Some(after) => format!("lag 0 within {:.1} s of the end of the load", after.as_secs_f64()),
            None => format!("lag not 0 within {} s", DRAIN.as_secs()),
        },
    );
    checks::check_parked(&mut checks, &api).await;
    checks::check_consumers(&mut checks, &api).await;
    let turns_stored = checks::stored_turns(&api, &tenant, &sessions(&plan)).await.len();

    let mut watched = vec![Watched::of("server", &server_readings, plan.window, end)];
    if !pg_readings.is_empty() {
        watched.push(Watched::of("postgres backends", &pg_readings, plan.window, end));
    }
    let server = &watched[0];
    let (fds, sockets, threads) = server.first_max;
    checks.push(
        "server: no growth in open files",
        server.last.fds <= fds + FD_SLACK,
        format!(
            "median {:.0} in the last window, at most {fds:.0} in the first",
            server.last.fds
        ),
    );
    checks.push(
        "server: no growth in sockets",
        server.last.sockets <= sockets + FD_SLACK,
        format!(
            "median {:.0} in the last window, at most {sockets:.0} in the first",
            server.last.sockets
        ),
    );
    checks.push(
        "server: no growth in threads",
        server.last.threads <= threads + THREAD_SLACK,
        format!(
            "median {:.0} in the last window, at most {threads:.0} in the first",
            server.last.threads
        ),
    );
    checks.push(
        "server: heap flat",
        server.anon_trend.is_some_and(|t| t.upper() <= RSS_SLOPE_LIMIT),
        format!(
            "anonymous memory trend {} after the first window (limit {RSS_SLOPE_LIMIT} MB/min)",
            server.anon_trend.map_or("n/a".to_owned(), |t| t.to_string())
        ),
    );
    let connections = (!pg_connections.is_empty()).then(|| {
        let first: Vec<f64> = pg_connections
            .iter()
            .filter(|c| c.0 < plan.window)
            .map(|c| c.1)
            .collect();
        let most = first.iter().copied().fold(f64::NAN, f64::max);
        let last = median(
            pg_connections
                .iter()
                .filter(|c| c.0 + plan.window >= end)
                .map(|c| c.1)
                .collect(),
        );
        (median(first), most, last)
    });
    if let Some((first, most, last)) = connections {
        checks.push(
            "postgres: no growth in connections",
            last <= most + CONNECTION_SLACK,
            format!("median {first:.0} in the first window (at most {most:.0}), {last:.0} in the last"),
        );
    }

    api.stop().await;
    if let Some((db, broker)) = cluster {
        broker.cleanup().await;
        drop(db);
    }
    Report {
        deployment,
        plan,
        sent: answers.len(),
        failed,
        appends: (
            Latency::of(&answers, Kind::Append, Duration::ZERO, plan.window),
            Latency::of(&answers, Kind::Append, end.saturating_sub(plan.window), end),
        ),
        recalls: (
            Latency::of(&answers, Kind::Recall, Duration::ZERO, plan.window),
            Latency::of(&answers, Kind::Recall, end.saturating_sub(plan.window), end),
        ),
        turns_stored,
        watched,
        pg_connections: connections.map(|(first, _, last)| (first, last)),
        cpu_seconds,
        checks,
    }
}

/// The open-loop load: appends and recalls at their own Poisson arrival times, each request
/// sent at its time whatever the ones before are doing.
async fn drive(base: String, tenant: Tenant, plan: Plan, started: Instant, answers: Arc<Mutex<Vec<Answer>>>) {
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("http client");
    let seconds = plan.duration.as_secs_f64();
    let mut schedule: Vec<(Duration, Kind)> = poisson_arrivals_seeded(plan.appends, seconds, plan.seed)
        .into_iter()
        .map(|at| (at, Kind::Append))
        .chain(
            poisson_arrivals_seeded(plan.recalls, seconds, plan.seed ^ 0x5eed)
                .into_iter()
                .map(|at| (at, Kind::Recall)),
        )
        .collect();
    schedule.sort_by_key(|s| s.0);
    let names = sessions(&plan);
    let mut rng = Rng::new(plan.seed);
    let mut requests = tokio::task::JoinSet::new();
    for (n, (at, kind)) in schedule.into_iter().enumerate() {
        let (url, body) = match kind {
            Kind::Append => {
                let session = &names[n % names.len()];
                let messages: Vec<_> = (0..plan.turns)
                    .map(|i| {
                        let user = i % 2 == 0;
                        json!({"role": if user { "user" } else { "assistant" }, "content": turn_text(&mut rng, user)})
                    })
                    .collect();
                (
                    format!("{base}/v1/sessions/{session}/messages"),
                    json!({ "messages": messages }),
                )
            }
            Kind::Recall => {
                let topic = *rng.pick(&TOPICS);
                (
                    format!("{base}/v1/recall"),
                    json!({"query": format!("which tool do we use for {topic}?"), "limit": 10}),
                )
            }
        };
        tokio::time::sleep_until((started + at).into()).await;
        let (client, tenant, answers) = (client.clone(), tenant.clone(), answers.clone());
        requests.spawn(async move {
            let sent = Instant::now();
            let response = client.post(url).tenant_headers(&tenant).json(&body).send().await;
            let ok = match response {
                Ok(response) => {
                    let expected = if kind == Kind::Append { 201 } else { 200 };
                    let status = response.status().as_u16();
                    // The whole body, so the latency is the answer's, not its first bytes'.
                    response.bytes().await.is_ok() && status == expected
                }
                Err(_) => false,
            };
            answers.lock().expect("answers").push(Answer {
                kind,
                at: sent - started,
                latency: sent.elapsed(),
                ok,
            });
        });
        // Reap what has finished, so a long run holds only the requests in flight.
        while requests.try_join_next().is_some() {}
    }
    while requests.join_next().await.is_some() {}
}

/// The names of the load's sessions.
fn sessions(plan: &Plan) -> Vec<String> {
    (0..plan.sessions).map(|n| format!("soak-{n}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trend_is_the_least_squares_slope_with_its_interval() {
        let flat: Vec<(f64, f64)> = (0..60).map(|i| (i as f64 / 6.0, 100.0 + (i % 2) as f64)).collect();
        let trend = Trend::fit(&flat).unwrap();
        assert!(trend.slope.abs() < 0.05, "{trend}");
        assert!(trend.upper() < 0.1, "{trend}");
        let rising: Vec<(f64, f64)> = (0..60).map(|i| (i as f64, 10.0 + 2.0 * i as f64)).collect();
        let trend = Trend::fit(&rising).unwrap();
        assert!((trend.slope - 2.0).abs() < 1e-9);
        assert!(trend.half_width < 1e-6);
        assert_eq!(Trend::fit(&rising[..2]), None);
        assert_eq!(Trend::fit(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
    }

    #[test]
    fn windows_are_a_sixth_of_the_run_up_to_five_minutes() {
        assert_eq!(Plan::minutes(3.0, 1).window, Duration::from_secs(30));
        assert_eq!(Plan::minutes(30.0, 1).window, Duration::from_secs(300));
        assert_eq!(Plan::minutes(60.0, 1).window, Duration::from_secs(300));
    }
}
