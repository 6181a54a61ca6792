//! Export and import of an owner's whole memory (`sediment export`, `sediment import`, `GET
//! /v1/export`, `POST /v1/import`): an owner moves from the embedded deployment into a fresh
//! cluster and exports from there line for line the same; a second import changes nothing; the
//! target indexes what it imported. Streams that are cut short, broken, of an unknown version or
//! whose ids another owner holds are refused with nothing left behind.

use std::process::Output;
use std::time::{Duration, Instant};

use integration_tests::app::{fast_layer_env, tenant, Mode, Options, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::Tenant;

const BIN: &str = env!("CARGO_BIN_EXE_sediment-api");
const WAIT: Duration = Duration::from_secs(60);

/// `sediment <args>` against `base`, as `t` when given (auth is off in these apps).
async fn sediment(base: &str, t: Option<&Tenant>, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(BIN);
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_URL", base)
        .stdin(std::process::Stdio::null());
    if let Some(t) = t {
        command
            .env("SEDIMENT_TEAM", &t.team)
            .env("SEDIMENT_AGENT", &t.agent)
            .env("SEDIMENT_USER", &t.user);
    }
    tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the command ends within 120 s")
        .expect("run sediment")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(stream: &str) -> Vec<Value> {
    stream
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The stream without its instance-local fields (the header's `exported_at` and `source`).
fn comparable(stream: &str) -> Vec<Value> {
    let mut lines = lines(stream);
    let header = lines[0].as_object_mut().expect("a header object");
    header.remove("exported_at");
    header.remove("source");
    lines
}

fn kinds(stream: &str) -> Vec<String> {
    lines(stream)
        .iter()
        .map(|l| l["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn export(app: &TestApp, t: &Tenant) -> String {
    let response = app.req(Method::GET, "/v1/export", t).send().await.expect("export");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    response.text().await.expect("the stream")
}

/// The owner's export once the background layers stopped changing it: two exports a second
/// apart that are the same.
async fn settled_export(app: &TestApp, t: &Tenant) -> String {
    let started = Instant::now();
    let mut last = export(app, t).await;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let next = export(app, t).await;
        if comparable(&next) == comparable(&last) {
            return next;
        }
        assert!(started.elapsed() < WAIT, "the owner's memory never settled");
        last = next;
    }
}

async fn import(app: &TestApp, t: &Tenant, stream: &str) -> (StatusCode, Value) {
    let response = app
        .req(Method::POST, "/v1/import", t)
        .header("content-type", "application/x-ndjson")
        .body(stream.to_owned())
        .send()
        .await
        .expect("import");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(app: &TestApp, t: &Tenant, path: &str) -> (StatusCode, Value) {
    let response = app.req(Method::GET, path, t).send().await.expect("get");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Polls `path` until `ready` accepts its answer.
async fn until(app: &TestApp, t: &Tenant, path: &str, ready: impl Fn(StatusCode, &Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (status, body) = get(app, t, path).await;
        if ready(status, &body) {
            return body;
        }
        assert!(started.elapsed() < WAIT, "{path} never became ready: {status} {body}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn items(body: &Value) -> Vec<Value> {
    body["items"].as_array().cloned().unwrap_or_default()
}

/// An owner with turns in two sessions, memories (one corrected, so it has history in its
/// provenance), scenes and a persona, built by the rules engines.
async fn owner_with_everything(app: &TestApp) -> Tenant {
    let t = tenant();
    app.append_ok(
        &t,
        "move-1",
        json!([
            { "role": "user", "content": "I am the on-call DBA for the Hollowmere billing cluster.", "client_id": "m-1",
              "metadata": { "channel": "slack", "thread": 7 } },
            { "role": "assistant", "content": "Noted: Hollowmere billing runs on Postgres 16." },
            { "role": "user", "content": "I prefer short answers with code first." },
        ]),
    )
    .await;
    app.append_ok(
        &t,
        "move-2",
        json!([
            { "role": "user", "content": "The Hollowmere offsite is in Lisbon next spring.", "created_at": "2026-11-02T10:00:00.123456Z" },
        ]),
    )
    .await;
    app.wait_extracted(WAIT).await;
    let memories = until(app, &t, "/v1/memories", |s, b| {
        s == StatusCode::OK
            && items(b)
                .iter()
                .any(|m| m["content"].as_str().is_some_and(|c| c.contains("DBA")))
    })
    .await;
    let id = items(&memories)[0]["id"].as_str().expect("an id").to_owned();
    let response = app
        .req(Method::PATCH, &format!("/v1/memories/{id}"), &t)
        .json(&json!({ "priority": 91 }))
        .send()
        .await
        .expect("correct a memory");
    assert_eq!(response.status(), StatusCode::OK);
    until(app, &t, "/v1/scenes", |s, b| {
        s == StatusCode::OK && !items(b).is_empty()
    })
    .await;
    until(app, &t, "/v1/persona", |s, _| s == StatusCode::OK).await;
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_moves_from_embedded_into_a_cluster_and_exports_from_there_unchanged() {
    let mut source = TestApp::with(
        Mode::Embedded,
        Options {
            env: fast_layer_env(),
            ..Options::default()
        },
    )
    .await;
    let t = owner_with_everything(&source).await;
    let settled = settled_export(&source, &t).await;

    // `sediment export` to a file: the stream, and a summary on stderr.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("owner.jsonl");
    let file = file.display().to_string();
    let exported = sediment(&source.base, Some(&t), &["export", "--output", &file]).await;
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    assert!(
        text(&exported.stderr).starts_with("exported "),
        "{}",
        text(&exported.stderr)
    );
    let stream = std::fs::read_to_string(&file).expect("read the export");
    assert_eq!(comparable(&stream), comparable(&settled));
    let kinds = kinds(&stream);
    assert_eq!(kinds.first().map(String::as_str), Some("header"));
    assert_eq!(kinds.last().map(String::as_str), Some("end"));
    for kind in [
        "session",
        "turn",
        "memory",
        "memory_provenance",
        "scene",
        "persona",
        "artifact_provenance",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} line in {kinds:?}");
    }
    let end = lines(&stream).pop().expect("an end line");
    assert_eq!(end["counts"]["session"], 2);
    assert_eq!(end["counts"]["turn"], 4);
    // Stdout holds the same stream.
    let to_stdout = sediment(&source.base, Some(&t), &["export"]).await;
    assert!(to_stdout.status.success(), "{}", text(&to_stdout.stderr));
    assert_eq!(comparable(&text(&to_stdout.stdout)), comparable(&stream));

    // Into a fresh cluster: the owner is the stream's.
    let mut target = TestApp::start(Mode::Cluster).await;
    let imported = sediment(&target.base, None, &["import", &file, "--json"]).await;
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    let report: Value = serde_json::from_slice(&imported.stdout).expect("one JSON document");
    assert_eq!(report["read"], report["inserted"], "{report}");
    assert_eq!(report["inserted"]["turn"], 4, "{report}");
    assert_eq!(report["lines"], kinds.len(), "{report}");

    // The cluster's export is the same stream, apart from the instance-local fields.
    let again = export(&target, &t).await;
    assert_eq!(comparable(&again), comparable(&stream));

    // A second import changes nothing.
    let (status, second) = import(&target, &t, &stream).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert!(
        second["inserted"].as_object().expect("counts").values().all(|n| n == 0),
        "{second}"
    );
    assert_eq!(comparable(&export(&target, &t).await), comparable(&stream));

    // What was imported works: the turns are indexed again, the memories too, and the scene,
    // persona and memory history read the same.
    target.wait_indexed(WAIT).await;
    let found = target.search_contents(&t, "Hollowmere offsite").await;
    assert!(found.iter().any(|c| c.contains("Lisbon")), "{found:?}");
    let memory = lines(&stream)
        .into_iter()
        .find(|l| l["kind"] == "memory" && l["content"].as_str().is_some_and(|c| c.contains("DBA")))
        .expect("the DBA memory");
    let id = memory["id"].as_str().expect("id");
    let started = Instant::now();
    loop {
        let response = target
            .req(Method::POST, "/v1/memories/search", &t)
            .json(&json!({ "query": "Hollowmere DBA", "strategy": "keyword" }))
            .send()
            .await
            .expect("memory search");
        let body: Value = response.json().await.expect("json");
        if items(&body).iter().any(|m| m["id"] == id) {
            break;
        }
        assert!(started.elapsed() < WAIT, "the imported memory is never found: {body}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let (_, before) = get(&source, &t, &format!("/v1/memories/{id}")).await;
    let (status, after) = get(&target, &t, &format!("/v1/memories/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(after["provenance"], before["provenance"]);
    assert_eq!(after["history"], before["history"]);
    let (_, persona_before) = get(&source, &t, "/v1/persona").await;
    let (_, persona_after) = get(&target, &t, "/v1/persona").await;
    assert_eq!(persona_after["content"], persona_before["content"]);
    let scene = lines(&stream)
        .into_iter()
        .find(|l| l["kind"] == "scene")
        .expect("a scene");
    let (status, scene_after) = get(&target, &t, &format!("/v1/scenes/{}", scene["id"].as_str().unwrap())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(scene_after["content"], scene["document"]);

    target.stop().await;
    source.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_cut_or_conflicting_streams_are_refused_and_leave_nothing() {
    let mut source = TestApp::with(
        Mode::Embedded,
        Options {
            env: fast_layer_env(),
            ..Options::default()
        },
    )
    .await;
    let t = owner_with_everything(&source).await;
    let stream = settled_export(&source, &t).await;
    let all: Vec<&str> = stream.lines().collect();
    let mut target = TestApp::start(Mode::Embedded).await;

    let join = |lines: &[&str]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let refused = [
        // Without its end line.
        (join(&all[..all.len() - 1]), "truncated_import", "truncated"),
        // Cut inside a line.
        (
            format!("{}{}", join(&all[..2]), &all[2][..all[2].len() / 2]),
            "invalid_import",
            "line 3: ",
        ),
        // A line that is not JSON.
        (
            {
                let mut broken = all.clone();
                broken[3] = "{\"kind\": \"turn\", \"id\":";
                join(&broken)
            },
            "invalid_import",
            "line 4: ",
        ),
        // A line dropped from the middle: the end line counts one more.
        (
            {
                let mut short = all.clone();
                short.remove(3);
                join(&short)
            },
            "invalid_import",
            "lines are missing",
        ),
        (
            stream.replacen("\"version\":1", "\"version\":99", 1),
            "unsupported_export_version",
            "version 99",
        ),
        (String::new(), "invalid_import", "empty"),
    ];
    for (body, code, says) in &refused {
        let (status, answer) = import(&target, &t, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{code}: {answer}");
        assert_eq!(answer["code"], *code, "{answer}");
        assert!(
            answer["message"].as_str().is_some_and(|m| m.contains(says)),
            "{code}: {answer}"
        );
    }
    // The CLI names the call and the code.
    let dir = tempfile::tempdir().expect("temp dir");
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, &refused[0].0).expect("write");
    let output = sediment(&target.base, Some(&t), &["import", &cut.display().to_string()]).await;
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("POST /v1/import: truncated_import (422)"),
        "{}",
        text(&output.stderr)
    );
    // Nothing of the owner is there.
    let nothing = export(&target, &t).await;
    assert_eq!(kinds(&nothing), ["header", "end"], "{nothing}");
    let (status, _) = get(&target, &t, "/v1/sessions/move-1/messages").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The whole stream imports (SQLite to SQLite), and exports the same.
    let (status, report) = import(&target, &t, &stream).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(comparable(&export(&target, &t).await), comparable(&stream));

    // The same stream for another user of the same instance: its ids are the first owner's,
    // so it is refused, and neither its rows nor its documents stay.
    let other = Tenant {
        user: "someone-else".into(),
        ..t.clone()
    };
    let (status, answer) = import(&target, &other, &stream).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["code"], "import_conflict", "{answer}");
    assert_eq!(kinds(&export(&target, &other).await), ["header", "end"]);
    let files = target
        .backends
        .files
        .list(&shared::scene::paths::owner_prefix(&other))
        .await
        .expect("list files");
    assert!(files.is_empty(), "documents of a refused import stayed: {files:?}");
    // The first owner is as it was.
    assert_eq!(comparable(&export(&target, &t).await), comparable(&stream));

    target.stop().await;
    source.stop().await;
}
