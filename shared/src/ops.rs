//! Operational read-outs: the queue gauges of `/metrics`, and the snapshot behind the API's ops
//! page (queues, consumer lag, worker liveness, recent failures, the L1 funnel).
//!
//! Everything here is aggregate and crosses tenants, so it carries counts, ages, kinds and error
//! messages only: never the content of a turn or memory, never a tenant, session, turn or
//! memory id. Reads are bounded by [`SOURCE_TIMEOUT`] and never fail the caller: a source that
//! does not answer shows as unavailable (and is logged), and the others still show.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::backends::Backends;
use crate::bus::{EventBus, QueueStats, WorkerKind};
use crate::metrics;
use crate::runtime::{error_chain, Heartbeat};
use crate::store::memory::{ProvenanceRecord, EXTRACT_CONSUMER};
use crate::store::INDEX_CONSUMER;

/// Longest wait for one source (a queue, a lag query, the failures); a scrape or a page load
/// must not hang on a broker or database that does not answer.
pub const SOURCE_TIMEOUT: Duration = Duration::from_secs(3);
/// A consumer loop that has not turned for this long is wedged.
pub const WEDGED_AFTER: Duration = Duration::from_secs(30);
/// Failed batches shown on the ops page.
pub const RECENT_FAILURES: u32 = 20;
/// Longest error message shown per failure, in characters.
const MAX_ERROR_CHARS: usize = 300;
/// The consumers with a cursor in the store, whose lag the snapshot reads.
const CURSOR_CONSUMERS: [&str; 2] = [INDEX_CONSUMER, EXTRACT_CONSUMER];

/// Reads the stats of each kind's queue and sets the queue gauges (`sediment_queue_depth`,
/// `sediment_parked_messages`, `sediment_queue_consumers`); `None` for a queue that could not
/// be read, whose gauges keep their last value.
pub async fn sample_queues(bus: &dyn EventBus, kinds: &[WorkerKind]) -> Vec<(WorkerKind, Option<QueueStats>)> {
    let reads = kinds.iter().map(|&kind| async move {
        let stats = match tokio::time::timeout(SOURCE_TIMEOUT, bus.stats(kind)).await {
            Ok(Ok(stats)) => {
                record_queue(kind, &stats);
                Some(stats)
            }
            Ok(Err(e)) => {
                tracing::warn!(queue = kind.as_str(), error = %error_chain(&e), "failed to read queue stats");
                None
            }
            Err(_) => {
                tracing::warn!(
                    queue = kind.as_str(),
                    timeout_ms = SOURCE_TIMEOUT.as_millis() as u64,
                    "queue stats timed out"
                );
                None
            }
        };
        (kind, stats)
    });
    futures::future::join_all(reads).await
}

/// Sets the queue gauges of `kind`.
pub fn record_queue(kind: WorkerKind, stats: &QueueStats) {
    let queue = kind.as_str();
    ::metrics::gauge!(metrics::QUEUE_DEPTH, "queue" => queue).set(stats.ready as f64);
    ::metrics::gauge!(metrics::PARKED_MESSAGES, "queue" => queue).set(stats.parked as f64);
    ::metrics::gauge!(metrics::QUEUE_CONSUMERS, "queue" => queue).set(stats.consumers as f64);
}

/// A consumer loop running in this process, for its liveness.
#[derive(Debug, Clone)]
pub struct WorkerProbe {
    pub kind: WorkerKind,
    pub heartbeat: Arc<Heartbeat>,
}

/// What a snapshot is taken from.
pub struct Sources<'a> {
    pub backends: &'a Backends,
    /// The consumer loops of this process; the other kinds run elsewhere (or not at all).
    pub in_process: &'a [WorkerProbe],
    /// This process's Prometheus text when L1 extraction runs in this process: the funnel's
    /// counters. `None` when extraction runs elsewhere, whose counters this process cannot see.
    pub metrics_text: Option<String>,
}

/// The ops page's data; its JSON is the `/ops/state` body.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub generated_at: DateTime<Utc>,
    /// `embedded` or `cluster`.
    pub deployment: &'static str,
    pub queues: Vec<QueueRow>,
    pub lag: Vec<LagRow>,
    pub workers: Vec<WorkerRow>,
    pub failures: Failures,
    pub funnel: Funnel,
}

/// One worker kind's queue; the counts are `None` when the bus did not answer.
#[derive(Debug, Clone, Serialize)]
pub struct QueueRow {
    pub queue: &'static str,
    pub available: bool,
    pub ready: Option<u64>,
    pub parked: Option<u64>,
    pub consumers: Option<u64>,
}

