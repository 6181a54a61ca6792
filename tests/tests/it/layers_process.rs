//! The scene and persona workers as real processes (cluster: Postgres + RabbitMQ + the S3
//! server when the tests have one): the API extracts memories, `sediment-scene` writes the scene,
//! `sediment-persona` builds the persona; their side ports report the file store; SIGTERM
//! drains and exits 0. They refuse the embedded deployment.

use std::process::Stdio;
use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::process::{free_port, sigterm_and_wait};
use reqwest::Method;
use serde_json::{json, Value};
use shared::config::{Deployment, FileStoreSettings};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_sediment-test-layers");
const TIMERS: [(&str, &str); 3] = [
    ("SCENE_AFTER_L1_MS", "100"),
    ("SCENE_MIN_GAP_MS", "300"),
    ("PERSONA_MEMORY_THRESHOLD", "1"),
];

/// Starts `kind` on the app's database, broker and file store; waits until it is ready and
/// returns its readiness body.
async fn spawn(app: &TestApp, kind: &str) -> (Child, String, Value) {
    let Deployment::Cluster { database_url, amqp_url } = &app.settings.deployment else {
        panic!("cluster only");
    };
    let health = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(BIN);
    cmd.arg(kind)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_DATABASE_URL", database_url)
        .env("SEDIMENT_AMQP_URL", amqp_url)
        .env("SEDIMENT_AMQP_PREFIX", &app.settings.amqp_prefix)
        .env("SEDIMENT_WORKER_HEALTH_LISTEN", &health)
        .env("SEDIMENT_WORKER_SWEEP_INTERVAL_MS", "200")
        .env("SEDIMENT_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in TIMERS {
        cmd.env(format!("SEDIMENT_{k}"), v);
    }
    match &app.settings.files {
        FileStoreSettings::Local { root } => {
            cmd.env("SEDIMENT_FILES_DIR", root);
        }
        FileStoreSettings::S3(s3) => {
            cmd.env("SEDIMENT_S3_BUCKET", &s3.bucket)
                .env("SEDIMENT_S3_ENDPOINT", s3.endpoint.clone().unwrap_or_default())
                .env("SEDIMENT_S3_PREFIX", &s3.root_prefix);
            if let Some(credentials) = &s3.credentials {
                cmd.env("SEDIMENT_S3_ACCESS_KEY_ID", &credentials.access_key_id)
                    .env("SEDIMENT_S3_SECRET_ACCESS_KEY", credentials.secret_access_key.expose());
            }
        }
    }
    let child = cmd.spawn().expect("spawn the worker");
    let base = format!("http://{health}");
    let started = Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("{base}/readyz")).await {
            if r.status() == 200 {
                let body = r.json().await.expect("readyz json");
                return (child, base, body);
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the {kind} worker did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scene_and_persona_workers_run_as_processes() {
    let env = TIMERS.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    let app = TestApp::with(
        Mode::Cluster,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    let (scene, scene_health, ready) = spawn(&app, "scene").await;
    assert_eq!(ready, json!({"store": "ok", "bus": "ok", "files": "ok"}));
    let (persona, _, _) = spawn(&app, "persona").await;

    let t = tenant();
    app.append_ok(
        &t,
        "layers-process",
        json!([{"role": "user", "content": "我是腾讯云 DBA，主要管北京区的 TDSQL-C"}]),
    )
    .await;
    let started = Instant::now();
    let body = loop {
        let response = app.req(Method::GET, "/v1/persona", &t).send().await.expect("persona");
        if response.status() == 200 {
            break response.json::<Value>().await.expect("json");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no persona from the workers"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(body["content"].as_str().unwrap_or_default().contains("DBA"), "{body}");
    // The persona may come first (from memories alone); the scene follows its timer.
    let scenes = loop {
        let scenes: Value = app
            .req(Method::GET, "/v1/scenes", &t)
            .send()
            .await
            .expect("scenes")
            .json()
            .await
            .expect("json");
        if scenes["items"].as_array().is_some_and(|items| !items.is_empty()) {
            break scenes;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no scene from the workers");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(scenes["items"].as_array().map(Vec::len), Some(1), "{scenes}");

    // A run is counted once it returns, just after its commit made the scene visible.
    loop {
        let metrics = reqwest::get(format!("{scene_health}/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        if metrics.contains("sediment_scene_runs_total") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the scene worker's metrics count no run: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sigterm_and_wait(scene).await;
    sigterm_and_wait(persona).await;
}

#[tokio::test]
async fn the_layer_workers_refuse_the_embedded_deployment() {
    for kind in ["scene", "persona"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let output = Command::new(BIN)
            .arg(kind)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("SEDIMENT_DATA_DIR", dir.path())
            .env("SEDIMENT_LOG", "warn")
            .output()
            .await
            .expect("run the worker");
        assert!(!output.status.success(), "{kind}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("cluster deployment"), "{kind}: {stderr}");
    }
}
