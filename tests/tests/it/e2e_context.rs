//! Session context end to end, in both deployments: a long mixed Chinese/English session
//! crossing 50 % and 75 % of its window, concurrent context calls, tenant isolation, bad input,
//! truncation, reset and forced compaction.
//!
//! Embedded: the API runs the compact worker itself. Cluster: the test runs one beside it, as a
//! `sediment-compact` process would (same handler, same bus).

use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, TestApp, MODES};
use integration_tests::mixed_session;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use shared::bus::WorkerKind;
use shared::domain::Tenant;

/// The compact worker of a deployment: in-process for embedded, started here for cluster.
fn compact_worker(app: &TestApp) -> Option<tokio_util::sync::DropGuard> {
    (app.mode == Mode::Cluster).then(|| app.spawn_compact_worker().drop_guard())
}

async fn get(app: &TestApp, t: &Tenant, path: &str) -> (StatusCode, Value) {
    let response = app.req(Method::GET, path, t).send().await.expect("send");
    let status = response.status();
    (status, response.json().await.expect("json body"))
}

async fn context(app: &TestApp, t: &Tenant, session: &str, window: u64) -> Value {
    let (status, body) = get(
        app,
        t,
        &format!("/v1/sessions/{session}/context?window_tokens={window}"),
    )
    .await;
    assert_eq!(status, 200, "context failed: {body}");
    body
}

async fn compaction(app: &TestApp, t: &Tenant, session: &str) -> Value {
    let (status, body) = get(app, t, &format!("/v1/sessions/{session}/compaction")).await;
    assert_eq!(status, 200, "compaction state failed: {body}");
    body
}

