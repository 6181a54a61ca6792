//! L2 scenes and the L3 persona end to end, in both deployments: ingest → L1 → scene → persona,
//! and recall's stable part carries them. Rules mode (no LLM) and LLM mode (the scripted
//! OpenAI-compatible server); the editor's rollback and the scene cap with a real run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::app::{fast_layer_env, tenant, Mode, Options, TestApp, MODES};
use integration_tests::fake_openai::{chat_message, FakeOpenAi};
use reqwest::Method;
use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::persona::build::{
    BuildOutcome, PersonaBuilder, PersonaEngine, PersonaInput, PersonaSettings, RulesPersonaEngine,
};
use shared::persona::PersonaTriggerSettings;
use shared::store::scene::LAYER_L2;

const WAIT: Duration = Duration::from_secs(40);

async fn start(mode: Mode, mut env: Vec<(&'static str, String)>) -> TestApp {
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
        // In the cluster the scene and persona workers are processes of their own.
        app.spawn_layer_workers();
    }
    app
}

async fn get(app: &TestApp, t: &Tenant, path: &str) -> (u16, Value) {
    let response = app.req(Method::GET, path, t).send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Polls `GET path` until `ready` accepts the body.
async fn wait_for(app: &TestApp, t: &Tenant, path: &str, ready: impl Fn(u16, &Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (status, body) = get(app, t, path).await;
        if ready(status, &body) {
            return body;
        }
        assert!(started.elapsed() < WAIT, "{path} never became ready: {status} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn persona_containing(app: &TestApp, t: &Tenant, needle: &str) -> Value {
    wait_for(app, t, "/v1/persona", |status, body| {
        status == 200 && body["content"].as_str().is_some_and(|c| c.contains(needle))
    })
    .await
}

fn user(content: &str) -> Value {
    json!([{ "role": "user", "content": content }])
}

/// What another tenant sees: nothing, through every endpoint.
async fn assert_isolated(app: &TestApp, scene_id: &str) {
    let other = tenant();
    let (status, body) = get(app, &other, "/v1/persona").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("persona_not_found")),
        "{body}"
    );
    let (status, body) = get(app, &other, "/v1/scenes").await;
    assert_eq!(status, 200);
    assert_eq!(body["items"], json!([]));
    let (status, body) = get(app, &other, &format!("/v1/scenes/{scene_id}")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("scene_not_found")),
        "{body}"
    );
    let recall = app.recall_ok(&other, json!({"query": "DBA"})).await;
    assert_eq!(recall["stable"]["persona"], "");
    assert_eq!(recall["stable"]["scene_navigation"], "");
}

