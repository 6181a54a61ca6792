//! Ingest and conversation-search benchmark against real backends, in either deployment.
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench -- embedded
//! cargo run --release -p integration-tests --bin bench -- cluster   # needs Postgres + RabbitMQ
//! ```
//!
//! Ingest: for 1, 16 and 64 concurrent clients, each sends append requests of `BATCH` turns to
//! its own session for 10 s (`BENCH_SECONDS=60` for a minute, which holds the index optimizer
//! runs of steady ingest); reports request latency p50/p99 and turns/s, how busy the cores were
//! meanwhile and which processes kept them busy (`integration_tests::cpu`), then the time until
//! the index caught up (index lag). Search: loads `SEARCH_TURNS` turns into one tenant
//! and times `SEARCH_QUERIES` queries, without a date and with one. With `BENCH_NO_WORKER=1`
//! no index worker runs: ingest alone, as when workers run on other machines (run `ingest`
//! only then). `mixed` times searches of one more client during the paced ingest at 64
//! clients, one query after another (`BENCH_SEARCH_RATE=400` paces it instead). `SEDIMENT_*`
//! settings in the environment apply to the app under test (`SEDIMENT_INDEX_NICE=0` runs index
//! writes at the requests' priority, say), except where its state lives. L1 extraction is off
//! unless `BENCH_WITH_EXTRACT=1`: these numbers are for the L0 path. `BENCH_INDEX_PARENT=/dev/shm`
//! keeps the embedded index on another file system than the store, to tell their disk writes
//! apart.
//!
//! `load` states latency at a load (issue 37, target 4): first the capacity, the turns/s that a
//! closed loop of 64 clients gets appended and indexed (its turns over the time until the last
//! one is searchable); then, at 25, 50, 75 and 90 % of it, an open loop: appends of
//! `BATCH` turns with Poisson arrivals at that rate, spread over 64 sessions of one tenant, and
//! conversation searches of that tenant with Poisson arrivals at `LOAD_SEARCH_RATE`. Every
//! request is its own task, sent at its scheduled time whatever the ones before it do, and
//! timed from that scheduled time, so a server that falls behind shows it as latency instead
//! of slowing the clients down. Index lag is the commit-to-indexed histogram of the round.

use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TenantHeaders as _, TestApp};
use integration_tests::cpu;
use integration_tests::stats::{percentile, poisson_arrivals_seeded};
use integration_tests::synthetic::{sentence, Rng};
use serde_json::{json, Value};
use shared::bus::TURN_APPENDED;
use shared::metrics::{
    EVENTS_PUBLISHED, HTTP_LATENCY, INDEX_DELAY, INDEX_FLUSH_SECONDS, INDEX_OPTIMIZER_SECONDS, INDEX_OPTIMIZING,
    INDEX_ROUND_SESSIONS, INDEX_SEGMENTS, INDEX_SYNC_SESSIONS, INDEX_UPDATE_SECONDS, INDEX_WRITE_POINTS,
    STORE_GROUP_COMMIT_APPENDS,
};
use shared::store::INDEX_CONSUMER;

/// How long each ingest round runs, unless `BENCH_SECONDS` says otherwise (a longer round
/// includes the index optimizer runs that steady ingest sets off).
fn seconds() -> u64 {
    std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s > 0)
        .unwrap_or(10)
}
const BATCH: usize = 10;
const SEARCH_TURNS: usize = 100_000;
const SEARCH_QUERIES: usize = 2_000;

/// `p50=…ms p99=…ms` of latencies sorted ascending.
fn p50_p99(sorted: &[Duration]) -> String {
    format!(
        "p50={:.2}ms p99={:.2}ms",
        percentile(sorted, 0.50).as_secs_f64() * 1e3,
        percentile(sorted, 0.99).as_secs_f64() * 1e3,
    )
}

/// Query number `q` of a run: `words` words drawn from the synthetic vocabulary, the same for
/// the same `q` in every run.
fn query_words(q: usize, words: usize) -> String {
    let mut rng = Rng(q as u64 * 7_919 + 17);
    (0..words).map(|_| rng.word()).collect::<Vec<_>>().join(" ")
}

