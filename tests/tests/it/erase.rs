//! Erasing a user: the erase store's conformance on both backends, then `DELETE
//! /v1/users/{user_id}` in both deployments (everything of the owner gone from every store, the
//! neighbour untouched, the audit record written), and a job left half done by a crash that
//! the server finishes by itself.

use std::time::{Duration, Instant};

use chrono::{SubsecRound as _, Utc};
use integration_tests::app::{tenant, Mode, TestApp, MODES};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::erase::{FILE_STORE, INDEX_STORE};
use shared::scene::paths::owner_prefix;
use shared::store::erase::{Erasure, ErasureStep};

macro_rules! store_suite {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (store, _db) = integration_tests::stores::postgres().await;
                    shared::store::erase_testsuite::$check(&store).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let (store, _dir) = integration_tests::stores::sqlite().await;
                    shared::store::erase_testsuite::$check(&store).await;
                }
            )*
        }
    };
}

store_suite!(
    a_job_runs_once_per_owner_and_under_one_lease,
    erase_removes_every_row_of_the_owner_and_no_other,
    a_batch_read_before_the_erasure_cannot_commit_after_it,
);

const MARKER: &str = "zanzibar";

/// A session id naming its owner, so that a leak across owners would show whose it was.
fn session_of(owner: &Tenant, name: &str) -> String {
    format!("s-{name}-{}-{}-{}", owner.team, owner.agent, owner.user)
}

/// Gives `owner` turns in two sessions (indexed and extracted into memories) and a document
/// in its file prefix, as its scene documents would be.
async fn populate(app: &TestApp, owner: &Tenant) {
    for session in ["work", "home"] {
        app.append_ok(
            owner,
            &session_of(owner, session),
            json!([
                { "role": "user", "content": format!("I live in {MARKER} and I work as a ferry pilot") },
                { "role": "assistant", "content": "Noted." },
                { "role": "user", "content": format!("My favourite dish in {MARKER} is octopus stew") },
            ]),
        )
        .await;
    }
    app.wait_indexed(Duration::from_secs(60)).await;
    app.wait_extracted(Duration::from_secs(60)).await;
    app.backends
        .files
        .put(
            &format!("{}scenes/notes.md", owner_prefix(owner)),
            format!("# {MARKER}\n").into_bytes(),
        )
        .await
        .expect("put a document");
}

async fn erasure(app: &TestApp, as_tenant: &Tenant, location: &str) -> (StatusCode, Value) {
    let response = app
        .req(Method::GET, location, as_tenant)
        .send()
        .await
        .expect("GET erasure");
    let status = response.status();
    (status, response.json().await.expect("json body"))
}

