//! End to end through HTTP, in both deployments: ingest, read back, search, idempotency,
//! concurrency, sanitizing and recovery from a stopped worker or lost events.

use std::collections::HashSet;
use std::time::Duration;

use integration_tests::app::{tenant, Mode, Options, TenantHeaders as _, TestApp, MODES};
use serde_json::{json, Value};
use shared::domain::{MEMORY_BLOCK_END, MEMORY_BLOCK_START};

const INDEX_WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn ingest_then_search_finds_the_turn() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        let body = app
            .append_ok(
                &t,
                "s1",
                json!([
                    {"role": "user", "content": "Please check the index on the orders table", "metadata": {"lang": "en"}},
                    {"role": "assistant", "content": "请检查订单表的索引，然后告诉我结果"},
                    {"role": "user", "content": "我是腾讯云 DBA，主要管北京区的 TDSQL-C"},
                ]),
            )
            .await;
        let seqs: Vec<i64> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, [1, 2, 3], "{mode:?}");
        app.wait_indexed(INDEX_WAIT).await;

        let hits = app.search_contents(&t, "orders index").await;
        assert_eq!(
            hits.first().map(String::as_str),
            Some("Please check the index on the orders table"),
            "{mode:?}"
        );
        // A Chinese word inside a longer phrase: 订单 within 订单表.
        let hits = app.search_contents(&t, "订单").await;
        assert_eq!(hits, ["请检查订单表的索引，然后告诉我结果"], "{mode:?}");
        let hits = app.search_contents(&t, "北京").await;
        assert_eq!(hits, ["我是腾讯云 DBA，主要管北京区的 TDSQL-C"], "{mode:?}");

        let response = app.search(&t, json!({"query": "orders", "session_id": "s1"})).await;
        let body: Value = response.json().await.unwrap();
        let item = &body["items"][0];
        assert_eq!(item["session_id"], "s1");
        assert_eq!(item["seq"], 1);
        assert_eq!(item["role"], "user");
        assert_eq!(item["metadata"], json!({"lang": "en"}));
        assert!(item["score"].as_f64().unwrap() > 0.0);
        assert!(item["id"].as_str().is_some() && item["created_at"].as_str().is_some());

        // Scoped to a session the hit is not in: nothing.
        let response = app.search(&t, json!({"query": "orders", "session_id": "other"})).await;
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["items"], json!([]), "{mode:?}");
    }
}

/// With the sweep ten minutes away, wake-ups alone index the turns: appends to many sessions
/// at once share `turns.appended` events, and the worker indexes every session of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wake_ups_alone_index_every_session() {
    for mode in MODES {
        let app = TestApp::with(
            mode,
            Options {
                env: vec![("WORKER_SWEEP_INTERVAL_MS", "600000".to_owned())],
                ..Options::default()
            },
        )
        .await;
        let t = tenant();
        // Past the start-up sweep first, which would otherwise find the turns below on its own.
        app.append_ok(&t, "warm-up", json!([{"role": "user", "content": "warming up"}]))
            .await;
        app.wait_indexed(INDEX_WAIT).await;
        let appends = (0..12).map(|i| {
            let (app, t) = (&app, &t);
            async move {
                let turn = json!([{"role": "user", "content": format!("wombat sighting number {i}")}]);
                app.append_ok(t, &format!("fan-{i}"), turn).await;
            }
        });
        futures::future::join_all(appends).await;
        app.wait_indexed(INDEX_WAIT).await;
        assert_eq!(app.search_contents(&t, "wombat").await.len(), 12, "{mode:?}");
    }
}

#[tokio::test]
async fn read_back_pages_in_order_with_metadata() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        let turns: Vec<Value> = (1..=25)
            .map(|i| json!({"role": if i % 2 == 0 { "assistant" } else { "user" }, "content": format!("turn {i} 🌊"), "metadata": {"i": i}}))
            .collect();
        app.append_ok(&t, "paging", Value::Array(turns)).await;
        let response = app.list(&t, "paging", "?after_seq=10&limit=5").await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        let page = body["messages"].as_array().unwrap();
        assert_eq!(page.len(), 5, "{mode:?}");
        assert_eq!(page[0]["seq"], 11);
        assert_eq!(page[0]["content"], "turn 11 🌊");
        assert_eq!(page[0]["metadata"], json!({"i": 11}));
        assert_eq!(page[4]["seq"], 15);
        let response = app.list(&t, "paging", "").await;
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 25);
    }
}

#[tokio::test]
async fn retry_with_the_same_client_id_writes_nothing() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        let turn = json!([{"role": "user", "content": "only once", "client_id": "k-1"}]);
        let first = app.append_ok(&t, "idem", turn.clone()).await;
        let second = app.append_ok(&t, "idem", turn).await;
        assert_eq!(first["messages"], second["messages"], "{mode:?}");
        let mixed = app
            .append_ok(&t, "idem", json!([{"role": "user", "content": "only once", "client_id": "k-1"}, {"role": "user", "content": "new"}]))
            .await;
        assert_eq!(mixed["messages"][0], first["messages"][0]);
        assert_eq!(mixed["messages"][1]["seq"], 2);
        let body: Value = app.list(&t, "idem", "").await.json().await.unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 2, "{mode:?}");
    }
}

