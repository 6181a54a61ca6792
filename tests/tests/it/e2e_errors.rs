//! Bad input and tenant isolation, end to end in both deployments: every case gets a 4xx with
//! a JSON code, never a 500 and never a partial write.

use std::time::Duration;

use integration_tests::app::{tenant, Mode, Options, TestApp, MODES};
use reqwest::Method;
use serde_json::{json, Value};

async fn expect_error(response: reqwest::Response, status: u16, code: &str) {
    let got = response.status().as_u16();
    let body: Value = response.json().await.expect("error body is JSON");
    assert_eq!((got, body["code"].as_str()), (status, Some(code)), "body: {body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "body: {body}");
}

#[tokio::test]
async fn bad_input_gets_a_coded_4xx_and_writes_nothing() {
    for mode in MODES {
        let app = TestApp::with(
            mode,
            Options {
                env: vec![
                    ("MAX_BODY_BYTES", "4096".into()),
                    ("MAX_TURNS_PER_REQUEST", "10".into()),
                ],
                ..Options::default()
            },
        )
        .await;
        let t = tenant();
        let path = app.url("/v1/sessions/bad/messages");
        let ok_turn = json!({"role": "user", "content": "fine"});

        // No tenant at all.
        let r = app
            .client
            .post(&path)
            .json(&json!({"messages": [ok_turn]}))
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "missing_tenant").await;
        // Two of three headers.
        let r = app
            .client
            .post(&path)
            .header(api::TEAM_HEADER, "t")
            .header(api::AGENT_HEADER, "a")
            .json(&json!({"messages": [ok_turn]}))
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "missing_tenant").await;
        // Unknown role and empty content, next to a valid turn: nothing of the request is kept.
        let r = app
            .append(&t, "bad", json!([ok_turn, {"role": "robot", "content": "beep"}]))
            .await;
        expect_error(r, 422, "invalid_request").await;
        let r = app
            .append(&t, "bad", json!([ok_turn, {"role": "user", "content": "  "}]))
            .await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.append(&t, "bad", json!([])).await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.append(&t, "bad", json!([{"role": "user"}])).await;
        expect_error(r, 422, "invalid_request").await;
        // Malformed JSON.
        let r = app
            .req(Method::POST, "/v1/sessions/bad/messages", &t)
            .header("content-type", "application/json")
            .body("{\"messages\": [")
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "malformed_json").await;
        // Not JSON at all.
        let r = app
            .req(Method::POST, "/v1/sessions/bad/messages", &t)
            .body("hello")
            .send()
            .await
            .unwrap();
        expect_error(r, 415, "unsupported_media_type").await;
        // Over the body limit.
        let r = app
            .append(&t, "bad", json!([{"role": "user", "content": "x".repeat(5000)}]))
            .await;
        expect_error(r, 413, "payload_too_large").await;
        // Too many turns.
        let many: Vec<Value> = (0..11)
            .map(|i| json!({"role": "user", "content": format!("t{i}")}))
            .collect();
        let r = app.append(&t, "bad", Value::Array(many)).await;
        expect_error(r, 413, "too_many_items").await;
        // Bad query parameters and search bodies.
        let r = app.list(&t, "bad", "?limit=0").await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.list(&t, "bad", "?after_seq=-1").await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.list(&t, "bad", "?limit=abc").await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.search(&t, json!({"query": "  "})).await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.search(&t, json!({"query": "x", "limit": 0})).await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.search(&t, json!({"query": "x", "limit": 100000})).await;
        expect_error(r, 422, "invalid_request").await;
        let r = app.client.get(app.url("/v1/nope")).send().await.unwrap();
        expect_error(r, 404, "not_found").await;

        // None of the rejected requests left a turn behind: the session does not even exist.
        let r = app.list(&t, "bad", "").await;
        expect_error(r, 404, "not_found").await;
        app.append_ok(&t, "bad", json!([ok_turn])).await;
        let body: Value = app.list(&t, "bad", "").await.json().await.unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{mode:?}");
        assert_eq!(
            body["messages"][0]["seq"], 1,
            "{mode:?}: rejected requests consumed no seq"
        );
    }
}

