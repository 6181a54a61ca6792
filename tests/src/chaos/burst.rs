//! `backpressure`: a burst ten times what the workers drain. The bottleneck is extraction with
//! an LLM (the scripted model of `llm-faults`, answering after a fixed latency), as in
//! production; the index is keyword-only and keeps up. A probe first measures the drain rate
//! with its own tenant, then the load appends at ten times that rate, with recalls and
//! searches beside it, and the run samples the lag, the queues and the server's memory until
//! everything has drained.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use shared::store::memory::EXTRACT_CONSUMER;

use super::llm::ScriptedModel;
use super::load::{Load, Plan, Reads, Tally};
use super::{checks, embedded_llm_env, keep_log_tail, verify, Form, Recovery, Report, LLM_HANG};
use crate::app::TenantHeaders as _;
use crate::process::{free_port, metric_sum, ApiProcess, ProcStatus};
use crate::stats::percentile;

/// How long the scripted model takes to answer: a real model's seconds, shortened.
const MODEL_LATENCY: Duration = Duration::from_millis(400);
/// Sessions of the probe and of the load: extraction runs one batch per session at a time.
const SESSIONS: usize = 8;
/// Turns per append request.
const TURNS: usize = 10;
/// How many times the drain rate the burst appends.
const OVERLOAD: f64 = 10.0;
/// How often the lag, the queues and the memory are read.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The recall's own deadline (`SEDIMENT_RECALL_TIMEOUT_MS`'s default): every read must be
/// answered within it, however deep the backlog.
const RECALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Wake-ups an in-process queue holds here (`SEDIMENT_WORKER_QUEUE_LIMIT`, 10,000 by default):
/// below what even the short burst queues, so that events are dropped and the sweep has to
/// find their work.
const QUEUE_LIMIT: u64 = 16;
/// The most the server's anonymous memory may grow over its level before the burst: the
/// backlog is in the store, and what is in memory is bounded by the work in flight.
const MEMORY_GROWTH_LIMIT_MB: f64 = 256.0;

/// One reading of the lag curve.
#[derive(Debug, Clone, Copy)]
struct Point {
    at: Duration,
    extract_lag: Option<i64>,
    extract_ready: Option<u64>,
    index_ready: Option<u64>,
    anon_mb: Option<f64>,
}

pub(super) async fn backpressure(bin: &Path, report: &mut Report) {
    let burst_seconds = match report.form {
        Form::Short => 8.0,
        Form::Long => 40.0,
    };
    let model = ScriptedModel::start(LLM_HANG).await;
    model.set_latency(MODEL_LATENCY);
    let dir = tempfile::tempdir().expect("make the scenario's directory");
    let log = dir.path().join("server.log");
    let mut env = embedded_llm_env(&model, dir.path());
    env.push(("WORKER_QUEUE_LIMIT", QUEUE_LIMIT.to_string()));
    let (server, _) = ApiProcess::start_at(bin, free_port(), &env, &log).await;

    let drain = probe(&server, &model).await;
    let rate = OVERLOAD * drain / TURNS as f64;
    let plan = Plan {
        rate,
        seconds: burst_seconds,
        sessions: SESSIONS,
        turns: TURNS,
        seed: report.seed,
    };
    let tenant = crate::app::tenant();
    let before = anon_mb(server.pid());
    let load = Load::start(server.base.clone(), tenant.clone(), plan);
    let start = load.started;
    // Reads until well into the drain: the deepest backlog comes at the burst's end.
    let reads = Reads::start(server.base.clone(), tenant.clone(), start, burst_seconds * 2.0);
    let bound = Duration::from_secs_f64(burst_seconds * OVERLOAD * 3.0).max(Duration::from_secs(120));
    let curve = sample_until_drained(&server, start, Duration::from_secs_f64(burst_seconds), bound).await;
    let sent = load.finish().await;
    let reads = reads.finish().await;
    report.tally = Tally::of(&sent);

    let peak = curve.iter().filter_map(|p| p.extract_lag).max().unwrap_or(0);
    let peak_at = curve
        .iter()
        .find(|p| p.extract_lag == Some(peak))
        .map_or(Duration::ZERO, |p| p.at);
    let zero_at = curve
        .iter()
        .find(|p| p.at > peak_at && p.extract_lag == Some(0))
        .map(|p| p.at);
    let burst_end = Duration::from_secs_f64(burst_seconds);
    let accepted_turns = report.tally.accepted * TURNS;
    let drained_at = zero_at.map_or("not drained".to_owned(), |zero_at| {
        let seconds = (zero_at - peak_at).as_secs_f64().max(1e-3);
        format!("drained at {:.1} turns/s after the peak", peak as f64 / seconds)
    });
    report.recoveries.push(Recovery {
        fault: format!(
            "{:.0} turns/s for {burst_seconds:.0} s against a drain of {drain:.1} turns/s ({:.1}x): extraction lag peaked at {peak} turns at {:.1} s, {drained_at}; curve {}",
            rate * TURNS as f64,
            accepted_turns as f64 / burst_seconds / drain,
            peak_at.as_secs_f64(),
            describe(&curve)
        ),
        back: "extraction lag 0",
        after: zero_at.map(|at| at.saturating_sub(burst_end)),
    });
    report.checks.push(
        "ingest accepts the whole burst",
        report.tally.accepted == report.tally.sent && report.tally.sent > 0,
        format!(
            "{} of {} requests answered 201",
            report.tally.accepted, report.tally.sent
        ),
    );
    report.checks.push(
        "the burst outran the workers",
        peak as f64 >= accepted_turns as f64 / 2.0,
        format!("extraction lag peaked at {peak} of {accepted_turns} accepted turns"),
    );
    let mut latencies: Vec<Duration> = reads.iter().map(|r| r.answered - r.sent).collect();
    latencies.sort();
    let slow = reads
        .iter()
        .filter(|r| r.status != Some(200) || r.answered - r.sent > RECALL_TIMEOUT)
        .count();
    report.checks.push(
        "recall and search answer within the recall timeout",
        slow == 0 && !reads.is_empty(),
        format!(
            "{} reads during the burst and the drain, p50 {:.0} ms, p99 {:.0} ms, {slow} not 200 within {} s",
            reads.len(),
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            RECALL_TIMEOUT.as_secs()
        ),
    );
    let most_ready = curve
        .iter()
        .filter_map(|p| Some(p.extract_ready? + p.index_ready?))
        .max()
        .unwrap_or(0);
    let dropped = metric_sum(&server.metrics().await, "sediment_events_dropped_total", &[]);
    report.checks.push(
        "the in-process queues stay within their limit",
        curve
            .iter()
            .all(|p| p.extract_ready.unwrap_or(0) <= QUEUE_LIMIT && p.index_ready.unwrap_or(0) <= QUEUE_LIMIT),
        format!(
            "at most {most_ready} wake-ups waiting in the extract and index queues together (limit {QUEUE_LIMIT} each), for {} append requests; {dropped} events dropped, their work left to the sweep",
            report.tally.sent
        ),
    );
    let peak_mb = curve.iter().filter_map(|p| p.anon_mb).fold(f64::NAN, f64::max);
    let drained_mb = curve.last().and_then(|p| p.anon_mb).unwrap_or(f64::NAN);
    report.checks.push(
        "the server's memory stays bounded",
        before.is_some_and(|before| peak_mb - before <= MEMORY_GROWTH_LIMIT_MB),
        format!(
            "anonymous memory {:.0} MB before the burst, at most {peak_mb:.0} MB during it and the drain (limit +{MEMORY_GROWTH_LIMIT_MB:.0}), {drained_mb:.0} MB once drained",
            before.unwrap_or(f64::NAN)
        ),
    );
    verify(server, &tenant, &plan, &sent, &dir.path().join("data/index"), report).await;
    keep_log_tail(report, &log);
}