/// One conversation search of `query` (limit 10) as `t`, timed over the HTTP round trip and
/// reading the body.
async fn timed_search(app: &TestApp, t: &shared::domain::Tenant, query: &str) -> Duration {
    let start = Instant::now();
    let r = app.search(t, json!({"query": query, "limit": 10})).await;
    assert_eq!(r.status(), 200);
    let _: Value = r.json().await.expect("json");
    start.elapsed()
}

/// Closed loop (`rate` = None: each client sends its next request as soon as the last one
/// returned, so latency = clients / throughput) or open loop (`rate` = total turns/s, spread
/// evenly over the clients: latency is the service time at that load).
async fn ingest(app: &TestApp, clients: usize, rate: Option<f64>) {
    ingest_with(app, clients, rate, false).await;
}

/// [`ingest`], and with `searching` one more client that searches the tenant being written, one
/// query after another, for as long: the latency of recall under ingest load.
/// Returns the turns/s that became searchable: the turns over the round plus its catch-up (the
/// appended rate when no index worker runs here).
async fn ingest_with(app: &TestApp, clients: usize, rate: Option<f64>, searching: bool) -> f64 {
    // A round starts on a settled index: otherwise the paced rounds would share the cores with
    // the optimizer runs that the closed-loop rounds before them set off.
    let settled = optimizer_idle(app).await;
    if settled > Duration::from_millis(100) {
        println!(
            "{:?} index optimizer idle after {:.1}s",
            app.mode,
            settled.as_secs_f64()
        );
    }
    let t = tenant();
    let delays_before = buckets(app, INDEX_DELAY).await;
    let flushes_before = buckets(app, INDEX_FLUSH_SECONDS).await;
    let appends_before = buckets_where(app, HTTP_LATENCY, &APPEND_ROUTE).await;
    let writes_before = buckets(app, INDEX_WRITE_POINTS).await;
    let rounds_before = buckets(app, INDEX_ROUND_SESSIONS).await;
    let syncs_before = buckets(app, INDEX_SYNC_SESSIONS).await;
    let updates_before = buckets(app, INDEX_UPDATE_SECONDS).await;
    let optimizer_before = buckets(app, INDEX_OPTIMIZER_SECONDS).await;
    // The optimizer's run time so far, the `_sum` series of its histogram.
    let optimizer_seconds_sum = format!("{INDEX_OPTIMIZER_SECONDS}_sum");
    let optimizer_seconds_before = counter(app, &optimizer_seconds_sum, &[]).await;
    let groups_before = buckets(app, STORE_GROUP_COMMIT_APPENDS).await;
    let published_before = counter(app, EVENTS_PUBLISHED, &PUBLISHED_OK).await;
    let cpu_before = cpu::Sample::now();
    let seconds = seconds();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (client, base, t) = (app.client.clone(), app.base.clone(), t.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0usize;
            let interval = rate.map(|r| Duration::from_secs_f64(BATCH as f64 * clients as f64 / r));
            let mut next_send = Instant::now()
                + interval
                    .map(|i| i.mul_f64(c as f64 / clients as f64))
                    .unwrap_or_default();
            while Instant::now() < deadline {
                if let Some(interval) = interval {
                    tokio::time::sleep_until(next_send.into()).await;
                    next_send += interval;
                }
                let turns: Vec<Value> = (0..BATCH)
                    .map(|i| json!({"role": "user", "content": sentence(c * 1_000_000 + n + i)}))
                    .collect();
                n += BATCH;
                let start = Instant::now();
                let r = client
                    .post(format!("{base}/v1/sessions/{}-{c}/messages", t.team))
                    .tenant_headers(&t)
                    .json(&json!({ "messages": turns }))
                    .send()
                    .await
                    .expect("send");
                assert_eq!(r.status(), 201);
                latencies.push(start.elapsed());
            }
            latencies
        });
    }
    // `BENCH_SEARCH_RATE=400` paces the searching client at 400 queries/s; by default it sends
    // each query when the last returned, so faster searches also mean more search load.
    let search_interval = std::env::var("BENCH_SEARCH_RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(1.0 / r));
    let searches = async {
        let mut latencies = Vec::new();
        let mut q = 0;
        let mut next = Instant::now();
        while searching && Instant::now() < deadline {
            if let Some(interval) = search_interval {
                tokio::time::sleep_until(next.into()).await;
                next += interval;
            }
            latencies.push(timed_search(app, &t, &query_words(q, 2)).await);
            q += 1;
        }
        latencies
    };
    let clients_done = async {
        let mut latencies = Vec::new();
        while let Some(l) = tasks.join_next().await {
            latencies.extend(l.expect("client"));
        }
        (latencies, Instant::now())
    };
    let (mut searches, (mut latencies, ingest_end)) = tokio::join!(searches, clients_done);
    let cpu = cpu_before
        .zip(cpu::Sample::now())
        .map(|(before, after)| before.until(&after));
    if searching {
        searches.sort_unstable();
        println!(
            "{:?} search while ingesting: queries={} {}",
            app.mode,
            searches.len(),
            p50_p99(&searches)
        );
    }
    latencies.sort_unstable();
    let turns = latencies.len() * BATCH;
    // The API's own view (request in to response out, from its histogram: coarse buckets),
    // which leaves out the client and the wait for a runtime thread on either side.
    let server = since(buckets_where(app, HTTP_LATENCY, &APPEND_ROUTE).await, &appends_before);
    // Only the SQLite store commits appends in groups.
    let groups = since(buckets(app, STORE_GROUP_COMMIT_APPENDS).await, &groups_before);
    // Group sizes are whole numbers, so the share in the first bucket (le=1) is that of the
    // appends committed alone; interpolating a p50 inside it would report 0.5.
    let grouped = match (groups.first(), groups.last()) {
        (Some((_, alone)), Some((_, n))) if *n > 0.0 => format!(
            "; commits of one append {:.0}%, appends per commit p99={:.0}",
            alone / n * 100.0,
            histogram_quantile(&groups, 0.99).ceil()
        ),
        _ => String::new(),
    };
    // One wake-up event per publish round, however many requests the round covered.
    let published = counter(app, EVENTS_PUBLISHED, &PUBLISHED_OK).await - published_before;
    let ingested = format!(
        "{:?} ingest clients={clients:>2} batch={BATCH} {}: requests={} {} turns/s={:.0} (server p50={:.2}ms p99={:.2}ms{grouped}; events/s={:.0}; cpu {})",
        app.mode,
        rate.map(|r| format!("paced at {r:.0} turns/s"))
            .unwrap_or_else(|| "closed loop".into()),
        latencies.len(),
        p50_p99(&latencies),
        turns as f64 / seconds as f64,
        histogram_quantile(&server, 0.50) * 1e3,
        histogram_quantile(&server, 0.99) * 1e3,
        published / seconds as f64,
        cpu.map_or_else(|| "unknown".to_string(), |u| u.to_string()),
    );
    if !app.backends.api_runs_index_worker {
        println!("{ingested} | no index worker");
        return turns as f64 / seconds as f64;
    }
    let lag_at_end = app.backends.store.lag(INDEX_CONSUMER).await.expect("lag").turns;
    app.wait_indexed(Duration::from_secs(600)).await;
    let catch_up = ingest_end.elapsed();
    let searchable = turns as f64 / started.elapsed().as_secs_f64();
    let delays = since(buckets(app, INDEX_DELAY).await, &delays_before);
    let flushes = since(buckets(app, INDEX_FLUSH_SECONDS).await, &flushes_before);
    let writes = since(buckets(app, INDEX_WRITE_POINTS).await, &writes_before);
    let rounds = since(buckets(app, INDEX_ROUND_SESSIONS).await, &rounds_before);
    let syncs = since(buckets(app, INDEX_SYNC_SESSIONS).await, &syncs_before);
    let updates = since(buckets(app, INDEX_UPDATE_SECONDS).await, &updates_before);
    let optimizer = since(buckets(app, INDEX_OPTIMIZER_SECONDS).await, &optimizer_before);
    let optimizer_seconds = counter(app, &optimizer_seconds_sum, &[]).await - optimizer_seconds_before;
    let segments = counter(app, INDEX_SEGMENTS, &[]).await;
    let running = counter(app, INDEX_OPTIMIZING, &[]).await > 0.0;
    println!(
        "{ingested} | index lag at end={lag_at_end} turns, caught up {:.2}s later; commit-to-indexed p50={:.3}s p99={:.3}s; edge update p50={:.1}ms p99={:.1}ms, flush p50={:.1}ms p99={:.1}ms n={}, points per write p50={:.0}; sessions per index batch p50={:.0} n={}; syncs={}; optimizer runs finished={} in {optimizer_seconds:.1}s, running at end={running}, segments after the last run={segments}",
        catch_up.as_secs_f64(),
        histogram_quantile(&delays, 0.50),
        histogram_quantile(&delays, 0.99),
        histogram_quantile(&updates, 0.50) * 1e3,
        histogram_quantile(&updates, 0.99) * 1e3,
        histogram_quantile(&flushes, 0.50) * 1e3,
        histogram_quantile(&flushes, 0.99) * 1e3,
        flushes.last().map_or(0.0, |(_, n)| *n),
        histogram_quantile(&writes, 0.50),
        histogram_quantile(&rounds, 0.50),
        rounds.last().map_or(0.0, |(_, n)| *n),
        syncs.last().map_or(0.0, |(_, n)| *n),
        optimizer.last().map_or(0.0, |(_, n)| *n),
    );
    searchable
}

