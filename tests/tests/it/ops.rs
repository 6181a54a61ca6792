//! The ops page end to end: `/ops/state` from a running API, the page rendered by headless
//! Chromium with its script fetching that state, the access rule, and the queue gauges on
//! `/metrics`.

use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::browser::{self, text_of};
use integration_tests::fake_openai::FakeOpenAi;
use serde_json::{json, Value};
use shared::bus::testsuite::eventually;
use shared::bus::WorkerKind;
use shared::memory::schedule::Trigger;

/// Written into every turn: the page must never show it.
const CONTENT_MARKER: &str = "ops-page-must-never-show-this";
const SESSION: &str = "ops-session-hidden";

async fn get_json(app: &TestApp, path: &str) -> Value {
    let response = reqwest::get(app.url(path)).await.expect("send request");
    let status = response.status();
    let body: Value = response.json().await.expect("json body");
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

fn row<'a>(state: &'a Value, list: &str, key: &str, name: &str) -> &'a Value {
    state[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list} is not a list: {state}"))
        .iter()
        .find(|r| r[key] == name)
        .unwrap_or_else(|| panic!("no {list} row {name}: {state}"))
}

/// An append's wake-up waits in the index and extract queues (no in-process worker takes it),
/// and a real extraction batch fails on a malformed LLM answer: the state shows both, without
/// any content, tenant or session, and so does the page once Chromium ran its script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_page_in_chromium_shows_queue_depth_and_recent_failure() {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(|_| Some("Sure! Here are your cards, not as JSON".to_owned()));
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![
                ("LLM_URL", llm.base_url()),
                ("LLM_MODEL", "fake-model".into()),
                ("LLM_MAX_RETRIES", "0".into()),
            ],
            no_worker: true,
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    // One append, so one wake-up: two appends could share a round's event or not.
    let turns: Vec<Value> = ["I am the on-call DBA", "I prefer short answers"]
        .iter()
        .map(|text| json!({ "role": "user", "content": format!("{text} {CONTENT_MARKER}") }))
        .collect();
    app.append_ok(&t, SESSION, Value::Array(turns)).await;
    // The wake-up is published after the append answered.
    for kind in [WorkerKind::Index, WorkerKind::Extract] {
        eventually(&format!("the wake-up in the {kind:?} queue"), || async {
            app.backends.bus.depth(kind).await.expect("depth") == Some(1)
        })
        .await;
    }
    // The batch runs as the extract worker runs it; its failure is recorded by the pipeline.
    let scheduler = app
        .backends
        .extract_scheduler(&app.settings)
        .expect("build the scheduler");
    let result = scheduler
        .poll(&shared::domain::SessionKey::new(t.clone(), SESSION), Trigger::Flush)
        .await;
    assert!(result.is_err(), "a malformed answer must fail the batch: {result:?}");

    let state = get_json(&app, "/ops/state").await;
    assert_eq!(state["deployment"], "embedded");
    for queue in ["index", "extract"] {
        let q = row(&state, "queues", "queue", queue);
        assert_eq!((q["ready"].as_u64(), q["parked"].as_u64()), (Some(1), Some(0)), "{q}");
    }
    assert_eq!(row(&state, "lag", "consumer", "extract")["turns"], 2);
    assert_eq!(row(&state, "lag", "consumer", "index")["sessions"], 1);
    let index = row(&state, "workers", "worker", "index");
    assert_eq!(
        (&index["runs"], &index["status"]),
        (&json!("external"), &json!("no_consumer"))
    );
    assert_eq!(row(&state, "workers", "worker", "compact")["runs"], "in_process");
    assert_eq!(
        state["funnel"]["source"], "elsewhere",
        "extraction does not run in this process"
    );
    let failure = state["failures"]["items"]
        .as_array()
        .expect("failures")
        .iter()
        .find(|f| f["error"].as_str().is_some_and(|e| e.contains("not valid JSON")))
        .unwrap_or_else(|| panic!("the failed batch is not listed: {state}"));
    assert_eq!(
        (&failure["kind"], &failure["mode"], &failure["turns"]),
        (&json!("malformed"), &json!("llm"), &json!(2))
    );
    let text = state.to_string();
    for hidden in [CONTENT_MARKER, SESSION, t.team.as_str()] {
        assert!(!text.contains(hidden), "/ops/state shows {hidden}: {text}");
    }

    let Some(chromium) = browser::chromium() else {
        return;
    };
    let dom = browser::dump_dom(&chromium, &app.url("/ops")).await;
    assert!(
        dom.contains("data-state=\"ready\""),
        "the page did not render its state:\n{dom}"
    );
    assert_eq!(text_of(&dom, "queue-index-ready").as_deref(), Some("1"), "{dom}");
    assert_eq!(text_of(&dom, "queue-extract-ready").as_deref(), Some("1"), "{dom}");
    assert_eq!(text_of(&dom, "lag-extract-turns").as_deref(), Some("2"), "{dom}");
    assert!(
        dom.contains("class=\"failure\"") && dom.contains("not valid JSON") && dom.contains("malformed"),
        "the recent failure is not on the page:\n{dom}"
    );
    for hidden in [CONTENT_MARKER, SESSION, t.team.as_str()] {
        assert!(!dom.contains(hidden), "the page shows {hidden}");
    }
}

