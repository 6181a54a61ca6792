//! Authentication and scoped access: the key store on both backends, then the API in both
//! deployments with an admin key (keys created, used within their scope, revoked), and the
//! start-up rules that keep auth from being off by accident.

use std::time::{Duration, Instant};

use chrono::{SubsecRound as _, Utc};
use integration_tests::app::{tenant, Mode, Options, TestApp, MODES};
use integration_tests::stores::{postgres_fixture, sqlite_fixture};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};
use shared::auth::{key_hash, IssuedKey, Permission};
use shared::backends::Backends;
use shared::config::Settings;
use shared::domain::Tenant;
use shared::store::keys::KeyStore;
use tokio_util::sync::CancellationToken;

const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef-0123456789";

// --- the key store, on both backends -----------------------------------------------------------

fn issue(team: &str, agents: Option<Vec<&str>>, permission: Permission, minutes_ago: i64) -> IssuedKey {
    let at = Utc::now().trunc_subsecs(6) - chrono::Duration::minutes(minutes_ago);
    let agents = agents.map(|a| a.into_iter().map(str::to_owned).collect());
    IssuedKey::generate(team, agents, permission, Some("ci".into()), at).expect("valid key")
}

async fn key_store_conformance(store: &dyn KeyStore) {
    let team = tenant().team;
    let other = tenant().team;
    let old = issue(&team, None, Permission::Read, 10);
    let new = issue(&team, Some(vec!["bot", "helper"]), Permission::Admin, 1);
    let foreign = issue(&other, None, Permission::Write, 5);
    for key in [&old, &new, &foreign] {
        store.create_key(&key.new).await.expect("create");
    }

    let listed = store.list_keys(Some(&team)).await.expect("list");
    assert_eq!(
        listed,
        vec![new.new.key.clone(), old.new.key.clone()],
        "the team's keys, newest first"
    );
    let all = store.list_keys(None).await.expect("list all");
    assert!(all.iter().any(|k| k.id == foreign.new.key.id) && all.len() >= 3);

    // A use finds the key by its secret's hash and records when.
    let now = Utc::now().trunc_subsecs(6);
    let used = store
        .use_key(&key_hash(&new.secret), now)
        .await
        .expect("use")
        .expect("an active key");
    assert_eq!(used.id, new.new.key.id);
    assert_eq!(used.agents, Some(vec!["bot".to_owned(), "helper".to_owned()]));
    assert_eq!(used.permission, Permission::Admin);
    assert_eq!(used.last_used_at, Some(now));
    // An older use never moves it back.
    let earlier = now - chrono::Duration::seconds(30);
    let again = store.use_key(&key_hash(&new.secret), earlier).await.unwrap().unwrap();
    assert_eq!(again.last_used_at, Some(now));
    assert_eq!(store.use_key(&key_hash("sdmk_nope"), now).await.unwrap(), None);

    // Revoked: no longer usable, still listed, first revocation time kept.
    let revoked_at = Utc::now().trunc_subsecs(6);
    let revoked = store.revoke_key(old.new.key.id, revoked_at).await.unwrap().unwrap();
    assert_eq!(revoked.revoked_at, Some(revoked_at));
    let twice = store
        .revoke_key(old.new.key.id, revoked_at + chrono::Duration::seconds(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(twice.revoked_at, Some(revoked_at), "the first revocation stands");
    assert_eq!(store.use_key(&key_hash(&old.secret), Utc::now()).await.unwrap(), None);
    let listed = store.list_keys(Some(&team)).await.unwrap();
    assert_eq!(listed[1].revoked_at, Some(revoked_at));
    assert_eq!(store.revoke_key(uuid::Uuid::new_v4(), Utc::now()).await.unwrap(), None);

    // The secret itself is nowhere in what the store gives back.
    let printed = format!("{:?}", store.list_keys(None).await.unwrap());
    for key in [&old, &new, &foreign] {
        assert!(!printed.contains(&key.secret[5..]), "secret leaked: {printed}");
    }
}

#[tokio::test]
async fn key_store_conformance_postgres() {
    key_store_conformance(&*postgres_fixture().await.store).await;
}

#[tokio::test]
async fn key_store_conformance_sqlite() {
    key_store_conformance(&*sqlite_fixture().await.store).await;
}

// --- the API with auth on -----------------------------------------------------------------------

async fn app_with_auth(mode: Mode, extra: &[(&'static str, &str)]) -> TestApp {
    let mut env = vec![("ADMIN_KEY", ADMIN_KEY.to_owned())];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    TestApp::with(
        mode,
        Options {
            env,
            ..Options::default()
        },
    )
    .await
}

/// A request with a bearer credential and, when given, the tenant headers.
fn call(app: &TestApp, method: Method, path: &str, bearer: Option<&str>, tenant: Option<&Tenant>) -> RequestBuilder {
    let mut req = app.client.request(method, app.url(path));
    if let Some(bearer) = bearer {
        req = req.bearer_auth(bearer);
    }
    if let Some(t) = tenant {
        req = req
            .header(api::TEAM_HEADER, &t.team)
            .header(api::AGENT_HEADER, &t.agent)
            .header(api::USER_HEADER, &t.user);
    }
    req
}

async fn status_and_body(req: RequestBuilder) -> (StatusCode, Value) {
    let response = req.send().await.expect("send");
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Creates a key through the admin API; returns (secret, the created body).
async fn create_key(app: &TestApp, body: Value) -> (String, Value) {
    let (status, created) =
        status_and_body(call(app, Method::POST, "/v1/admin/keys", Some(ADMIN_KEY), None).json(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    (created["key"].as_str().expect("the secret").to_owned(), created)
}

fn append_body(text: &str) -> Value {
    json!({ "messages": [{ "role": "user", "content": text }] })
}

#[tokio::test]
async fn keys_decide_the_team_and_scope_every_call() {
    for mode in MODES {
        let app = app_with_auth(mode, &[]).await;
        let t = tenant();
        let messages = "/v1/sessions/s1/messages";

        // No credential, a wrong one, a well-formed unknown one: 401 with the scheme named.
        let unknown = format!("sdmk_{}", "0".repeat(64));
        for bearer in [None, Some("not-a-key"), Some(unknown.as_str())] {
            let response = call(&app, Method::POST, messages, bearer, Some(&t))
                .json(&append_body("hello"))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{mode:?} {bearer:?}");
            let challenge = response.headers()["www-authenticate"].to_str().unwrap().to_owned();
            assert!(challenge.starts_with("Bearer"), "{challenge}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["code"], "unauthorized");
        }
        // Health, readiness and metrics stay open.
        for path in ["/healthz", "/readyz", "/metrics"] {
            let response = app.client.get(app.url(path)).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{path}");
        }

        // The admin key makes keys; it reads no tenant data.
        let (status, body) = status_and_body(call(&app, Method::GET, "/v1/memories", Some(ADMIN_KEY), Some(&t))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let (writer, created) = create_key(&app, json!({ "team_id": t.team, "name": "ingest" })).await;
        assert!(writer.starts_with("sdmk_") && writer.len() == 69, "{writer}");
        assert_eq!(created["permission"], "write");
        assert_eq!(created["team_id"], t.team.as_str());
        assert!(writer.starts_with(created["prefix"].as_str().unwrap()));

        // The key decides the team: no team header needed, and the turn lands in it.
        let no_team = call(&app, Method::POST, messages, Some(&writer), None)
            .header(api::AGENT_HEADER, &t.agent)
            .header(api::USER_HEADER, &t.user)
            .json(&append_body("the key decides my team"));
        let (status, body) = status_and_body(no_team).await;
        assert_eq!(status, StatusCode::CREATED, "{mode:?}: {body}");
        let stored = app
            .backends
            .store
            .list(&t, &shared::domain::SessionId::parse("s1").unwrap(), 0, 10)
            .await
            .expect("list");
        assert_eq!(stored.len(), 1, "stored under the key's team");

        // Naming another team, in a header or in the body, is 403; so is the admin route.
        let other = tenant();
        let (status, _) =
            status_and_body(call(&app, Method::POST, messages, Some(&writer), Some(&other)).json(&append_body("x")))
                .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let mut body = append_body("x");
        body["team_id"] = json!(other.team);
        body["agent_id"] = json!(t.agent);
        body["user_id"] = json!(t.user);
        let (status, _) = status_and_body(call(&app, Method::POST, messages, Some(&writer), None).json(&body)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "a body team_id of another team");
        let (status, _) = status_and_body(call(&app, Method::GET, "/v1/admin/keys", Some(&writer), None)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "a team key managing keys");

        // A read key reads and searches but cannot write; a write key cannot change team
        // settings.
        let (reader, _) = create_key(&app, json!({ "team_id": t.team, "permission": "read" })).await;
        app.wait_indexed(Duration::from_secs(20)).await;
        let (status, found) = status_and_body(
            call(&app, Method::POST, "/v1/conversations/search", Some(&reader), Some(&t))
                .json(&json!({ "query": "decides team", "strategy": "keyword" })),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{found}");
        assert_eq!(found["items"].as_array().map(Vec::len), Some(1), "{found}");
        let (status, _) =
            status_and_body(call(&app, Method::POST, messages, Some(&reader), Some(&t)).json(&append_body("x"))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "a read key appending");
        let (status, _) = status_and_body(
            call(&app, Method::PUT, "/v1/prompts/l1.extract", Some(&writer), Some(&t))
                .json(&json!({ "level": "team", "version": "1", "content": "x" })),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "a write key changing team prompts");
        let (status, _) = status_and_body(call(&app, Method::GET, "/v1/audit", Some(&writer), Some(&t))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "a write key reading the audit log");

        // A key narrowed to one agent acts only as that agent.
        let (bot, _) = create_key(
            &app,
            json!({ "team_id": t.team, "agents": ["bot"], "permission": "read" }),
        )
        .await;
        let as_bot = Tenant {
            agent: "bot".into(),
            ..t.clone()
        };
        let (status, _) = status_and_body(call(&app, Method::GET, "/v1/memories", Some(&bot), Some(&as_bot))).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _) = status_and_body(call(&app, Method::GET, "/v1/memories", Some(&bot), Some(&t))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "another agent of the same team");

        // Listing shows every key of the team, never a secret; last use is recorded.
        let (status, listed) = status_and_body(call(
            &app,
            Method::GET,
            &format!("/v1/admin/keys?team_id={}", t.team),
            Some(ADMIN_KEY),
            None,
        ))
        .await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        let items = listed["items"].as_array().unwrap();
        assert_eq!(items.len(), 3, "{listed}");
        let text = listed.to_string();
        for secret in [&writer, &reader, &bot] {
            assert!(!text.contains(&secret[5..]), "a secret in the listing");
        }
        let writer_row = items.iter().find(|k| k["name"] == "ingest").unwrap();
        assert!(writer_row["last_used_at"].is_string(), "{writer_row}");
        assert!(writer_row["revoked_at"].is_null());

        // Revoked here: refused at once on this replica.
        let id = writer_row["id"].as_str().unwrap();
        let (status, revoked) = status_and_body(call(
            &app,
            Method::DELETE,
            &format!("/v1/admin/keys/{id}"),
            Some(ADMIN_KEY),
            None,
        ))
        .await;
        assert_eq!(status, StatusCode::OK, "{revoked}");
        assert!(revoked["revoked_at"].is_string());
        let (status, _) = status_and_body(
            call(&app, Method::POST, messages, Some(&writer), Some(&t)).json(&append_body("after revoke")),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "a revoked key");
        let (status, _) = status_and_body(call(
            &app,
            Method::DELETE,
            &format!("/v1/admin/keys/{}", uuid::Uuid::new_v4()),
            Some(ADMIN_KEY),
            None,
        ))
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}

#[tokio::test]
async fn bad_key_requests_are_refused_with_their_field() {
    let app = app_with_auth(Mode::Embedded, &[]).await;
    let team = tenant().team;
    for (body, field) in [
        (json!({ "team_id": team, "permission": "root" }), "permission"),
        (json!({ "team_id": team, "agents": [] }), "agents"),
        (json!({ "team_id": " " }), "team"),
        (json!({ "team_id": team, "name": "x".repeat(200) }), "name"),
        (json!({ "team_id": team, "scope": "all" }), "scope"),
    ] {
        let (status, error) =
            status_and_body(call(&app, Method::POST, "/v1/admin/keys", Some(ADMIN_KEY), None).json(&body)).await;
        assert!(status.is_client_error(), "{body} -> {status}");
        assert!(error["message"].as_str().unwrap().contains(field), "{body} -> {error}");
    }
    let (status, _) = status_and_body(call(
        &app,
        Method::DELETE,
        "/v1/admin/keys/not-a-uuid",
        Some(ADMIN_KEY),
        None,
    ))
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, error) =
        status_and_body(call(&app, Method::GET, "/v1/admin/keys?team=x", Some(ADMIN_KEY), None)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
}

/// A key revoked elsewhere (another replica, or the store directly) stops working within the
/// key cache period of this replica.
#[tokio::test]
async fn a_key_revoked_elsewhere_stops_within_the_cache_period() {
    let ttl = Duration::from_millis(500);
    let app = app_with_auth(Mode::Cluster, &[("AUTH_KEY_CACHE_MS", "500")]).await;
    let t = tenant();
    let (secret, created) = create_key(&app, json!({ "team_id": t.team, "permission": "read" })).await;
    let (status, _) = status_and_body(call(&app, Method::GET, "/v1/memories", Some(&secret), Some(&t))).await;
    assert_eq!(status, StatusCode::OK);

    let id = uuid::Uuid::parse_str(created["id"].as_str().unwrap()).unwrap();
    app.backends.keys.revoke_key(id, Utc::now()).await.unwrap().unwrap();
    let revoked = Instant::now();
    loop {
        let (status, _) = status_and_body(call(&app, Method::GET, "/v1/memories", Some(&secret), Some(&t))).await;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert_eq!(status, StatusCode::OK);
        // The bound is the cache period; the slack is for a loaded machine, not for the cache.
        assert!(
            revoked.elapsed() < ttl + Duration::from_secs(5),
            "still accepted {:?} after revocation",
            revoked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// --- start-up rules -----------------------------------------------------------------------------

/// Starts the API with `env` on `addr`; returns the start error, or `None` when it started
/// (and was stopped again).
async fn start_error(mode: Mode, addr: &str, env: &[(&str, &str)]) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut vars: std::collections::HashMap<String, String> = [
        ("DATA_DIR", dir.path().join("data").display().to_string()),
        ("INDEX_DIR", dir.path().join("index").display().to_string()),
        ("FILES_DIR", dir.path().join("files").display().to_string()),
        ("EMBEDDING", "none".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let (_db, _broker);
    if mode == Mode::Cluster {
        let db = integration_tests::pg::TestDb::create().await;
        let broker = integration_tests::amqp::TestBroker::start("auth-start").await;
        let amqp = broker.settings();
        vars.insert("DATABASE_URL".into(), db.url.clone());
        vars.insert("AMQP_URL".into(), amqp.url);
        vars.insert("AMQP_PREFIX".into(), amqp.prefix);
        (_db, _broker) = (Some(db), Some(broker));
    } else {
        (_db, _broker) = (None, None);
    }
    for (k, v) in env {
        vars.insert((*k).to_owned(), (*v).to_owned());
    }
    let settings = Settings::from_map(&vars).expect("valid settings");
    let backends = Backends::connect(&settings).await.expect("backends");
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let shutdown = CancellationToken::new();
    match api::start(listener, backends, &settings, shutdown.clone()).await {
        Ok(server) => {
            shutdown.cancel();
            server.wait().await.expect("stops");
            None
        }
        Err(e) => Some(format!("{e:#}")),
    }
}

#[tokio::test]
async fn auth_is_never_off_by_accident() {
    // Embedded on loopback: off, so the README's first command needs no set-up.
    assert_eq!(start_error(Mode::Embedded, "127.0.0.1:0", &[]).await, None);
    // Embedded on every address without a key: refused, unless said explicitly.
    let err = start_error(Mode::Embedded, "0.0.0.0:0", &[]).await.expect("refused");
    assert!(
        err.contains("SEDIMENT_ADMIN_KEY") && err.contains("SEDIMENT_AUTH=off"),
        "{err}"
    );
    assert_eq!(start_error(Mode::Embedded, "0.0.0.0:0", &[("AUTH", "off")]).await, None);
    assert_eq!(
        start_error(Mode::Embedded, "0.0.0.0:0", &[("ADMIN_KEY", ADMIN_KEY)]).await,
        None
    );
    // The cluster requires auth, even on loopback.
    let err = start_error(Mode::Cluster, "127.0.0.1:0", &[]).await.expect("refused");
    assert!(err.contains("cluster deployment requires auth"), "{err}");
    assert_eq!(
        start_error(Mode::Cluster, "127.0.0.1:0", &[("ADMIN_KEY", ADMIN_KEY)]).await,
        None
    );
}

/// A refused start touches nothing: `api::run` refuses before it opens the store or the index,
/// so a container started without a key leaves its data volume as it found it.
#[tokio::test]
async fn a_refused_start_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let vars = [
        ("DATA_DIR", data.display().to_string()),
        ("EMBEDDING", "none".to_owned()),
        ("LISTEN", "0.0.0.0:0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let settings = Settings::from_map(&vars).expect("valid settings");
    let err = api::run(settings, CancellationToken::new()).await.expect_err("refused");
    assert!(
        format!("{err:#}").contains("refusing to listen on 0.0.0.0:0"),
        "{err:#}"
    );
    assert!(!data.exists(), "a refused start created {}", data.display());
}

/// With `SEDIMENT_HEALTH_LISTEN`, probes and metrics answer there, open, and no longer on the
/// tenants' address, which answers only with a credential.
#[tokio::test]
async fn probes_can_move_to_their_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let vars: std::collections::HashMap<String, String> = [
        ("DATA_DIR", dir.path().join("data").display().to_string()),
        ("EMBEDDING", "none".to_owned()),
        ("ADMIN_KEY", ADMIN_KEY.to_owned()),
        ("HEALTH_LISTEN", "127.0.0.1:0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let settings = Settings::from_map(&vars).expect("valid settings");
    let backends = Backends::connect(&settings).await.expect("backends");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = CancellationToken::new();
    let server = api::start(listener, backends, &settings, shutdown.clone())
        .await
        .expect("start");
    let probes = server.probes_addr.expect("a probe address");
    let client = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/metrics"] {
        let there = client.get(format!("http://{probes}{path}")).send().await.unwrap();
        assert_eq!(there.status(), StatusCode::OK, "{path} on the probe address");
        let main = client
            .get(format!("http://{}{path}", server.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(main.status(), StatusCode::NOT_FOUND, "{path} on the tenants' address");
    }
    let v1 = client.get(format!("http://{probes}/v1/memories")).send().await.unwrap();
    assert_eq!(
        v1.status(),
        StatusCode::NOT_FOUND,
        "no tenant route on the probe address"
    );
    shutdown.cancel();
    server.wait().await.expect("stops");
    assert!(
        tokio::net::TcpStream::connect(probes).await.is_err(),
        "the probe address closes on shutdown"
    );
}

/// Each team has its own token bucket per replica: past its burst a call is 429
/// `rate_limited` with `Retry-After`, and other teams are not slowed.
#[tokio::test]
async fn each_team_is_rate_limited_on_its_own() {
    let app = app_with_auth(Mode::Embedded, &[("RATE_LIMIT_RPS", "1"), ("RATE_LIMIT_BURST", "2")]).await;
    let (t, other) = (tenant(), tenant());
    let (key, _) = create_key(&app, json!({ "team_id": t.team, "permission": "read" })).await;
    let (other_key, _) = create_key(&app, json!({ "team_id": other.team, "permission": "read" })).await;
    for _ in 0..2 {
        let (status, body) = status_and_body(call(&app, Method::GET, "/v1/memories", Some(&key), Some(&t))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let response = call(&app, Method::GET, "/v1/memories", Some(&key), Some(&t))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited");
    let (status, _) = status_and_body(call(&app, Method::GET, "/v1/memories", Some(&other_key), Some(&other))).await;
    assert_eq!(status, StatusCode::OK, "another team keeps its own bucket");
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("sediment_rate_limited_total"),
        "the refusal is counted"
    );
}
