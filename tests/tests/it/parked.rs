//! Parked messages and their replay (issue 39, upgrades). Every worker, on every routing key it
//! consumes, parks a message it cannot read (an event type from a newer API, a body that is not
//! JSON) without acking it away or stopping; `POST /v1/admin/queues/{kind}/parked/replay` moves
//! them back, and they park again since the worker still cannot read them. A valid message
//! parked by an older worker is replayed to the real worker, which consumes it. And the
//! endpoint's failures: an unknown kind, a bad limit, a broker that is down.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::amqp::amqp_url;
use integration_tests::app::{tenant, Mode, Options, TestApp, MODES};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::bus::testsuite::{eventually, expect_delivery};
use shared::bus::{Appended, Event, Outcome, WorkerKind};
use shared::indexer::Indexer;
use shared::runtime::{run_consumer, ConsumerSettings, Handler, HandlerError, Heartbeat, IndexHandler};
use tokio_util::sync::CancellationToken;

const ADMIN_KEY: &str = "parked-admin-key-0123456789abcdef-01234567";
/// Longest wait for a worker to park or consume what it was sent.
const WAIT: Duration = Duration::from_secs(30);

async fn app(mode: Mode, no_worker: bool, env: Vec<(&'static str, String)>) -> TestApp {
    let mut env = env;
    env.push(("ADMIN_KEY", ADMIN_KEY.to_owned()));
    TestApp::with(
        mode,
        Options {
            env,
            no_worker,
            ..Options::default()
        },
    )
    .await
}

/// `POST /v1/admin/queues/{kind}/parked/replay` with the admin key; the status and the body.
async fn replay(app: &TestApp, kind: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut request = app
        .client
        .post(app.url(&format!("/v1/admin/queues/{kind}/parked/replay")))
        .bearer_auth(ADMIN_KEY);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("send the replay");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The operator's log of replays, newest first (`query`: more parameters, `&...`).
async fn replay_log(app: &TestApp, query: &str) -> Value {
    app.client
        .get(app.url(&format!("/v1/admin/audit?action=parked.replay{query}")))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
}

/// Polls `check` until it holds, for up to [`WAIT`].
async fn within_wait<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A body a newer API could send, and its type tag (`None`: not JSON).
type Sent = (Vec<u8>, Option<String>);

/// One event of each type the workers read today. The match has no wildcard: a new event type
/// fails to compile here until it is added to the list.
fn every_event() -> Vec<Event> {
    let t = tenant();
    let events = vec![
        Event::TurnAppended {
            tenant: t.clone(),
            session_id: "s".into(),
            last_seq: 1,
        },
        Event::TurnsAppended {
            sessions: vec![Appended {
                tenant: t.clone(),
                session_id: "s".into(),
                last_seq: 1,
            }],
        },
        Event::ExtractDue {
            tenant: t.clone(),
            session_id: "s".into(),
        },
        Event::CompactionRequested {
            tenant: t.clone(),
            session_id: "s".into(),
        },
        Event::SceneDue { tenant: t.clone() },
        Event::PersonaDue { tenant: t },
    ];
    for event in &events {
        match event {
            Event::TurnAppended { .. }
            | Event::TurnsAppended { .. }
            | Event::ExtractDue { .. }
            | Event::CompactionRequested { .. }
            | Event::SceneDue { .. }
            | Event::PersonaDue { .. } => {}
        }
    }
    events
}

/// The upgrade rule, on the cluster's RabbitMQ with the real consumer loops and handlers of
/// every kind (index and extract in the API process, as with Qdrant Edge; compact, scene and
/// persona as their worker processes run them): what a newer API may send, each known event
/// type as `.v99` and a body that is not JSON, on every routing key, is parked by every kind
/// bound to the key, none acked away, and no consumer stops. Replayed, each parks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_parks_what_it_cannot_read_and_replay_brings_it_back() {
    let app = app(Mode::Cluster, false, Vec::new()).await;
    let _layers = app.spawn_layer_workers();
    let _compact = app.spawn_compact_worker();
    let bus = app.backends.bus.clone();
    let stats = |kind| {
        let bus = bus.clone();
        async move { bus.stats(kind).await.expect("stats") }
    };
    for &kind in WorkerKind::ALL {
        within_wait(&format!("a consumer of {kind:?}"), || async {
            stats(kind).await.consumers == 1
        })
        .await;
    }

    // Per routing key, the bodies a newer API could send: every known type as `.v99`, and
    // garbage.
    let mut bodies: BTreeMap<&str, Vec<Sent>> = BTreeMap::new();
    for event in every_event() {
        let mut body = serde_json::to_value(&event).expect("serialize");
        let known = body["type"].as_str().expect("a type tag").to_owned();
        let newer = known.replace(".v1", ".v99");
        assert_ne!(known, newer, "{known} is not a .v1 type");
        body["type"] = json!(newer);
        bodies
            .entry(event.routing_key())
            .or_default()
            .push((serde_json::to_vec(&body).unwrap(), Some(newer)));
    }
    for (key, list) in bodies.iter_mut() {
        list.push((format!("\u{1}not json, sent on {key}").into_bytes(), None));
    }
    // Every routing key of every kind is covered, and so every kind gets some.
    let mut expected: BTreeMap<&str, Vec<Option<String>>> = BTreeMap::new();
    for &kind in WorkerKind::ALL {
        for key in kind.routing_keys() {
            let sent = bodies.get(key).unwrap_or_else(|| panic!("no event is sent on {key}"));
            expected
                .entry(kind.as_str())
                .or_default()
                .extend(sent.iter().map(|(_, tag)| tag.clone()));
        }
    }
    let broker = app.broker().expect("the cluster app has a broker");
    for (key, list) in &bodies {
        for (body, _) in list {
            broker.publish_raw(key, body).await;
        }
    }

    for &kind in WorkerKind::ALL {
        let want = expected[kind.as_str()].len() as u64;
        within_wait(&format!("{want} parked by {kind:?}"), || async {
            let s = stats(kind).await;
            s.parked == want && s.ready == 0
        })
        .await;
    }

    let mut first_ids: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for &kind in WorkerKind::ALL {
        let (status, answer) = replay(&app, kind.as_str(), Some(json!({ "limit": 1000 }))).await;
        assert_eq!(status, StatusCode::OK, "{kind:?}: {answer}");
        assert_eq!(answer["kind"], kind.as_str());
        let items = answer["items"].as_array().expect("items");
        let mut types: Vec<Option<String>> = items.iter().map(|i| i["type"].as_str().map(str::to_owned)).collect();
        let mut want = expected[kind.as_str()].clone();
        types.sort();
        want.sort();
        assert_eq!(types, want, "{kind:?} replayed what it parked: {answer}");
        for item in items {
            assert_eq!(
                (&item["reason"], &item["attempts"]),
                (&json!("rejected"), &json!(1)),
                "{item}"
            );
        }
        let ids: BTreeSet<String> = items
            .iter()
            .map(|i| i["message_id"].as_str().expect("message id").to_owned())
            .collect();
        assert_eq!(ids.len(), items.len(), "each its own id: {answer}");
        first_ids.insert(kind.as_str(), ids);
    }

    // The worker still cannot read them: every one parks again, none is lost, and the
    // consumers carry on.
    for &kind in WorkerKind::ALL {
        let want = expected[kind.as_str()].len() as u64;
        within_wait(&format!("{want} parked again by {kind:?}"), || async {
            let s = stats(kind).await;
            s.parked == want && s.ready == 0
        })
        .await;
        assert_eq!(stats(kind).await.consumers, 1, "the {kind:?} consumer stopped");
    }
    // A message keeps its id through a replay and parking again.
    for &kind in WorkerKind::ALL {
        let (status, answer) = replay(&app, kind.as_str(), Some(json!({ "limit": 1 }))).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let items = answer["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "limit 1: {answer}");
        let id = items[0]["message_id"].as_str().expect("message id");
        assert!(
            first_ids[kind.as_str()].contains(id),
            "{kind:?}: {id} was not among the first replay's ids"
        );
    }
}

/// Records the events the wrapped handler handled, and how.
struct Recording {
    inner: IndexHandler,
    handled: Mutex<Vec<(Event, bool)>>,
}

#[async_trait::async_trait]
impl Handler for Recording {
    fn kind(&self) -> WorkerKind {
        self.inner.kind()
    }

    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        let result = self.inner.handle(event).await;
        self.handled.lock().unwrap().push((event.clone(), result.is_ok()));
        result
    }

    async fn sweep(&self, stop: &tokio_util::sync::CancellationToken) -> Result<usize, HandlerError> {
        self.inner.sweep(stop).await
    }
}

/// A valid `turns.appended` parked by an older worker (a subscription that rejects it) is
/// replayed by the endpoint and consumed by the real index worker: it reaches its handler,
/// which succeeds, and nothing is left parked or queued. Both deployments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_event_replayed_is_consumed_by_the_worker() {
    for mode in MODES {
        // Without the API's own index worker, so the older worker below has the queue alone.
        let app = app(mode, true, Vec::new()).await;
        let bus = app.backends.bus.clone();
        let event = Event::TurnsAppended {
            sessions: vec![Appended {
                tenant: tenant(),
                session_id: format!("parked-{}", uuid::Uuid::new_v4().simple()),
                last_seq: 1,
            }],
        };
        bus.publish(&event).await.expect("publish");
        let mut older = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
        let delivery = expect_delivery(older.as_mut(), "the event").await;
        assert_eq!(delivery.event.as_ref().ok(), Some(&event));
        let message_id = delivery.message_id.clone();
        older.settle(delivery, Outcome::Reject).await.expect("reject");
        older.cancel().await.expect("cancel");
        drop(older);
        eventually("one parked", || async {
            bus.stats(WorkerKind::Index).await.expect("stats").parked == 1
        })
        .await;

        let handler = Arc::new(Recording {
            inner: IndexHandler(Indexer::new(
                app.backends.store.clone(),
                app.backends.index.clone(),
                app.backends.embedder.clone(),
                app.settings.worker.batch_size,
            )),
            handled: Mutex::default(),
        });
        let stop = CancellationToken::new();
        let worker = tokio::spawn(run_consumer(
            bus.clone(),
            handler.clone(),
            ConsumerSettings {
                prefetch: app.settings.worker.prefetch,
                sweep_interval: app.settings.worker.sweep_interval,
                shutdown_deadline: app.settings.shutdown_deadline,
            },
            Arc::new(Heartbeat::default()),
            stop.clone(),
        ));

        let (status, answer) = replay(&app, "index", None).await;
        assert_eq!(status, StatusCode::OK, "{mode:?}: {answer}");
        assert_eq!(
            answer,
            json!({ "kind": "index", "items": [{
                "message_id": message_id, "reason": "rejected", "attempts": 1, "type": "turns.appended.v1",
            }] }),
            "{mode:?}"
        );
        within_wait("the worker to handle the replayed event", || async {
            handler.handled.lock().unwrap().contains(&(event.clone(), true))
        })
        .await;
        within_wait("nothing parked or queued", || async {
            let s = bus.stats(WorkerKind::Index).await.expect("stats");
            s.parked == 0 && s.ready == 0
        })
        .await;
        stop.cancel();
        worker.await.expect("join").expect("the worker ran");
        let (status, answer) = replay(&app, "index", None).await;
        assert_eq!(
            (status, answer),
            (StatusCode::OK, json!({ "kind": "index", "items": [] }))
        );
    }
}