/// What one cursor consumer has not processed yet; `None` when the store did not answer.
#[derive(Debug, Clone, Serialize)]
pub struct LagRow {
    pub consumer: &'static str,
    pub available: bool,
    pub turns: Option<i64>,
    pub sessions: Option<i64>,
}

/// One worker kind's liveness, as far as this process can tell.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRow {
    pub worker: &'static str,
    /// `in_process` (this process runs its consumer loop and sees its heartbeat) or `external`
    /// (its own processes, whose heartbeats only their side port shows).
    pub runs: &'static str,
    /// In process: `ok`, `wedged` (no heartbeat for [`WEDGED_AFTER`]) or `starting`.
    /// External: `consuming` (the bus sees consumers), `no_consumer`, or `unknown` (the bus
    /// did not answer).
    pub status: &'static str,
    pub heartbeat_age_seconds: Option<f64>,
    /// Subscriptions on the kind's queue, from every process.
    pub consumers: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failures {
    pub available: bool,
    /// Newest first.
    pub items: Vec<FailureRow>,
}

/// A failed batch, described without its tenant, session, turns or content.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureRow {
    pub at: DateTime<Utc>,
    /// `L1`, `L2`, `L3`.
    pub layer: String,
    /// The engine: `llm` or `rules`.
    pub mode: Option<String>,
    /// `unavailable`, `malformed` or `rejected`.
    pub kind: Option<String>,
    pub model: Option<String>,
    /// How many turns the batch held.
    pub turns: usize,
    pub duration_ms: i64,
    /// The error, cut to a few hundred characters.
    pub error: Option<String>,
}

/// The L1 extraction funnel.
#[derive(Debug, Clone, Serialize)]
pub struct Funnel {
    /// `this_process` (the counters since this process started) or `elsewhere` (extraction
    /// runs in other processes, or not at all: see their `/metrics`).
    pub source: &'static str,
    pub counts: Option<FunnelCounts>,
}

/// Counter totals of the funnel, since the process started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FunnelCounts {
    pub input_turns: u64,
    pub junk_turns: u64,
    pub cards: u64,
    /// By decision: `add`, `update`, `merge`, `discard` (each present, 0 if none).
    pub decisions: BTreeMap<String, u64>,
    /// By result: `ok`, `empty`, `failed`, `raced`.
    pub batches: BTreeMap<String, u64>,
}

/// Takes a snapshot: every source is read at once, each within [`SOURCE_TIMEOUT`].
pub async fn snapshot(sources: Sources<'_>) -> Snapshot {
    let backends = sources.backends;
    let lag_reads = CURSOR_CONSUMERS.map(|consumer| async move {
        let lag = match tokio::time::timeout(SOURCE_TIMEOUT, backends.store.lag(consumer)).await {
            Ok(Ok(lag)) => Some(lag),
            Ok(Err(e)) => {
                tracing::warn!(consumer, error = %error_chain(&e), "failed to read consumer lag");
                None
            }
            Err(_) => {
                tracing::warn!(consumer, "consumer lag timed out");
                None
            }
        };
        LagRow {
            consumer,
            available: lag.is_some(),
            turns: lag.map(|l| l.turns),
            sessions: lag.map(|l| l.sessions),
        }
    });
    let failures = async {
        match tokio::time::timeout(SOURCE_TIMEOUT, backends.memories.recent_failures(RECENT_FAILURES)).await {
            Ok(Ok(records)) => Failures {
                available: true,
                items: records.iter().map(failure_row).collect(),
            },
            Ok(Err(e)) => {
                tracing::warn!(error = %error_chain(&e), "failed to read recent failures");
                Failures {
                    available: false,
                    items: Vec::new(),
                }
            }
            Err(_) => {
                tracing::warn!("recent failures timed out");
                Failures {
                    available: false,
                    items: Vec::new(),
                }
            }
        }
    };
    let (queues, lag, failures) = tokio::join!(
        sample_queues(&*backends.bus, WorkerKind::ALL),
        futures::future::join_all(lag_reads),
        failures
    );

    let workers = queues
        .iter()
        .map(|&(kind, stats)| worker_row(kind, stats, sources.in_process))
        .collect();
    let queues = queues
        .into_iter()
        .map(|(kind, stats)| QueueRow {
            queue: kind.as_str(),
            available: stats.is_some(),
            ready: stats.map(|s| s.ready),
            parked: stats.map(|s| s.parked),
            consumers: stats.map(|s| s.consumers),
        })
        .collect();
    let funnel = match sources.metrics_text {
        Some(text) => Funnel {
            source: "this_process",
            counts: Some(funnel_counts(&text)),
        },
        None => Funnel {
            source: "elsewhere",
            counts: None,
        },
    };
    Snapshot {
        generated_at: Utc::now(),
        deployment: if backends.embedded { "embedded" } else { "cluster" },
        queues,
        lag,
        workers,
        failures,
        funnel,
    }
}

