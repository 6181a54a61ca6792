//! Hybrid search and recall end to end: over HTTP in both deployments with an embeddings
//! endpoint (the scripted fake: the only remote service tests may fake), and at the library
//! level over real SQLite and Qdrant Edge with an index that is made slow or down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Options, TestApp, MODES};
use integration_tests::fake_openai::FakeOpenAi;
use integration_tests::faulty_index::FaultyIndex;
use serde_json::{json, Value};
use shared::domain::{NewTurn, SessionId, MEMORY_BLOCK_END, MEMORY_BLOCK_START};
use shared::index::{EdgeIndex, Fusion, SearchIndex, Strategy};
use shared::indexer::Indexer;
use shared::recall::budget::CUT_MARKER;
use shared::recall::{Budget, Recall, RecallRequest};
use shared::search::ConversationSearch;
use shared::store::{SqliteStore, TranscriptStore};

const INDEX_WAIT: Duration = Duration::from_secs(30);
const DIMENSION: usize = 256;

/// These tests are about L0 turn recall: extraction is off, so no memory comes first
/// (memories in recall are tested by `e2e_memories`).
async fn app_with_embedder(mode: integration_tests::app::Mode, fake: &FakeOpenAi) -> TestApp {
    TestApp::with(
        mode,
        Options {
            env: vec![
                ("EXTRACT", "false".to_owned()),
                ("EMBEDDING", "openai".to_owned()),
                ("EMBEDDING_URL", fake.base_url()),
                ("EMBEDDING_MAX_RETRIES", "0".to_owned()),
                ("EMBEDDING_TIMEOUT_MS", "2000".to_owned()),
            ],
            ..Options::default()
        },
    )
    .await
}

/// An embedded app without an embedder and without extraction (see `app_with_embedder`).
async fn l0_app() -> TestApp {
    TestApp::with(
        integration_tests::app::Mode::Embedded,
        Options {
            env: vec![("EXTRACT", "false".to_owned())],
            ..Options::default()
        },
    )
    .await
}

fn contents(body: &Value) -> Vec<String> {
    body["dynamic"]
        .as_array()
        .expect("dynamic array")
        .iter()
        .map(|item| {
            let content = item["content"].as_str().expect("content");
            content
                .strip_prefix(MEMORY_BLOCK_START)
                .and_then(|c| c.strip_suffix(MEMORY_BLOCK_END))
                .unwrap_or_else(|| panic!("item not wrapped in the memory markers: {content}"))
                .to_owned()
        })
        .collect()
}

fn conversation() -> Value {
    json!([
        {"role": "user", "content": "I adopted a puppy last week and named him Biscuit"},
        {"role": "assistant", "content": "Congratulations on the new puppy! What a lovely name."},
        {"role": "user", "content": "The billing service is owned by Priya since March"},
        {"role": "user", "content": "我们把订单表迁移到了 TDSQL-C 北京区"},
        {"role": "assistant", "content": "Noted: the migration of the orders table went to Beijing."},
        {"role": "user", "content": "Remember that I never drink coffee after noon"},
    ])
}

