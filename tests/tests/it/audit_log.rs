//! The audit log: the store port on both backends, and the API writing one entry per recall
//! and per administrative action, listed per tenant; and the operator's log of the admin key's
//! calls, in both deployments.

use std::time::Duration;

use chrono::{SubsecRound as _, Utc};
use integration_tests::app::{tenant, Mode, Options, TestApp, MODES};
use integration_tests::pg::TestDb;
use reqwest::Method;
use serde_json::{json, Value};
use shared::store::audit::{AuditCursor, AuditEntry, AuditFilter, AuditLog, OperatorEntry, OperatorFilter};
use shared::store::SqliteStore;
use uuid::Uuid;

fn entry(tenant: &shared::domain::Tenant, action: &str, minutes_ago: i64) -> AuditEntry {
    AuditEntry {
        id: Uuid::new_v4(),
        at: Utc::now().trunc_subsecs(6) - chrono::Duration::minutes(minutes_ago),
        tenant: tenant.clone(),
        actor: "ops-bot".to_owned(),
        action: action.to_owned(),
        target: Some("s1".to_owned()),
        outcome: "ok".to_owned(),
        duration_ms: 7,
        detail: json!({ "items": 3 }),
    }
}

async fn conformance(log: &dyn AuditLog) {
    let (t, other) = (tenant(), tenant());
    let written: Vec<AuditEntry> = (0..5)
        .map(|i| entry(&t, if i % 2 == 0 { "recall" } else { "memory.delete" }, i))
        .collect();
    for e in &written {
        log.record(e).await.expect("record");
    }
    log.record(&entry(&other, "recall", 0)).await.expect("record");

    // Pages cover every entry once, newest first, and round-trip exactly.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = log
            .audit_entries(&t, &AuditFilter::default(), after, 2)
            .await
            .expect("list");
        if page.is_empty() {
            break;
        }
        after = page.last().map(|e| AuditCursor { at: e.at, id: e.id });
        seen.extend(page);
    }
    assert_eq!(seen, written, "entries round-trip, newest first");
    let recalls = log
        .audit_entries(
            &t,
            &AuditFilter {
                action: Some("recall".into()),
                ..AuditFilter::default()
            },
            None,
            100,
        )
        .await
        .expect("list");
    assert_eq!(recalls.len(), 3);
    let window = log
        .audit_entries(
            &t,
            &AuditFilter {
                since: Some(written[3].at),
                until: Some(written[0].at),
                ..AuditFilter::default()
            },
            None,
            100,
        )
        .await
        .expect("list");
    assert_eq!(window.len(), 3, "since is inclusive, until exclusive");
    let theirs = log
        .audit_entries(&other, &AuditFilter::default(), None, 100)
        .await
        .expect("list");
    assert_eq!(theirs.len(), 1, "another tenant sees only its own entries");
}

fn operator_entry(team: Option<&str>, action: &str, minutes_ago: i64) -> OperatorEntry {
    OperatorEntry {
        id: Uuid::new_v4(),
        at: Utc::now().trunc_subsecs(6) - chrono::Duration::minutes(minutes_ago),
        team_id: team.map(str::to_owned),
        actor: "oncall".to_owned(),
        action: action.to_owned(),
        target: Some(Uuid::new_v4().to_string()),
        outcome: "ok".to_owned(),
        duration_ms: 3,
        detail: json!({ "permission": "read" }),
    }
}