#[tokio::test]
async fn concurrent_clients_get_gapless_unique_seqs() {
    const CLIENTS: usize = 8;
    const TURNS: usize = 500;
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..CLIENTS {
            let (client, base, t) = (app.client.clone(), app.base.clone(), t.clone());
            tasks.spawn(async move {
                let mut seqs = Vec::with_capacity(TURNS);
                for i in 0..TURNS {
                    let response = client
                        .post(format!("{base}/v1/sessions/busy/messages"))
                        .tenant_headers(&t)
                        .json(&json!({"messages": [{"role": "user", "content": format!("client {c} turn {i}")}]}))
                        .send()
                        .await
                        .expect("send");
                    assert_eq!(response.status(), 201);
                    let body: Value = response.json().await.expect("json");
                    seqs.push(body["messages"][0]["seq"].as_i64().expect("seq"));
                }
                seqs
            });
        }
        let mut all = Vec::new();
        while let Some(seqs) = tasks.join_next().await {
            all.extend(seqs.expect("client task"));
        }
        all.sort_unstable();
        let expected: Vec<i64> = (1..=(CLIENTS * TURNS) as i64).collect();
        assert_eq!(all, expected, "{mode:?}: seqs must be 1..=4000, each once");
        app.wait_indexed(INDEX_WAIT).await;
        assert_eq!(app.indexed_count(&t).await, (CLIENTS * TURNS) as u64, "{mode:?}");
    }
}

#[tokio::test]
async fn injected_memory_is_stripped_before_storage() {
    for mode in MODES {
        let app = TestApp::start(mode).await;
        let t = tenant();
        let content = format!("{MEMORY_BLOCK_START}\n- the user is a DBA\n{MEMORY_BLOCK_END}\nhow do I add an index?");
        app.append_ok(&t, "clean", json!([{"role": "user", "content": content}]))
            .await;
        let body: Value = app.list(&t, "clean", "").await.json().await.unwrap();
        assert_eq!(body["messages"][0]["content"], "how do I add an index?", "{mode:?}");
        app.wait_indexed(INDEX_WAIT).await;
        assert!(
            app.search_contents(&t, "DBA").await.is_empty(),
            "{mode:?}: injected memory must not be indexed"
        );
    }
}

#[tokio::test]
async fn a_stopped_worker_catches_up_exactly_once() {
    for mode in MODES {
        let app = TestApp::with(
            mode,
            Options {
                no_worker: true,
                ..Options::default()
            },
        )
        .await;
        let t = tenant();
        for batch in 0..10 {
            let turns: Vec<Value> = (0..100)
                .map(|i| json!({"role": "user", "content": format!("backlog turn {batch}-{i} walrus")}))
                .collect();
            app.append_ok(&t, &format!("backlog-{}", batch % 3), Value::Array(turns))
                .await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            app.indexed_count(&t).await,
            0,
            "{mode:?}: nothing indexes while the worker is down"
        );
        let lag = app.backends.store.lag(shared::store::INDEX_CONSUMER).await.unwrap();
        assert_eq!(lag.turns, 1_000);

        let _worker = app.spawn_index_worker();
        app.wait_indexed(INDEX_WAIT).await;
        assert_eq!(
            app.indexed_count(&t).await,
            1_000,
            "{mode:?}: every turn indexed, none twice"
        );
        let response = app.search(&t, json!({"query": "walrus", "limit": 100})).await;
        let body: Value = response.json().await.unwrap();
        let ids: HashSet<&str> = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 100, "{mode:?}");
    }
}

#[tokio::test]
async fn graceful_stop_drains_and_a_restart_keeps_every_turn() {
    // Embedded only: the data directory is the state. (Cluster state is the database, which
    // outlives any process by construction.)
    let dir = tempfile::tempdir().unwrap();
    let env = vec![
        ("DATA_DIR", dir.path().join("data").display().to_string()),
        ("INDEX_DIR", dir.path().join("index").display().to_string()),
    ];
    let t = tenant();
    {
        let mut app = TestApp::with(
            Mode::Embedded,
            Options {
                env: env.clone(),
                ..Options::default()
            },
        )
        .await;
        app.append_ok(
            &t,
            "keep",
            json!([{"role": "user", "content": "persist me across restarts"}]),
        )
        .await;
        app.wait_indexed(INDEX_WAIT).await;
        app.stop().await;
    }
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    let body: Value = app.list(&t, "keep", "").await.json().await.unwrap();
    assert_eq!(body["messages"][0]["content"], "persist me across restarts");
    assert_eq!(
        app.search_contents(&t, "restarts").await,
        ["persist me across restarts"]
    );
    let body = app
        .append_ok(&t, "keep", json!([{"role": "user", "content": "second"}]))
        .await;
    assert_eq!(body["messages"][0]["seq"], 2);
}

