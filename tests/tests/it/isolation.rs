//! Tenant isolation, proven route by route (issue 33). For every route of the router an owner's
//! data is created, then four intruders try each read, search, recall, list, change and delete
//! on it: another team (its own key), the owner's team as another agent, the owner's agent as
//! another user, and the owner's team key naming another team. The first three must get what a
//! caller gets for a resource that does not exist; the fourth is refused (403), since a key's
//! team is enforced. Afterwards the owner's data is unchanged. Both deployments, auth on, so
//! every key is real.
//!
//! The table (`cases`) maps each `(method, route)` of the router to a call and to what
//! "nothing" is for it; routes that hold no tenant data are in `EXEMPT` with why. A route in
//! neither fails the test, and so does an entry for a route the router no longer has.
//!
//! "Does not exist" is measured, not assumed: each intruder has a stranger twin (a fresh team
//! with its own key, the intruder's agent and user names) that makes the same calls in the same
//! order with every owner id swapped for one that exists nowhere. The twin's state evolves like
//! the intruder's (its own audit entries, its own prompt overrides), so the two answers must be
//! equal but for ids and times. The intruder's raw answer must also hold none of the owner's
//! marker strings or ids, except those the request itself carried.
//!
//! The erasure job's route runs last: the owner erases itself, and its job is what the
//! intruders then look for.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use integration_tests::app::{fast_layer_env, tenant, Mode, Options, TestApp};
use integration_tests::mixed_session;
use integration_tests::routes::routes_in_source;
use reqwest::Method;
use serde_json::{json, Value};
use shared::domain::Tenant;

const ADMIN_KEY: &str = "isolation-admin-key-0123456789abcdef-0123";
/// The word intruders search and recall with: it is in the owner's turns.
const QUERY: &str = "Quokkaville";
/// In every owner turn, memory, scene, persona and prompt that holds the owner's words, and in
/// no intruder's request: an answer holding it leaked the owner's content.
const MARK: &str = "Marzipanova";
/// Stands for [`QUERY`] in the absent twin's calls: in no one's data.
const ABSENT_QUERY: &str = "Xanaduvian";
const TEMPLATE: &str = "l1-extract";
const WAIT: Duration = Duration::from_secs(60);

/// Routes that hold no tenant data, with why.
const EXEMPT: &[(&str, &str, &str)] = &[
    ("get", "/healthz", "a probe: no tenant data"),
    ("get", "/readyz", "a probe: no tenant data"),
    (
        "get",
        "/metrics",
        "labelled by route template, never by tenant (checked)",
    ),
    ("get", "/openapi.json", "the API's description, the same for everyone"),
    ("get", "/ops", "the ops page's HTML, without data"),
    (
        "get",
        "/ops/state",
        "the operator's view: no content, no tenant, session or turn id (checked)",
    ),
    ("post", "/v1/admin/keys", KEY_MANAGEMENT),
    ("get", "/v1/admin/keys", KEY_MANAGEMENT),
    ("delete", "/v1/admin/keys/{key_id}", KEY_MANAGEMENT),
    ("delete", "/v1/admin/teams/{team_id}", OPERATOR_ERASE),
    ("get", "/v1/admin/erasures/{erasure_id}", OPERATOR_ERASE),
    (
        "get",
        "/v1/admin/audit",
        "the operator's log: ids and counts of admin calls, no content; the admin key's alone (checked)",
    ),
    (
        "post",
        "/v1/admin/queues/{kind}/parked/replay",
        "the operator's parked messages: message ids, type tags and counts, no content; the admin key's alone (checked)",
    ),
];
const KEY_MANAGEMENT: &str = "the admin key's alone, which reads no tenant data; no team key reaches it (checked)";
const OPERATOR_ERASE: &str =
    "the operator's erase across owners: the admin key's alone; no team key reaches it (checked)";

/// Who tries to reach the owner's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Intruder {
    /// Another team with its own key, under the owner's agent and user names.
    OtherTeam,
    /// The owner's team key, as another agent.
    OtherAgent,
    /// The owner's team key and agent, as another user.
    OtherUser,
    /// The owner's team key naming another team in its headers.
    ForeignHeaders,
}

/// What an intruder must get instead of the owner's data.
#[derive(Debug, Clone, Copy)]
enum Nothing {
    /// 404 with this error code: a resource by id.
    NotFound(&'static str),
    /// 200 with nothing (`[]`, `""` or `null`) at each JSON pointer; `*` is every array item.
    Empty(&'static [&'static str]),
    /// 200 with an export stream of nothing: its header and an end line that counts no line.
    EmptyStream,
    /// One of these statuses: the call acts on the caller's own scope (a prompt override, an
    /// erasure of its own), or is refused for its input (a user header naming another user than
    /// the path), so "nothing" is the owner's data left as it was.
    Status(&'static [u16]),
}

/// One call of one route, as the owner would make it.
struct Case {
    method: Method,
    /// The router's path template.
    route: &'static str,
    /// The path with the owner's ids.
    path: String,
    body: Option<Value>,
    nothing: Nothing,
    /// What the owner's own answer holds: the control that the call reaches the data at all.
    /// `None` for calls that change data (checked by the owner's view afterwards).
    owner_sees: Option<String>,
    /// Intruders who share this route's data with the owner by design, with why.
    shared: &'static [(Intruder, &'static str)],
    /// Needs the owner erased (its erasure job), so it runs after every other case.
    after_erase: bool,
}