/// Searches a second in every `load` round, whatever its append rate: an agent's recalls
/// against the conversations being written.
const LOAD_SEARCH_RATE: f64 = 20.0;
/// Sessions the appends of a `load` round are spread over.
const LOAD_SESSIONS: usize = 64;

/// The capacity, then an open loop at 25, 50, 75 and 90 % of it (see the module docs).
async fn load(app: &TestApp) {
    // What the whole service sustains, the index included: a closed loop alone outruns the
    // index by far (49k turns/s appended against 17k indexed, embedded), and an open loop at a
    // share of that rate would only measure a growing backlog.
    let capacity = ingest_with(app, 64, None, false).await;
    println!(
        "{:?} capacity: {capacity:.0} turns/s appended and indexed (closed loop, 64 clients, requests of {BATCH} turns, until the last turn was indexed)",
        app.mode
    );
    for percent in [25.0, 50.0, 75.0, 90.0] {
        open_loop(app, capacity * percent / 100.0, percent).await;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Append,
    Search,
}

/// One open-loop round at `rate` turns/s of appends plus the searches.
async fn open_loop(app: &TestApp, rate: f64, percent: f64) {
    optimizer_idle(app).await;
    let t = tenant();
    let delays_before = buckets(app, INDEX_DELAY).await;
    let cpu_before = cpu::Sample::now();
    let seconds = seconds() as f64;
    let appends = poisson_arrivals_seeded(rate / BATCH as f64, seconds, 1);
    let searches = poisson_arrivals_seeded(LOAD_SEARCH_RATE, seconds, 2);
    let start = Instant::now() + Duration::from_millis(100);
    let mut tasks = tokio::task::JoinSet::new();
    for (n, offset) in appends.iter().enumerate() {
        let (client, base, t) = (app.client.clone(), app.base.clone(), t.clone());
        let scheduled = start + *offset;
        tasks.spawn(async move {
            tokio::time::sleep_until(scheduled.into()).await;
            let turns: Vec<Value> = (0..BATCH)
                .map(|i| json!({"role": "user", "content": sentence(n * BATCH + i)}))
                .collect();
            let r = client
                .post(format!("{base}/v1/sessions/{}-{}/messages", t.team, n % LOAD_SESSIONS))
                .tenant_headers(&t)
                .json(&json!({ "messages": turns }))
                .send()
                .await;
            let ok = r.is_ok_and(|r| r.status() == 201);
            (Call::Append, ok, scheduled.elapsed())
        });
    }
    for (q, offset) in searches.iter().enumerate() {
        let (client, base, t) = (app.client.clone(), app.base.clone(), t.clone());
        let scheduled = start + *offset;
        tasks.spawn(async move {
            tokio::time::sleep_until(scheduled.into()).await;
            let r = client
                .post(format!("{base}/v1/conversations/search"))
                .tenant_headers(&t)
                .json(&json!({"query": query_words(q, 2), "limit": 10}))
                .send()
                .await;
            let ok = match r {
                Ok(r) if r.status() == 200 => r.json::<Value>().await.is_ok(),
                _ => false,
            };
            (Call::Search, ok, scheduled.elapsed())
        });
    }
    // A request that fails (an error status, or no connection once a server far behind has
    // used up the file descriptors) is counted, not timed.
    let (mut append_latencies, mut search_latencies, mut failed) = (Vec::new(), Vec::new(), 0);
    while let Some(done) = tasks.join_next().await {
        match done.expect("request") {
            (_, false, _) => failed += 1,
            (Call::Append, true, latency) => append_latencies.push(latency),
            (Call::Search, true, latency) => search_latencies.push(latency),
        }
    }
    let cpu = cpu_before
        .zip(cpu::Sample::now())
        .map(|(before, after)| before.until(&after));
    app.wait_indexed(Duration::from_secs(600)).await;
    let delays = since(buckets(app, INDEX_DELAY).await, &delays_before);
    append_latencies.sort_unstable();
    search_latencies.sort_unstable();
    println!(
        "{:?} open loop at {percent:.0}% of capacity: appends {rate:.0} turns/s ({} requests) {}; searches {LOAD_SEARCH_RATE:.0}/s ({}) {}; failed {failed}; commit-to-indexed p50={:.3}s p99={:.3}s; cpu {}",
        app.mode,
        append_latencies.len(),
        p50_p99(&append_latencies),
        search_latencies.len(),
        p50_p99(&search_latencies),
        histogram_quantile(&delays, 0.50),
        histogram_quantile(&delays, 0.99),
        cpu.map_or_else(|| "unknown".to_string(), |u| u.to_string()),
    );
}

const APPEND_ROUTE: [(&str, &str); 2] = [("method", "POST"), ("route", "/v1/sessions/{session_id}/messages")];
const PUBLISHED_OK: [(&str, &str); 2] = [("routing_key", TURN_APPENDED), ("result", "ok")];

/// The sum of counter `name` over its series with these label values, from the API's
/// `/metrics`; 0 before any series exists.
async fn counter(app: &TestApp, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matches = with_labels(labels);
    app.metrics_text()
        .await
        .lines()
        .filter_map(|line| line.strip_prefix(name))
        .filter_map(|rest| {
            let (series, value) = rest.rsplit_once(' ')?;
            matches(series).then_some(value)
        })
        .filter_map(|value| value.trim().parse::<f64>().ok())
        .sum()
}

/// Tells whether a series' label text carries each of these label values.
fn with_labels(labels: &[(&str, &str)]) -> impl Fn(&str) -> bool {
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    move |series| wanted.iter().all(|w| series.contains(w.as_str()))
}

/// `after - before`, bucket by bucket.
fn since(after: Vec<(f64, f64)>, before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    after
        .into_iter()
        .map(|(le, count)| {
            let earlier = before.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, c)| *c);
            (le, count - earlier)
        })
        .collect()
}