#[tokio::test]
async fn tenants_never_see_each_other() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let a = tenant();
        let mut b = a.clone();
        b.user = "someone-else".into();
        app.append_ok(
            &a,
            "private",
            json!([{"role": "user", "content": "my secret plan involves zeppelins"}]),
        )
        .await;
        app.append_ok(
            &b,
            "theirs",
            json!([{"role": "user", "content": "zeppelins are also mine"}]),
        )
        .await;
        app.wait_indexed(Duration::from_secs(30)).await;

        // B cannot read, reset or search A's session; 404 as if it did not exist.
        expect_error(app.list(&b, "private", "").await, 404, "not_found").await;
        let r = app
            .req(Method::POST, "/v1/sessions/private/reset", &b)
            .send()
            .await
            .unwrap();
        expect_error(r, 404, "not_found").await;
        assert_eq!(
            app.search_contents(&b, "zeppelins").await,
            ["zeppelins are also mine"],
            "{mode:?}"
        );
        assert_eq!(
            app.search_contents(&a, "zeppelins").await,
            ["my secret plan involves zeppelins"],
            "{mode:?}"
        );
        let r = app
            .search(&b, json!({"query": "zeppelins", "session_id": "private"}))
            .await;
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["items"], json!([]), "{mode:?}");

        // B's append to the same id makes a session of B's own, numbered from 1.
        let r = app
            .append(&b, "private", json!([{"role": "user", "content": "intrusion"}]))
            .await;
        assert_eq!(r.status(), 201, "{mode:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["messages"][0]["seq"], 1, "{mode:?}");
        let body: Value = app.list(&b, "private", "").await.json().await.unwrap();
        assert_eq!(body["messages"][0]["content"], "intrusion", "{mode:?}");
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{mode:?}");

        // A's session is untouched by B's.
        let body: Value = app.list(&a, "private", "").await.json().await.unwrap();
        assert_eq!(
            body["messages"][0]["content"], "my secret plan involves zeppelins",
            "{mode:?}"
        );
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{mode:?}");
    }
}

#[tokio::test]
async fn reset_marks_the_session_and_deletes_nothing() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        app.append_ok(&t, "r", json!([{"role": "user", "content": "before reset"}]))
            .await;
        let r = app.req(Method::POST, "/v1/sessions/r/reset", &t).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["session_id"], "r");
        assert!(body["reset_at"].as_str().is_some(), "{mode:?}");
        let body: Value = app.list(&t, "r", "").await.json().await.unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{mode:?}");
        let r = app
            .req(Method::POST, "/v1/sessions/absent/reset", &t)
            .send()
            .await
            .unwrap();
        expect_error(r, 404, "not_found").await;
    }
}

#[tokio::test]
async fn probes_and_metrics_answer() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        let r = app.client.get(app.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let r = app.client.get(app.url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            body,
            json!({"store": "ok", "bus": "ok", "index": "ok", "files": "ok"}),
            "{mode:?}"
        );
        app.append_ok(&t, "m", json!([{"role": "user", "content": "count me"}]))
            .await;
        app.wait_indexed(Duration::from_secs(30)).await;
        let r = app.client.get(app.url("/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        for name in [
            "sediment_http_requests_total",
            "sediment_http_request_duration_seconds",
            "sediment_turns_ingested_total",
            "sediment_events_published_total",
            "sediment_turns_indexed_total",
            "sediment_index_round_sessions",
            // Both modes index into Qdrant Edge here: its syncs, and its segment count, which
            // every flush updates rather than only an optimizer run.
            "sediment_index_sync_sessions",
            "sediment_index_segments",
        ] {
            assert!(text.contains(name), "{mode:?}: /metrics lacks {name}");
        }
        // Index lag has buckets on both sides of 1 s and up to minutes.
        for le in ["0.75", "1.5", "300"] {
            let bucket = format!("sediment_index_delay_seconds_bucket{{le=\"{le}\"}}");
            assert!(text.contains(&bucket), "{mode:?}: /metrics lacks {bucket}");
        }
        assert!(
            text.contains("route=\"/v1/sessions/{session_id}/messages\""),
            "routes are labelled by template"
        );
        // The SQLite store's WAL is checkpointed by a thread of its own, every second.
        if mode == Mode::Embedded {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let r = app.client.get(app.url("/metrics")).send().await.unwrap();
                if r.text()
                    .await
                    .unwrap()
                    .contains("sediment_store_checkpoint_seconds_count")
                {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "no checkpoint in /metrics");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