impl Case {
    fn new(method: Method, route: &'static str, path: String, nothing: Nothing) -> Self {
        Self {
            method,
            route,
            path,
            body: None,
            nothing,
            owner_sees: None,
            shared: &[],
            after_erase: false,
        }
    }

    fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    fn owner_sees(mut self, text: &str) -> Self {
        self.owner_sees = Some(text.to_owned());
        self
    }

    fn shared(mut self, shared: &'static [(Intruder, &'static str)]) -> Self {
        self.shared = shared;
        self
    }

    fn after_erase(mut self) -> Self {
        self.after_erase = true;
        self
    }
}

const PROMPTS_ARE_PER_AGENT: &[(Intruder, &str)] = &[(
    Intruder::OtherUser,
    "prompt overrides are team and agent configuration, shared by every user of an agent (PromptScope::of)",
)];

/// The owner's ids the table needs; `Default` gives placeholders for the coverage check.
#[derive(Default)]
struct Owned {
    user: String,
    session: String,
    memory: String,
    scene: String,
    /// The owner's own erasure, made after the other cases ran.
    erasure: String,
}

/// Every route's calls, reads first. A twin's own changes would otherwise make its later
/// answers differ from its intruder's for reasons that are not isolation: its append makes its
/// absent session exist, and a recall's audit entry is written after the answer.
fn cases(o: &Owned) -> Vec<Case> {
    let s = &o.session;
    let memory = &o.memory;
    let scene = &o.scene;
    let (user, erasure) = (&o.user, &o.erasure);
    vec![
        // The intruders' own recalls are audited, so the log is read before any of them.
        Case::new(
            Method::GET,
            "/v1/audit",
            "/v1/audit".into(),
            Nothing::Empty(&["/items"]),
        )
        .owner_sees(memory),
        Case::new(
            Method::GET,
            "/v1/sessions/{session_id}/messages",
            format!("/v1/sessions/{s}/messages?limit=1000"),
            Nothing::NotFound("not_found"),
        )
        .owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/sessions/{session_id}/context",
            format!("/v1/sessions/{s}/context?window_tokens=100000"),
            Nothing::NotFound("not_found"),
        )
        .owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/sessions/{session_id}/compaction",
            format!("/v1/sessions/{s}/compaction"),
            Nothing::NotFound("not_found"),
        )
        .owner_sees("success"),
        Case::new(
            Method::POST,
            "/v1/conversations/search",
            "/v1/conversations/search".into(),
            Nothing::Empty(&["/items"]),
        )
        .body(json!({ "query": QUERY, "strategy": "keyword", "limit": 20 }))
        .owner_sees(MARK),
        Case::new(
            Method::POST,
            "/v1/conversations/search",
            "/v1/conversations/search".into(),
            Nothing::Empty(&["/items"]),
        )
        .body(json!({ "query": QUERY, "strategy": "keyword", "session_id": s }))
        .owner_sees(MARK),
        Case::new(
            Method::POST,
            "/v1/recall",
            "/v1/recall".into(),
            Nothing::Empty(&["/dynamic", "/stable/persona", "/stable/scene_navigation"]),
        )
        .body(json!({ "query": format!("{QUERY} DBA"), "session_id": s }))
        .owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/memories",
            "/v1/memories?limit=500".into(),
            Nothing::Empty(&["/items"]),
        )
        .owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/memories",
            format!("/v1/memories?session_id={s}"),
            Nothing::Empty(&["/items"]),
        )
        .owner_sees(MARK),
        Case::new(
            Method::POST,
            "/v1/memories/search",
            "/v1/memories/search".into(),
            Nothing::Empty(&["/items"]),
        )
        .body(json!({ "query": format!("{QUERY} DBA"), "strategy": "keyword", "limit": 100 }))
        .owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/memories/{memory_id}",
            format!("/v1/memories/{memory}"),
            Nothing::NotFound("not_found"),
        )
        .owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/scenes",
            "/v1/scenes".into(),
            Nothing::Empty(&["/items"]),
        )
        .owner_sees(scene),
        Case::new(
            Method::GET,
            "/v1/scenes/{id}",
            format!("/v1/scenes/{scene}"),
            Nothing::NotFound("scene_not_found"),
        )
        .owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/persona",
            "/v1/persona".into(),
            Nothing::NotFound("persona_not_found"),
        )
        .owner_sees(MARK),
        Case::new(Method::GET, "/v1/export", "/v1/export".into(), Nothing::EmptyStream).owner_sees(MARK),
        Case::new(
            Method::GET,
            "/v1/prompts",
            "/v1/prompts".into(),
            Nothing::Empty(&["/items/*/team", "/items/*/agent"]),
        )
        .owner_sees(MARK)
        .shared(PROMPTS_ARE_PER_AGENT),
        Case::new(
            Method::GET,
            "/v1/prompts/{template_id}",
            format!("/v1/prompts/{TEMPLATE}"),
            Nothing::Empty(&["/team", "/agent", "/history"]),
        )
        .owner_sees(MARK)
        .shared(PROMPTS_ARE_PER_AGENT),
        // Changes.
        Case::new(
            Method::POST,
            "/v1/sessions/{session_id}/reset",
            format!("/v1/sessions/{s}/reset"),
            Nothing::NotFound("not_found"),
        ),
        Case::new(
            Method::POST,
            "/v1/sessions/{session_id}/compact",
            format!("/v1/sessions/{s}/compact"),
            Nothing::NotFound("not_found"),
        ),
        Case::new(
            Method::PATCH,
            "/v1/memories/{memory_id}",
            format!("/v1/memories/{memory}"),
            Nothing::NotFound("not_found"),
        )
        .body(json!({ "content": "rewritten by an intruder", "priority": 1 })),
        Case::new(
            Method::DELETE,
            "/v1/memories/{memory_id}",
            format!("/v1/memories/{memory}"),
            Nothing::NotFound("not_found"),
        ),
        // Before the intruder's own override exists: a delete that reached the owner's would
        // answer 204 here.
        Case::new(
            Method::DELETE,
            "/v1/prompts/{template_id}",
            format!("/v1/prompts/{TEMPLATE}?level=agent"),
            Nothing::NotFound("not_found"),
        )
        .shared(PROMPTS_ARE_PER_AGENT),
        Case::new(
            Method::PUT,
            "/v1/prompts/{template_id}",
            format!("/v1/prompts/{TEMPLATE}"),
            Nothing::Status(&[201]),
        )
        .body(json!({ "level": "agent", "version": "intruder-1", "content": "Written by an intruder." }))
        .shared(PROMPTS_ARE_PER_AGENT),
        // A session id is its owner's: the intruder's append to the owner's id makes a session
        // of the intruder's own (201), as the twin's does with an id nobody used, and the owner's
        // session does not change. After the reads: it makes the caller's session exist.
        Case::new(
            Method::POST,
            "/v1/sessions/{session_id}/messages",
            format!("/v1/sessions/{s}/messages"),
            Nothing::Status(&[201]),
        )
        .body(json!({ "messages": [{ "role": "user", "content": "written by an intruder" }] })),
        // An import into the caller's own scope that names the owner's session id imports into
        // the caller's session of that id, as the twin's does.
        Case::new(Method::POST, "/v1/import", "/v1/import".into(), Nothing::Status(&[200]))
            .body(Value::String(import_stream(s))),
        // After the append, which an erased owner's tombstone might refuse. It erases the
        // caller's own (team, agent, path user), which holds nothing, or is refused (422) when
        // the header names another user than the path.
        Case::new(
            Method::DELETE,
            "/v1/users/{user_id}",
            format!("/v1/users/{user}"),
            Nothing::Status(&[202, 422]),
        ),
        // The owner's own erasure job; a user header naming another user is refused (422).
        Case::new(
            Method::GET,
            "/v1/users/{user_id}/erasures/{erasure_id}",
            format!("/v1/users/{user}/erasures/{erasure}"),
            Nothing::Status(&[404, 422]),
        )
        .owner_sees("done")
        .after_erase(),
    ]
}

