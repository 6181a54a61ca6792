//! L1 memories end to end through the API, in both deployments, with the rules engine (the
//! embedded default): extraction on the warm-up schedule, recall of memories before turns,
//! dedup with history, corrections and deletions, idle flush, shutdown flush, tenancy and
//! input validation.

use std::time::Duration;

use integration_tests::app::{tenant, Mode, Options, TestApp};
use reqwest::Method;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

fn user(content: &str) -> Value {
    json!([{ "role": "user", "content": content }])
}

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

/// The seed's second-turn case: what the user said in turn 1 is recalled during turn 2.
async fn second_turn_recalls_the_first(mode: Mode) {
    let app = app(mode).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    app.wait_extracted(WAIT).await;

    let recall = app
        .recall_ok(&t, json!({ "query": "帮我看一下这个实例的慢查询", "session_id": "s1" }))
        .await;
    let first = &recall["dynamic"][0];
    assert_eq!(first["kind"], "memory", "a memory comes first: {recall}");
    assert!(
        first["content"]
            .as_str()
            .unwrap()
            .contains("我是腾讯云 DBA，主要管北京区的 TDSQL-C"),
        "{recall}"
    );
    assert_eq!(first["source"]["type"], "memory");
    assert_eq!(first["source"]["category"], "persona");
    // The turn the memory came from is not repeated as an L0 item.
    let turns = recall["dynamic"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "turn")
        .count();
    assert_eq!(turns, 0, "{recall}");
    assert!(recall["errors"].as_array().unwrap().is_empty(), "{recall}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_second_turn_recalls_the_first() {
    second_turn_recalls_the_first(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_second_turn_recalls_the_first() {
    second_turn_recalls_the_first(Mode::Cluster).await;
}

/// Repeating a fact is discarded; contradicting it archives the old one with history; the
/// memory detail shows both and its provenance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeat_and_contradiction_keep_one_current_memory_with_history() {
    let app = app(Mode::Embedded).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I live in Beijing.")).await;
    app.wait_extracted(WAIT).await;
    app.append_ok(&t, "s2", user("I live in Beijing.")).await;
    app.wait_extracted(WAIT).await;
    assert_eq!(
        app.memory_contents(&t).await,
        ["I live in Beijing."],
        "a repeat is discarded"
    );

    app.append_ok(&t, "s3", user("I live in Shanghai.")).await;
    app.wait_extracted(WAIT).await;
    assert_eq!(
        app.memory_contents(&t).await,
        ["I live in Shanghai."],
        "the contradiction wins"
    );
    let archived = app.memories(&t, "?status=archived").await;
    assert_eq!(archived["items"].as_array().unwrap().len(), 1, "{archived}");
    assert_eq!(archived["items"][0]["content"], "I live in Beijing.");

    let current = app.memories(&t, "?status=active").await["items"][0].clone();
    let detail: Value = app
        .req(
            Method::GET,
            &format!("/v1/memories/{}", current["id"].as_str().unwrap()),
            &t,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["history"][0]["content"], "I live in Beijing.", "{detail}");
    assert_eq!(detail["history"][0]["superseded_by"], current["id"]);
    let provenance = &detail["provenance"][0];
    assert_eq!(provenance["event"], "update", "{detail}");
    assert_eq!(provenance["layer"], "L1");
    assert_eq!(provenance["model"], "rules");
    assert_eq!(provenance["template"]["id"], "l1-extract");
    assert_eq!(provenance["input_message_ids"], current["source_message_ids"]);
    assert_eq!(provenance["detail"]["archived"][0], archived["items"][0]["id"]);

    // Recall sees only the current fact.
    let recall = app.recall_ok(&t, json!({ "query": "where do I live" })).await;
    let memories: Vec<&str> = recall["dynamic"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "memory")
        .map(|i| i["content"].as_str().unwrap())
        .collect();
    assert_eq!(memories.len(), 1, "{recall}");
    assert!(memories[0].contains("Shanghai"));
}

/// A refinement (the old fact plus more) replaces the old memory, which stays as history.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refinement_updates_the_memory() {
    let app = app(Mode::Cluster).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I prefer Python.")).await;
    app.wait_extracted(WAIT).await;
    app.append_ok(&t, "s2", user("I prefer Python 3.12 for data scripts."))
        .await;
    app.wait_extracted(WAIT).await;
    assert_eq!(
        app.memory_contents(&t).await,
        ["I prefer Python 3.12 for data scripts."],
        "the refinement replaced the old memory"
    );
    let current = app.memories(&t, "?status=active").await["items"][0].clone();
    let detail: Value = app
        .req(
            Method::GET,
            &format!("/v1/memories/{}", current["id"].as_str().unwrap()),
            &t,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["history"][0]["content"], "I prefer Python.", "{detail}");
    assert_eq!(detail["history"][0]["status"], "archived");
}

/// Acknowledgements are dropped; secrets never reach a memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn junk_is_dropped_and_secrets_are_redacted() {
    let app = app(Mode::Embedded).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("好的")).await;
    app.append_ok(
        &t,
        "s1",
        user("Remember that my API key for staging is sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c."),
    )
    .await;
    app.wait_extracted(WAIT).await;
    let contents = app.memory_contents(&t).await;
    assert_eq!(contents.len(), 1, "{contents:?}");
    assert!(
        !contents[0].contains("sk-live-4f9a8b7c"),
        "a secret reached a memory: {contents:?}"
    );
    assert!(contents[0].contains("REDACTED"), "{contents:?}");
}

