//! Team and agent prompt overrides: the `PromptStore` conformance checks against both backends,
//! the `/v1/prompts` API (tenancy, validation), and an LLM-mode extraction that uses a team's
//! override and records it in provenance.

use std::sync::Arc;
use std::time::Duration;

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::fake_openai::{chat_message, FakeOpenAi};
use reqwest::Method;
use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::llm::{InstanceTemplates, OverrideLevel, Prompts, TemplateId};
use shared::store::prompts::{NewPrompt, PromptScope, PromptStore, PutOutcome, StoredOverrides, StoredPrompt};

/// The conformance checks: each takes a fresh store and panics naming the broken rule.
mod suite {
    use super::*;

    fn prompt(tenant: &Tenant, level: OverrideLevel, version: &str, content: &str) -> NewPrompt {
        NewPrompt::new(TemplateId::L1Extract, PromptScope::of(tenant, level), version, content).expect("valid prompt")
    }

    fn created(outcome: PutOutcome) -> StoredPrompt {
        let PutOutcome::Created(stored) = outcome else {
            panic!("expected a new version, got {outcome:?}");
        };
        stored
    }

    async fn active(store: &dyn PromptStore, tenant: &Tenant) -> Vec<(String, String)> {
        let mut active: Vec<(String, String)> = store
            .active_prompts(tenant, Some(TemplateId::L1Extract))
            .await
            .expect("read active prompts")
            .into_iter()
            .map(|p| (p.scope.level.as_str().to_owned(), p.version))
            .collect();
        active.sort();
        active
    }

    async fn effective_source(store: Arc<dyn PromptStore>, tenant: &Tenant) -> (String, String) {
        let prompts = Prompts::new(InstanceTemplates::default(), Arc::new(StoredOverrides(store)));
        let effective = prompts.effective(TemplateId::L1Extract, tenant).await.expect("resolve");
        (effective.template.source, effective.text)
    }

    pub async fn put_stores_a_version_that_reads_back_and_resolves(store: Arc<dyn PromptStore>) {
        let t = tenant();
        let stored = created(
            store
                .put_prompt(&prompt(
                    &t,
                    OverrideLevel::Team,
                    "1",
                    "---\nversion: x\n---\nTeam JSON prompt\n",
                ))
                .await
                .expect("put"),
        );
        assert!(stored.active);
        assert_eq!(stored.content, "Team JSON prompt", "front matter is not stored");
        assert_eq!(stored.scope.agent, None);
        let read = store.active_prompts(&t, None).await.expect("read active prompts");
        assert_eq!(
            read,
            vec![stored.clone()],
            "what put returns is exactly what reads return"
        );
        assert_eq!(
            effective_source(store.clone(), &t).await,
            ("team".to_owned(), "Team JSON prompt".to_owned())
        );
        let other_template = store
            .active_prompts(&t, Some(TemplateId::L1Dedup))
            .await
            .expect("read active prompts");
        assert!(other_template.is_empty(), "an override is per template");
    }