/// An export stream of one empty session, `session`, for whoever imports it.
fn import_stream(session: &str) -> String {
    let lines = [
        json!({ "kind": "header", "format": "sediment-export", "version": 1,
            "owner": { "team": "t", "agent": "a", "user": "u" },
            "exported_at": "2026-01-01T00:00:00Z", "source": "isolation" }),
        json!({ "kind": "session", "id": session, "created_at": "2026-01-01T00:00:00Z", "last_seq": 0,
            "reset_at": null, "extracted_through": 0 }),
        json!({ "kind": "end", "counts": { "session": 1 } }),
    ];
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// What the router has and the table lacks, and the reverse.
fn coverage_gaps() -> Vec<String> {
    let routed = routes_in_source();
    let mut covered: BTreeSet<(String, String)> = cases(&Owned::default())
        .iter()
        .map(|c| (c.method.as_str().to_lowercase(), c.route.to_owned()))
        .collect();
    let mut gaps = Vec::new();
    for (method, route, _) in EXEMPT {
        if !covered.insert(((*method).to_owned(), (*route).to_owned())) {
            gaps.push(format!("{method} {route} is both exempt and a case"));
        }
    }
    gaps.extend(
        routed
            .difference(&covered)
            .map(|(m, r)| format!("{m} {r} is routed but has no isolation case and no exemption")),
    );
    gaps.extend(
        covered
            .difference(&routed)
            .map(|(m, r)| format!("{m} {r} is in the isolation table but not routed")),
    );
    gaps
}

#[test]
fn every_route_has_an_isolation_case_or_an_exemption() {
    let gaps = coverage_gaps();
    assert!(gaps.is_empty(), "{gaps:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_route_crosses_tenants_embedded() {
    matrix(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_route_crosses_tenants_cluster() {
    matrix(Mode::Cluster).await;
}

// --- callers -------------------------------------------------------------------------------------

/// A key and the tenant its headers name.
#[derive(Clone)]
struct Caller {
    key: String,
    tenant: Tenant,
}

/// An answer as it came: status and raw body.
struct Answer {
    status: u16,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

impl Caller {
    async fn send(&self, app: &TestApp, method: Method, path: &str, body: Option<&Value>) -> Answer {
        let mut request = app.req(method, path, &self.tenant).bearer_auth(&self.key);
        match body {
            // A string is an export stream, for the import.
            Some(Value::String(stream)) => {
                request = request
                    .header("content-type", "application/x-ndjson")
                    .body(stream.clone());
            }
            Some(body) => request = request.json(body),
            None => {}
        }
        let response = request.send().await.expect("send");
        let status = response.status().as_u16();
        let text = response.text().await.expect("read the body");
        Answer { status, text }
    }

    async fn get(&self, app: &TestApp, path: &str) -> Answer {
        self.send(app, Method::GET, path, None).await
    }
}

/// A new key of `team` that may do everything a team's key may.
async fn team_key(app: &TestApp, team: &str) -> String {
    let response = app
        .client
        .post(app.url("/v1/admin/keys"))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({ "team_id": team, "permission": "admin" }))
        .send()
        .await
        .expect("create a key");
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.expect("json");
    created["key"].as_str().expect("the secret").to_owned()
}

/// A caller of a fresh team with its own key, under `agent` and `user`.
async fn fresh_caller(app: &TestApp, agent: &str, user: &str) -> Caller {
    let team = tenant().team;
    Caller {
        key: team_key(app, &team).await,
        tenant: Tenant {
            team,
            agent: agent.into(),
            user: user.into(),
        },
    }
}

// --- the owner's data ------------------------------------------------------------------------------

async fn start(mode: Mode) -> TestApp {
    let mut env = vec![("ADMIN_KEY", ADMIN_KEY.to_owned())];
    env.extend(fast_layer_env());
    let app = TestApp::with(
        mode,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    if mode == Mode::Cluster {
        // Processes of their own in the cluster; the embedded API runs them itself.
        app.spawn_layer_workers();
        app.spawn_compact_worker();
    }
    app
}

/// Polls `GET path` as `caller` until `ready` accepts the answer.
async fn wait_for(app: &TestApp, caller: &Caller, path: &str, ready: impl Fn(&Answer) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let answer = caller.get(app, path).await;
        if ready(&answer) {
            return answer.json();
        }
        assert!(
            started.elapsed() < WAIT,
            "{path} never became ready: {} {}",
            answer.status,
            answer.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Gives the owner something behind every route: turns (with L1 memories, a scene and a
/// persona made from them), a compaction, a prompt override and audit entries. Returns the
/// ids the table needs and those of the turns.
async fn make_owner_data(app: &TestApp, owner: &Caller) -> (Owned, Value) {
    let session = format!("iso-{}", uuid::Uuid::new_v4().simple());
    let path = format!("/v1/sessions/{session}/messages");
    // Turns enough for a compaction to fold some in, then the marked ones, which stay in the
    // context window (compaction keeps the last five turns).
    let mut turns = mixed_session::turns(3, 12);
    turns.extend([
        json!({ "role": "user", "content": format!("I am the on-call DBA for the {QUERY} payments cluster at {MARK}.") }),
        json!({ "role": "assistant", "content": format!("Noted: {QUERY} payments run on Postgres 16 at {MARK}.") }),
        json!({ "role": "user", "content": format!("我是腾讯云 DBA，主要管北京区的 TDSQL-C，{QUERY} 项目属于 {MARK}") }),
    ]);
    let appended = owner
        .send(app, Method::POST, &path, Some(&json!({ "messages": turns })))
        .await;
    assert_eq!(appended.status, 201, "{}", appended.text);
    let turn_ids = each(&appended.json()["messages"], |t| t["id"].clone());
    app.wait_indexed(WAIT).await;
    app.wait_extracted(WAIT).await;

    let memories = wait_for(app, owner, "/v1/memories?limit=500", |a| a.text.contains(MARK)).await;
    let items = memories["items"].as_array().expect("memories");
    let memory = items
        .iter()
        .find(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
        .and_then(|m| m["id"].as_str())
        .expect("a memory with the marker")
        .to_owned();

    // The scene made of the marked turns (the mixed ones make scenes of their own).
    let started = Instant::now();
    let scene = loop {
        let list = owner.get(app, "/v1/scenes").await.json();
        let ids: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| s["id"].as_str().expect("scene id").to_owned())
            .collect();
        let mut marked = None;
        for id in &ids {
            if owner.get(app, &format!("/v1/scenes/{id}")).await.text.contains(MARK) {
                marked = Some(id.clone());
                break;
            }
        }
        if let Some(scene) = marked {
            break scene;
        }
        assert!(started.elapsed() < WAIT, "no scene holds {MARK}: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    wait_for(app, owner, "/v1/persona", |a| a.status == 200 && a.text.contains(MARK)).await;

    let compact = owner
        .send(app, Method::POST, &format!("/v1/sessions/{session}/compact"), None)
        .await;
    assert_eq!(compact.status, 202, "{}", compact.text);
    wait_for(app, owner, &format!("/v1/sessions/{session}/compaction"), |a| {
        a.json()["status"] == "success"
    })
    .await;

    let put = owner
        .send(
            app,
            Method::PUT,
            &format!("/v1/prompts/{TEMPLATE}"),
            Some(&json!({
                "level": "agent",
                "version": format!("{}-1", MARK.to_lowercase()),
                "content": format!("Extract the facts {MARK} cares about."),
            })),
        )
        .await;
    assert_eq!(put.status, 201, "{}", put.text);
    // Audited: a correction (its target is the memory's id) and a recall.
    let patched = owner
        .send(
            app,
            Method::PATCH,
            &format!("/v1/memories/{memory}"),
            Some(&json!({ "priority": 90 })),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let recall = owner
        .send(
            app,
            Method::POST,
            "/v1/recall",
            Some(&json!({ "query": QUERY, "session_id": session })),
        )
        .await;
    assert_eq!(recall.status, 200, "{}", recall.text);
    wait_for(app, owner, "/v1/audit", |a| {
        a.json()["items"].as_array().is_some_and(|i| i.len() >= 3)
    })
    .await;

    let owned = Owned {
        user: owner.tenant.user.clone(),
        session,
        memory,
        scene,
        erasure: String::new(),
    };
    (owned, turn_ids)
}

/// Every id of the owner's data (its session, turns, memories, scenes and audit entries), once
/// the workers are done making it.
async fn owner_ids(app: &TestApp, owner: &Caller, session: &str, turn_ids: Value) -> Vec<String> {
    let mut ids = vec![Value::from(session), turn_ids];
    for (path, items) in [
        ("/v1/memories?limit=500", "items"),
        ("/v1/scenes", "items"),
        ("/v1/audit?limit=500", "items"),
    ] {
        ids.push(each(&owner.get(app, path).await.json()[items], |item| {
            item["id"].clone()
        }));
    }
    let mut flat = Vec::new();
    for id in &ids {
        match id {
            Value::Array(list) => flat.extend(list.iter().filter_map(Value::as_str).map(str::to_lowercase)),
            Value::String(id) => flat.push(id.to_lowercase()),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => {}
        }
    }
    flat
}

/// What the owner sees of everything an intruder's change could touch.
async fn owner_view(app: &TestApp, owner: &Caller, o: &Owned) -> Value {
    let s = &o.session;
    // A failed read stands whole (status and answer) for its fields, so that what an intruder
    // broke is reported with every other failure rather than stopping the test here.
    let read = |path: String, pick: fn(&Value) -> Value| async move {
        let answer = owner.get(app, &path).await;
        match answer.status {
            200 => pick(&answer.json()),
            status => json!({ "status": status, "answer": answer.text }),
        }
    };
    json!({
        "messages": read(format!("/v1/sessions/{s}/messages?limit=1000"), |v| v["messages"].clone()).await,
        "context": read(format!("/v1/sessions/{s}/context?window_tokens=100000"), |v| v["messages"].clone()).await,
        "compaction": read(format!("/v1/sessions/{s}/compaction"), |v| {
            json!([v["status"], v["last_seq"], v["requested_at"], v["attempts"]])
        }).await,
        "memories": read("/v1/memories?limit=500".into(), |v| {
            each(&v["items"], |m| json!([m["id"], m["content"], m["category"], m["priority"], m["status"]]))
        }).await,
        "memory": read(format!("/v1/memories/{}", o.memory), |v| {
            json!([v["content"], v["priority"], v["provenance"].as_array().map(Vec::len)])
        }).await,
        "prompt": read(format!("/v1/prompts/{TEMPLATE}"), |v| json!([v["agent"], v["team"], v["effective"]])).await,
        "scenes": read("/v1/scenes".into(), |v| each(&v["items"], |scene| scene["id"].clone())).await,
        "persona": read("/v1/persona".into(), |v| json!([v["version"], v["content"]])).await,
    })
}

/// `pick` of each item of an array (none of anything else).
fn each(items: &Value, pick: fn(&Value) -> Value) -> Value {
    items.as_array().into_iter().flatten().map(pick).collect()
}

/// The owner's view once the workers are done with it: the same twice a second apart.
async fn settled_view(app: &TestApp, owner: &Caller, o: &Owned) -> Value {
    let started = Instant::now();
    let mut view = owner_view(app, owner, o).await;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let again = owner_view(app, owner, o).await;
        if again == view {
            return view;
        }
        assert!(started.elapsed() < WAIT, "the owner's data never settled");
        view = again;
    }
}

// --- comparing answers -----------------------------------------------------------------------------

/// The answer with each `(value, placeholder)` replaced, ids and times redacted, and numbers
/// that measure the call (durations, scores) blanked: what is left must not depend on whose
/// data was asked for.
fn normalized(answer: &Answer, subs: &[(&str, &str)]) -> (u16, Value) {
    let mut text = answer.text.clone();
    for (value, placeholder) in subs {
        text = text.replace(value, placeholder);
    }
    let mut value = serde_json::from_str(&text).unwrap_or_else(|_| {
        // An export stream: one JSON document per line.
        let lines: Option<Vec<Value>> = text.lines().map(|l| serde_json::from_str(l).ok()).collect();
        lines
            .filter(|l| !l.is_empty())
            .map_or(Value::String(text), Value::Array)
    });
    redact(&mut value);
    (answer.status, value)
}

fn redact(value: &mut Value) {
    match value {
        Value::String(s) if uuid::Uuid::parse_str(s).is_ok() => *s = "<uuid>".into(),
        Value::String(s) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => *s = "<time>".into(),
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::Object(fields) => {
            for (name, field) in fields.iter_mut() {
                if name == "duration_ms" || name == "score" {
                    *field = json!("<measured>");
                } else {
                    redact(field);
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// The values at a JSON pointer whose `*` segments stand for every item of an array.
fn values_at<'a>(value: &'a Value, pointer: &str) -> Vec<&'a Value> {
    let Some(rest) = pointer.strip_prefix('/') else {
        return vec![value];
    };
    let (head, tail) = rest.split_once('/').map_or((rest, ""), |(h, t)| (h, t));
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!("/{tail}")
    };
    match (head, value) {
        ("*", Value::Array(items)) => items.iter().flat_map(|i| values_at(i, &tail)).collect(),
        ("*", _) => Vec::new(),
        _ => value.get(head).map(|v| values_at(v, &tail)).unwrap_or_default(),
    }
}

fn is_nothing(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Bool(_) | Value::Number(_) | Value::Object(_) => false,
    }
}

/// Why `answer` is not the `nothing` it should be, if it is not.
fn not_nothing(nothing: Nothing, answer: &Answer) -> Option<String> {
    let body = answer.json();
    match nothing {
        Nothing::NotFound(code) if answer.status == 404 && body["code"] == code => None,
        Nothing::NotFound(code) => Some(format!("expected 404 {code}")),
        Nothing::Status(statuses) if statuses.contains(&answer.status) => None,
        Nothing::Status(statuses) => Some(format!("expected one of {statuses:?}")),
        Nothing::EmptyStream => {
            let lines: Vec<Value> = answer
                .text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let kinds: Vec<&str> = lines.iter().filter_map(|l| l["kind"].as_str()).collect();
            let empty = lines.last().is_some_and(|end| end["counts"] == json!({}));
            (answer.status != 200 || kinds != ["header", "end"] || !empty)
                .then(|| "expected 200 with a stream of nothing (header and end)".into())
        }
        Nothing::Empty(_) if answer.status != 200 => Some("expected 200".into()),
        Nothing::Empty(pointers) => pointers
            .iter()
            .find(|p| {
                let found = values_at(&body, p);
                found.is_empty() || !found.into_iter().all(is_nothing)
            })
            .map(|p| format!("expected nothing at {p}")),
    }
}

// --- the matrix ----------------------------------------------------------------------------------

/// An intruder with its absent twin (none for the one refused outright).
struct Intrusion {
    who: Intruder,
    caller: Caller,
    twin: Option<Caller>,
    /// What stands for each owner value of `Run::swaps` in the twin's calls. Each twin has
    /// values of its own, since its calls create some (its append makes its session exist).
    absent: Vec<String>,
}

/// One deployment's run of the table: what each cell is compared with, and what failed.
struct Run<'a> {
    app: &'a TestApp,
    owner: &'a Caller,
    intrusions: Vec<Intrusion>,
    /// The owner's values the table uses, with the placeholder that stands for them (and for
    /// the twins' absent ones) in answers.
    swaps: Vec<(String, &'static str)>,
    /// Lowercase strings only the owner's data holds.
    markers: Vec<String>,
    failures: Vec<String>,
    cells: usize,
    shared: usize,
    /// Erasures the intruders and twins started of their own scope: they run in the
    /// background, and must be over before the owner's data is looked at again.
    erasures: Vec<(Caller, String)>,
}

impl Run<'_> {
    /// Adds an owner value to swap, and an absent one of each twin's for it.
    fn swap(&mut self, value: &str, placeholder: &'static str, absent: impl Fn() -> String) {
        self.swaps.push((value.to_owned(), placeholder));
        for intrusion in &mut self.intrusions {
            intrusion.absent.push(absent());
        }
    }

    /// `text` with the owner's values swapped for the absent ones of intrusion `i`'s twin.
    fn to_absent(&self, i: usize, text: &str) -> String {
        self.swaps
            .iter()
            .zip(&self.intrusions[i].absent)
            .fold(text.to_owned(), |text, ((value, _), absent)| {
                text.replace(value, absent)
            })
    }

    /// The answer without what depends on whose call it was: the values swapped (the owner's,
    /// or with `twin_of: Some(i)` those of intrusion `i`'s twin) and the caller's own team.
    fn normalized(&self, answer: &Answer, caller: &Caller, twin_of: Option<usize>) -> (u16, Value) {
        let mut subs: Vec<(&str, &str)> = match twin_of {
            None => self.swaps.iter().map(|(value, p)| (value.as_str(), *p)).collect(),
            Some(i) => self
                .swaps
                .iter()
                .zip(&self.intrusions[i].absent)
                .map(|((_, p), absent)| (absent.as_str(), *p))
                .collect(),
        };
        subs.push((caller.tenant.team.as_str(), "<team>"));
        normalized(answer, &subs)
    }

    /// Runs one case: the owner's control, then each intruder beside its twin.
    async fn case(&mut self, case: &Case) {
        let app = self.app;
        let what = format!("{} {}", case.method, case.path);
        if let Some(needle) = &case.owner_sees {
            let answer = self
                .owner
                .send(app, case.method.clone(), &case.path, case.body.as_ref())
                .await;
            let shown = answer.text.to_lowercase().contains(&needle.to_lowercase());
            if !(200..300).contains(&answer.status) || !shown {
                self.failures.push(format!(
                    "control: the owner's {what} does not show {needle:?}: {} {}",
                    answer.status, answer.text
                ));
            }
        }
        let request = format!(
            "{} {}",
            case.path,
            case.body.as_ref().map(Value::to_string).unwrap_or_default()
        )
        .to_lowercase();
        let owner_team = self.owner.tenant.team.to_lowercase();
        for i in 0..self.intrusions.len() {
            let Intrusion { who, caller, twin, .. } = &self.intrusions[i];
            let who = *who;
            if case.shared.iter().any(|(by_design, _)| *by_design == who) {
                self.shared += 1;
                continue;
            }
            self.cells += 1;
            let answer = caller
                .send(app, case.method.clone(), &case.path, case.body.as_ref())
                .await;
            let text = answer.text.to_lowercase();
            // The owner's words and ids, except those the request carried itself; to another
            // team, the owner's team id too.
            let other_team = match who {
                Intruder::OtherTeam | Intruder::ForeignHeaders => Some(&owner_team),
                Intruder::OtherAgent | Intruder::OtherUser => None,
            };
            let leaked: Vec<&String> = self
                .markers
                .iter()
                .chain(other_team)
                .filter(|m| text.contains(m.as_str()) && !request.contains(m.as_str()))
                .collect();
            if !leaked.is_empty() {
                self.failures.push(format!(
                    "LEAK {who:?} {what}: the answer holds the owner's {leaked:?}: {} {}",
                    answer.status, answer.text
                ));
            }
            // The intruder naming a foreign team has no twin: the key's team is enforced, so it
            // is refused before any data is looked at.
            let Some(twin) = twin else {
                if answer.status != 403 || answer.json()["code"] != "forbidden" {
                    self.failures.push(format!(
                        "{who:?} {what}: expected 403 forbidden, got {} {}",
                        answer.status, answer.text
                    ));
                }
                continue;
            };
            if let Some(why) = not_nothing(case.nothing, &answer) {
                self.failures
                    .push(format!("{who:?} {what}: {why}, got {} {}", answer.status, answer.text));
            }
            let absent_body = case
                .body
                .as_ref()
                .map(|b| serde_json::from_str::<Value>(&self.to_absent(i, &b.to_string())).expect("json"));
            let baseline = twin
                .send(
                    app,
                    case.method.clone(),
                    &self.to_absent(i, &case.path),
                    absent_body.as_ref(),
                )
                .await;
            let got = self.normalized(&answer, caller, None);
            let expected = self.normalized(&baseline, twin, Some(i));
            if got != expected {
                self.failures.push(format!(
                    "{who:?} {what}: distinguishable from an absent resource:\n  intruder {got:?}\n  absent   {expected:?}"
                ));
            }
            if case.route == "/v1/users/{user_id}" {
                let mut started = Vec::new();
                for (by, answer) in [(caller, &answer), (twin, &baseline)] {
                    if answer.status == 202 {
                        let id = answer.json()["id"].as_str().expect("erasure id").to_owned();
                        started.push((by.clone(), format!("/v1/users/{}/erasures/{id}", by.tenant.user)));
                    }
                }
                self.erasures.extend(started);
            }
        }
    }
}

/// Polls an erasure as the caller that started it until it is done.
async fn wait_erased(app: &TestApp, caller: &Caller, path: &str) {
    wait_for(app, caller, path, |a| a.json()["status"] == "done").await;
}

async fn matrix(mode: Mode) {
    let started = Instant::now();
    let gaps = coverage_gaps();
    assert!(gaps.is_empty(), "{gaps:#?}");
    let mut app = start(mode).await;
    let t = tenant();
    let owner = Caller {
        key: team_key(&app, &t.team).await,
        tenant: t.clone(),
    };
    let other_team = fresh_caller(&app, &t.agent, &t.user).await;
    let of_owner_team = |agent: &str, user: &str| Caller {
        key: owner.key.clone(),
        tenant: Tenant {
            team: t.team.clone(),
            agent: agent.into(),
            user: user.into(),
        },
    };
    let mut intrusions = Vec::new();
    for (who, caller) in [
        (Intruder::OtherTeam, other_team.clone()),
        (Intruder::OtherAgent, of_owner_team("agent-2", &t.user)),
        (Intruder::OtherUser, of_owner_team(&t.agent, "user-2")),
    ] {
        let twin = fresh_caller(&app, &caller.tenant.agent, &caller.tenant.user).await;
        intrusions.push(Intrusion {
            who,
            caller,
            twin: Some(twin),
            absent: Vec::new(),
        });
    }
    intrusions.push(Intrusion {
        who: Intruder::ForeignHeaders,
        caller: Caller {
            key: owner.key.clone(),
            tenant: other_team.tenant.clone(),
        },
        twin: None,
        absent: Vec::new(),
    });

    let (mut owned, turn_ids) = make_owner_data(&app, &owner).await;
    let before = settled_view(&app, &owner, &owned).await;
    let mut markers = owner_ids(&app, &owner, &owned.session, turn_ids).await;
    markers.push(MARK.to_lowercase());
    let prepared = started.elapsed();

    let new_id = || uuid::Uuid::new_v4().to_string();
    let mut run = Run {
        app: &app,
        owner: &owner,
        intrusions,
        swaps: Vec::new(),
        markers,
        failures: Vec::new(),
        cells: 0,
        shared: 0,
        erasures: Vec::new(),
    };
    run.swap(&owned.session, "<session>", || {
        format!("iso-{}", uuid::Uuid::new_v4().simple())
    });
    run.swap(&owned.memory, "<memory>", new_id);
    run.swap(&owned.scene, "<scene>", new_id);
    run.swap(QUERY, "<query>", || ABSENT_QUERY.to_owned());
    let table = cases(&owned);
    for case in table.iter().filter(|c| !c.after_erase) {
        run.case(case).await;
    }
    for (caller, path) in std::mem::take(&mut run.erasures) {
        wait_erased(&app, &caller, &path).await;
    }
    let after = owner_view(&app, &owner, &owned).await;
    if after != before {
        run.failures.push(format!(
            "the owner's data changed under the intruders:\n  before {before}\n  after  {after}"
        ));
    }

    // The exempt routes anyone may read hold none of the owner's words or ids, nor its team.
    let mut everything = run.markers.clone();
    everything.push(t.team.to_lowercase());
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json", "/ops", "/ops/state"] {
        let response = app.client.get(app.url(path)).send().await.expect("send");
        let text = response.text().await.expect("body").to_lowercase();
        let leaked: Vec<&String> = everything.iter().filter(|m| text.contains(m.as_str())).collect();
        if !leaked.is_empty() {
            run.failures
                .push(format!("LEAK GET {path} (exempt) holds the owner's {leaked:?}"));
        }
    }

    // The admin routes are the admin key's alone: no team key reaches them, not even the
    // owner's own (whose permission is the highest a team key has) on its own team.
    let mut team_keys = vec![&owner];
    team_keys.extend(run.intrusions.iter().map(|i| &i.caller));
    for (method, route, _) in EXEMPT.iter().filter(|(_, r, _)| r.starts_with("/v1/admin/")) {
        let path = route
            .replace("{team_id}", &t.team)
            .replace("{key_id}", &new_id())
            .replace("{erasure_id}", &new_id())
            .replace("{kind}", "index");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
        let body = (method == Method::POST).then(|| json!({ "team_id": t.team }));
        for caller in &team_keys {
            let answer = caller.send(&app, method.clone(), &path, body.as_ref()).await;
            if answer.status != 403 {
                run.failures.push(format!(
                    "{method} {path} with the team key of {:?}: expected 403, got {} {}",
                    caller.tenant, answer.status, answer.text
                ));
            }
        }
    }

    // Last, the routes of an erasure: the owner erases itself.
    let erase = owner
        .send(&app, Method::DELETE, &format!("/v1/users/{}", t.user), None)
        .await;
    assert_eq!(erase.status, 202, "{}", erase.text);
    owned.erasure = erase.json()["id"].as_str().expect("erasure id").to_owned();
    wait_erased(
        &app,
        &owner,
        &format!("/v1/users/{}/erasures/{}", t.user, owned.erasure),
    )
    .await;
    run.swap(&owned.erasure, "<erasure>", new_id);
    run.markers.push(owned.erasure.clone());
    for case in cases(&owned).iter().filter(|c| c.after_erase) {
        run.case(case).await;
    }

    println!(
        "isolation {mode:?}: {} calls of {} routes ({} more exempt) × {} intruders = {} cells ({} shared by design); \
         set-up {:.1} s, matrix {:.1} s",
        table.len(),
        table
            .iter()
            .map(|c| (c.method.as_str(), c.route))
            .collect::<BTreeSet<_>>()
            .len(),
        EXEMPT.len(),
        run.intrusions.len(),
        run.cells,
        run.shared,
        prepared.as_secs_f64(),
        (started.elapsed() - prepared).as_secs_f64(),
    );
    let failures = run.failures;
    app.stop().await;
    assert!(
        failures.is_empty(),
        "{mode:?}: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
