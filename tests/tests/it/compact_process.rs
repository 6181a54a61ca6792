//! The compact worker as a real process (cluster: Postgres + RabbitMQ): SIGKILL while a job is
//! claimed and waiting on the LLM loses the job to nobody — a second worker takes it over once
//! the lease expires — and SIGTERM drains and exits 0. It refuses the embedded deployment.

use std::process::Stdio;
use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, TestApp};
use integration_tests::fake_openai::{FakeOpenAi, Fault};
use integration_tests::mixed_session;
use integration_tests::process::{free_port, sigterm_and_wait};
use reqwest::Method;
use serde_json::{json, Value};
use shared::config::Deployment;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_sediment-test-compact");
const LEASE_MS: u64 = 2_000;

/// Starts a compact worker on the app's database and broker; waits until it is ready.
async fn spawn(app: &TestApp, extra: &[(&str, String)]) -> (Child, String) {
    let Deployment::Cluster { database_url, amqp_url } = &app.settings.deployment else {
        panic!("cluster only");
    };
    let health = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_DATABASE_URL", database_url)
        .env("SEDIMENT_AMQP_URL", amqp_url)
        .env("SEDIMENT_AMQP_PREFIX", &app.settings.amqp_prefix)
        .env("SEDIMENT_WORKER_HEALTH_LISTEN", &health)
        .env("SEDIMENT_WORKER_SWEEP_INTERVAL_MS", "200")
        .env("SEDIMENT_COMPACTION_LEASE_MS", LEASE_MS.to_string())
        .env("SEDIMENT_COMPACTION_TIMEOUT_MS", "1500")
        .env("SEDIMENT_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn the compact worker");
    let base = format!("http://{health}");
    let started = Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("{base}/readyz")).await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the worker did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, base)
}

/// Waits up to 10 s for the model's first call; panics with `never` when none comes.
async fn first_model_call(fake: &FakeOpenAi, never: &str) {
    let started = Instant::now();
    while fake.chat().requests() == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "{never}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn state(app: &TestApp, t: &shared::domain::Tenant, session: &str) -> Value {
    app.req(Method::GET, &format!("/v1/sessions/{session}/compaction"), t)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_job_is_replaced_after_its_lease_and_sigterm_drains() {
    let app = TestApp::start(Mode::Cluster).await;
    let t = tenant();
    let session = "killed-mid-job";
    app.append_ok(&t, session, json!(mixed_session::turns(21, 30))).await;

    // Worker A summarizes with an LLM that takes a minute to answer.
    let fake = FakeOpenAi::start(8).await;
    fake.chat().push(Fault::Delay(Duration::from_secs(60)));
    let (mut a, _) = spawn(
        &app,
        &[
            ("SEDIMENT_LLM_URL", fake.base_url()),
            ("SEDIMENT_LLM_MODEL", "slow-model".into()),
        ],
    )
    .await;
    let response = app
        .req(Method::POST, &format!("/v1/sessions/{session}/compact"), &t)
        .send()
        .await
        .expect("compact");
    assert_eq!(response.status(), 202);
    first_model_call(&fake, "worker A never called the LLM").await;
    // A holds the job and waits on the model: kill it there.
    a.kill().await.expect("SIGKILL worker A");
    let killed_at = Instant::now();
    let held = state(&app, &t, session).await;
    assert_eq!(held["status"], "pending", "{held}");
    assert_eq!(held["attempts"], 1);

    // Worker B (rules) takes the job over once A's lease has run out.
    let (b, health) = spawn(&app, &[]).await;
    let done = loop {
        let s = state(&app, &t, session).await;
        if s["status"] == "success" {
            break s;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(20),
            "the job was never taken over: {s}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        killed_at.elapsed() >= Duration::from_millis(LEASE_MS - 500),
        "B waited out A's lease"
    );
    assert_eq!(done["summarizer"], "rules");
    assert_eq!(done["last_seq"], 25);
    assert_eq!(done["attempts"], 0);
    assert!(done["error"].is_null());

    let healthz = reqwest::get(format!("{health}/healthz")).await.expect("healthz");
    assert_eq!(healthz.status(), 200);
    let metrics = reqwest::get(format!("{health}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("sediment_compactions_total"), "{metrics}");

    sigterm_and_wait(b).await;
}

#[tokio::test]
async fn the_compact_worker_refuses_the_embedded_deployment() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_DATA_DIR", dir.path())
        .env("SEDIMENT_LOG", "warn")
        .output()
        .await
        .expect("run the worker");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the API process runs it itself"), "{stderr}");
}

/// A job the sweep holds when SIGTERM comes is work the process holds, like a delivery's: the
/// drain finishes it (the model answers well within the drain deadline) rather than leaving it
/// claimed, for the next worker to wait out its lease and summarize it again. The worker
/// listens on a queue of its own, so that only its sweep finds the jobs. Found by the chaos
/// scenario `rolling-restart` ("a graceful stop leaves no lease held", now and then there):
/// `run_consumer` aborted the sweep's task on shutdown instead of letting it finish what it
/// claimed.
///
/// The sweep takes no other job once the stop began: the second job due stays unclaimed, for
/// the next process to take at once, instead of holding the drain for another model call (and
/// being left claimed when that outlasts the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_sweep_holds_a_job_finishes_it_and_takes_no_other() {
    let app = TestApp::start(Mode::Cluster).await;
    let t = tenant();
    let (held, left) = ("swept-at-sigterm", "left-at-sigterm");
    for session in [held, left] {
        app.append_ok(&t, session, json!(mixed_session::turns(21, 30))).await;
        let response = app
            .req(Method::POST, &format!("/v1/sessions/{session}/compact"), &t)
            .send()
            .await
            .expect("compact");
        assert_eq!(response.status(), 202);
    }

    let fake = FakeOpenAi::start(8).await;
    fake.set_latency(Duration::from_secs(1));
    let summary = json!({"decisions": ["keep the summary short"], "todos": ["check the drain"]});
    fake.set_chat_responder(move |_| Some(summary.to_string()));
    // Both jobs are due before the worker starts, so its first sweep finds both, oldest first.
    let (worker, _) = spawn(
        &app,
        &[
            ("SEDIMENT_LLM_URL", fake.base_url()),
            ("SEDIMENT_LLM_MODEL", "slow-model".into()),
            (
                "SEDIMENT_AMQP_PREFIX",
                format!("{}-sweep-only", app.settings.amqp_prefix),
            ),
        ],
    )
    .await;
    first_model_call(&fake, "the sweep never took the job").await;
    // The sweep holds the first job and waits on the model, which answers in a second.
    sigterm_and_wait(worker).await;
    let after = state(&app, &t, held).await;
    assert_eq!(
        after["status"], "success",
        "the job the sweep held at SIGTERM was left behind: {after}"
    );
    let other = state(&app, &t, left).await;
    assert_eq!(
        (&other["status"], &other["attempts"]),
        (&json!("pending"), &json!(0)),
        "the sweep took another job after SIGTERM: {other}"
    );
}