/// The cumulative buckets `(le, count)` of histogram `name` from the API's `/metrics`, `+Inf`
/// last.
async fn buckets(app: &TestApp, name: &str) -> Vec<(f64, f64)> {
    buckets_where(app, name, &[]).await
}

/// [`buckets`] of the series of `name` with these label values.
async fn buckets_where(app: &TestApp, name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let matches = with_labels(labels);
    let body = app.metrics_text().await;
    let mut buckets: Vec<(f64, f64)> = body
        .lines()
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .filter_map(|rest| {
            let (series, count) = rest.rsplit_once("} ")?;
            if !matches(series) {
                return None;
            }
            let le = series.split("le=\"").nth(1)?.strip_suffix('"')?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.is_empty() {
        // Nothing indexed yet in this process: the series does not exist.
        buckets.push((f64::INFINITY, 0.0));
    }
    buckets
}

/// Prometheus' `histogram_quantile`: linear interpolation inside the bucket holding rank `q`.
fn histogram_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    if total <= 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return lower.0;
            }
            let within = (rank - lower.1) / (count - lower.1).max(f64::MIN_POSITIVE);
            return lower.0 + (le - lower.0) * within;
        }
        lower = (le, count);
    }
    lower.0
}

async fn search(app: &TestApp) {
    let t = tenant();
    let load = Instant::now();
    for chunk in 0..SEARCH_TURNS / 1_000 {
        let turns: Vec<Value> = (0..1_000)
            .map(|i| json!({"role": "user", "content": sentence(chunk * 1_000 + i)}))
            .collect();
        app.append_ok(&t, &format!("search-{}", chunk % 50), Value::Array(turns))
            .await;
    }
    app.wait_indexed(Duration::from_secs(1_200)).await;
    println!(
        "{:?} loaded {SEARCH_TURNS} turns in {:.1}s",
        app.mode,
        load.elapsed().as_secs_f64()
    );
    // A date in the query adds a copy of the keyword channel narrowed to the turns tagged with
    // it: this month's tag is on every turn loaded here (the narrowed copy is as large as the
    // whole), another month's on none.
    let today = chrono::Utc::now().date_naive();
    let this_month = today.format("%B").to_string();
    let other_month = (today - chrono::Months::new(6)).format("%B").to_string();
    for (label, suffix) in [
        ("no date", String::new()),
        ("this month, every turn tagged", format!(" in {this_month}")),
        ("another month, no turn tagged", format!(" in {other_month}")),
    ] {
        let mut latencies = Vec::with_capacity(SEARCH_QUERIES);
        for q in 0..SEARCH_QUERIES {
            let query = format!("{}{suffix}", query_words(q, 2));
            latencies.push(timed_search(app, &t, &query).await);
        }
        latencies.sort_unstable();
        println!(
            "{:?} search over {SEARCH_TURNS} turns (HTTP round trip, limit 10), {label}: {}",
            app.mode,
            p50_p99(&latencies)
        );
    }
}