    pub async fn versions_name_one_text_and_keep_their_history(store: Arc<dyn PromptStore>) {
        let t = tenant();
        let v1 = created(
            store
                .put_prompt(&prompt(&t, OverrideLevel::Team, "v1", "first"))
                .await
                .unwrap(),
        );
        let again = store
            .put_prompt(&prompt(&t, OverrideLevel::Team, "v1", "first\n"))
            .await
            .unwrap();
        assert_eq!(
            again,
            PutOutcome::Unchanged(v1.clone()),
            "a repeated put changes nothing"
        );
        let taken = store
            .put_prompt(&prompt(&t, OverrideLevel::Team, "v1", "another text"))
            .await
            .unwrap();
        assert_eq!(taken, PutOutcome::VersionTaken(v1.clone()), "a version names one text");
        let v2 = created(
            store
                .put_prompt(&prompt(&t, OverrideLevel::Team, "v2", "second"))
                .await
                .unwrap(),
        );
        assert_eq!(active(&*store, &t).await, [("team".to_owned(), "v2".to_owned())]);
        let history = store.prompt_history(&t, TemplateId::L1Extract).await.unwrap();
        let versions: Vec<(&str, bool)> = history.iter().map(|p| (p.version.as_str(), p.active)).collect();
        assert_eq!(
            versions,
            [("v2", true), ("v1", false)],
            "newest first, the old one kept"
        );

        // Putting an old version again rolls back to its row.
        let outcome = store
            .put_prompt(&prompt(&t, OverrideLevel::Team, "v1", "first"))
            .await
            .unwrap();
        let PutOutcome::Reactivated(again) = outcome else {
            panic!("an old version comes back: {outcome:?}");
        };
        assert_eq!((again.id, again.active), (v1.id, true));
        assert!(again.updated_at >= v2.created_at);
        assert_eq!(active(&*store, &t).await, [("team".to_owned(), "v1".to_owned())]);
        assert_eq!(store.prompt_history(&t, TemplateId::L1Extract).await.unwrap().len(), 2);
    }

    pub async fn deactivate_falls_back_and_keeps_the_row(store: Arc<dyn PromptStore>) {
        let t = tenant();
        let team = PromptScope::of(&t, OverrideLevel::Team);
        let agent = PromptScope::of(&t, OverrideLevel::Agent);
        created(
            store
                .put_prompt(&prompt(&t, OverrideLevel::Team, "t1", "Team text"))
                .await
                .unwrap(),
        );
        created(
            store
                .put_prompt(&prompt(&t, OverrideLevel::Agent, "a1", "Agent text"))
                .await
                .unwrap(),
        );
        assert_eq!(
            effective_source(store.clone(), &t).await,
            ("agent".to_owned(), "Agent text".to_owned()),
            "the agent's override wins over the team's"
        );
        assert!(store.deactivate_prompt(TemplateId::L1Extract, &agent).await.unwrap());
        assert!(
            !store.deactivate_prompt(TemplateId::L1Extract, &agent).await.unwrap(),
            "a repeated delete finds nothing"
        );
        assert_eq!(effective_source(store.clone(), &t).await.0, "team");
        assert!(store.deactivate_prompt(TemplateId::L1Extract, &team).await.unwrap());
        assert_eq!(effective_source(store.clone(), &t).await.0, "builtin");
        assert!(active(&*store, &t).await.is_empty());
        let history = store.prompt_history(&t, TemplateId::L1Extract).await.unwrap();
        assert_eq!(history.len(), 2, "a delete keeps the rows");
        assert!(history.iter().all(|p| !p.active));
    }

