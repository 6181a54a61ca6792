//! The audit log: the store port on both backends, and the API writing one entry per recall
//! and per administrative action, listed per tenant.

use std::time::Duration;

use chrono::{SubsecRound as _, Utc};
use integration_tests::app::{tenant, Mode, TestApp};
use integration_tests::pg::TestDb;
use reqwest::Method;
use serde_json::{json, Value};
use shared::store::audit::{AuditCursor, AuditEntry, AuditFilter, AuditLog};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_audit_log_conforms() {
    let db = TestDb::create().await;
    conformance(&db.store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_audit_log_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("db.sqlite")).await.unwrap();
    conformance(&store).await;
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
