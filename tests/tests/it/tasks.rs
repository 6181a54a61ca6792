//! The optional fifth isolation dimension, `task`, end to end through the API in both
//! deployments: appended turns carry it, extracted memories inherit it (and dedup keeps
//! tasks apart), and search, recall and the memory listing narrow to it; then how the
//! `X-Sediment-Task` header and the request's own `task` are checked against each other.

use std::time::Duration;

use integration_tests::app::{tenant, Mode, Options, TestApp};
use reqwest::{Method, Response};
use serde_json::{json, Value};
use shared::domain::Tenant;

const WAIT: Duration = Duration::from_secs(30);
const TASK_A: &str = "task-a";
const TASK_B: &str = "任务-b";

async fn app(mode: Mode) -> TestApp {
    TestApp::with(
        mode,
        Options {
            env: vec![("EXTRACT_IDLE_FLUSH_MS", "300".into())],
            ..Options::default()
        },
    )
    .await
}

/// Sends `body` as `tenant`, with `header` in `X-Sediment-Task` when given.
async fn send(
    app: &TestApp,
    method: Method,
    path: &str,
    t: &Tenant,
    header: Option<&str>,
    body: Option<Value>,
) -> Response {
    let mut request = app.req(method, path, t);
    if let Some(task) = header {
        request = request.header(api::TASK_HEADER, task);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("send")
}

async fn json_of(response: Response, status: u16) -> Value {
    let actual = response.status().as_u16();
    let body: Value = response.json().await.expect("a JSON body");
    assert_eq!(actual, status, "{body}");
    body
}

/// One user turn appended to `session`, under `task` (in the body).
async fn append(app: &TestApp, t: &Tenant, session: &str, task: Option<&str>, content: &str) {
    let mut body = json!({ "messages": [{ "role": "user", "content": content }] });
    if let Some(task) = task {
        body["task"] = json!(task);
    }
    let response = send(
        app,
        Method::POST,
        &format!("/v1/sessions/{session}/messages"),
        t,
        None,
        Some(body),
    )
    .await;
    json_of(response, 201).await;
}

async fn search(app: &TestApp, t: &Tenant, header: Option<&str>, body: Value) -> Value {
    json_of(
        send(app, Method::POST, "/v1/conversations/search", t, header, Some(body)).await,
        200,
    )
    .await
}

fn field<'v>(items: &'v Value, name: &str) -> Vec<&'v Value> {
    let mut values: Vec<&Value> = items.as_array().expect("an array").iter().map(|i| &i[name]).collect();
    values.sort_by_key(|v| v.to_string());
    values
}