/// The operator's log pages newest first, filters by team, action and time, and keeps entries
/// that name no team.
async fn operator_conformance(log: &dyn AuditLog) {
    let (team, other) = (tenant().team, tenant().team);
    let written: Vec<OperatorEntry> = (0..5)
        .map(|i| operator_entry(Some(&team), if i % 2 == 0 { "key.create" } else { "key.revoke" }, i))
        .collect();
    for e in &written {
        log.record_operator(e).await.expect("record");
    }
    log.record_operator(&operator_entry(Some(&other), "team.erase", 0))
        .await
        .expect("record");
    log.record_operator(&operator_entry(None, "key.revoke", 10))
        .await
        .expect("record");
    let ours = OperatorFilter {
        team_id: Some(team.clone()),
        ..OperatorFilter::default()
    };
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = log.operator_entries(&ours, after, 2).await.expect("list");
        if page.is_empty() {
            break;
        }
        after = page.last().map(|e| AuditCursor { at: e.at, id: e.id });
        seen.extend(page);
    }
    assert_eq!(seen, written, "entries round-trip, newest first");
    let creates = OperatorFilter {
        action: Some("key.create".into()),
        ..ours.clone()
    };
    assert_eq!(log.operator_entries(&creates, None, 100).await.expect("list").len(), 3);
    let window = OperatorFilter {
        since: Some(written[3].at),
        until: Some(written[0].at),
        ..ours.clone()
    };
    assert_eq!(
        log.operator_entries(&window, None, 100).await.expect("list").len(),
        3,
        "since is inclusive, until exclusive"
    );
    // Across teams (other tests write here too): both of the other entries are listed.
    let all = log
        .operator_entries(&OperatorFilter::default(), None, 10_000)
        .await
        .expect("list");
    assert!(all.iter().any(|e| e.team_id.as_deref() == Some(other.as_str())));
    assert!(
        all.iter().any(|e| e.team_id.is_none()),
        "an entry without a team is kept"
    );
    assert!(
        all.windows(2).all(|w| (w[0].at, w[0].id) > (w[1].at, w[1].id)),
        "newest first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_audit_log_conforms() {
    let db = TestDb::create().await;
    let store = db.store().await;
    conformance(&store).await;
    operator_conformance(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_audit_log_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("db.sqlite")).await.unwrap();
    conformance(&store).await;
    operator_conformance(&store).await;
}

async fn audit(app: &TestApp, t: &shared::domain::Tenant, query: &str) -> Vec<Value> {
    let response = app
        .req(Method::GET, &format!("/v1/audit{query}"), t)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["items"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recalls_and_admin_actions_are_audited() {
    let app = TestApp::start(Mode::Cluster).await;
    let (t, other) = (tenant(), tenant());
    app.append_ok(
        &t,
        "s1",
        json!([{ "role": "user", "content": "I am the DBA for billing." }]),
    )
    .await;
    app.wait_extracted(Duration::from_secs(30)).await;
    let recall = app
        .req(Method::POST, "/v1/recall", &t)
        .header("x-sediment-actor", "support-agent-7")
        .json(&json!({ "query": "who runs billing", "session_id": "s1" }))
        .send()
        .await
        .unwrap();
    assert_eq!(recall.status(), 200);
    let recall: Value = recall.json().await.unwrap();
    let memory_id = recall["dynamic"][0]["id"].as_str().unwrap().to_owned();
    let deleted = app
        .req(Method::DELETE, &format!("/v1/memories/{memory_id}"), &t)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);

    // The recall's entry is written off the request path: wait for it.
    let mut entries = Vec::new();
    for _ in 0..100 {
        entries = audit(&app, &t, "").await;
        if entries.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let actions: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["memory.delete", "recall"], "{entries:?}");
    let (delete, recall_entry) = (&entries[0], &entries[1]);
    assert_eq!(delete["target"], memory_id);
    assert_eq!(delete["actor"], t.user, "without the header, the actor is the user");
    assert_eq!(recall_entry["actor"], "support-agent-7");
    assert_eq!(recall_entry["target"], "s1");
    assert_eq!(recall_entry["outcome"], "ok");
    assert_eq!(recall_entry["detail"]["items"][0]["id"], memory_id.as_str());
    assert!(
        !recall_entry.to_string().contains("billing"),
        "the audit log keeps no content: {recall_entry}"
    );
    assert_eq!(audit(&app, &t, "?action=recall").await.len(), 1);
    assert!(audit(&app, &other, "").await.is_empty(), "another tenant sees nothing");

    for query in ["?limit=0", "?cursor=x", "?since=yesterday"] {
        let response = app
            .req(Method::GET, &format!("/v1/audit{query}"), &t)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_client_error(), "{query}: {}", response.status());
    }
}

const ADMIN_KEY: &str = "audit-admin-key-0123456789abcdef-0123456789";