/// The endpoint's failures, each with the API's error body, and the operator's log of every
/// call; a team's key never reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_refuses_an_unknown_kind_and_a_bad_limit() {
    let app = app(Mode::Embedded, false, Vec::new()).await;
    let (status, answer) = replay(&app, "parked", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(answer["code"], "not_found");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("index, extract, compact, scene, persona")),
        "{answer}"
    );
    for limit in [json!(0), json!(1001), json!(-1), json!("ten")] {
        let (status, answer) = replay(&app, "scene", Some(json!({ "limit": limit }))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "limit {limit}: {answer}");
        assert_eq!(answer["code"], "invalid_request", "{answer}");
    }
    let (status, answer) = replay(&app, "scene", Some(json!({ "limits": 5 }))).await;
    assert_eq!(
        (status, &answer["code"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("invalid_request"))
    );
    let sent = |body: &'static str, content_type: &'static str| {
        app.client
            .post(app.url("/v1/admin/queues/scene/parked/replay"))
            .bearer_auth(ADMIN_KEY)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let response = sent("{\"limit\":", "application/json").await.expect("send");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.json::<Value>().await.unwrap()["code"], "malformed_json");
    let response = sent("limit=5", "text/plain").await.expect("send");
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, answer) = replay(&app, "scene", Some(json!({ "limit": 1000 }))).await;
    assert_eq!(
        (status, answer),
        (StatusCode::OK, json!({ "kind": "scene", "items": [] }))
    );
    // Left out, or `null` (the document's optional body): the default limit.
    for body in ["", " null "] {
        let response = sent(body, "application/json").await.expect("send");
        assert_eq!(response.status(), StatusCode::OK, "body {body:?}");
    }
    let response = sent("[]", "application/json").await.expect("send");
    assert_eq!(
        response.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "an array is no body"
    );

    // Only the admin key: none at all is 401, a team's key (even an admin one) 403.
    let response = app
        .client
        .post(app.url("/v1/admin/queues/index/parked/replay"))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let t = tenant();
    let key = app
        .client
        .post(app.url("/v1/admin/keys"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({ "team_id": t.team, "permission": "admin" }))
        .send()
        .await
        .expect("create a key")
        .json::<Value>()
        .await
        .expect("json")["key"]
        .as_str()
        .expect("the secret")
        .to_owned();
    let response = app
        .client
        .post(app.url("/v1/admin/queues/index/parked/replay"))
        .bearer_auth(key)
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    // Every call the admin key made is in the operator's log, with its outcome.
    let log = replay_log(&app, "&limit=50").await;
    let entries: Vec<(String, String)> = log["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|e| {
            (
                e["target"].as_str().unwrap_or_default().to_owned(),
                e["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let count = |target: &str, outcome: &str| {
        entries
            .iter()
            .filter(|e| **e == (target.into(), outcome.into()))
            .count()
    };
    assert_eq!(count("parked", "not_found"), 1, "{log}");
    assert_eq!(count("scene", "invalid_request"), 6, "{log}");
    assert_eq!(count("scene", "malformed_json"), 1, "{log}");
    assert_eq!(count("scene", "ok"), 3, "{log}");
    let details: Vec<&Value> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "ok")
        .map(|e| &e["detail"])
        .collect();
    assert!(
        details.contains(&&json!({ "limit": 1000, "replayed": 0 }))
            && details.contains(&&json!({ "limit": 100, "replayed": 0 })),
        "{log}"
    );
}

/// A TCP proxy to the test broker that can be cut: every connection through it closes and new
/// ones are refused, as when the broker goes down.
struct Cuttable {
    url: String,
    cut: CancellationToken,
}

async fn cuttable_broker() -> Cuttable {
    let url = amqp_url();
    let uri: lapin::uri::AMQPUri = url.parse().expect("a broker url");
    let target = format!("{}:{}", uri.authority.host, uri.authority.port);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxied = url.replace(&target, &listener.local_addr().unwrap().to_string());
    assert_ne!(proxied, url, "the broker url names {target} explicitly");
    let cut = CancellationToken::new();
    let stop = cut.clone();
    tokio::spawn(async move {
        loop {
            let (mut inbound, _) = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => continue,
                },
            };
            let (stop, target) = (stop.clone(), target.clone());
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    () = stop.cancelled() => {}
                }
            });
        }
    });
    Cuttable { url: proxied, cut }
}