async fn rules_pipeline(mode: Mode) {
    let mut app = start(mode, Vec::new()).await;
    let t = tenant();
    let (status, body) = get(&app, &t, "/v1/persona").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("persona_not_found")),
        "{body}"
    );

    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    let persona = persona_containing(&app, &t, "DBA").await;
    assert!(persona["version"].as_i64() >= Some(1), "{persona}");
    assert_eq!(persona["provenance"][0]["template"]["source"], "rules", "{persona}");

    let scenes = wait_for(&app, &t, "/v1/scenes", |s, b| {
        s == 200 && b["items"].as_array().is_some_and(|i| !i.is_empty())
    })
    .await;
    let scene = &scenes["items"][0];
    let id = scene["id"].as_str().expect("scene id");
    let (status, detail) = get(&app, &t, &format!("/v1/scenes/{id}")).await;
    assert_eq!(status, 200, "{detail}");
    let content = detail["content"].as_str().expect("content");
    assert!(content.starts_with("# "), "a scene document: {content}");
    assert!(content.contains("TDSQL-C"), "{content}");
    assert_eq!(detail["provenance"][0]["event"], "create", "{detail}");

    let recall = app
        .recall_ok(&t, json!({"query": "which database does the user run?"}))
        .await;
    let stable = &recall["stable"];
    assert!(
        stable["persona"].as_str().is_some_and(|p| p.contains("DBA")),
        "{recall}"
    );
    let navigation = stable["scene_navigation"].as_str().expect("navigation");
    assert!(
        navigation.contains(scene["name"].as_str().expect("name")),
        "{navigation}"
    );
    assert!(navigation.contains(&format!("scenes/{id}.md")), "{navigation}");
    assert!(stable["tools_guide"]
        .as_str()
        .is_some_and(|g| g.contains("/v1/conversations/search")));
    // The stable part is stable: the same for another query.
    let again = app.recall_ok(&t, json!({"query": "something else entirely"})).await;
    assert_eq!(again["stable"], recall["stable"]);

    assert_isolated(&app, id).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rules_mode_turns_become_scenes_and_persona_embedded() {
    rules_pipeline(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rules_mode_turns_become_scenes_and_persona_cluster() {
    rules_pipeline(Mode::Cluster).await;
}

// ---------------------------------------------------------------------------------------------
// LLM mode

/// The parsed user message of a chat request.
fn payload(body: &Value) -> Value {
    chat_message(body, "user")
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

fn system(body: &Value) -> String {
    chat_message(body, "system").unwrap_or_default()
}

/// L1: one card per user turn in scene "慢查询排查"; L1 dedup: add.
fn l1_answer(body: &Value) -> Option<String> {
    let payload = payload(body);
    if let Some(turns) = payload["turns"].as_array() {
        let cards: Vec<Value> = turns
            .iter()
            .filter(|t| t["role"] == "user")
            .map(|t| {
                json!({
                    "content": t["content"],
                    "category": "work_fact",
                    "priority": 80,
                    "occurred_at": "2025-08-20",
                    "source_message_ids": [t["ref"]],
                })
            })
            .collect();
        return Some(json!({ "scenes": [{ "scene": "慢查询排查", "cards": cards }] }).to_string());
    }
    if let Some(cards) = payload["cards"].as_array() {
        let decisions: Vec<Value> = cards
            .iter()
            .map(|c| json!({ "card": c["ref"], "action": "add", "targets": [] }))
            .collect();
        return Some(json!({ "decisions": decisions }).to_string());
    }
    None
}

fn scene_markdown(name: &str, overview: &str, events: &[String]) -> String {
    let events: String = events.iter().map(|e| format!("- [2025-08-20] {e}\n")).collect();
    format!("# {name}\n- tags: mysql\n\n## Overview\n{overview}\n\n## Event chain\n{events}\n## Conclusions\n- 大表 DDL 优先 CONCURRENTLY\n")
}

/// The persona: a fixed profile naming how many scenes it was given. The scene agent: creates
/// the first scene from the memories; later, reads scene s1, then rewrites it with its events
/// and the new memories.
fn layers_answer(body: &Value) -> Option<String> {
    let prompt = system(body);
    let payload = payload(body);
    if payload.get("mode").is_some() && prompt.contains("persona") {
        let scenes = payload["scenes"].as_array().map_or(0, Vec::len);
        let persona = format!(
            "# Persona\n\n## Identity\n- 腾讯云 DBA\n\n## Preferences\n- 简洁回答\n\n## Methodology\n- 遇到 DDL 优先在线方案 (scenes seen: {scenes})\n\n## Worldview\n- 稳定第一\n\n### Anti-patterns\n- 不要在高峰期做 DDL\n"
        );
        return Some(json!({ "persona": persona }).to_string());
    }
    if prompt.contains("scene documents") {
        // The briefing (the first user message) holds the memories and the scene list.
        let briefing: Value = body["messages"]
            .as_array()?
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| serde_json::from_str(m["content"].as_str()?).ok())?;
        let memories: Vec<String> = briefing["memories"]
            .as_array()?
            .iter()
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect();
        let has_scene = briefing["scenes"].as_array().is_some_and(|s| !s.is_empty());
        let Some(results) = payload["results"].as_array() else {
            // First step: read the scene to extend, or create the first one.
            let action = if has_scene {
                json!({"tool": "read", "scene": "s1"})
            } else {
                json!({"tool": "create", "content": scene_markdown("实例 A 慢查询", "凌晨实例 A 慢查询的排查与修复。", &memories)})
            };
            return Some(json!({"actions": [action], "done": false, "persona_worthy": true}).to_string());
        };
        let Some(read) = results.iter().find(|r| r["tool"] == "read") else {
            return Some(json!({"actions": [], "done": true}).to_string());
        };
        // Keep every event of the scene, add the new memories.
        let mut events: Vec<String> = read["content"]
            .as_str()?
            .lines()
            .filter_map(|line| {
                line.strip_prefix("- [")
                    .and_then(|rest| rest.split_once("] "))
                    .map(|(_, what)| what.to_owned())
            })
            .collect();
        events.extend(memories);
        let content = scene_markdown("实例 A 慢查询", "凌晨实例 A 慢查询的排查与修复。", &events);
        return Some(
            json!({"actions": [{"tool": "update", "scene": "s1", "content": content}], "done": true}).to_string(),
        );
    }
    l1_answer(body)
}

fn llm_env(llm: &FakeOpenAi) -> Vec<(&'static str, String)> {
    vec![
        ("LLM_URL", llm.base_url()),
        ("LLM_MODEL", "fake-model".into()),
        ("LLM_MAX_RETRIES", "0".into()),
        ("LLM_TIMEOUT_MS", "5000".into()),
    ]
}

async fn llm_pipeline(mode: Mode) {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(layers_answer);
    let mut app = start(mode, llm_env(&llm)).await;
    let t = tenant();
    let started = Instant::now();
    app.append_ok(&t, "s1", user("实例 A 在 02:10 出现慢查询，Buffer Pool 命中率跌至 92%"))
        .await;
    let persona = persona_containing(&app, &t, "腾讯云 DBA").await;
    let first_persona = started.elapsed();
    assert_eq!(persona["provenance"][0]["template"]["id"], "l3-persona", "{persona}");
    assert!(persona["content"]
        .as_str()
        .unwrap_or_default()
        .contains("不要在高峰期做 DDL"));

    let scenes = wait_for(&app, &t, "/v1/scenes", |s, b| {
        s == 200 && b["items"].as_array().is_some_and(|i| i.len() == 1)
    })
    .await;
    let id = scenes["items"][0]["id"].as_str().expect("id").to_owned();
    assert_eq!(scenes["items"][0]["name"], "实例 A 慢查询");
    assert_eq!(scenes["items"][0]["overview"], "凌晨实例 A 慢查询的排查与修复。");

    // A second batch updates the same scene (version 2) and, flagged persona-worthy, leads to an
    // incremental persona build that is given only the changed scene.
    let before = persona["version"].as_i64().expect("version");
    app.append_ok(&t, "s1", user("报表任务 02:00 批量执行的新 SQL 没有走索引"))
        .await;
    let detail = wait_for(&app, &t, &format!("/v1/scenes/{id}"), |s, b| {
        s == 200 && b["version"] == 2
    })
    .await;
    let content = detail["content"].as_str().expect("content");
    assert!(
        content.contains("没有走索引") && content.contains("Buffer Pool"),
        "{content}"
    );
    assert_eq!(detail["provenance"][0]["template"]["id"], "l2-scene", "{detail}");
    // Incremental: a build after the update is given that scene (version 2) and no other.
    let changed = format!("scene:{id}@2");
    let updated = wait_for(&app, &t, "/v1/persona", |s, b| {
        s == 200
            && b["provenance"][0]["input_refs"]
                .as_array()
                .is_some_and(|refs| refs.iter().any(|r| r == changed.as_str()))
    })
    .await;
    let build = &updated["provenance"][0];
    assert_eq!(build["detail"]["full"], false, "{updated}");
    assert_eq!(build["detail"]["scenes_given"], 1, "{updated}");
    assert!(updated["version"].as_i64() > Some(before), "{updated}");
    assert!(
        updated["content"]
            .as_str()
            .unwrap_or_default()
            .contains("scenes seen: 1"),
        "{updated}"
    );
    eprintln!(
        "{mode:?}: first turn to first persona {} ms (timers scaled to 100 ms / 300 ms)",
        first_persona.as_millis()
    );

    let recall = app.recall_ok(&t, json!({"query": "慢查询"})).await;
    assert!(
        recall["stable"]["persona"]
            .as_str()
            .unwrap_or_default()
            .contains("腾讯云 DBA"),
        "{recall}"
    );
    assert!(recall["stable"]["scene_navigation"]
        .as_str()
        .unwrap_or_default()
        .contains("实例 A 慢查询"));
    assert_isolated(&app, &id).await;
    app.stop().await;
    llm.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn llm_mode_turns_become_scenes_and_persona_embedded() {
    llm_pipeline(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn llm_mode_turns_become_scenes_and_persona_cluster() {
    llm_pipeline(Mode::Cluster).await;
}

/// A run whose edit empties a scene's overview is rolled back: the document is what it was,
/// and the rollback is in the scene provenance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_edit_that_destroys_core_content_is_rolled_back() {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(layers_answer);
    let mut app = start(Mode::Embedded, llm_env(&llm)).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("实例 A 在 02:10 出现慢查询")).await;
    let scenes = wait_for(&app, &t, "/v1/scenes", |s, b| {
        s == 200 && b["items"].as_array().is_some_and(|i| i.len() == 1)
    })
    .await;
    let id = scenes["items"][0]["id"].as_str().expect("id").to_owned();
    let (_, good) = get(&app, &t, &format!("/v1/scenes/{id}")).await;

    // From now on the agent wipes the overview.
    llm.set_chat_responder(|body: &Value| {
        if system(body).contains("scene documents") {
            if payload(body).get("results").is_some() {
                return Some(json!({"actions": [], "done": true}).to_string());
            }
            // Valid on its face (it has an event), but the overview is gone.
            let wiped = "# 实例 A 慢查询\n\n## Overview\n\n## Event chain\n- [2025-08-20] 没有走索引\n";
            return Some(
                json!({"actions": [{"tool": "update", "scene": "s1", "content": wiped}], "done": true}).to_string(),
            );
        }
        layers_answer(body)
    });
    app.append_ok(&t, "s1", user("报表任务的新 SQL 没有走索引")).await;
    let started = Instant::now();
    let rollback = loop {
        let records = app
            .backends
            .scenes
            .artifact_provenance(&t, LAYER_L2, None, 20)
            .await
            .expect("provenance");
        if let Some(r) = records.into_iter().find(|r| r.event == "rollback") {
            break r;
        }
        assert!(started.elapsed() < WAIT, "no rollback recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        rollback.detail["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("overview"),
        "{:?}",
        rollback.detail
    );
    let (_, after) = get(&app, &t, &format!("/v1/scenes/{id}")).await;
    assert_eq!(after["content"], good["content"], "the document is restored");
    assert_eq!(after["version"], 1);
    app.stop().await;
    llm.stop().await;
}

/// The cap holds in a real run: with cap 4 the agent may create up to 3 scenes; the fourth
/// create is refused with a reason the agent reads in its next step.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scene_cap_holds_in_a_real_run() {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(|body: &Value| {
        if system(body).contains("scene documents") {
            if payload(body).get("results").is_some() {
                return Some(json!({"actions": [], "done": true}).to_string());
            }
            let actions: Vec<Value> = (1..=5)
                .map(|i| json!({"tool": "create", "content": scene_markdown(&format!("topic {i}"), "about it", &[format!("event {i}")])}))
                .collect();
            return Some(json!({"actions": actions, "done": false}).to_string());
        }
        layers_answer(body)
    });
    let mut env = llm_env(&llm);
    env.push(("SCENE_CAP", "4".into()));
    let mut app = start(Mode::Embedded, env).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("实例 A 在 02:10 出现慢查询")).await;
    let started = Instant::now();
    let follow_up = loop {
        if let Some(body) = llm
            .chat()
            .bodies()
            .into_iter()
            .find(|b| system(b).contains("scene documents") && payload(b).get("results").is_some())
        {
            break payload(&body);
        }
        assert!(started.elapsed() < WAIT, "the agent never got its results");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let results = follow_up["results"].as_array().expect("results");
    let ok = results.iter().filter(|r| r["ok"] == true).count();
    assert_eq!(ok, 3, "{follow_up}");
    assert!(
        results
            .iter()
            .filter(|r| r["ok"] == false)
            .all(|r| r["error"].as_str().is_some_and(|e| !e.is_empty())),
        "{follow_up}"
    );
    let scenes = wait_for(&app, &t, "/v1/scenes", |s, b| {
        s == 200 && b["items"].as_array().is_some_and(|i| !i.is_empty())
    })
    .await;
    assert_eq!(scenes["items"].as_array().map(Vec::len), Some(3), "{scenes}");
    app.stop().await;
    llm.stop().await;
}

/// Every mode keeps turns, memories, scenes and persona of a tenant to that tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scene_endpoints_validate_input() {
    for mode in MODES {
        let mut app = start(mode, Vec::new()).await;
        let t = tenant();
        let (status, body) = get(&app, &t, "/v1/scenes/not-a-uuid").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("scene_not_found")),
            "{body}"
        );
        let response = app.client.get(app.url("/v1/scenes")).send().await.expect("request");
        assert_eq!(response.status().as_u16(), 400);
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["code"], "missing_tenant");
        app.stop().await;
    }
}