/// Three sessions, under task A, task B and none, each saying where the user lives: the
/// rules engine reads each as a memory, and B's and the task-less one contradict A's.
async fn tasks_narrow_turns_memories_and_recall(mode: Mode) {
    let app = app(mode).await;
    let t = tenant();
    append(&app, &t, "s-a", Some(TASK_A), "I live in Beijing.").await;
    app.wait_extracted(WAIT).await;
    // The header alone names the task as well as the body does.
    let response = send(
        &app,
        Method::POST,
        "/v1/sessions/s-b/messages",
        &t,
        Some("task-b-header"),
        Some(json!({ "messages": [{ "role": "user", "content": "I live in Shanghai." }] })),
    )
    .await;
    json_of(response, 201).await;
    append(&app, &t, "s-b2", Some(TASK_B), "I live in Hangzhou.").await;
    app.wait_extracted(WAIT).await;
    append(&app, &t, "s-none", None, "I live in Shenzhen.").await;
    app.wait_extracted(WAIT).await;
    app.wait_indexed(WAIT).await;

    // Turns show the task they were appended under, null for none.
    for (session, task) in [
        ("s-a", json!(TASK_A)),
        ("s-b", json!("task-b-header")),
        ("s-b2", json!(TASK_B)),
        ("s-none", Value::Null),
    ] {
        let listed = json_of(app.list(&t, session, "").await, 200).await;
        assert_eq!(listed["messages"][0]["task"], task, "{session}: {listed}");
    }

    // Search narrows to the task; without one it finds every turn.
    let query = |task: Option<&str>| {
        let mut body = json!({ "query": "where do I live", "strategy": "keyword", "limit": 20 });
        if let Some(task) = task {
            body["task"] = json!(task);
        }
        body
    };
    let found = search(&app, &t, None, query(Some(TASK_A))).await;
    assert_eq!(
        field(&found["items"], "content"),
        [&json!("I live in Beijing.")],
        "{found}"
    );
    assert_eq!(field(&found["items"], "task"), [&json!(TASK_A)], "{found}");
    let found = search(&app, &t, Some("task-b-header"), query(None)).await;
    assert_eq!(
        field(&found["items"], "content"),
        [&json!("I live in Shanghai.")],
        "{found}"
    );
    let found = search(&app, &t, None, query(Some("no-such-task"))).await;
    assert!(found["items"].as_array().unwrap().is_empty(), "{found}");
    let found = search(&app, &t, None, query(None)).await;
    assert_eq!(found["items"].as_array().unwrap().len(), 4, "{found}");
    // A task is within the tenant: another tenant naming it finds nothing of this one's.
    let stranger = tenant();
    let found = search(&app, &stranger, None, query(Some(TASK_A))).await;
    assert!(found["items"].as_array().unwrap().is_empty(), "{found}");
    let listed = app.memories(&stranger, &format!("?task={TASK_A}")).await;
    assert!(listed["items"].as_array().unwrap().is_empty(), "{listed}");

    // Memories inherit their turns' task, and dedup kept the tasks apart: the contradicting
    // statements of other tasks did not archive A's memory (the task-less one is a task of
    // its own for dedup, too).
    let active = app.memories(&t, "?status=active").await;
    let mut by_task: Vec<(String, Value)> = active["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["content"].as_str().unwrap().to_owned(), m["task"].clone()))
        .collect();
    by_task.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        by_task,
        [
            ("I live in Beijing.".to_owned(), json!(TASK_A)),
            ("I live in Hangzhou.".to_owned(), json!(TASK_B)),
            ("I live in Shanghai.".to_owned(), json!("task-b-header")),
            ("I live in Shenzhen.".to_owned(), Value::Null),
        ],
        "{active}"
    );
    let listed = app.memories(&t, &format!("?task={TASK_A}")).await;
    assert_eq!(
        field(&listed["items"], "content"),
        [&json!("I live in Beijing.")],
        "{listed}"
    );
    let listed = app.memories(&t, "?task=%E4%BB%BB%E5%8A%A1-b").await;
    assert_eq!(
        field(&listed["items"], "content"),
        [&json!("I live in Hangzhou.")],
        "{listed}"
    );
    let response = send(&app, Method::GET, "/v1/memories", &t, Some("task-b-header"), None).await;
    let listed = json_of(response, 200).await;
    assert_eq!(
        field(&listed["items"], "content"),
        [&json!("I live in Shanghai.")],
        "{listed}"
    );

    // Recall: the dynamic part holds only the task's memories and turns, the small-scope path
    // included (each scope here is smaller than the limit); the stable part is the owner's.
    let recall = |task: Option<&str>| {
        let mut body = json!({ "query": "which city should the weather report cover?", "limit": 10 });
        if let Some(task) = task {
            body["task"] = json!(task);
        }
        body
    };
    let narrowed = app.recall_ok(&t, recall(Some(TASK_A))).await;
    let contents: Vec<&str> = narrowed["dynamic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"].as_str().unwrap())
        .collect();
    assert!(!contents.is_empty(), "{narrowed}");
    assert!(contents.iter().all(|c| c.contains("Beijing")), "{narrowed}");
    assert_eq!(narrowed["dynamic"][0]["kind"], "memory", "{narrowed}");
    // Each item says its task, memories and turns alike.
    for item in narrowed["dynamic"].as_array().unwrap() {
        assert_eq!(item["source"]["task"], TASK_A, "{item}");
    }
    let everything = app.recall_ok(&t, recall(None)).await;
    for city in ["Beijing", "Shanghai", "Hangzhou", "Shenzhen"] {
        assert!(everything["dynamic"].to_string().contains(city), "{city}: {everything}");
    }
    assert_eq!(narrowed["stable"], everything["stable"]);
    let other = app.recall_ok(&t, recall(Some("no-such-task"))).await;
    assert!(other["dynamic"].as_array().unwrap().is_empty(), "{other}");
    assert_eq!(other["stable"], everything["stable"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_tasks_narrow_turns_memories_and_recall() {
    tasks_narrow_turns_memories_and_recall(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_tasks_narrow_turns_memories_and_recall() {
    tasks_narrow_turns_memories_and_recall(Mode::Cluster).await;
}

/// The header and the request's own task: equal is fine, different is 422, and each is
/// checked whenever it is present, so an invalid one is refused beside a valid other one.
/// Nothing refused is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_header_and_the_request_task_must_both_be_valid_and_agree() {
    let app = TestApp::start(Mode::Embedded).await;
    let t = tenant();
    let messages = json!([{ "role": "user", "content": "a turn" }]);
    let long = "x".repeat(129);

    // Equal: accepted, on every route that takes a task.
    let both = send(
        &app,
        Method::POST,
        "/v1/sessions/s1/messages",
        &t,
        Some(TASK_A),
        Some(json!({ "messages": messages, "task": TASK_A })),
    )
    .await;
    json_of(both, 201).await;
    app.wait_indexed(WAIT).await;
    let found = search(&app, &t, Some(TASK_A), json!({ "query": "turn", "task": TASK_A })).await;
    assert_eq!(found["items"].as_array().unwrap().len(), 1, "{found}");
    let recalled = send(
        &app,
        Method::POST,
        "/v1/recall",
        &t,
        Some(TASK_A),
        Some(json!({ "query": "turn", "task": TASK_A })),
    )
    .await;
    json_of(recalled, 200).await;
    let listed = send(
        &app,
        Method::GET,
        &format!("/v1/memories?task={TASK_A}"),
        &t,
        Some(TASK_A),
        None,
    )
    .await;
    json_of(listed, 200).await;
    // A task of 128 characters is the longest allowed.
    let longest = "y".repeat(128);
    json_of(
        send(
            &app,
            Method::POST,
            "/v1/conversations/search",
            &t,
            Some(&longest),
            Some(json!({ "query": "turn", "task": longest })),
        )
        .await,
        200,
    )
    .await;

    // Different: 422, naming both.
    let body = json_of(
        send(
            &app,
            Method::POST,
            "/v1/conversations/search",
            &t,
            Some(TASK_A),
            Some(json!({ "query": "turn", "task": "task-b" })),
        )
        .await,
        422,
    )
    .await;
    assert_eq!(body["code"], "invalid_request");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("x-sediment-task") && message.contains(TASK_A) && message.contains("task-b"),
        "{message}"
    );
    let body = json_of(
        send(&app, Method::GET, "/v1/memories?task=task-b", &t, Some(TASK_A), None).await,
        422,
    )
    .await;
    assert_eq!(body["code"], "invalid_request", "{body}");

    // Invalid in the request beside a valid header, and the other way round: 422 on each
    // route, whichever is valid. (Found by the fuzzer: a valid header used to hide the body.)
    let invalid = ["", "\u{c}", "a\u{0}b", "tab\there", "\u{85}", long.as_str()];
    for bad in invalid {
        let routes: [(Method, String, Option<Value>); 3] = [
            (
                Method::POST,
                "/v1/sessions/s1/messages".into(),
                Some(json!({ "messages": messages, "task": bad })),
            ),
            (
                Method::POST,
                "/v1/conversations/search".into(),
                Some(json!({ "query": "turn", "task": bad })),
            ),
            (
                Method::POST,
                "/v1/recall".into(),
                Some(json!({ "query": "turn", "task": bad })),
            ),
        ];
        for (method, path, body) in routes {
            let refused = json_of(send(&app, method, &path, &t, Some(TASK_A), body).await, 422).await;
            assert_eq!(refused["code"], "invalid_request", "{path} {bad:?}: {refused}");
            assert!(
                refused["message"].as_str().unwrap().contains("task"),
                "{path} {bad:?}: {refused}"
            );
        }
    }
    for query in ["%0C", "", "a%00b", "%C2%85", long.as_str()] {
        let refused = json_of(
            send(
                &app,
                Method::GET,
                &format!("/v1/memories?task={query}"),
                &t,
                Some(TASK_A),
                None,
            )
            .await,
            422,
        )
        .await;
        assert_eq!(refused["code"], "invalid_request", "?task={query}: {refused}");
    }
    // An invalid header beside a valid task in the request, and one alone.
    for bad in ["", "tab\there", long.as_str()] {
        for body in [json!({ "query": "turn", "task": TASK_A }), json!({ "query": "turn" })] {
            let refused = json_of(
                send(
                    &app,
                    Method::POST,
                    "/v1/conversations/search",
                    &t,
                    Some(bad),
                    Some(body),
                )
                .await,
                422,
            )
            .await;
            assert_eq!(refused["code"], "invalid_request", "header {bad:?}: {refused}");
        }
        let refused = json_of(
            send(
                &app,
                Method::GET,
                &format!("/v1/memories?task={TASK_A}"),
                &t,
                Some(bad),
                None,
            )
            .await,
            422,
        )
        .await;
        assert_eq!(refused["code"], "invalid_request", "header {bad:?}: {refused}");
    }
    let latin1 = reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap();
    let refused = app
        .req(Method::POST, "/v1/conversations/search", &t)
        .header(api::TASK_HEADER, latin1.clone())
        .json(&json!({ "query": "turn" }))
        .send()
        .await
        .unwrap();
    json_of(refused, 422).await;

    // Only the first append was stored; the refused ones wrote nothing.
    let listed = json_of(app.list(&t, "s1", "").await, 200).await;
    assert_eq!(listed["messages"].as_array().unwrap().len(), 1, "{listed}");
    // Routes that take no task ignore the header, even one that is not visible ASCII.
    let response = app
        .req(Method::GET, "/v1/sessions/s1/messages", &t)
        .header(api::TASK_HEADER, latin1.clone())
        .send()
        .await
        .unwrap();
    json_of(response, 200).await;
}
