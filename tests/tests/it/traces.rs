//! Traces: one append, with the caller's `traceparent`, is one trace from the API request
//! through the bus to every worker delivery, on both buses; retries and delays keep the
//! context; with no endpoint nothing is exported and nothing breaks.
//!
//! The server runs as a child process: the global `tracing` subscriber (and so the exporter)
//! is per process, and this test binary's is shared by every test in it.

use std::process::Stdio;
use std::time::{Duration, Instant};

use integration_tests::amqp::TestBroker;
use integration_tests::app::{tenant, TenantHeaders as _};
use integration_tests::otel_collector::{
    describe, FakeCollector, RecordedSpan, KIND_CONSUMER, KIND_PRODUCER, KIND_SERVER,
};
use integration_tests::pg::TestDb;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use serde_json::json;
use shared::bus::testsuite::{expect_delivery, Knobs};
use shared::bus::{Event, EventBus, LocalBus, Outcome, WorkerKind};
use tokio::process::{Child, Command};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

const BIN: &str = env!("CARGO_BIN_EXE_sediment-test-server");
/// The caller's trace: what an agent that traces its own work sends.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
/// Generous: a loaded 2-core machine starts the server and runs the workers slowly.
const ARRIVAL: Duration = Duration::from_secs(60);

struct Proc {
    child: Child,
    base: String,
}

async fn spawn(env: &[(String, String)]) -> Proc {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_LISTEN", format!("127.0.0.1:{port}"))
        .env("SEDIMENT_LOG", "warn")
        .env("SEDIMENT_EMBEDDING", "none")
        // Export every 100 ms rather than every 5 s, so the test need not wait.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn the server binary");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let start = Instant::now();
    loop {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(60), "server did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Proc { child, base }
}

/// Appends one turn to `session`, as a caller in trace [`CALLER_TRACE`].
async fn append_traced(base: &str, session: &str) {
    let t = tenant();
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/sessions/{session}/messages"))
        .tenant_headers(&t)
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .header("tracestate", "agent=1")
        .json(&json!({ "messages": [{"role": "user", "content": "I prefer tea over coffee"}] }))
        .send()
        .await
        .expect("append");
    assert_eq!(r.status(), 201);
}

async fn sigterm_and_wait(mut proc: Proc) {
    let pid = proc.child.id().expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(15), proc.child.wait())
        .await
        .expect("exit within 15 s of SIGTERM")
        .unwrap();
    assert!(exit.success(), "exit status {exit:?} after SIGTERM");
}

fn consumer<'a>(spans: &'a [RecordedSpan], worker: &str) -> Option<&'a RecordedSpan> {
    spans
        .iter()
        .find(|s| s.trace_id == CALLER_TRACE && s.kind == KIND_CONSUMER && s.name == format!("process {worker}"))
}

/// Whether `span`'s parent chain, within the recorded spans, reaches a span with `ancestor`'s
/// id, passing through a producer span on the way.
fn descends_via_publish(spans: &[RecordedSpan], span: &RecordedSpan, ancestor: &RecordedSpan) -> bool {
    let mut seen_publish = false;
    let mut current = span;
    for _ in 0..spans.len() {
        if current.parent_span_id == ancestor.span_id {
            return seen_publish;
        }
        let Some(parent) = spans.iter().find(|s| s.span_id == current.parent_span_id) else {
            return false;
        };
        seen_publish |= parent.kind == KIND_PRODUCER;
        current = parent;
    }
    false
}

/// Runs one traced append against a server exporting to `collector` and checks the trace.
async fn assert_one_trace(env: &[(String, String)], collector: &FakeCollector, service: &str) {
    let proc = spawn(env).await;
    append_traced(&proc.base, "traced").await;
    let spans = collector
        .wait_for(ARRIVAL, "the request and both worker spans", |spans| {
            consumer(spans, "index").is_some() && consumer(spans, "extract").is_some()
        })
        .await;
    eprintln!("spans of the trace:\n{}", describe(&spans));
    let request = spans
        .iter()
        .find(|s| s.kind == KIND_SERVER && s.name == "POST /v1/sessions/{session_id}/messages")
        .unwrap_or_else(|| panic!("no request span:\n{}", describe(&spans)));
    assert_eq!(
        request.trace_id, CALLER_TRACE,
        "the request continues the caller's trace"
    );
    assert_eq!(
        request.parent_span_id, CALLER_SPAN,
        "the caller's span is the request's parent"
    );
    assert_eq!(request.service, service);
    assert_eq!(
        request.attributes.get("route").map(String::as_str),
        Some("/v1/sessions/{session_id}/messages")
    );
    for worker in ["index", "extract"] {
        let handler = consumer(&spans, worker).expect("waited for it");
        assert!(
            descends_via_publish(&spans, handler, request),
            "the {worker} handler span descends from the request through a publish span:\n{}",
            describe(&spans)
        );
        assert_eq!(
            handler
                .attributes
                .get("messaging.consumer.group.name")
                .map(String::as_str),
            Some(worker)
        );
    }
    let publish = spans
        .iter()
        .find(|s| s.kind == KIND_PRODUCER && s.trace_id == CALLER_TRACE)
        .expect("a publish span");
    assert_eq!(publish.name, "publish turn.appended");
    assert_eq!(
        publish.attributes.get("messaging.destination.name").map(String::as_str),
        Some("turn.appended")
    );
    sigterm_and_wait(proc).await;
}