/// The scene timer end to end: a batch schedules the run `after_l1` later; a second batch
/// before it fires does not push it back; the run happens once it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scene_timer_only_moves_earlier() {
    // The scripted LLM turns every turn into a memory, so both batches store one.
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(layers_answer);
    let mut env = llm_env(&llm);
    env.extend([
        ("SCENE_AFTER_L1_MS", "1500".to_owned()),
        ("SCENE_MIN_GAP_MS", "300".to_owned()),
        ("SCENE_MAX_WAIT_MS", "5000".to_owned()),
        ("EXTRACT_IDLE_FLUSH_MS", "300".to_owned()),
    ]);
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    let (first_due, first_l1) = loop {
        let schedule = app.backends.scenes.scene_schedule(&t).await.expect("schedule");
        if let (Some(due), Some(l1)) = (schedule.due_at, schedule.last_l1_at) {
            break (due, l1);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A second batch for the same owner, before the first run: the due-time stays.
    app.append_ok(&t, "s2", user("我还负责上海区的 MySQL 集群的备份")).await;
    let started = Instant::now();
    let mut saw_second = false;
    loop {
        let schedule = app.backends.scenes.scene_schedule(&t).await.expect("schedule");
        if schedule.last_run_at.is_some() {
            break;
        }
        if schedule.last_l1_at != Some(first_l1) {
            saw_second = true;
            assert_eq!(schedule.due_at, Some(first_due), "the due-time moved: {schedule:?}");
        }
        assert!(started.elapsed() < WAIT, "the scene run never happened: {schedule:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_second, "the second batch landed only after the run");
    let schedule = app.backends.scenes.scene_schedule(&t).await.expect("schedule");
    let ran = schedule.last_run_at.expect("ran");
    assert!(ran >= first_due, "ran at {ran}, before it was due at {first_due}");
    app.stop().await;
    llm.stop().await;
}

/// Self-heal: the database says a persona was built but its document is gone; the persona
/// worker's sweep rebuilds it from all scenes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_persona_document_is_rebuilt() {
    let mut app = start(Mode::Embedded, Vec::new()).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    let persona = persona_containing(&app, &t, "DBA").await;
    let version = persona["version"].as_i64().expect("version");
    let key = app
        .backends
        .scenes
        .persona(&t)
        .await
        .expect("row")
        .and_then(|row| row.object_key)
        .expect("object key");
    app.backends
        .files
        .delete(&key)
        .await
        .expect("delete the persona document");

    let healed = wait_for(&app, &t, "/v1/persona", |s, b| {
        s == 200 && b["version"].as_i64() > Some(version)
    })
    .await;
    assert_eq!(healed["provenance"][0]["detail"]["trigger"], "self_heal", "{healed}");
    assert_eq!(healed["provenance"][0]["detail"]["full"], true, "{healed}");
    assert!(
        healed["content"].as_str().unwrap_or_default().contains("DBA"),
        "{healed}"
    );
    app.stop().await;
}

/// A file store outage costs recall the persona it cannot read, not also the scene list,
/// which comes from the store (the chaos suite's s3-outage found recall answering with
/// neither while S3 was down). Once the store is back, the persona is there again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recall_keeps_the_scene_list_while_the_file_store_is_down() {
    let down = Arc::new(AtomicBool::new(false));
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env: fast_layer_env(),
            file_store_down: Some(down.clone()),
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    persona_containing(&app, &t, "DBA").await;
    let scenes = wait_for(&app, &t, "/v1/scenes", |s, b| {
        s == 200 && b["items"].as_array().is_some_and(|i| !i.is_empty())
    })
    .await;
    let name = scenes["items"][0]["name"].as_str().expect("scene name").to_owned();

    // No recall has read the persona yet, so recall must read it from the store that is down.
    down.store(true, Ordering::SeqCst);
    let recall = app
        .recall_ok(&t, json!({"query": "which database does the user run?"}))
        .await;
    let navigation = recall["stable"]["scene_navigation"].as_str().unwrap_or_default();
    assert!(navigation.contains(&name), "{recall}");
    assert_eq!(recall["stable"]["persona"], "", "{recall}");
    assert!(
        recall["errors"]
            .as_array()
            .is_some_and(|errors| errors.iter().any(|e| e["code"] == "store_unavailable")),
        "{recall}"
    );

    down.store(false, Ordering::SeqCst);
    let recall = app
        .recall_ok(&t, json!({"query": "which database does the user run?"}))
        .await;
    assert!(
        recall["stable"]["persona"].as_str().is_some_and(|p| p.contains("DBA")),
        "{recall}"
    );
    let codes: Vec<&str> = recall["errors"]
        .as_array()
        .map(|errors| errors.iter().filter_map(|e| e["code"].as_str()).collect())
        .unwrap_or_default();
    assert!(!codes.contains(&"store_unavailable"), "{recall}");
    app.stop().await;
}

/// A file store outage longer than a wake-up's delivery attempts parks no scene or persona
/// wake-up: a failed scene run moved the owner's timer and the sweeps run what is due or
/// triggered, so a parked copy would only be work for a human (the chaos suite's s3-outage
/// parked 24 in a 31 s outage). Once the store is back, the scene and the persona take the
/// new memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_store_outage_parks_no_layer_wake_up() {
    let down = Arc::new(AtomicBool::new(false));
    let mut env = fast_layer_env();
    env.extend([
        ("SCENE_RETRY_MS", "200".to_owned()),
        ("WORKER_MAX_ATTEMPTS", "2".to_owned()),
        ("WORKER_RETRY_DELAY_MS", "50".to_owned()),
    ]);
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            file_store_down: Some(down.clone()),
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    wait_for(&app, &t, "/v1/scenes", |s, b| {
        s == 200 && b["items"].as_array().is_some_and(|i| !i.is_empty())
    })
    .await;
    let persona = persona_containing(&app, &t, "DBA").await;
    let version = persona["version"].as_i64().expect("version");

    down.store(true, Ordering::SeqCst);
    app.append_ok(
        &t,
        "s1",
        user("I prefer short answers, and our orders table lives in MySQL 8.0."),
    )
    .await;
    // The wake-up a scene run sends once it has edited, arriving while the store is down.
    app.backends
        .bus
        .publish(&shared::bus::Event::PersonaDue { tenant: t.clone() })
        .await
        .expect("publish persona.due");
    // Long enough for every wake-up's two attempts, 50 ms apart, and runs retried every 200 ms.
    tokio::time::sleep(Duration::from_secs(2)).await;
    down.store(false, Ordering::SeqCst);

    wait_for(&app, &t, "/v1/persona", |s, b| {
        s == 200 && b["version"].as_i64() > Some(version)
    })
    .await;
    let started = Instant::now();
    'scenes: loop {
        let (_, scenes) = get(&app, &t, "/v1/scenes").await;
        for scene in scenes["items"].as_array().into_iter().flatten() {
            let id = scene["id"].as_str().unwrap_or_default();
            let (_, detail) = get(&app, &t, &format!("/v1/scenes/{id}")).await;
            if detail["content"].as_str().is_some_and(|c| c.contains("MySQL 8.0")) {
                break 'scenes;
            }
        }
        if started.elapsed() > WAIT {
            let all = app.backends.scenes.scenes(&t, true).await;
            let memories = app.memory_contents(&t).await;
            panic!("no scene took the memory: {scenes}; all rows {all:?}; memories {memories:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for kind in [shared::bus::WorkerKind::Scene, shared::bus::WorkerKind::Persona] {
        let stats = app.backends.bus.stats(kind).await.expect("queue stats");
        assert_eq!(stats.parked, 0, "{kind:?}: {stats:?}");
    }
    app.stop().await;
}

/// A scene run cut off by a file store outage (its writes and its rollback failed) gives its
/// owner back once the store answers again, not only when its lease (10 minutes by default)
/// expires: the chaos suite's s3-outage saw an owner's scene runs wait for the whole lease
/// after the store was back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scene_run_cut_off_by_a_file_store_outage_resumes_when_it_is_back() {
    let down = Arc::new(AtomicBool::new(true));
    let mut env = fast_layer_env();
    env.push(("SCENE_RETRY_MS", "200".to_owned()));
    let mut app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            file_store_down: Some(down.clone()),
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    // The first scene run writes a new scene into the store that is down, and its rollback
    // cannot undo it there either.
    tokio::time::sleep(Duration::from_secs(2)).await;
    down.store(false, Ordering::SeqCst);

    wait_for(&app, &t, "/v1/scenes", |s, b| {
        s == 200 && b["items"].as_array().is_some_and(|i| !i.is_empty())
    })
    .await;
    app.stop().await;
}