/// After the warm-up, turns below the threshold wait for the idle flush, which comes from the
/// stored due-time even when every wake-up event is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_sessions_are_flushed_even_without_events() {
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("EXTRACT_IDLE_FLUSH_MS", "400".into())],
            lose_events: true,
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I prefer dark mode in every editor."))
        .await;
    app.wait_extracted(WAIT).await;
    assert_eq!(
        app.memory_contents(&t).await.len(),
        1,
        "the first turn is extracted at once"
    );
    // Runs = 1: the next batch waits for 2 turns; one turn waits for the idle flush.
    app.append_ok(&t, "s1", user("Remember that I deploy only on Mondays."))
        .await;
    app.wait_extracted(WAIT).await;
    let contents = app.memory_contents(&t).await;
    assert_eq!(contents.len(), 2, "{contents:?}");
    let schedule = app
        .backends
        .memories
        .schedule(&shared::domain::SessionKey::new(t.clone(), "s1"))
        .await
        .unwrap();
    assert_eq!(schedule.runs, 2);
    assert_eq!(schedule.idle_due_at, None, "the flush cleared the due-time");
}

/// With the sweep and the idle flush far away, wake-ups alone start extraction: the first turns
/// of many sessions, appended at once, share `turns.appended` events, and the worker extracts
/// every session of each (a session's first turn is extracted at once, on the warm-up
/// schedule).
async fn wake_ups_alone_extract_every_session(mode: Mode) {
    let app = TestApp::with(
        mode,
        Options {
            env: vec![
                ("EXTRACT_IDLE_FLUSH_MS", "3600000".into()),
                ("WORKER_SWEEP_INTERVAL_MS", "600000".into()),
            ],
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    // Past the start-up sweep first, which would otherwise find the turns below on its own.
    app.append_ok(&t, "warm-up", user("I am a site reliability engineer."))
        .await;
    app.wait_extracted(WAIT).await;
    let appends = (0..6).map(|i| {
        let (app, t) = (&app, &t);
        async move {
            app.append_ok(t, &format!("fan-{i}"), user(&format!("I prefer editor number {i}.")))
                .await;
        }
    });
    futures::future::join_all(appends).await;
    app.wait_extracted(WAIT).await;
    let contents = app.memory_contents(&t).await;
    assert_eq!(contents.len(), 7, "{mode:?}: {contents:?}");
    for i in 0..6 {
        let said = format!("editor number {i}");
        assert!(
            contents.iter().any(|c| c.contains(&said)),
            "{mode:?}: {said} in {contents:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_wake_ups_alone_extract_every_session() {
    wake_ups_alone_extract_every_session(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_wake_ups_alone_extract_every_session() {
    wake_ups_alone_extract_every_session(Mode::Cluster).await;
}

/// A graceful stop flushes what is pending instead of leaving it for the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_shutdown_flushes_pending_turns() {
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("EXTRACT_IDLE_FLUSH_MS", "3600000".into())],
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I am a backend engineer.")).await;
    app.wait_extracted(WAIT).await;
    app.append_ok(&t, "s1", user("I prefer Rust for services.")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lag = app
        .backends
        .store
        .lag(shared::store::memory::EXTRACT_CONSUMER)
        .await
        .unwrap();
    assert_eq!(lag.turns, 1, "the second turn waits for more turns or the idle flush");
    // Another run holds the session when the stop comes (one still busy with the last turn,
    // say): the flush waits for it to let go instead of leaving the turn for the next start.
    // The second turn's own look at the session (which only arms its timer) holds the lease for
    // a few statements, longer than the wait above on a loaded machine: claim once it let go.
    let held = async {
        loop {
            let claimed = app
                .backends
                .memories
                .claim_session(
                    &shared::domain::SessionKey::new(t.clone(), "s1"),
                    uuid::Uuid::new_v4(),
                    chrono::Utc::now() + chrono::Duration::milliseconds(700),
                )
                .await
                .unwrap();
            if claimed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, held)
        .await
        .expect("the run that armed the second turn's timer lets the session go");
    app.stop().await;
    let lag = app
        .backends
        .store
        .lag(shared::store::memory::EXTRACT_CONSUMER)
        .await
        .unwrap();
    assert_eq!(lag.turns, 0, "shutdown flushed the pending turn");
    let count = app
        .backends
        .memories
        .count_memories(&t, shared::memory::MemoryStatus::Active)
        .await
        .unwrap();
    assert_eq!(count, 2);
}

/// A correction is applied, recorded and followed by recall; a deletion removes the memory
/// from the store and from recall.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corrections_and_deletions_reach_recall() {
    let app = app(Mode::Embedded).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I prefer tabs for indentation.")).await;
    app.wait_extracted(WAIT).await;
    let id = app.memories(&t, "").await["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let patched = app
        .req(Method::PATCH, &format!("/v1/memories/{id}"), &t)
        .json(&json!({ "content": "I prefer spaces for indentation.", "priority": 90, "scene": null }))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    let patched: Value = patched.json().await.unwrap();
    assert_eq!(patched["content"], "I prefer spaces for indentation.");
    assert_eq!(patched["priority"], 90);
    assert_eq!(patched["scene"], Value::Null);

    let recall = app.recall_ok(&t, json!({ "query": "spaces indentation" })).await;
    assert_eq!(recall["dynamic"][0]["kind"], "memory", "{recall}");
    assert!(recall["dynamic"][0]["content"].as_str().unwrap().contains("spaces"));

    let detail: Value = app
        .req(Method::GET, &format!("/v1/memories/{id}"), &t)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let events: Vec<&str> = detail["provenance"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["add", "correction"], "{detail}");
    assert_eq!(
        detail["provenance"][1]["detail"]["before"]["content"],
        "I prefer tabs for indentation."
    );

    let deleted = app
        .req(Method::DELETE, &format!("/v1/memories/{id}"), &t)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let gone = app
        .req(Method::GET, &format!("/v1/memories/{id}"), &t)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    let recall = app.recall_ok(&t, json!({ "query": "spaces indentation" })).await;
    assert!(
        recall["dynamic"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["kind"] != "memory"),
        "a deleted memory is still recalled: {recall}"
    );
    let points = app
        .backends
        .index
        .count(&t, shared::index::PointKind::Memory)
        .await
        .unwrap();
    assert_eq!(points, 0, "the deleted memory left the index");
}

/// No endpoint shows or changes another tenant's memories.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memories_never_cross_tenants() {
    let app = app(Mode::Cluster).await;
    let (owner, other) = (tenant(), tenant());
    app.append_ok(&owner, "s1", user("I am the on-call DBA for payments."))
        .await;
    app.wait_extracted(WAIT).await;
    let id = app.memories(&owner, "").await["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    assert!(app.memories(&other, "").await["items"].as_array().unwrap().is_empty());
    for method in [Method::GET, Method::DELETE] {
        let response = app
            .req(method.clone(), &format!("/v1/memories/{id}"), &other)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{method} of another tenant's memory");
    }
    let response = app
        .req(Method::PATCH, &format!("/v1/memories/{id}"), &other)
        .json(&json!({ "content": "hijacked" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let recall = app.recall_ok(&other, json!({ "query": "on-call DBA payments" })).await;
    assert!(recall["dynamic"].as_array().unwrap().is_empty(), "{recall}");
    assert_eq!(
        app.memory_contents(&owner).await,
        ["I am the on-call DBA for payments."]
    );
}

/// Listing pages without gaps and filters; bad input is a 4xx with a code.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_pages_filters_and_validates() {
    let app = app(Mode::Embedded).await;
    let t = tenant();
    let facts = [
        "I am a data engineer.",
        "I prefer Python for scripts.",
        "Always use UTC timestamps.",
        "I prefer short answers.",
        "Never run migrations on Fridays.",
    ];
    for (i, fact) in facts.iter().enumerate() {
        // One session each: each first turn is extracted at once.
        app.append_ok(&t, &format!("s{i}"), user(fact)).await;
    }
    app.wait_extracted(WAIT).await;

    let mut seen = Vec::new();
    let mut query = "?limit=2".to_owned();
    loop {
        let page = app.memories(&t, &query).await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|m| m["content"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => query = format!("?limit=2&cursor={next}"),
            None => break,
        }
    }
    seen.sort();
    let mut expected: Vec<String> = facts.iter().map(|f| (*f).to_owned()).collect();
    expected.sort();
    assert_eq!(seen, expected, "pages cover every memory exactly once");

    let instructions = app.memories(&t, "?category=instruction").await;
    assert!(instructions["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["category"] == "instruction"));
    let session = app.memories(&t, "?session_id=s0").await;
    assert_eq!(session["items"].as_array().unwrap().len(), 1);

    for (query, code) in [
        ("?category=feelings", "invalid_request"),
        ("?status=deleted", "invalid_request"),
        ("?limit=0", "invalid_request"),
        ("?limit=100000", "invalid_request"),
        ("?cursor=garbage", "invalid_request"),
    ] {
        let response = app
            .req(Method::GET, &format!("/v1/memories{query}"), &t)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 422, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], code, "{query}: {body}");
    }
    let id = app.memories(&t, "").await["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for (body, status) in [
        (json!({}), 422),
        (json!({ "priority": 101 }), 422),
        (json!({ "content": "   " }), 422),
        (json!({ "category": "feelings" }), 422),
        (json!({ "colour": "blue" }), 422),
    ] {
        let response = app
            .req(Method::PATCH, &format!("/v1/memories/{id}"), &t)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{body}");
    }
    let missing = app
        .req(Method::GET, "/v1/memories/not-a-uuid", &t)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let no_tenant = reqwest::get(app.url("/v1/memories")).await.unwrap();
    assert_eq!(no_tenant.status(), 400);
}

/// With extraction off, turns stay L0 only, and the extract queue takes no events (nothing
/// would ever consume them: they would pile up in memory, or in RabbitMQ).
async fn extraction_off_extracts_nothing_and_queues_nothing(mode: Mode) {
    let app = TestApp::with(
        mode,
        Options {
            env: vec![("EXTRACT", "false".into())],
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    for i in 0..3 {
        app.append_ok(&t, "s1", user(&format!("I prefer option {i}."))).await;
    }
    app.wait_indexed(WAIT).await;
    let depth = app.backends.bus.depth(shared::bus::WorkerKind::Extract).await.unwrap();
    assert_eq!(depth, Some(0), "events for a worker that will never run");
    assert!(app.memory_contents(&t).await.is_empty());
    let recall = app.recall_ok(&t, json!({ "query": "option" })).await;
    assert!(recall["dynamic"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["kind"] == "turn"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_extraction_off_extracts_nothing_and_queues_nothing() {
    extraction_off_extracts_nothing_and_queues_nothing(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_extraction_off_extracts_nothing_and_queues_nothing() {
    extraction_off_extracts_nothing_and_queues_nothing(Mode::Cluster).await;
}