/// Waits until the session's compaction is `success` past `after_seq` (or, with `None`, just
/// `success`).
async fn wait_compacted(app: &TestApp, t: &Tenant, session: &str, after_seq: Option<i64>) -> Value {
    let started = Instant::now();
    loop {
        let state = compaction(app, t, session).await;
        let advanced = after_seq.is_none_or(|seq| state["last_seq"].as_i64().is_some_and(|last| last > seq));
        if state["status"] == "success" && advanced {
            return state;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no compaction after 20 s: {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn seqs(ctx: &Value) -> Vec<i64> {
    ctx["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["seq"].as_i64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_mixed_session_crosses_half_and_three_quarters_and_the_next_call_fits() {
    const WINDOW: u64 = 4_000;
    const TURNS: usize = 200;
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let _worker = compact_worker(&app);
        let t = tenant();
        let session = "long-mixed";
        let mut over_half_without_summary = 0;
        let mut reused = 0;
        let mut compactions = 0;
        let mut summarized_to: Option<i64> = None;
        for (i, turn) in mixed_session::turns(11, TURNS).into_iter().enumerate() {
            let seq = i as i64 + 1;
            app.append_ok(&t, session, json!([turn])).await;
            let ctx = context(&app, &t, session, WINDOW).await;
            let estimate = ctx["token_estimate"].as_u64().expect("token_estimate");
            assert!(estimate <= WINDOW, "{mode:?} turn {seq}: {estimate} over the window");
            assert_eq!(seqs(&ctx).last(), Some(&seq), "the newest turn is always there");
            let summary_used = ctx["summary_used"].as_bool().expect("summary_used");
            if summary_used {
                reused += 1;
                assert_eq!(ctx["messages"][0]["role"], "system");
                assert!(ctx["messages"][0]["seq"].is_null());
                assert_eq!(seqs(&ctx).first().map(|first| first - 1), summarized_to);
            } else if estimate > WINDOW / 2 {
                over_half_without_summary += 1;
            }
            if ctx["compaction"]["queued"] == true {
                compactions += 1;
                assert!(estimate > WINDOW * 3 / 4, "{mode:?}: queued at {estimate}");
                assert_eq!(ctx["turns_omitted"], false, "queued as soon as it crossed 75 %");
                let state = wait_compacted(&app, &t, session, summarized_to).await;
                assert_eq!(state["last_seq"], seq - 5, "all but the last 5 turns");
                summarized_to = state["last_seq"].as_i64();

                let next = context(&app, &t, session, WINDOW).await;
                let next_estimate = next["token_estimate"].as_u64().expect("token_estimate");
                assert_eq!(next["summary_used"], true, "{mode:?}: {next}");
                assert_eq!(next["turns_omitted"], false);
                assert!(
                    next_estimate <= WINDOW * 3 / 4,
                    "{mode:?}: {next_estimate} after compaction"
                );
                assert_eq!(next["compaction"]["due"], false);
                assert_eq!(seqs(&next), ((seq - 4)..=seq).collect::<Vec<_>>());
            }
        }
        assert!(
            over_half_without_summary > 0,
            "{mode:?}: never crossed 50 % before a summary"
        );
        assert!(
            compactions >= 3,
            "{mode:?}: only {compactions} compactions in {TURNS} turns"
        );
        assert!(reused > 100, "{mode:?}: the summary was reused {reused} times");

        let state = compaction(&app, &t, session).await;
        assert_eq!(state["status"], "success");
        assert_eq!(
            state["message_count"], state["last_seq"],
            "every turn up to last_seq, once"
        );
        assert_eq!(state["summarizer"], "rules");
        assert!(state["summary"]["requests_and_intent"]
            .as_array()
            .is_some_and(|a| !a.is_empty()));
        assert!(state["error"].is_null());

        let metrics = app.metrics_text().await;
        assert!(metrics.contains("sediment_context_summary_reuse_total"));
        assert!(metrics.contains("sediment_compactions_total{result=\"queued\"}"));
        if mode == Mode::Embedded {
            assert!(metrics.contains("sediment_compactions_total{result=\"success\"}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn context_calls_at_once_queue_one_compaction() {
    const WINDOW: u64 = 6_000;
    for mode in MODES {
        // Cluster: no compact worker yet, so the job and its event stay where they were put.
        let app = TestApp::start(mode).await;
        let t = tenant();
        let session = "crowded";
        app.append_ok(&t, session, json!(mixed_session::turns(3, 100))).await;
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let req = app.req(
                Method::GET,
                &format!("/v1/sessions/{session}/context?window_tokens={WINDOW}"),
                &t,
            );
            calls.spawn(async move { req.send().await.expect("send").json::<Value>().await.expect("json") });
        }
        let mut queued = 0;
        while let Some(ctx) = calls.join_next().await {
            let ctx = ctx.expect("call");
            // Embedded, the in-process worker may finish before the last calls read the
            // session; those then see the summary and nothing due.
            if ctx["compaction"]["queued"] == true {
                assert_eq!(ctx["compaction"]["due"], true, "{ctx}");
                queued += 1;
            }
        }
        assert_eq!(
            queued, 1,
            "{mode:?}: {queued} of 8 concurrent calls queued a compaction"
        );
        if mode == Mode::Cluster {
            assert_eq!(
                app.backends.bus.depth(WorkerKind::Compact).await.expect("depth"),
                Some(1),
                "one event for one job"
            );
            assert_eq!(compaction(&app, &t, session).await["status"], "pending");
            let _worker = app.spawn_compact_worker().drop_guard();
            wait_compacted(&app, &t, session, None).await;
        } else {
            wait_compacted(&app, &t, session, None).await;
        }
        let after = context(&app, &t, session, WINDOW).await;
        assert_eq!(after["summary_used"], true);
        assert_eq!(after["compaction"]["due"], false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_see_or_compact_a_session() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let _worker = compact_worker(&app);
        let owner = tenant();
        let session = "private";
        app.append_ok(&owner, session, json!(mixed_session::turns(5, 40))).await;
        let intruders = [
            tenant(),
            Tenant {
                user: "someone-else".into(),
                ..owner.clone()
            },
            Tenant {
                agent: "other-agent".into(),
                ..owner.clone()
            },
        ];
        for other in &intruders {
            for (method, path) in [
                (
                    Method::GET,
                    format!("/v1/sessions/{session}/context?window_tokens=1000"),
                ),
                (Method::POST, format!("/v1/sessions/{session}/compact")),
                (Method::GET, format!("/v1/sessions/{session}/compaction")),
            ] {
                let response = app.req(method.clone(), &path, other).send().await.expect("send");
                let status = response.status();
                let body: Value = response.json().await.expect("json");
                assert_eq!(
                    (status, body["code"].as_str()),
                    (StatusCode::NOT_FOUND, Some("not_found")),
                    "{method} {path}: {body}"
                );
            }
        }
        assert_eq!(
            compaction(&app, &owner, session).await["status"],
            "none",
            "{mode:?}: the intruders queued nothing"
        );
        // The owner compacts; the intruders still see nothing of it.
        let response = app
            .req(Method::POST, &format!("/v1/sessions/{session}/compact"), &owner)
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 202);
        wait_compacted(&app, &owner, session, None).await;
        let (status, _) = get(&app, &intruders[0], &format!("/v1/sessions/{session}/compaction")).await;
        assert_eq!(status, 404);
    }
}

#[tokio::test]
async fn bad_context_requests_get_a_coded_4xx() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        app.append_ok(&t, "s", json!([{"role": "user", "content": "hi"}])).await;
        for (query, why) in [
            ("", "absent"),
            ("?window_tokens=0", "zero"),
            ("?window_tokens=127", "below the minimum"),
            ("?window_tokens=2000001", "above the maximum"),
            ("?window_tokens=1000000000000", "huge"),
            ("?window_tokens=99999999999999999999999", "beyond u64"),
            ("?window_tokens=-5", "negative"),
            ("?window_tokens=abc", "not a number"),
            ("?window_tokens=1000&window=5", "an unknown parameter"),
        ] {
            let (status, body) = get(&app, &t, &format!("/v1/sessions/s/context{query}")).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
                "{mode:?} {why}: {body}"
            );
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
        let (status, body) = get(&app, &t, "/v1/sessions/nope/context?window_tokens=1000").await;
        assert_eq!((status.as_u16(), body["code"].as_str()), (404, Some("not_found")));
        let long = "x".repeat(200);
        let (status, _) = get(&app, &t, &format!("/v1/sessions/{long}/context?window_tokens=1000")).await;
        assert_eq!(status, 422);
        let response = app
            .client
            .get(app.url("/v1/sessions/s/context?window_tokens=1000"))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 400, "no tenant");
        let response = app
            .client
            .post(app.url("/v1/sessions/s/compact"))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 400, "no tenant");
        // The extremes that are allowed.
        context(&app, &t, "s", 128).await;
        let max = context(&app, &t, "s", 2_000_000).await;
        assert_eq!(max["messages"].as_array().map(Vec::len), Some(1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_turns_are_cut_reset_empties_the_window_and_compact_can_be_forced() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let _worker = compact_worker(&app);
        let t = tenant();
        let session = "cut";
        let long: String = format!("开头{}结尾", "订单表 orders 的慢查询分析。".repeat(300));
        app.append_ok(
            &t,
            session,
            json!([
                {"role": "user", "content": long},
                {"role": "assistant", "content": "好的，我看一下 EXPLAIN 的结果。"}
            ]),
        )
        .await;
        let ctx = context(&app, &t, session, 8_000).await;
        assert_eq!(ctx["truncated_turns"], 1);
        let cut = ctx["messages"][0]["content"].as_str().expect("content");
        assert!(cut.starts_with("开头订单表"), "{cut}");
        assert!(cut.ends_with("慢查询分析。结尾"), "{cut}");
        assert!(cut.contains("\n...[truncated]...\n"));
        assert_eq!(cut.chars().count(), 2_000 + "\n...[truncated]...\n".chars().count());
        assert_eq!(ctx["messages"][1]["content"], "好的，我看一下 EXPLAIN 的结果。");
        assert_eq!(ctx["summary_used"], false);
        assert_eq!(ctx["compaction"]["due"], false);

        // Forced on a short session: the job runs, finds nothing to fold in, succeeds.
        let response = app
            .req(Method::POST, &format!("/v1/sessions/{session}/compact"), &t)
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 202);
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["queued"], true, "{body}");
        let state = wait_compacted(&app, &t, session, None).await;
        assert!(state["last_seq"].is_null(), "no summary of 2 turns: {state}");

        // A real compaction, then a reset: the window is empty and the old summary unused.
        app.append_ok(&t, session, json!(mixed_session::turns(9, 30))).await;
        app.req(Method::POST, &format!("/v1/sessions/{session}/compact"), &t)
            .send()
            .await
            .expect("send");
        let state = wait_compacted(&app, &t, session, Some(0)).await;
        assert_eq!(state["last_seq"], 27);
        let response = app
            .req(Method::POST, &format!("/v1/sessions/{session}/reset"), &t)
            .send()
            .await
            .expect("reset");
        assert_eq!(response.status(), 200);
        let ctx = context(&app, &t, session, 500).await;
        assert_eq!(ctx["messages"], json!([]));
        assert_eq!(ctx["token_estimate"], 0);
        tokio::time::sleep(Duration::from_millis(5)).await;
        app.append_ok(&t, session, json!(mixed_session::turns(10, 12))).await;
        let ctx = context(&app, &t, session, 500).await;
        assert_eq!(
            ctx["summary_used"], false,
            "a summary from before the reset is never used"
        );
        assert!(seqs(&ctx).iter().all(|&seq| seq > 32), "{ctx}");
        assert!(ctx["token_estimate"].as_u64().unwrap() <= 500);

        let metrics = app.metrics_text().await;
        assert!(metrics.contains("sediment_context_truncations_total"));
    }
}