/// The rules persona engine, slower by a fixed delay, counting its calls (an LLM build that
/// takes a while).
struct SlowPersona {
    delay: Duration,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait::async_trait]
impl PersonaEngine for SlowPersona {
    fn mode(&self) -> &'static str {
        "rules"
    }

    async fn build(
        &self,
        tenant: &Tenant,
        input: &PersonaInput,
    ) -> Result<(shared::persona::PersonaDoc, shared::memory::EngineRun), shared::memory::EngineError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        RulesPersonaEngine.build(tenant, input).await
    }
}

/// A persona build renews its lease while it works, so a builder killed mid-build (SIGKILL,
/// OOM) holds its owner one lease at most, not as long as the slowest build may take: another
/// builder finds the owner busy while the first one works past its first lease, and builds
/// within a lease of the kill. The lease used to be 10 minutes, renewed never.
#[tokio::test]
async fn a_killed_persona_build_frees_its_owner_within_one_lease() {
    // The in-process layer workers would build the persona themselves.
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            env: vec![("LAYERS", "false".into())],
            ..Options::default()
        },
    )
    .await;
    let t = tenant();
    app.append_ok(
        &t,
        "s1",
        json!([{ "role": "user", "content": "I am a backend engineer." }]),
    )
    .await;
    app.wait_extracted(WAIT).await;

    let lease = Duration::from_millis(600);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let builder = |delay| {
        PersonaBuilder::new(
            app.backends.memories.clone(),
            app.backends.scenes.clone(),
            app.backends.files.clone(),
            Arc::new(SlowPersona {
                delay,
                calls: calls.clone(),
            }),
            PersonaSettings {
                lease,
                // One memory is enough for a first build.
                trigger: PersonaTriggerSettings { memory_threshold: 1 },
                ..PersonaSettings::default()
            },
        )
    };
    // Four leases long: a lease that is not renewed lapses three times in it.
    let (killed, other) = (builder(lease * 4), builder(Duration::ZERO));
    let owner = t.clone();
    let killed = tokio::spawn(async move { killed.check(&owner).await });
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(lease * 2).await;
    assert_eq!(
        other.check(&t).await.expect("check"),
        BuildOutcome::Busy,
        "two leases into the build, its renewed lease still holds the owner"
    );

    killed.abort();
    let _ = killed.await;
    let aborted = Instant::now();
    loop {
        match other.check(&t).await.expect("check") {
            BuildOutcome::Built { .. } => break,
            BuildOutcome::Busy => {
                assert!(
                    aborted.elapsed() < lease * 3,
                    "the killed build still holds the owner {:?} after it died",
                    aborted.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            outcome @ (BuildOutcome::NotNeeded | BuildOutcome::LeaseLost) => {
                panic!("the other builder neither built nor found the owner busy: {outcome:?}")
            }
        }
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the killed build and the one that took over"
    );
}