#[tokio::test]
async fn one_append_is_one_trace_through_the_local_bus() {
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = vec![
        (
            "SEDIMENT_DATA_DIR".into(),
            dir.path().join("data").display().to_string(),
        ),
        ("SEDIMENT_OTLP_ENDPOINT".into(), collector.endpoint.clone()),
    ];
    assert_one_trace(&env, &collector, "sediment-test-server").await;
}

#[tokio::test]
async fn one_append_is_one_trace_through_rabbitmq() {
    let collector = FakeCollector::start().await;
    let db = TestDb::create().await;
    let broker = TestBroker::start("traces").await;
    let amqp = broker.settings();
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = vec![
        ("SEDIMENT_DATABASE_URL".into(), db.url.clone()),
        ("SEDIMENT_AMQP_URL".into(), amqp.url.clone()),
        ("SEDIMENT_AMQP_PREFIX".into(), amqp.prefix.clone()),
        ("SEDIMENT_AUTH".into(), "off".into()),
        (
            "SEDIMENT_INDEX_DIR".into(),
            dir.path().join("index").display().to_string(),
        ),
        (
            "SEDIMENT_FILES_DIR".into(),
            dir.path().join("files").display().to_string(),
        ),
        // The standard variable, with the generic endpoint (the exporter adds `/v1/traces`).
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), collector.endpoint.clone()),
        ("OTEL_SERVICE_NAME".into(), "sediment-cluster".into()),
    ];
    assert_one_trace(&env, &collector, "sediment-cluster").await;
    broker.cleanup().await;
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported_and_ingest_works() {
    let collector = FakeCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = vec![(
        "SEDIMENT_DATA_DIR".into(),
        dir.path().join("data").display().to_string(),
    )];
    let proc = spawn(&env).await;
    append_traced(&proc.base, "untraced").await;
    // Long enough for the workers to take the deliveries and for an exporter to have sent.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let ready = reqwest::get(format!("{}/readyz", proc.base)).await.unwrap();
    assert_eq!(ready.status(), 200);
    sigterm_and_wait(proc).await;
    assert_eq!(collector.requests(), 0, "nothing is exported without an endpoint");
}

/// Publishes in a traced span, retries the delivery, then publishes with a delay: every
/// delivery carries the publisher's context. The OpenTelemetry layer is this thread's default
/// subscriber only, so other tests in the binary are untouched.
async fn deliveries_keep_the_context(bus: &dyn EventBus) {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _default = tracing::subscriber::set_default(subscriber);
    // Other tests in this process hit the bus's span callsites on their own threads, under the
    // global dispatcher only; a hit racing with the registration of this thread's dispatcher
    // can leave a callsite's cached interest at "never" for it (tracing-core recomputes
    // interest per callsite, not atomically with dispatcher registration). Recompute now that
    // this dispatcher exists. A process with one global subscriber has no such race.
    tracing::callsite::rebuild_interest_cache();

    let mut sub = bus.subscribe(WorkerKind::Index, 1).await.unwrap();
    let root = tracing::info_span!("test root");
    let root_cx = root.context();
    let trace_id = root_cx.span().span_context().trace_id().to_string();
    let root_span_id = root_cx.span().span_context().span_id().to_string();
    let event = Event::TurnAppended {
        tenant: tenant(),
        session_id: "s".into(),
        last_seq: 1,
    };

    bus.publish(&event).instrument(root.clone()).await.unwrap();
    let first = expect_delivery(&mut *sub, "the first delivery").await;
    let traceparent = first.trace.traceparent.clone().expect("a traceparent");
    assert!(traceparent.starts_with(&format!("00-{trace_id}-")), "{traceparent}");
    assert!(
        !traceparent.contains(&root_span_id),
        "the parent is the publish span, not the caller's: {traceparent}"
    );
    sub.settle(first, Outcome::Retry).await.unwrap();
    let retried = expect_delivery(&mut *sub, "the retried delivery").await;
    assert_eq!(retried.attempt, 2);
    assert_eq!(retried.trace.traceparent.as_deref(), Some(traceparent.as_str()));
    sub.settle(retried, Outcome::Ack).await.unwrap();

    bus.publish_delayed(&event, Duration::from_millis(50))
        .instrument(root.clone())
        .await
        .unwrap();
    let delayed = expect_delivery(&mut *sub, "the delayed delivery").await;
    let delayed_parent = delayed.trace.traceparent.clone().expect("a traceparent");
    assert!(
        delayed_parent.starts_with(&format!("00-{trace_id}-")),
        "{delayed_parent}"
    );
    sub.settle(delayed, Outcome::Ack).await.unwrap();
    sub.cancel().await.unwrap();

    // And untraced publishes carry nothing.
    drop(_default);
    let mut sub = bus.subscribe(WorkerKind::Index, 1).await.unwrap();
    bus.publish(&event).await.unwrap();
    let plain = expect_delivery(&mut *sub, "an untraced delivery").await;
    assert!(plain.trace.is_empty(), "{:?}", plain.trace);
    sub.settle(plain, Outcome::Ack).await.unwrap();
}

#[tokio::test]
async fn amqp_deliveries_keep_the_trace_context_through_retries() {
    let broker = TestBroker::with_knobs(
        "traces-retry",
        Knobs {
            max_attempts: 3,
            retry_delay: Duration::from_millis(20),
        },
    )
    .await;
    let bus = broker.bus().await;
    deliveries_keep_the_context(&bus).await;
    broker.cleanup().await;
}

#[tokio::test]
async fn local_deliveries_keep_the_trace_context_through_retries() {
    let bus = LocalBus::new(3, Duration::from_millis(20));
    deliveries_keep_the_context(&bus).await;
}