/// Lists the operator's log as the admin key; returns the status and the body.
async fn operator_log(app: &TestApp, bearer: &str, query: &str) -> (reqwest::StatusCode, Value) {
    let response = app
        .client
        .get(app.url(&format!("/v1/admin/audit{query}")))
        .bearer_auth(bearer)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every call of the admin key that makes or revokes a key or erases a team is in the
/// operator's log, with its actor, team, target and outcome, failures included, and never a
/// secret; only the admin key reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_keys_calls_are_in_the_operators_log() {
    for mode in MODES {
        let options = Options {
            env: vec![("ADMIN_KEY", ADMIN_KEY.to_owned())],
            ..Options::default()
        };
        let mut app = TestApp::with(mode, options).await;
        let t = tenant();
        let admin = |method: Method, path: &str| {
            app.client
                .request(method, app.url(path))
                .bearer_auth(ADMIN_KEY)
                .header("x-sediment-actor", "alice@ops")
        };

        let created = admin(Method::POST, "/v1/admin/keys")
            .json(&json!({ "team_id": t.team, "permission": "admin", "name": "team admin" }))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
        let created: Value = created.json().await.unwrap();
        let (secret, key_id) = (created["key"].as_str().unwrap(), created["id"].as_str().unwrap());
        let refused = admin(Method::POST, "/v1/admin/keys")
            .json(&json!({ "team_id": t.team, "permission": "root" }))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 422);

        // The team's admin key writes data and then may not read the operator's log.
        let appended = app
            .req(Method::POST, "/v1/sessions/s1/messages", &t)
            .bearer_auth(secret)
            .json(&json!({ "messages": [{ "role": "user", "content": "I run the billing database." }] }))
            .send()
            .await
            .unwrap();
        assert_eq!(appended.status(), 201);
        let (status, _) = operator_log(&app, secret, "").await;
        assert_eq!(status, 403, "{mode:?}: a team's key reading the operator's log");

        let erased = admin(Method::DELETE, &format!("/v1/admin/teams/{}", t.team))
            .send()
            .await
            .unwrap();
        assert_eq!(erased.status(), 202);
        let erased: Value = erased.json().await.unwrap();
        let job = erased["items"][0]["id"].as_str().unwrap().to_owned();
        let revoked = admin(Method::DELETE, &format!("/v1/admin/keys/{key_id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(revoked.status(), 200);
        let unknown = Uuid::new_v4().to_string();
        let missing = app
            .client
            .delete(app.url(&format!("/v1/admin/keys/{unknown}")))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 404);

        let (status, body) = operator_log(&app, ADMIN_KEY, &format!("?team_id={}", t.team)).await;
        assert_eq!(status, 200, "{body}");
        let items = body["items"].as_array().unwrap();
        let summary: Vec<(&str, &str)> = items
            .iter()
            .map(|e| (e["action"].as_str().unwrap(), e["outcome"].as_str().unwrap()))
            .collect();
        assert_eq!(
            summary,
            [
                ("key.revoke", "ok"),
                ("team.erase", "ok"),
                ("key.create", "invalid_request"),
                ("key.create", "ok")
            ],
            "{mode:?}: {body}"
        );
        assert!(items
            .iter()
            .all(|e| e["actor"] == "alice@ops" && e["team_id"] == t.team.as_str()));
        let (revoke, erase, create) = (&items[0], &items[1], &items[3]);
        assert_eq!(revoke["target"], key_id);
        assert_eq!(erase["detail"]["erasures"], json!([job]), "{erase}");
        assert_eq!(create["target"], key_id);
        assert_eq!(create["detail"]["permission"], "admin");
        assert_eq!(create["detail"]["prefix"], created["prefix"]);
        let text = body.to_string();
        assert!(!text.contains(&secret[5..]), "the secret is not logged");
        assert!(!text.contains("billing"), "no content is logged");

        // The unknown key's revoke names no team, and is found across teams with its actor.
        let (_, all) = operator_log(&app, ADMIN_KEY, "?action=key.revoke&limit=500").await;
        let miss = all["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["target"] == unknown.as_str())
            .unwrap_or_else(|| panic!("{mode:?}: the unknown key's revoke: {all}"));
        assert_eq!(miss["outcome"], "not_found");
        assert_eq!(
            miss["actor"], "operator",
            "without the header, the actor is the operator"
        );
        assert!(miss["team_id"].is_null());

        // Pages of one cover the team's entries once each, newest first.
        let mut paged = Vec::new();
        let mut query = format!("?team_id={}&limit=1", t.team);
        loop {
            let (status, page) = operator_log(&app, ADMIN_KEY, &query).await;
            assert_eq!(status, 200, "{page}");
            paged.extend(page["items"].as_array().unwrap().iter().map(|e| e["id"].clone()));
            match page["next"].as_str() {
                Some(next) => query = format!("?team_id={}&limit=1&cursor={next}", t.team),
                None => break,
            }
        }
        assert_eq!(paged, items.iter().map(|e| e["id"].clone()).collect::<Vec<_>>());
        for query in [
            "?limit=0",
            "?cursor=x",
            "?since=yesterday",
            "?team_id=%20",
            "?colour=blue",
        ] {
            let (status, body) = operator_log(&app, ADMIN_KEY, query).await;
            assert!(status.is_client_error(), "{query}: {status} {body}");
        }
        app.stop().await;
    }
}