/// Appends `SESSIONS` requests of `TURNS` turns at once under a tenant of its own and returns
/// how many turns a second extraction took from them.
async fn probe(server: &ApiProcess, model: &ScriptedModel) -> f64 {
    let tenant = crate::app::tenant();
    let started = Instant::now();
    let calls = model.calls();
    let appends = (0..SESSIONS).map(|s| {
        let messages: Vec<_> = (0..TURNS)
            .map(|t| {
                json!({"role": if t % 2 == 0 { "user" } else { "assistant" },
                       "content": format!("probe turn {t} of session {s}: I prefer blue-green deploys")})
            })
            .collect();
        server
            .client
            .post(format!("{}/v1/sessions/probe-{s}/messages", server.base))
            .tenant_headers(&tenant)
            .json(&json!({ "messages": messages }))
            .send()
    });
    for response in futures::future::join_all(appends).await {
        assert_eq!(response.expect("probe append").status(), 201, "probe append");
    }
    checks::lag_zero(server, EXTRACT_CONSUMER, started, Duration::from_secs(120))
        .await
        .expect("the probe's turns are extracted");
    let seconds = started.elapsed().as_secs_f64();
    assert!(model.calls() > calls, "the probe went through the model");
    (SESSIONS * TURNS) as f64 / seconds
}

/// Reads the curve every [`SAMPLE_EVERY`] from `start` until the load has ended and the
/// extraction lag is back at zero, or `bound` has passed.
async fn sample_until_drained(server: &ApiProcess, start: Instant, load: Duration, bound: Duration) -> Vec<Point> {
    let mut curve = Vec::new();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    loop {
        tick.tick().await;
        let at = start.elapsed();
        let state = server.ops_state().await;
        let lag = |consumer: &str| {
            state.as_ref()?["lag"]
                .as_array()?
                .iter()
                .find(|r| r["consumer"] == consumer)?["turns"]
                .as_i64()
        };
        let ready = |queue: &str| {
            state.as_ref()?["queues"]
                .as_array()?
                .iter()
                .find(|q| q["queue"] == queue)?["ready"]
                .as_u64()
        };
        let point = Point {
            at,
            extract_lag: lag(EXTRACT_CONSUMER),
            extract_ready: ready("extract"),
            index_ready: ready("index"),
            anon_mb: anon_mb(server.pid()),
        };
        curve.push(point);
        if (at > load && point.extract_lag == Some(0)) || at > load + bound {
            return curve;
        }
    }
}

/// The lag curve in a line: one reading a second at most, `s: lag/queued`.
fn describe(curve: &[Point]) -> String {
    let mut text = String::new();
    let mut next = Duration::ZERO;
    let step = (curve.last().map_or(Duration::ZERO, |p| p.at) / 20).max(Duration::from_secs(1));
    for point in curve {
        if point.at < next {
            continue;
        }
        next = point.at + step;
        let _ = write!(
            text,
            "{}{:.0}s {}/{}",
            if text.is_empty() { "" } else { ", " },
            point.at.as_secs_f64(),
            point.extract_lag.map_or("?".to_owned(), |l| l.to_string()),
            point
                .extract_ready
                .zip(point.index_ready)
                .map_or("?".to_owned(), |(e, i)| (e + i).to_string())
        );
    }
    text + " (seconds: extraction lag in turns / wake-ups queued)"
}

/// The process's anonymous resident memory in MB.
fn anon_mb(pid: &str) -> Option<f64> {
    ProcStatus::read(pid)?.mb("RssAnon:")
}