fn worker_row(kind: WorkerKind, stats: Option<QueueStats>, in_process: &[WorkerProbe]) -> WorkerRow {
    let consumers = stats.map(|s| s.consumers);
    match in_process.iter().find(|probe| probe.kind == kind) {
        Some(probe) => {
            let age = probe.heartbeat.age();
            WorkerRow {
                worker: kind.as_str(),
                runs: "in_process",
                status: match age {
                    None => "starting",
                    Some(age) if age < WEDGED_AFTER => "ok",
                    Some(_) => "wedged",
                },
                heartbeat_age_seconds: age.map(|a| a.as_secs_f64()),
                consumers,
            }
        }
        None => WorkerRow {
            worker: kind.as_str(),
            runs: "external",
            status: match consumers {
                None => "unknown",
                Some(0) => "no_consumer",
                Some(_) => "consuming",
            },
            heartbeat_age_seconds: None,
            consumers,
        },
    }
}

/// Keeps what an operator needs from a failed batch's provenance and drops whatever could
/// identify a tenant or carry their content (ids, refs, the rest of `detail`).
fn failure_row(record: &ProvenanceRecord) -> FailureRow {
    let detail = |key: &str| record.detail.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    FailureRow {
        at: record.started_at,
        layer: record.layer.clone(),
        mode: detail("mode"),
        kind: detail("kind"),
        model: record.model.clone(),
        turns: record.input_message_ids.len(),
        duration_ms: record.duration_ms,
        error: detail("error").map(|e| shorten(&e, MAX_ERROR_CHARS)),
    }
}

fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The funnel's counters from Prometheus text (the exporter offers no other way to read them).
fn funnel_counts(text: &str) -> FunnelCounts {
    let samples = parse_samples(text);
    let total = |name: &str| -> u64 {
        let sum: f64 = samples.iter().filter(|s| s.name == name).map(|s| s.value).sum();
        sum.round() as u64
    };
    let by = |name: &str, label: &str, keys: &[&str]| -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = keys.iter().map(|k| ((*k).to_owned(), 0)).collect();
        for sample in samples.iter().filter(|s| s.name == name) {
            if let Some((_, value)) = sample.labels.iter().find(|(k, _)| k == label) {
                *out.entry(value.clone()).or_default() += sample.value.round() as u64;
            }
        }
        out
    };
    FunnelCounts {
        input_turns: total(metrics::EXTRACT_INPUT_TURNS),
        junk_turns: total(metrics::EXTRACT_JUNK),
        cards: total(metrics::EXTRACT_CARDS),
        decisions: by(
            metrics::EXTRACT_DECISIONS,
            "decision",
            &["add", "update", "merge", "discard"],
        ),
        batches: by(metrics::EXTRACT_BATCHES, "result", &["ok", "empty", "failed", "raced"]),
    }
}