/// Polls the job until it is done, or panics after `timeout`.
async fn wait_done(app: &TestApp, owner: &Tenant, location: &str, timeout: Duration) -> Value {
    let start = Instant::now();
    loop {
        let (status, job) = erasure(app, owner, location).await;
        assert_eq!(status, 200, "{job}");
        if job["status"] == "done" {
            return job;
        }
        assert!(start.elapsed() < timeout, "erasure not done after {timeout:?}: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn erase_leaves_nothing_of_the_owner(mode: Mode) {
    let app = TestApp::start(mode).await;
    let owner = tenant();
    let neighbour = Tenant {
        user: "user-2".into(),
        ..owner.clone()
    };
    populate(&app, &owner).await;
    populate(&app, &neighbour).await;
    assert!(
        !app.memory_contents(&owner).await.is_empty(),
        "the rules extractor made memories"
    );

    let response = app
        .req(Method::DELETE, &format!("/v1/users/{}", owner.user), &owner)
        .send()
        .await
        .expect("DELETE user");
    assert_eq!(response.status(), 202);
    let location = response
        .headers()
        .get("location")
        .expect("Location")
        .to_str()
        .expect("ascii")
        .to_owned();
    let job = wait_done(&app, &owner, &location, Duration::from_secs(60)).await;

    assert_eq!(job["deleted"]["turns"], 6, "{job}");
    assert_eq!(job["deleted"]["sessions"], 2, "{job}");
    assert!(job["deleted"]["memories"].as_u64().expect("memories") > 0, "{job}");
    assert!(job["deleted"][INDEX_STORE].as_u64().expect("points") >= 6, "{job}");
    assert!(job["deleted"][FILE_STORE].as_u64().expect("files") >= 1, "{job}");
    let residue = job["residue"].as_object().expect("residue");
    assert!(residue.len() >= 10 && residue.values().all(|n| n == 0), "{job}");
    assert!(job["finished_at"].is_string() && job["error"].is_null(), "{job}");

    // Nothing of the owner answers any more, through any read.
    assert!(app.search_contents(&owner, MARKER).await.is_empty());
    assert!(app.memory_contents(&owner).await.is_empty());
    assert_eq!(app.list(&owner, &session_of(&owner, "work"), "").await.status(), 404);
    let recall = app
        .recall_ok(&owner, json!({ "query": format!("where do I live, {MARKER}?") }))
        .await;
    assert!(!recall.to_string().contains(MARKER), "recall still knows: {recall}");
    // The neighbour keeps everything.
    assert_eq!(app.search_contents(&neighbour, MARKER).await.len(), 4);
    assert!(!app.memory_contents(&neighbour).await.is_empty());

    // The audit log has one record with the counts, and no content.
    let audit: Value = app
        .req(Method::GET, "/v1/audit?action=user.erase", &owner)
        .send()
        .await
        .expect("audit")
        .json()
        .await
        .expect("json");
    let records = audit["items"].as_array().expect("items");
    assert_eq!(records.len(), 1, "{audit}");
    assert_eq!(records[0]["detail"]["deleted"]["turns"], 6);
    assert!(!audit.to_string().contains(MARKER));

    // The job is the owner's: another user or agent of the team cannot see it.
    let theirs = location.replace(
        &format!("/users/{}/", owner.user),
        &format!("/users/{}/", neighbour.user),
    );
    assert_eq!(erasure(&app, &neighbour, &theirs).await.0, 404);
    let other_agent = Tenant {
        agent: "agent-2".into(),
        ..owner.clone()
    };
    assert_eq!(erasure(&app, &other_agent, &location).await.0, 404);

    // A user header that names someone else than the path is refused, not obeyed.
    let response = app
        .req(Method::DELETE, &format!("/v1/users/{}", neighbour.user), &owner)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(response.status(), 422);
    assert_eq!(app.search_contents(&neighbour, MARKER).await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn erase_leaves_nothing_of_the_owner_embedded() {
    erase_leaves_nothing_of_the_owner(MODES[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn erase_leaves_nothing_of_the_owner_cluster() {
    erase_leaves_nothing_of_the_owner(MODES[1]).await;
}

/// A run died after deleting the rows (its lease ran out with the job at `index`): the server's
/// resumer takes the job over and finishes it, points and files included.
async fn a_crashed_erasure_is_finished_by_the_server(mode: Mode) {
    let app = TestApp::start(mode).await;
    let owner = tenant();
    populate(&app, &owner).await;
    let store = &app.backends.erasures;
    let now = Utc::now().trunc_subsecs(6);
    let job = store
        .start_erasure(&Erasure::new(owner.clone(), "ops".into(), now))
        .await
        .expect("start");
    let token = uuid::Uuid::new_v4();
    let mut crashed = store
        .claim_erasure(job.id, token, now, now + chrono::Duration::milliseconds(200))
        .await
        .expect("claim")
        .expect("claimed");
    crashed.deleted = store.erase_owner_rows(&owner).await.expect("rows");
    crashed.step = ErasureStep::Index;
    assert!(store
        .save_erasure(&crashed, token, Some(now + chrono::Duration::milliseconds(200)))
        .await
        .expect("save"));
    // The points and files are still there: the run died before those steps.
    assert!(app.indexed_count(&owner).await > 0);

    let location = format!("/v1/users/{}/erasures/{}", owner.user, job.id);
    let done = wait_done(&app, &owner, &location, Duration::from_secs(40)).await;
    assert_eq!(done["attempts"], 2, "{done}");
    assert_eq!(done["deleted"]["turns"], 6, "{done}");
    assert!(done["residue"].as_object().expect("residue").values().all(|n| n == 0));
    assert_eq!(app.indexed_count(&owner).await, 0);
    let files = app.backends.files.list(&owner_prefix(&owner)).await.expect("list");
    assert!(files.is_empty(), "{files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_erasure_is_finished_by_the_server_embedded() {
    a_crashed_erasure_is_finished_by_the_server(MODES[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_erasure_is_finished_by_the_server_cluster() {
    a_crashed_erasure_is_finished_by_the_server(MODES[1]).await;
}

const ADMIN_KEY: &str = "erase-admin-key-0123456789abcdef-0123456789";

/// Stores turns for `owner` straight through the store (no key needed).
async fn seed(app: &TestApp, owner: &Tenant) {
    let session = shared::domain::SessionId::parse(&session_of(owner, "seed")).expect("session");
    let turn = shared::domain::NewTurn::new("user", MARKER, None, None, None).expect("turn");
    app.backends
        .store
        .append(owner, &session, &[turn])
        .await
        .expect("append");
}

async fn admin(app: &TestApp, method: Method, path: &str) -> (StatusCode, Value) {
    let response = app
        .client
        .request(method, app.url(path))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .expect("admin call");
    let status = response.status();
    (status, response.json().await.expect("json body"))
}

/// The operator erases one agent of a team, then the whole team; other teams keep everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_operator_erases_an_agent_then_the_team() {
    let app = TestApp::with(
        Mode::Cluster,
        integration_tests::app::Options {
            env: vec![("ADMIN_KEY", ADMIN_KEY.to_owned())],
            ..Default::default()
        },
    )
    .await;
    let team = tenant();
    let owners: Vec<Tenant> = [("a1", "u1"), ("a1", "u2"), ("a2", "u1")]
        .into_iter()
        .map(|(agent, user)| Tenant {
            agent: agent.into(),
            user: user.into(),
            ..team.clone()
        })
        .collect();
    let stranger = tenant();
    for owner in owners.iter().chain([&stranger]) {
        seed(&app, owner).await;
    }
    let rows = |owner: &Tenant| {
        let store = app.backends.erasures.clone();
        let owner = owner.clone();
        async move { store.owner_rows(&owner).await.expect("count")["turns"] }
    };

    let wait_all = |jobs: Vec<Value>| {
        let app = &app;
        async move {
            for job in jobs {
                let path = format!("/v1/admin/erasures/{}", job["id"].as_str().expect("id"));
                let start = Instant::now();
                loop {
                    let (status, job) = admin(app, Method::GET, &path).await;
                    assert_eq!(status, 200, "{job}");
                    if job["status"] == "done" {
                        break;
                    }
                    assert!(start.elapsed() < Duration::from_secs(30), "not done: {job}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    };

    let (status, body) = admin(
        &app,
        Method::DELETE,
        &format!("/v1/admin/teams/{}?agent_id=a1", team.team),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let jobs = body["items"].as_array().expect("items").clone();
    let users: Vec<(&str, &str)> = jobs
        .iter()
        .map(|j| {
            (
                j["agent_id"].as_str().expect("agent"),
                j["user_id"].as_str().expect("user"),
            )
        })
        .collect();
    assert_eq!(users, [("a1", "u1"), ("a1", "u2")]);
    wait_all(jobs).await;
    assert_eq!((rows(&owners[0]).await, rows(&owners[1]).await), (0, 0));
    assert_eq!(rows(&owners[2]).await, 1, "the other agent keeps its turns");

    let (status, body) = admin(&app, Method::DELETE, &format!("/v1/admin/teams/{}", team.team)).await;
    assert_eq!(status, 202, "{body}");
    let jobs = body["items"].as_array().expect("items").clone();
    assert_eq!(jobs.len(), 1, "only the owner left: {body}");
    wait_all(jobs).await;
    assert_eq!(rows(&owners[2]).await, 0);
    assert_eq!(rows(&stranger).await, 1, "another team keeps everything");

    // Nothing left: an empty list, not an error. A team key cannot reach these routes.
    let (status, body) = admin(&app, Method::DELETE, &format!("/v1/admin/teams/{}", team.team)).await;
    assert_eq!(
        (status, body["items"].as_array().map(Vec::len)),
        (StatusCode::ACCEPTED, Some(0))
    );
    let (status, _) = admin(
        &app,
        Method::GET,
        &format!("/v1/admin/erasures/{}", uuid::Uuid::new_v4()),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = admin(&app, Method::DELETE, "/v1/admin/teams/%20").await;
    assert_eq!(status, 400);
}

/// A team's stored-turn quota refuses the append that would pass it, across its users and
/// agents, with 429 `quota_exceeded` and `Retry-After`; erasing a user frees room once the
/// count is read again.
async fn the_turn_quota_holds_until_an_erasure_frees_room(mode: Mode) {
    let app = TestApp::with(
        mode,
        integration_tests::app::Options {
            env: vec![("QUOTA_TURNS", "5".to_owned()), ("QUOTA_REFRESH_MS", "300".to_owned())],
            ..Default::default()
        },
    )
    .await;
    let ann = tenant();
    let bob = Tenant {
        agent: "agent-2".into(),
        user: "bob".into(),
        ..ann.clone()
    };
    let turns = |n: usize| {
        json!((0..n)
            .map(|i| json!({ "role": "user", "content": format!("turn {i}") }))
            .collect::<Vec<_>>())
    };
    let (ann_session, bob_session) = (session_of(&ann, "1"), session_of(&bob, "1"));
    app.append_ok(&ann, &ann_session, turns(3)).await;
    app.append_ok(&bob, &bob_session, turns(2)).await;
    let refused = app.append(&ann, &ann_session, turns(1)).await;
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=1).contains(&retry), "Retry-After {retry}");
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["code"], "quota_exceeded", "{body}");
    // Another team is not limited by this one's turns.
    let stranger = tenant();
    app.append_ok(&stranger, &session_of(&stranger, "1"), turns(5)).await;
    // The recorder is the process's: other tests' refusals count too.
    let metrics = app.metrics_text().await;
    let refusals: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sediment_quota_exceeded_total "))
        .expect("the counter is exported")
        .parse()
        .expect("a number");
    assert!(refusals >= 1.0);

    let response = app
        .req(Method::DELETE, &format!("/v1/users/{}", bob.user), &bob)
        .send()
        .await
        .expect("DELETE user");
    let location = response.headers()["location"].to_str().expect("ascii").to_owned();
    wait_done(&app, &bob, &location, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    app.append_ok(&ann, &ann_session, turns(2)).await;
    assert_eq!(app.append(&ann, &ann_session, turns(1)).await.status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_turn_quota_holds_until_an_erasure_frees_room_embedded() {
    the_turn_quota_holds_until_an_erasure_frees_room(MODES[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_turn_quota_holds_until_an_erasure_frees_room_cluster() {
    the_turn_quota_holds_until_an_erasure_frees_room(MODES[1]).await;
}