#[tokio::test]
async fn lost_events_only_delay_indexing() {
    for mode in MODES {
        let app = TestApp::with(
            mode,
            Options {
                lose_events: true,
                ..Options::default()
            },
        )
        .await;
        let t = tenant();
        app.append_ok(
            &t,
            "quiet",
            json!([{"role": "user", "content": "nobody announced this narwhal"}]),
        )
        .await;
        // No event arrives; the periodic sweep (200 ms in tests) must find the turn.
        app.wait_indexed(INDEX_WAIT).await;
        assert_eq!(
            app.search_contents(&t, "narwhal").await,
            ["nobody announced this narwhal"],
            "{mode:?}"
        );
    }
}

/// An index worker of `app`'s store and index consuming from `bus`, as its own task, until
/// `shutdown`.
fn index_consumer(
    app: &TestApp,
    bus: shared::bus::AmqpBus,
    sweep_interval: Duration,
    heartbeat: std::sync::Arc<shared::runtime::Heartbeat>,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    use std::sync::Arc;

    use shared::indexer::Indexer;
    use shared::runtime::{run_consumer, ConsumerSettings, IndexHandler};

    tokio::spawn(run_consumer(
        Arc::new(bus),
        Arc::new(IndexHandler(Indexer::new(
            app.backends.store.clone(),
            app.backends.index.clone(),
            app.backends.embedder.clone(),
            64,
        ))),
        ConsumerSettings {
            prefetch: 4,
            sweep_interval,
            shutdown_deadline: Duration::from_secs(5),
        },
        heartbeat,
        shutdown,
    ))
}

#[tokio::test]
async fn the_worker_resubscribes_after_losing_the_broker() {
    use std::sync::Arc;

    use shared::bus::{AmqpBus, AmqpSettings};
    use shared::config::Deployment;
    use shared::runtime::Heartbeat;

    // A long sweep period: only events can get the second turn indexed in time.
    let env = vec![("WORKER_SWEEP_INTERVAL_MS", "600000".to_owned())];
    let app = TestApp::with(
        Mode::Cluster,
        Options {
            no_worker: true,
            env,
            ..Options::default()
        },
    )
    .await;
    let Deployment::Cluster { amqp_url, .. } = &app.settings.deployment else {
        unreachable!()
    };
    let bus = AmqpBus::connect(AmqpSettings {
        url: amqp_url.clone(),
        prefix: app.settings.amqp_prefix.clone(),
        ..AmqpSettings::default()
    })
    .await
    .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let worker = index_consumer(
        &app,
        bus.clone(),
        Duration::from_secs(600),
        Arc::new(Heartbeat::default()),
        shutdown.clone(),
    );
    let t = tenant();
    app.append_ok(&t, "flaky", json!([{"role": "user", "content": "before the outage"}]))
        .await;
    app.wait_indexed(INDEX_WAIT).await;

    bus.force_disconnect().await;
    app.append_ok(&t, "flaky", json!([{"role": "user", "content": "after the outage"}]))
        .await;
    app.wait_indexed(INDEX_WAIT).await;
    assert_eq!(app.search_contents(&t, "outage").await.len(), 2);

    shutdown.cancel();
    worker.await.unwrap().unwrap();
}

/// While its broker is down, a worker goes on sweeping and beating: the store and the index
/// are up, so the turns still get indexed, and a liveness probe sees a loop that turns rather
/// than one stuck waiting to subscribe again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sweeps_and_beats_while_its_broker_is_down() {
    use std::sync::Arc;

    use integration_tests::chaos::PrivateBroker;
    use shared::bus::{AmqpBus, AmqpSettings};
    use shared::runtime::Heartbeat;

    let broker = PrivateBroker::start("sweeps").await.expect("start a private broker");
    let app = TestApp::with(
        Mode::Cluster,
        Options {
            no_worker: true,
            ..Options::default()
        },
    )
    .await;
    let bus = AmqpBus::connect(AmqpSettings {
        url: broker.url(),
        prefix: app.settings.amqp_prefix.clone(),
        ..AmqpSettings::default()
    })
    .await
    .unwrap();
    let heartbeat = Arc::new(Heartbeat::default());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let worker = index_consumer(
        &app,
        bus,
        Duration::from_millis(200),
        heartbeat.clone(),
        shutdown.clone(),
    );
    broker.stop_app().await.expect("stop the broker");
    // Long enough for the consumer to see its connection close and fail to subscribe again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t = tenant();
    // The API publishes its wake-up to the machine's broker, which no worker reads here: only
    // this worker's sweep can index the turn.
    app.append_ok(
        &t,
        "outage",
        json!([{"role": "user", "content": "indexed while the broker is away"}]),
    )
    .await;
    app.wait_indexed(INDEX_WAIT).await;
    assert_eq!(app.search_contents(&t, "broker").await.len(), 1);
    let age = heartbeat.age().expect("the loop started");
    assert!(age < Duration::from_secs(3), "the heartbeat stopped {age:?} ago");

    broker.start_app().await.expect("start the broker");
    shutdown.cancel();
    worker.await.unwrap().unwrap();
}