#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parses the samples of Prometheus text format 0.0.4; comments and lines that do not parse
/// are skipped (a funnel short of one series beats no page).
fn parse_samples(text: &str) -> Vec<Sample> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(parse_sample)
        .collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find(['{', ' ']) {
        Some(i) if line.as_bytes()[i] == b'{' => {
            let (labels, consumed) = parse_labels(&line[i + 1..])?;
            (&line[..i], labels, &line[i + 1 + consumed..])
        }
        Some(i) => (&line[..i], Vec::new(), &line[i..]),
        None => return None,
    };
    // The value, then an optional timestamp.
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `k="v",...}` (after the opening brace); returns the pairs and the bytes consumed,
/// closing brace included.
fn parse_labels(text: &str) -> Option<(Vec<(String, String)>, usize)> {
    let mut labels = Vec::new();
    let mut chars = text.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| *c == ',' || c.is_whitespace()).is_some() {}
        let (start, c) = chars.next()?;
        if c == '}' {
            return Some((labels, start + 1));
        }
        let mut key = String::from(c);
        loop {
            match chars.next()? {
                (_, '=') => break,
                (_, c) => key.push(c),
            }
        }
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                (_, '"') => break,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        }
        labels.push((key.trim().to_owned(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_samples_with_labels_and_escapes() {
        let text = "# HELP x help\n# TYPE x counter\nx 3\n\
                    y{a=\"1\",b=\"q\\\"uo,te}\"} 2.5\n\
                    z{} 7 1700000000\nbroken{a=\"1\" 4\n";
        let samples = parse_samples(text);
        assert_eq!(
            samples,
            vec![
                Sample {
                    name: "x".into(),
                    labels: vec![],
                    value: 3.0
                },
                Sample {
                    name: "y".into(),
                    labels: vec![("a".into(), "1".into()), ("b".into(), "q\"uo,te}".into())],
                    value: 2.5
                },
                Sample {
                    name: "z".into(),
                    labels: vec![],
                    value: 7.0
                },
            ]
        );
    }

    #[test]
    fn funnel_sums_series_and_lists_every_decision() {
        let text = format!(
            "{input} 10\n{junk}{{reason=\"ack\"}} 2\n{junk}{{reason=\"emoji\"}} 1\n\
             {cards}{{mode=\"rules\"}} 4\n{decisions}{{decision=\"add\"}} 3\n\
             {decisions}{{decision=\"discard\"}} 1\n{batches}{{result=\"failed\"}} 2\n",
            input = metrics::EXTRACT_INPUT_TURNS,
            junk = metrics::EXTRACT_JUNK,
            cards = metrics::EXTRACT_CARDS,
            decisions = metrics::EXTRACT_DECISIONS,
            batches = metrics::EXTRACT_BATCHES,
        );
        let counts = funnel_counts(&text);
        assert_eq!((counts.input_turns, counts.junk_turns, counts.cards), (10, 3, 4));
        let decisions: Vec<_> = counts.decisions.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(decisions, [("add", 3), ("discard", 1), ("merge", 0), ("update", 0)]);
        assert_eq!(counts.batches["failed"], 2);
        assert_eq!(counts.batches["ok"], 0);
    }

    #[test]
    fn failure_rows_carry_no_tenant_session_or_turn_ids() {
        let turn = uuid::Uuid::new_v4();
        let record = ProvenanceRecord {
            id: uuid::Uuid::new_v4(),
            memory_id: None,
            tenant: crate::domain::Tenant {
                team: "team-secret".into(),
                agent: "agent-secret".into(),
                user: "user-secret".into(),
            },
            session_id: "session-secret".into(),
            layer: "L1".into(),
            event: "failed".into(),
            template: None,
            model: None,
            input_message_ids: vec![turn, uuid::Uuid::new_v4()],
            sibling_ids: Vec::new(),
            detail: serde_json::json!({ "mode": "llm", "kind": "malformed", "error": "é".repeat(400), "extra": "x" }),
            started_at: Utc::now(),
            duration_ms: 12,
        };
        let row = failure_row(&record);
        assert_eq!(
            (row.mode.as_deref(), row.kind.as_deref(), row.turns),
            (Some("llm"), Some("malformed"), 2)
        );
        assert_eq!(
            row.error.as_deref().map(|e| e.chars().count()),
            Some(MAX_ERROR_CHARS + 1)
        );
        let json = serde_json::to_string(&row).unwrap();
        for secret in ["secret", &turn.to_string(), &record.id.to_string(), "extra"] {
            assert!(!json.contains(secret), "{secret} leaked: {json}");
        }
    }

    #[test]
    fn queue_gauges_are_labelled_by_kind() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let stats = QueueStats {
            ready: 7,
            parked: 2,
            consumers: 1,
        };
        ::metrics::with_local_recorder(&recorder, || record_queue(WorkerKind::Extract, &stats));
        let text = handle.render();
        for line in [
            "sediment_queue_depth{queue=\"extract\"} 7",
            "sediment_parked_messages{queue=\"extract\"} 2",
            "sediment_queue_consumers{queue=\"extract\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn in_process_workers_report_heartbeats_and_others_their_consumers() {
        let heartbeat = Arc::new(Heartbeat::default());
        let probes = [WorkerProbe {
            kind: WorkerKind::Index,
            heartbeat: heartbeat.clone(),
        }];
        let stats = |consumers| {
            Some(QueueStats {
                consumers,
                ..QueueStats::default()
            })
        };
        assert_eq!(worker_row(WorkerKind::Index, stats(1), &probes).status, "starting");
        heartbeat.beat();
        let row = worker_row(WorkerKind::Index, stats(1), &probes);
        assert_eq!((row.runs, row.status), ("in_process", "ok"));
        assert_eq!(worker_row(WorkerKind::Compact, stats(2), &probes).status, "consuming");
        assert_eq!(worker_row(WorkerKind::Compact, stats(0), &probes).status, "no_consumer");
        assert_eq!(worker_row(WorkerKind::Compact, None, &probes).status, "unknown");
    }
}