    pub async fn overrides_are_tenant_scoped(store: Arc<dyn PromptStore>) {
        let t = tenant();
        let other_team = tenant();
        let other_agent = Tenant {
            agent: "agent-2".into(),
            ..t.clone()
        };
        let other_user = Tenant {
            user: "user-2".into(),
            ..t.clone()
        };
        created(
            store
                .put_prompt(&prompt(&t, OverrideLevel::Team, "t1", "Team text"))
                .await
                .unwrap(),
        );
        created(
            store
                .put_prompt(&prompt(&t, OverrideLevel::Agent, "a1", "Agent text"))
                .await
                .unwrap(),
        );
        let both = [
            ("agent".to_owned(), "a1".to_owned()),
            ("team".to_owned(), "t1".to_owned()),
        ];
        assert_eq!(active(&*store, &t).await, both);
        assert_eq!(
            active(&*store, &other_user).await,
            both,
            "every user of the agent shares them"
        );
        assert_eq!(
            active(&*store, &other_agent).await,
            [("team".to_owned(), "t1".to_owned())],
            "another agent of the team sees the team's only"
        );
        assert!(active(&*store, &other_team).await.is_empty(), "another team sees none");
        assert!(store
            .prompt_history(&other_team, TemplateId::L1Extract)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(effective_source(store.clone(), &other_team).await.0, "builtin");

        // Another team's puts and deletes do not touch them.
        for level in [OverrideLevel::Team, OverrideLevel::Agent] {
            assert!(!store
                .deactivate_prompt(TemplateId::L1Extract, &PromptScope::of(&other_team, level))
                .await
                .unwrap());
        }
        created(
            store
                .put_prompt(&prompt(&other_team, OverrideLevel::Team, "t1", "Other text"))
                .await
                .unwrap(),
        );
        assert_eq!(active(&*store, &t).await, both);
        assert_eq!(
            effective_source(store.clone(), &t).await.1,
            "Agent text",
            "the same version at another team is another override"
        );
    }

    pub async fn concurrent_puts_leave_one_active(store: Arc<dyn PromptStore>) {
        let t = tenant();
        let puts = (0..8).map(|i| {
            let store = store.clone();
            let new = prompt(&t, OverrideLevel::Team, &format!("c{i}"), &format!("text {i}"));
            tokio::spawn(async move { store.put_prompt(&new).await })
        });
        for put in futures::future::join_all(puts).await {
            created(put.expect("join").expect("every concurrent put succeeds"));
        }
        assert_eq!(active(&*store, &t).await.len(), 1, "exactly one version is active");
        assert_eq!(store.prompt_history(&t, TemplateId::L1Extract).await.unwrap().len(), 8);
    }
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let db = integration_tests::pg::TestDb::create().await;
                    let store = std::sync::Arc::new(db.store().await);
                    super::suite::$check(store).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let dir = tempfile::tempdir().expect("temp dir");
                    let store = shared::store::SqliteStore::open(&dir.path().join("sediment.db"))
                        .await
                        .expect("open");
                    super::suite::$check(std::sync::Arc::new(store)).await;
                }
            )*
        }
    };
}

conformance!(
    put_stores_a_version_that_reads_back_and_resolves,
    versions_name_one_text_and_keep_their_history,
    deactivate_falls_back_and_keeps_the_row,
    overrides_are_tenant_scoped,
    concurrent_puts_leave_one_active,
);

// ---------------------------------------------------------------------------------------------
// The API.