#[tokio::test]
async fn strategies_search_and_recall_with_an_embeddings_endpoint() {
    for mode in MODES {
        let fake = FakeOpenAi::start(DIMENSION).await;
        let app = app_with_embedder(mode, &fake).await;
        assert_eq!(app.backends.index.dense_dimension(), Some(DIMENSION), "{mode:?}");
        let t = tenant();
        // Ingest does not embed: only the index worker does, after the turns are stored.
        app.append_ok(&t, "s1", conversation()).await;
        app.wait_indexed(INDEX_WAIT).await;
        let embedded: usize = fake
            .embeddings()
            .bodies()
            .iter()
            .map(|b| b["input"].as_array().map_or(1, Vec::len))
            .sum();
        assert!(embedded >= 6, "{mode:?}: the worker embedded {embedded} texts");

        for strategy in ["keyword", "semantic", "hybrid"] {
            let response = app
                .search(
                    &t,
                    json!({"query": "puppy named Biscuit", "strategy": strategy, "limit": 3}),
                )
                .await;
            assert_eq!(response.status(), 200, "{mode:?} {strategy}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["strategy"], strategy, "{mode:?}: {body}");
            assert_eq!(body["errors"], json!([]));
            assert_eq!(
                body["items"][0]["content"], "I adopted a puppy last week and named him Biscuit",
                "{mode:?} {strategy}: {body}"
            );
        }

        let body = app
            .recall_ok(
                &t,
                json!({"query": "who owns the billing service?", "limit": 2, "session_id": "s1"}),
            )
            .await;
        assert_eq!(body["strategy"], "hybrid", "{mode:?}: {body}");
        assert_eq!(body["errors"], json!([]), "{mode:?}");
        assert_eq!(body["truncated"], false);
        // No scenes or persona yet; the tool guide is always there.
        assert_eq!(body["stable"]["persona"], "");
        assert_eq!(body["stable"]["scene_navigation"], "");
        assert!(body["stable"]["tools_guide"]
            .as_str()
            .is_some_and(|g| g.contains("/v1/conversations/search")));
        let items = contents(&body);
        assert_eq!(items.len(), 2, "{mode:?}: {body}");
        assert_eq!(items[0], "The billing service is owned by Priya since March");
        let first = &body["dynamic"][0];
        assert_eq!(first["kind"], "turn");
        assert_eq!(first["source"]["type"], "turn");
        assert_eq!(first["source"]["session_id"], "s1");
        assert_eq!(first["source"]["seq"], 3);
        assert_eq!(first["source"]["role"], "user");
        assert!(first["score"].as_f64().unwrap() > 0.0);

        // Recalled memory sent back in the next turn is stripped again at ingest.
        let echoed = format!("{} what about the budget?", first["content"].as_str().unwrap());
        app.append_ok(&t, "s1", json!([{"role": "user", "content": echoed}]))
            .await;
        let listed: Value = app.list(&t, "s1", "?after_seq=6").await.json().await.unwrap();
        assert_eq!(listed["messages"][0]["content"], "what about the budget?");

        // Another tenant recalls nothing of this one's, by any strategy.
        let other = tenant();
        for strategy in ["keyword", "semantic", "hybrid"] {
            let body = app
                .recall_ok(&other, json!({"query": "puppy Biscuit billing", "strategy": strategy}))
                .await;
            assert_eq!(body["dynamic"], json!([]), "{mode:?} {strategy}: {body}");
        }
    }
}

#[tokio::test]
async fn budgets_cut_and_drop_in_code_points() {
    let fake = FakeOpenAi::start(DIMENSION).await;
    let app = app_with_embedder(integration_tests::app::Mode::Embedded, &fake).await;
    let t = tenant();
    let long = "订单表迁移😀 orders migration ".repeat(20);
    app.append_ok(
        &t,
        "s1",
        json!([
            {"role": "user", "content": long},
            {"role": "user", "content": "short note about the orders migration"},
            {"role": "user", "content": "订单 migration plan: 周五上线 🚀"},
        ]),
    )
    .await;
    app.wait_indexed(INDEX_WAIT).await;

    let body = app
        .recall_ok(
            &t,
            json!({"query": "orders migration", "budget": {"item_chars": 60, "total_chars": 110}}),
        )
        .await;
    assert_eq!(body["truncated"], true, "{body}");
    let items = contents(&body);
    assert!(
        !items.is_empty() && items.len() < 3,
        "the total cap dropped something: {items:?}"
    );
    let total: usize = items.iter().map(|i| i.chars().count()).sum();
    assert!(total <= 110, "total {total} > 110: {items:?}");
    for item in &items {
        assert!(item.chars().count() <= 60, "item over the cap: {item}");
    }
    let cut = items
        .iter()
        .find(|i| i.ends_with(CUT_MARKER))
        .expect("the long item is cut");
    assert!(
        long.starts_with(cut.trim_end_matches(CUT_MARKER)),
        "a cut keeps a prefix: {cut}"
    );
    // Scores stay best first after the drop.
    let scores: Vec<f64> = body["dynamic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

#[tokio::test]
async fn a_small_scope_is_returned_whole() {
    let app = l0_app().await;
    let t = tenant();
    app.append_ok(
        &t,
        "tiny",
        json!([
            {"role": "user", "content": "deploy the invoice service on friday"},
            {"role": "assistant", "content": "sure"},
            {"role": "user", "content": "and tell Maria"},
        ]),
    )
    .await;
    app.append_ok(&t, "other", json!([{"role": "user", "content": "unrelated chatter"}]))
        .await;
    app.wait_indexed(INDEX_WAIT).await;
    let body = app
        .recall_ok(&t, json!({"query": "invoice deploy", "session_id": "tiny", "limit": 5}))
        .await;
    let items = contents(&body);
    assert_eq!(
        items.len(),
        3,
        "every turn of a scope smaller than the limit: {items:?}"
    );
    assert_eq!(
        items[0], "deploy the invoice service on friday",
        "the match still ranks first"
    );
    assert_eq!(body["strategy"], "keyword", "no embedder: hybrid runs as keyword");
}

#[tokio::test]
async fn embedding_outage_degrades_to_keyword_and_says_so() {
    for mode in MODES {
        let fake = FakeOpenAi::start(DIMENSION).await;
        let app = app_with_embedder(mode, &fake).await;
        let t = tenant();
        app.append_ok(&t, "s1", conversation()).await;
        app.wait_indexed(INDEX_WAIT).await;
        fake.set_down(true);

        let body = app.recall_ok(&t, json!({"query": "billing service owner"})).await;
        assert_eq!(body["strategy"], "keyword", "{mode:?}: {body}");
        assert_eq!(body["errors"][0]["code"], "embedding_unavailable", "{mode:?}: {body}");
        assert_eq!(
            contents(&body)[0],
            "The billing service is owned by Priya since March",
            "keyword results still come back"
        );
        let response = app
            .search(&t, json!({"query": "billing", "strategy": "semantic"}))
            .await;
        assert_eq!(
            response.status(),
            503,
            "{mode:?}: semantic search has nothing to fall back to"
        );
        let body: Value = app
            .search(&t, json!({"query": "billing", "strategy": "hybrid"}))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(body["strategy"], "keyword");
        assert_eq!(body["errors"][0]["code"], "embedding_unavailable");

        // A slow endpoint: the recall answers within its deadline, by keyword.
        fake.set_down(false);
        fake.embeddings()
            .push(integration_tests::fake_openai::Fault::Delay(Duration::from_secs(3)));
        let started = Instant::now();
        let body = app
            .recall_ok(&t, json!({"query": "billing service owner", "timeout_ms": 400}))
            .await;
        assert!(
            started.elapsed() < Duration::from_millis(1_500),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(body["errors"][0]["code"], "embedding_unavailable", "{body}");
        assert!(!contents(&body).is_empty());
    }
}

#[tokio::test]
async fn semantic_search_without_an_embedder_is_a_clear_4xx() {
    let app = l0_app().await;
    let t = tenant();
    let response = app.search(&t, json!({"query": "x", "strategy": "semantic"})).await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("embedding provider"),
        "{body}"
    );
    // Recall instead degrades and says why.
    app.append_ok(&t, "s1", json!([{"role": "user", "content": "hello world"}]))
        .await;
    app.wait_indexed(INDEX_WAIT).await;
    let body = app
        .recall_ok(&t, json!({"query": "hello", "strategy": "semantic"}))
        .await;
    assert_eq!(body["strategy"], "keyword");
    assert_eq!(body["errors"][0]["code"], "embedding_unavailable");
    assert_eq!(contents(&body), ["hello world"]);
}

#[tokio::test]
async fn bad_recall_requests_get_4xx_codes() {
    let app = l0_app().await;
    let t = tenant();
    for (body, status, code) in [
        (json!({"query": ""}), 422, "invalid_request"),
        (json!({"query": "x", "limit": 0}), 422, "invalid_request"),
        (json!({"query": "x", "limit": 100_000}), 422, "invalid_request"),
        (json!({"query": "x", "timeout_ms": 0}), 422, "invalid_request"),
        (
            json!({"query": "x", "budget": {"item_chars": 0}}),
            422,
            "invalid_request",
        ),
        (json!({"query": "x", "strategy": "psychic"}), 422, "invalid_request"),
        (json!({"query": "x", "surprise": true}), 422, "invalid_request"),
        (json!({"query": "x", "session_id": ""}), 422, "invalid_request"),
    ] {
        let response = app.recall(&t, body.clone()).await;
        let got_status = response.status().as_u16();
        let got: Value = response.json().await.unwrap();
        assert_eq!(
            (got_status, got["code"].as_str().unwrap()),
            (status, code),
            "{body}: {got}"
        );
    }
    let response = app
        .client
        .post(app.url("/v1/recall"))
        .json(&json!({"query": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400, "no tenant");
}

fn request(query: &str, timeout: Duration) -> RecallRequest {
    RecallRequest {
        query: query.to_owned(),
        session: None,
        task: None,
        strategy: Strategy::Hybrid,
        limit: 5,
        budget: Budget {
            item_chars: 1_000,
            total_chars: 5_000,
        },
        timeout,
        recency: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_down_index_is_reported_not_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("db.sqlite")).await.unwrap());
    let store: Arc<dyn TranscriptStore> = sqlite.clone();
    let edge: Arc<dyn SearchIndex> = Arc::new(EdgeIndex::open(&dir.path().join("index"), 5_000, None).unwrap());
    let t = tenant();
    let session = SessionId::parse("s1").unwrap();
    let turn = NewTurn::new(
        "user",
        "the staging database password rotates monthly",
        None,
        None,
        None,
    )
    .unwrap();
    store.append(&t, &session, &[turn]).await.unwrap();
    Indexer::new(store.clone(), edge.clone(), None, 100)
        .index_session(&shared::domain::SessionKey::new(t.clone(), "s1"))
        .await
        .unwrap();

    let recall_with = |delay: Duration, down: bool| {
        let impaired = FaultyIndex::new(edge.clone()).with_search_delay(delay);
        impaired.set_reads_down(down);
        let index: Arc<dyn SearchIndex> = Arc::new(impaired);
        Recall::new(
            ConversationSearch::new(store.clone(), index, None, Fusion::default()),
            sqlite.clone(),
        )
    };

    let healthy = recall_with(Duration::ZERO, false)
        .recall(&t, &request("database password", Duration::from_secs(5)))
        .await;
    assert_eq!(healthy.dynamic.len(), 1);
    assert!(healthy.errors.is_empty(), "{:?}", healthy.errors);

    let started = Instant::now();
    let slow = recall_with(Duration::from_secs(5), false)
        .recall(&t, &request("database password", Duration::from_millis(300)))
        .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1_000),
        "the deadline was not kept: {took:?}"
    );
    assert_eq!(slow.errors.len(), 1, "{:?}", slow.errors);
    assert_eq!(slow.errors[0].code, "recall_timeout");
    assert!(slow.dynamic.is_empty());

    let down = recall_with(Duration::ZERO, true)
        .recall(&t, &request("database password", Duration::from_secs(5)))
        .await;
    assert_eq!(down.errors[0].code, "index_unavailable", "{:?}", down.errors);
    assert!(down.dynamic.is_empty());
}
