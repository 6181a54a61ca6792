//! The command line's client commands, run as the real binary against an embedded server with
//! auth on: ingest, search, recall, memories (list, show, edit, delete), scenes, persona, erase,
//! status and parked replay, in `--json` and in table form; and their failures, which name the
//! call and the API's code and exit non-zero.

use std::process::Output;
use std::time::{Duration, Instant};

use integration_tests::app::{fast_layer_env, tenant, Mode, Options, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::bus::testsuite::{eventually, expect_delivery, sample_sessions};
use shared::bus::{Outcome, WorkerKind};
use shared::domain::Tenant;

const BIN: &str = env!("CARGO_BIN_EXE_sediment-api");
const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef-0123456789";
const WAIT: Duration = Duration::from_secs(40);

/// `sediment <args>` as `t` with `key`, against `app`; only the settings given here.
async fn sediment(app: &TestApp, key: &str, t: &Tenant, args: &[&str]) -> Output {
    let command = tokio::process::Command::new(BIN)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SEDIMENT_URL", &app.base)
        .env("SEDIMENT_API_KEY", key)
        .env("SEDIMENT_AGENT", &t.agent)
        .env("SEDIMENT_USER", &t.user)
        .stdin(std::process::Stdio::null())
        .output();
    tokio::time::timeout(Duration::from_secs(60), command)
        .await
        .expect("the command ends within 60 s")
        .expect("run sediment")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A command that succeeds and prints one JSON document.
async fn json_of(app: &TestApp, key: &str, t: &Tenant, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let output = sediment(app, key, t, &args).await;
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "one JSON document per line: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

/// Runs the command until it succeeds with an answer that `ready` accepts (what it waits for
/// may not exist yet: a persona is 404 until its first build).
async fn until(app: &TestApp, key: &str, t: &Tenant, args: &[&str], ready: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    let mut with_json = args.to_vec();
    with_json.push("--json");
    loop {
        let output = sediment(app, key, t, &with_json).await;
        let answer: Value = serde_json::from_str(&stdout(&output)).unwrap_or(Value::Null);
        if output.status.success() && ready(&answer) {
            return answer;
        }
        assert!(
            started.elapsed() < WAIT,
            "{args:?} never became ready: {answer} {}",
            stderr(&output)
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn mentions(items: &Value, needle: &str) -> bool {
    items.as_array().is_some_and(|items| {
        items
            .iter()
            .any(|i| i["content"].as_str().is_some_and(|c| c.contains(needle)))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_command_runs_against_a_server() {
    let mut env = vec![("ADMIN_KEY", ADMIN_KEY.to_owned())];
    env.extend(fast_layer_env());
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    let response = app
        .client
        .post(app.url("/v1/admin/keys"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({ "team_id": t.team }))
        .send()
        .await
        .expect("create a key");
    assert_eq!(response.status(), StatusCode::CREATED);
    let key = response.json::<Value>().await.expect("json")["key"]
        .as_str()
        .expect("the secret")
        .to_owned();

    // ingest: consecutive lines of a session go in one call; two sessions here.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("turns.jsonl");
    let lines = [
        json!({ "session_id": "cli-1", "role": "user", "content": "I am the on-call DBA for the Marmotvale billing cluster." }),
        json!({ "session_id": "cli-1", "role": "assistant", "content": "Noted: Marmotvale billing runs on Postgres 16.", "client_id": "a-1" }),
        json!({ "session_id": "cli-2", "role": "user", "content": "The Marmotvale offsite is in Lisbon.", "created_at": "2026-11-02T10:00:00Z" }),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n\n")).collect();
    std::fs::write(&file, text).expect("write the file");
    let file = file.display().to_string();
    let ingested = json_of(&app, &key, &t, &["ingest", &file]).await;
    assert_eq!(ingested, json!({ "turns": 3, "sessions": 2 }));
    // Table form: a summary line.
    let again = sediment(&app, &key, &t, &["ingest", &file]).await;
    assert_eq!(
        stdout(&again),
        "ingested 3 turns into 2 session(s)\n",
        "{}",
        stderr(&again)
    );

    let found = until(
        &app,
        &key,
        &t,
        &["search", "Marmotvale offsite", "--strategy", "keyword"],
        |a| mentions(&a["items"], "Lisbon"),
    )
    .await;
    assert_eq!(found["items"][0]["session_id"], "cli-2", "{found}");
    let table = sediment(
        &app,
        &key,
        &t,
        &["search", "Marmotvale offsite", "--strategy", "keyword"],
    )
    .await;
    let table = stdout(&table);
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["score", "session", "seq", "role", "content"], "{table}");
    assert!(table.contains("cli-2") && table.contains("Lisbon"), "{table}");

    let memories = until(&app, &key, &t, &["memories", "list"], |a| mentions(&a["items"], "DBA")).await;
    let memory = memories["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"].as_str().is_some_and(|c| c.contains("DBA")))
        .unwrap()
        .clone();
    let id = memory["id"].as_str().unwrap();
    let shown = json_of(&app, &key, &t, &["memories", "show", id]).await;
    assert_eq!(shown["id"], memory["id"]);
    assert!(shown["provenance"].as_array().is_some_and(|p| !p.is_empty()), "{shown}");
    let shown = stdout(&sediment(&app, &key, &t, &["memories", "show", id]).await);
    assert!(shown.starts_with(&format!("id           {id}\n")), "{shown}");
    let edited = json_of(&app, &key, &t, &["memories", "edit", id, "--priority", "95"]).await;
    assert_eq!(edited["priority"], 95, "{edited}");
    let recalled = json_of(&app, &key, &t, &["recall", "who runs the Marmotvale billing database?"]).await;
    assert!(
        recalled["dynamic"]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["id"] == memory["id"])),
        "{recalled}"
    );

    let scenes = until(&app, &key, &t, &["scenes"], |a| {
        a["items"].as_array().is_some_and(|items| !items.is_empty())
    })
    .await;
    let scene = &scenes["items"][0];
    let document = stdout(&sediment(&app, &key, &t, &["scenes", scene["id"].as_str().unwrap()]).await);
    assert!(
        document.starts_with(&format!("# {}\n", scene["name"].as_str().unwrap())),
        "{document}"
    );
    let persona = until(&app, &key, &t, &["persona"], |p| {
        p["content"].as_str().is_some_and(|c| c.contains("DBA"))
    })
    .await;
    let printed = stdout(&sediment(&app, &key, &t, &["persona"]).await);
    assert_eq!(printed, format!("{}\n", persona["content"].as_str().unwrap()));

    let deleted = json_of(&app, &key, &t, &["memories", "delete", id]).await;
    assert_eq!(deleted, json!({ "deleted": id }));

    // status: the ops data (loopback, no token needed).
    let status = stdout(&sediment(&app, &key, &t, &["status"]).await);
    assert!(status.starts_with("deployment: embedded\n"), "{status}");
    assert!(status.contains("queue") && status.contains("worker"), "{status}");

    // parked replay takes the admin key; nothing is parked here, so nothing moves (a replay
    // that moves messages is in `parked_replay_moves_messages_back`).
    let replayed = json_of(
        &app,
        &key,
        &t,
        &["parked", "replay", "compact", "--admin-key", ADMIN_KEY],
    )
    .await;
    assert_eq!(replayed, json!({ "kind": "compact", "items": [] }));
    let printed = stdout(&sediment(&app, &key, &t, &["parked", "replay", "scene", "--admin-key", ADMIN_KEY]).await);
    assert_eq!(printed, "replayed 0 parked message(s) to the scene queue\n");
    let refused = sediment(&app, &key, &t, &["parked", "replay", "index"]).await;
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("POST /v1/admin/queues/index/parked/replay: forbidden (403)"),
        "{}",
        stderr(&refused)
    );
    let unknown = sediment(&app, &key, &t, &["parked", "replay", "nope", "--admin-key", ADMIN_KEY]).await;
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("POST /v1/admin/queues/nope/parked/replay: not_found (404)"),
        "{}",
        stderr(&unknown)
    );
    let limit = sediment(
        &app,
        &key,
        &t,
        &["parked", "replay", "index", "--limit", "0", "--admin-key", ADMIN_KEY],
    )
    .await;
    assert!(stderr(&limit).contains("invalid_request (422)"), "{}", stderr(&limit));

    // Failures name the call and the API's code, and exit non-zero.
    let denied = sediment(&app, "sdmk_wrong", &t, &["memories", "list"]).await;
    assert!(!denied.status.success());
    assert!(
        stderr(&denied).contains("GET /v1/memories: unauthorized (401)"),
        "{}",
        stderr(&denied)
    );
    let missing = sediment(
        &app,
        &key,
        &t,
        &["memories", "show", "00000000-0000-4000-8000-000000000000"],
    )
    .await;
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("not_found (404)"), "{}", stderr(&missing));
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n{{\"session_id\": \"cli-3\"}}\n", lines[0])).unwrap();
    let refused = sediment(&app, &key, &t, &["ingest", &bad.display().to_string()]).await;
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("bad.jsonl:2: not a turn"),
        "{}",
        stderr(&refused)
    );

    // erase needs an admin key of the team; it waits for the job, then nothing of the user is
    // left.
    let refused = sediment(&app, &key, &t, &["erase"]).await;
    assert!(
        stderr(&refused).contains("DELETE /v1/users/user-1: forbidden (403)"),
        "{}",
        stderr(&refused)
    );
    let response = app
        .client
        .post(app.url("/v1/admin/keys"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({ "team_id": t.team, "permission": "admin" }))
        .send()
        .await
        .expect("create a key");
    let admin = response.json::<Value>().await.expect("json")["key"]
        .as_str()
        .expect("the secret")
        .to_owned();
    let erased = json_of(&app, &admin, &t, &["erase"]).await;
    assert_eq!(erased["status"], "done", "{erased}");
    let gone = json_of(&app, &key, &t, &["search", "Marmotvale", "--strategy", "keyword"]).await;
    assert_eq!(gone["items"], json!([]), "{gone}");
    app.stop().await;
}

/// `sediment parked replay` moves parked messages back, `--limit` at a time, and prints each:
/// on an app without an index worker, two events a stand-in worker rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_replay_moves_messages_back() {
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("ADMIN_KEY", ADMIN_KEY.to_owned())],
            no_worker: true,
            ..Options::default()
        },
    )
    .await;
    let bus = app.backends.bus.clone();
    let mut older = bus.subscribe(WorkerKind::Index, 2).await.expect("subscribe");
    let mut ids = Vec::new();
    for _ in 0..2 {
        bus.publish(&sample_sessions(1)).await.expect("publish");
        let delivery = expect_delivery(older.as_mut(), "the event").await;
        ids.push(delivery.message_id.clone());
        older.settle(delivery, Outcome::Reject).await.expect("reject");
    }
    drop(older);
    let t = tenant();

    let output = sediment(&app, ADMIN_KEY, &t, &["parked", "replay", "index", "--limit", "1"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = stdout(&output);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], "replayed 1 parked message(s) to the index queue", "{printed}");
    let header: Vec<&str> = lines[1].split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(header, ["message id", "type", "reason", "attempts"], "{printed}");
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        row,
        [ids[0].as_str(), "turns.appended.v1", "rejected", "1"],
        "{printed}"
    );
    assert_eq!(lines.len(), 3, "{printed}");

    let rest = json_of(&app, ADMIN_KEY, &t, &["parked", "replay", "index"]).await;
    assert_eq!(
        rest,
        json!({ "kind": "index", "items": [
            { "message_id": ids[1], "type": "turns.appended.v1", "reason": "rejected", "attempts": 1 }
        ] })
    );
    eventually("both back in the index queue", || async {
        let stats = bus.stats(WorkerKind::Index).await.expect("stats");
        stats.ready == 2 && stats.parked == 0
    })
    .await;
    app.stop().await;
}