async fn put(app: &TestApp, tenant: &Tenant, id: &str, body: Value) -> (u16, Value) {
    let response = app
        .req(Method::PUT, &format!("/v1/prompts/{id}"), tenant)
        .json(&body)
        .send()
        .await
        .expect("send put");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(app: &TestApp, tenant: &Tenant, path: &str) -> (u16, Value) {
    let response = app.req(Method::GET, path, tenant).send().await.expect("send get");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn delete(app: &TestApp, tenant: &Tenant, path: &str) -> (u16, Value) {
    let response = app.req(Method::DELETE, path, tenant).send().await.expect("send delete");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn sources(list: &Value) -> Vec<(String, String)> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap().to_owned(),
                i["effective"]["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn api_puts_resolves_and_falls_back(mode: Mode) {
    let app = TestApp::start(mode).await;
    let t = tenant();
    let (status, list) = get(&app, &t, "/v1/prompts").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(
        sources(&list),
        [
            ("l1-extract".into(), "builtin".into()),
            ("l1-dedup".into(), "builtin".into()),
            ("l2-scene".into(), "builtin".into()),
            ("l3-persona".into(), "builtin".into())
        ]
    );

    let (status, team) = put(
        &app,
        &t,
        "l1-extract",
        json!({"level": "team", "version": "2026-05", "content": "Team prompt. Answer in JSON."}),
    )
    .await;
    assert_eq!(status, 201, "{team}");
    assert_eq!(team["level"], "team");
    assert_eq!(team["version"], "2026-05");
    assert_eq!(team["effective"]["source"], "team");
    assert_eq!(team["effective"]["hash"], team["hash"]);
    assert_eq!(team["hash"].as_str().unwrap().len(), 64);

    let (status, again) = put(
        &app,
        &t,
        "l1-extract",
        json!({"level": "team", "version": "2026-05", "content": "Team prompt. Answer in JSON."}),
    )
    .await;
    assert_eq!(
        (status, &again["hash"]),
        (200, &team["hash"]),
        "a repeated put is a no-op"
    );

    let (status, agent) = put(
        &app,
        &t,
        "l1-extract",
        json!({"level": "agent", "version": "a1", "content": "Agent prompt. JSON."}),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let (_, detail) = get(&app, &t, "/v1/prompts/l1-extract").await;
    assert_eq!(detail["effective"]["source"], "agent", "{detail}");
    assert_eq!(detail["effective"]["version"], "a1");
    assert_eq!(detail["content"], "Agent prompt. JSON.");
    assert_eq!(detail["team"]["version"], "2026-05");
    assert_eq!(detail["team"]["content"], "Team prompt. Answer in JSON.");
    assert_eq!(detail["history"].as_array().unwrap().len(), 2);

    // Another agent of the team gets the team's; another team gets the builtin.
    let colleague = Tenant {
        agent: "agent-2".into(),
        ..t.clone()
    };
    let (_, list) = get(&app, &colleague, "/v1/prompts").await;
    assert_eq!(list["items"][0]["effective"]["source"], "team", "{list}");
    assert!(list["items"][0]["agent"].is_null());
    let stranger = tenant();
    let (_, list) = get(&app, &stranger, "/v1/prompts").await;
    assert_eq!(sources(&list)[0].1, "builtin", "{list}");
    let (_, detail) = get(&app, &stranger, "/v1/prompts/l1-extract").await;
    assert_eq!(detail["history"], json!([]), "{detail}");
    let (status, _) = delete(&app, &stranger, "/v1/prompts/l1-extract?level=team").await;
    assert_eq!(status, 404, "another team cannot delete it");

    let (status, _) = delete(&app, &t, "/v1/prompts/l1-extract?level=agent").await;
    assert_eq!(status, 204);
    let (_, detail) = get(&app, &t, "/v1/prompts/l1-extract").await;
    assert_eq!(detail["effective"]["source"], "team");
    let (status, _) = delete(&app, &t, "/v1/prompts/l1-extract?level=team").await;
    assert_eq!(status, 204);
    let (status, body) = delete(&app, &t, "/v1/prompts/l1-extract?level=team").await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (_, detail) = get(&app, &t, "/v1/prompts/l1-extract").await;
    assert_eq!(detail["effective"]["source"], "builtin");
    assert!(
        detail["content"].as_str().unwrap().contains("JSON"),
        "the builtin text is shown: {detail}"
    );
    assert_eq!(detail["history"].as_array().unwrap().len(), 2, "the history stays");

    // Every change is in the audit log, with hashes and versions but no text.
    let (_, audit) = get(&app, &t, "/v1/audit?limit=50").await;
    let actions: Vec<(String, String)> = audit["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{audit}"))
        .iter()
        .filter(|e| e["action"].as_str().is_some_and(|a| a.starts_with("prompt.")))
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["detail"]["result"]
                    .as_str()
                    .unwrap_or(e["detail"]["level"].as_str().unwrap())
                    .to_owned(),
            )
        })
        .collect();
    let expected = [
        ("prompt.delete", "team"),
        ("prompt.delete", "agent"),
        ("prompt.update", "created"),
        ("prompt.update", "unchanged"),
        ("prompt.update", "created"),
    ]
    .map(|(a, r)| (a.to_owned(), r.to_owned()));
    assert_eq!(actions, expected, "{audit}");
    assert!(!audit.to_string().contains("Team prompt."), "no text in the audit log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prompt_api_embedded() {
    api_puts_resolves_and_falls_back(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prompt_api_cluster() {
    api_puts_resolves_and_falls_back(Mode::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prompt_api_rejects_bad_input_with_coded_4xx() {
    let app = TestApp::start(Mode::Embedded).await;
    let t = tenant();
    let ok = json!({"level": "team", "version": "1", "content": "text"});
    let with = |key: &str, value: Value| {
        let mut body = ok.clone();
        body[key] = value;
        body
    };
    let mut without_version = ok.clone();
    without_version.as_object_mut().unwrap().remove("version");
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("l1_extract", ok.clone(), 404, "not_found"),
        ("l1-extract", with("level", json!("user")), 422, "invalid_request"),
        ("l1-extract", with("level", json!("instance")), 422, "invalid_request"),
        ("l1-extract", with("version", json!("")), 422, "invalid_request"),
        ("l1-extract", with("version", json!("v 1")), 422, "invalid_request"),
        (
            "l1-extract",
            with("version", json!("v".repeat(65))),
            422,
            "invalid_request",
        ),
        ("l1-extract", with("version", json!(3)), 422, "invalid_request"),
        ("l1-extract", with("content", json!("  ")), 422, "invalid_request"),
        (
            "l1-extract",
            with("content", json!("---\nversion: 1\n---\n")),
            422,
            "invalid_request",
        ),
        (
            "l1-extract",
            with("content", json!("x".repeat(32 * 1024 + 1))),
            422,
            "invalid_request",
        ),
        ("l1-extract", with("extra", json!(1)), 422, "invalid_request"),
        ("l1-extract", without_version, 422, "invalid_request"),
    ];
    for (id, body, status, code) in cases {
        let (got, answer) = put(&app, &t, id, body.clone()).await;
        assert_eq!(
            (got, answer["code"].as_str()),
            (status, Some(code)),
            "{id} {body}: {answer}"
        );
    }
    let response = app
        .client
        .put(app.url("/v1/prompts/l1-extract"))
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400, "the tenant headers are required");
    let (status, answer) = get(&app, &t, "/v1/prompts/nope").await;
    assert_eq!((status, answer["code"].as_str()), (404, Some("not_found")));
    for path in ["/v1/prompts/l1-extract", "/v1/prompts/l1-extract?level=everyone"] {
        let (status, answer) = delete(&app, &t, path).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (422, Some("invalid_request")),
            "{path}"
        );
    }

    // A version names one text: the same version with another text is refused.
    assert_eq!(put(&app, &t, "l1-dedup", ok.clone()).await.0, 201);
    let (status, answer) = put(&app, &t, "l1-dedup", with("content", json!("changed"))).await;
    assert_eq!(status, 422, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("new version"), "{answer}");
    let (_, detail) = get(&app, &t, "/v1/prompts/l1-dedup").await;
    assert_eq!(detail["content"], "text", "nothing changed: {detail}");
    // Nothing the rejected requests carried was stored.
    let (_, detail) = get(&app, &t, "/v1/prompts/l1-extract").await;
    assert_eq!(detail["history"], json!([]), "{detail}");
}

// ---------------------------------------------------------------------------------------------
// The override in use.

const WAIT: Duration = Duration::from_secs(30);
const TEAM_PROMPT: &str = "You are the DBA team's memory extractor. Reply with JSON: scenes and cards.";

/// One persona card per user turn, and `add` for every dedup card.
fn answer(body: &Value) -> Option<String> {
    let payload: Value = chat_message(body, "user")
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    if let Some(turns) = payload["turns"].as_array() {
        let cards: Vec<Value> = turns
            .iter()
            .filter(|t| t["role"] == "user")
            .map(|t| {
                json!({
                    "content": t["content"],
                    "category": "persona",
                    "priority": 90,
                    "occurred_at": null,
                    "source_message_ids": [t["ref"]],
                })
            })
            .collect();
        return Some(json!({ "scenes": [{ "scene": "intro", "cards": cards }] }).to_string());
    }
    let cards = payload["cards"].as_array()?;
    let decisions: Vec<Value> = cards
        .iter()
        .map(|c| json!({ "card": c["ref"], "action": "add", "targets": [], "content": null }))
        .collect();
    Some(json!({ "decisions": decisions }).to_string())
}

/// The system prompts of the extraction calls so far whose input carried `turn`. A batch may
/// be read twice (an event and the sweep race; the loser's commit finds the cursor moved), so
/// there may be more than one.
fn extract_prompts(llm: &FakeOpenAi, turn: &str) -> Vec<String> {
    llm.chat()
        .recorded()
        .iter()
        .filter(|r| r.header("x-sediment-trace") == Some("memory.l1-extract"))
        .filter(|r| chat_message(&r.body, "user").is_some_and(|input| input.contains(turn)))
        .filter_map(|r| chat_message(&r.body, "system"))
        .collect()
}

async fn provenance_template(app: &TestApp, tenant: &Tenant, content: &str) -> Value {
    let memories = app.memories(tenant, "?limit=500").await;
    let memory = memories["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == content)
        .unwrap_or_else(|| panic!("no memory {content:?}: {memories}"));
    let (_, detail) = get(app, tenant, &format!("/v1/memories/{}", memory["id"].as_str().unwrap())).await;
    detail["provenance"][0]["template"].clone()
}

async fn extraction_uses_the_team_override(mode: Mode) {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(answer);
    let app = TestApp::with(
        mode,
        Options {
            env: vec![
                ("LLM_URL", llm.base_url()),
                ("LLM_MODEL", "fake-model".into()),
                ("LLM_MAX_RETRIES", "0".into()),
                ("EXTRACT_IDLE_FLUSH_MS", "300".into()),
            ],
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(
        &t,
        "before",
        json!([{"role": "user", "content": "I am the on-call DBA."}]),
    )
    .await;
    app.wait_extracted(WAIT).await;
    let before = provenance_template(&app, &t, "I am the on-call DBA.").await;
    assert_eq!(before["source"], "builtin", "{before}");
    let builtin = extract_prompts(&llm, "I am the on-call DBA.");
    assert!(
        !builtin.is_empty() && builtin.iter().all(|p| p != TEAM_PROMPT),
        "{builtin:?}"
    );

    let (status, stored) = put(
        &app,
        &t,
        "l1-extract",
        json!({"level": "team", "version": "dba-3", "content": format!("---\nid: l1-extract\n---\n{TEAM_PROMPT}\n")}),
    )
    .await;
    assert_eq!(status, 201, "{stored}");
    // Another team's extraction is not affected.
    let stranger = tenant();
    app.append_ok(
        &stranger,
        "theirs",
        json!([{"role": "user", "content": "I am a data engineer."}]),
    )
    .await;
    app.append_ok(
        &t,
        "after",
        json!([{"role": "user", "content": "I prefer PostgreSQL 16."}]),
    )
    .await;
    app.wait_extracted(WAIT).await;

    let ours = extract_prompts(&llm, "I prefer PostgreSQL 16.");
    assert!(!ours.is_empty() && ours.iter().all(|p| p == TEAM_PROMPT), "{ours:?}");
    let theirs = extract_prompts(&llm, "I am a data engineer.");
    assert!(
        !theirs.is_empty() && theirs.iter().all(|p| p == &builtin[0]),
        "{theirs:?}"
    );
    let after = provenance_template(&app, &t, "I prefer PostgreSQL 16.").await;
    assert_eq!(
        after,
        json!({"id": "l1-extract", "version": "dba-3", "source": "team", "hash": stored["hash"]}),
        "provenance names the override"
    );
    let theirs = provenance_template(&app, &stranger, "I am a data engineer.").await;
    assert_eq!(theirs["source"], "builtin", "{theirs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prompt_override_drives_extraction_embedded() {
    extraction_uses_the_team_override(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prompt_override_drives_extraction_cluster() {
    extraction_uses_the_team_override(Mode::Cluster).await;
}