/// Waits until no optimizer run is in progress; returns how long that took.
async fn optimizer_idle(app: &TestApp) -> Duration {
    let waited = Instant::now();
    while optimizer_running(app).await {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    waited.elapsed()
}

/// Whether the API's `/metrics` says a search-index optimizer run is in progress. Recall is
/// timed in the steady state, as a serving index spends most of its time; `bench_dense` times
/// queries during optimizer runs.
async fn optimizer_running(app: &TestApp) -> bool {
    let running = format!("{INDEX_OPTIMIZING} 1");
    app.metrics_text().await.lines().any(|line| line.trim() == running)
}

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

#[tokio::main]
async fn main() {
    let mode = match std::env::args().nth(1).as_deref() {
        Some("cluster") => Mode::Cluster,
        Some("embedded") | None => Mode::Embedded,
        Some(other) => panic!("unknown mode {other:?}; use embedded or cluster"),
    };
    let what = std::env::args().nth(2).unwrap_or_else(|| "all".into());
    // `BENCH_NO_WORKER=1` measures ingest alone, as when workers run on other machines.
    let no_worker = std::env::var("BENCH_NO_WORKER").is_ok_and(|v| v == "1");
    let mut env = vec![("WORKER_SWEEP_INTERVAL_MS", "1000".to_owned())];
    // The L0 path alone: L1 extraction (and the layers above it) would share the two cores.
    // `BENCH_WITH_EXTRACT=1` keeps it on.
    if !std::env::var("BENCH_WITH_EXTRACT").is_ok_and(|v| v == "1") {
        env.push(("EXTRACT", "false".to_owned()));
    }
    // Settings from the environment, as the binaries take them (`SEDIMENT_INDEX_NICE=0`,
    // `SEDIMENT_WORKER_PREFETCH=128`, ...), override the bench's own; where state lives (its
    // own database, queues, directories and bucket) stays the bench's.
    const STATE: [&str; 7] = [
        "DATABASE_URL",
        "AMQP_URL",
        "AMQP_PREFIX",
        "DATA_DIR",
        "INDEX_DIR",
        "FILES_DIR",
        "QDRANT_URL",
    ];
    for (key, value) in std::env::vars() {
        if let Some(key) = key.strip_prefix("SEDIMENT_") {
            if !STATE.contains(&key) && !key.starts_with("S3_") {
                env.push((Box::leak(key.to_owned().into_boxed_str()), value));
            }
        }
    }
    let options = Options {
        env,
        no_worker,
        index_parent: std::env::var_os("BENCH_INDEX_PARENT").map(Into::into),
        ..Options::default()
    };
    // Whether the index threads' nice value reaches Postgres' backends too (see "Sharing cores
    // with Postgres" in helm/README.md and tests/BENCHMARKS.md): it changes the cluster's append
    // p99 several-fold here.
    if let Ok(autogroup) = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled") {
        println!("kernel.sched_autogroup_enabled={}", autogroup.trim());
    }
    let mut app = TestApp::with(mode, options).await;
    if what == "all" || what == "ingest" {
        for clients in [1, 16, 64] {
            ingest(&app, clients, None).await;
        }
        for clients in [16, 64] {
            ingest(&app, clients, Some(5_000.0)).await;
        }
    }
    if what == "mixed" {
        ingest_with(&app, 64, Some(5_000.0), true).await;
    }
    if what == "load" {
        load(&app).await;
    }
    if what == "all" || what == "search" {
        search(&app).await;
    }
    app.stop().await;
}