/// With a token, the state needs it (and the page's script sends it, taken from the URL
/// fragment); switched off, both routes do not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_token_guards_the_state_and_disabled_hides_the_page() {
    let token = "ops-test-token-0123456789";
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("OPS_TOKEN", token.into())],
            ..Options::default()
        },
    )
    .await;
    let client = &app.client;
    let refused = client.get(app.url("/ops/state")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["www-authenticate"], "Bearer");
    assert_eq!(refused.json::<Value>().await.unwrap()["code"], "unauthorized");
    let wrong = client
        .get(app.url("/ops/state"))
        .bearer_auth("ops-test-token-0123456780")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let state = client
        .get(app.url("/ops/state"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(state.status(), 200);
    let page = client.get(app.url("/ops")).send().await.unwrap();
    assert_eq!(
        page.status(),
        200,
        "the page shell holds no data and is served without the token"
    );
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    assert!(page.text().await.unwrap().contains("<title>sediment · ops</title>"));

    if let Some(chromium) = browser::chromium() {
        let dom = browser::dump_dom(&chromium, &app.url(&format!("/ops#token={token}"))).await;
        assert!(
            dom.contains("data-state=\"ready\""),
            "the page did not use the token:\n{dom}"
        );
        assert!(text_of(&dom, "queue-index-ready").is_some(), "{dom}");
        assert!(!dom.contains(token), "the token stays out of the page");
    }

    let off = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("OPS_ENABLED", "false".into())],
            ..Options::default()
        },
    )
    .await;
    for path in ["/ops", "/ops/state"] {
        let response = reqwest::get(off.url(path)).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
}

/// In the cluster the queues are RabbitMQ's: their consumers are counted across processes,
/// the kinds this API does not run are external, and `/metrics` carries the queue gauges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_cluster_state_reads_rabbitmq_and_metrics_export_queue_gauges() {
    let app = TestApp::start(Mode::Cluster).await;
    let t = tenant();
    app.append_ok(&t, SESSION, json!([{ "role": "user", "content": CONTENT_MARKER }]))
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let state = loop {
        let state = get_json(&app, "/ops/state").await;
        let index = row(&state, "queues", "queue", "index");
        // The in-process consumers subscribe in the background.
        if index["consumers"].as_u64() >= Some(1) && row(&state, "workers", "worker", "index")["status"] == "ok" {
            break state;
        }
        assert!(Instant::now() < deadline, "the index consumer never showed: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(state["deployment"], "cluster");
    for queue in ["index", "extract", "compact"] {
        assert_eq!(row(&state, "queues", "queue", queue)["available"], true, "{state}");
    }
    let compact = row(&state, "workers", "worker", "compact");
    assert_eq!(
        (&compact["runs"], &compact["status"]),
        (&json!("external"), &json!("no_consumer"))
    );
    assert_eq!(row(&state, "workers", "worker", "extract")["runs"], "in_process");
    assert_eq!(
        state["funnel"]["source"], "this_process",
        "Qdrant Edge: the API extracts"
    );
    assert!(state["funnel"]["counts"]["decisions"]["discard"].is_u64(), "{state}");

    let metrics = reqwest::get(app.url("/metrics")).await.unwrap().text().await.unwrap();
    for metric in [
        "sediment_queue_depth",
        "sediment_parked_messages",
        "sediment_queue_consumers",
    ] {
        for queue in ["index", "extract", "compact"] {
            let series = format!("{metric}{{queue=\"{queue}\"}} ");
            assert!(metrics.lines().any(|l| l.starts_with(&series)), "{series} missing");
        }
    }
}