/// With the broker gone, a replay is the API's 503 `backend_unavailable`, and logged so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_with_the_broker_down_is_unavailable() {
    let broker = cuttable_broker().await;
    let app = app(Mode::Cluster, false, vec![("AMQP_URL", broker.url.clone())]).await;
    let (status, answer) = replay(&app, "index", None).await;
    assert_eq!(
        (status, answer),
        (StatusCode::OK, json!({ "kind": "index", "items": [] }))
    );
    broker.cut.cancel();
    let bus = app.backends.bus.clone();
    within_wait("the bus to find the broker gone", || async {
        bus.ping().await.is_err()
    })
    .await;
    let (status, answer) = replay(&app, "index", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["code"], "backend_unavailable", "{answer}");
    let log = replay_log(&app, "").await;
    assert_eq!(log["items"][0]["outcome"], "backend_unavailable", "{log}");
}

/// The embedded default with auth off (loopback, no admin key) serves the replay to anyone, as
/// it serves every tenant: its parked messages live in memory, and restarting it with an admin
/// key to replay them would lose them. The other admin routes stay closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_embedded_server_replays_without_an_admin_key() {
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            no_worker: true,
            ..Options::default()
        },
    )
    .await;
    let bus = app.backends.bus.clone();
    let event = Event::TurnsAppended {
        sessions: vec![Appended {
            tenant: tenant(),
            session_id: "open".into(),
            last_seq: 1,
        }],
    };
    bus.publish(&event).await.expect("publish");
    let mut older = bus.subscribe(WorkerKind::Index, 1).await.expect("subscribe");
    let delivery = expect_delivery(older.as_mut(), "the event").await;
    older.settle(delivery, Outcome::Reject).await.expect("reject");
    older.cancel().await.expect("cancel");
    drop(older);

    let response = app
        .client
        .post(app.url("/v1/admin/queues/index/parked/replay"))
        .send()
        .await
        .expect("send the replay");
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["items"].as_array().map(Vec::len), Some(1), "{answer}");
    let stats = bus.stats(WorkerKind::Index).await.expect("stats");
    assert_eq!((stats.parked, stats.ready), (0, 1), "back in the queue");

    let keys = app.client.get(app.url("/v1/admin/keys")).send().await.expect("send");
    assert_eq!(
        keys.status(),
        StatusCode::FORBIDDEN,
        "the other admin routes stay closed"
    );
}
