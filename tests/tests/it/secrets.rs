//! Secrets pasted into a conversation never reach an LLM and never reach a derived store
//! (issue 33), in both deployments.
//!
//! The corpus (`integration_tests::secrets`) is ingested as the turns of one session with every
//! LLM stage pointed at the scripted fake: L1 extraction and dedup, session compaction, L2
//! scenes and the L3 persona. Then every request body the fake received, and everything the
//! stages stored, is searched for the corpus's needles.
//!
//! The fake does not only echo what it is sent (so that a stage forwarding unredacted input is
//! caught on its output too): each of its answers also quotes raw corpus turns, as a model that
//! remembers a secret from elsewhere, or is prompt-injected into repeating one, would. The
//! output side is therefore tested on its own, not only as the echo of a clean input.
//!
//! # What may keep a secret: the L0 transcript
//! The turns themselves (L0) are stored verbatim by design: they are the user's own record of
//! the conversation, listed and searched only by the same tenant, and erased with it. The issue
//! asks for redaction "before any LLM call and before storage of derived memories", so the
//! turn rows, the turn points of the index, the turn listing, conversation search and the turn
//! items of a recall or a context window may show a secret, and this test does not look there.
//! Everything derived from the turns (memories with their provenance, compaction summaries,
//! scene and persona documents, artifact provenance, memory items of a recall) must not.
//! The harness runs without an embedder (`SEDIMENT_EMBEDDING=none`); with one, turn texts are
//! embedded as they are indexed, under the same L0 rule.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::fake_openai::{chat_message, FakeOpenAi};
use integration_tests::secrets::{self, Sample};
use reqwest::Method;
use serde_json::{json, Value};
use shared::context::summary::COMPACT_PROMPT;
use shared::domain::{SessionId, Tenant};
use shared::llm::{trace, HEADER_TRACE};
use shared::memory::redact::{redact, SecretKind, MARKER_PREFIX};
use shared::store::memory::{MemoryFilter, EXTRACT_CONSUMER};
use shared::store::scene::{LAYER_L2, LAYER_L3};

const WAIT: Duration = Duration::from_secs(60);
const SESSION: &str = "pasted-secrets";

/// The redactor alone over the corpus: the quick way to see which kind a pattern misses, and
/// proof that redaction keeps the prose around a secret and leaves ordinary hashes alone.
#[test]
fn the_redactor_masks_every_secret_of_the_corpus() {
    let corpus = secrets::corpus();
    assert!(corpus.len() >= 30, "corpus of {}", corpus.len());
    let mut missed = Vec::new();
    for sample in &corpus {
        for needle in &sample.needles {
            assert!(sample.text.contains(needle.as_str()), "{}: bad needle", sample.kind);
        }
        let redacted = redact(&sample.text);
        let leaks = secrets::leaks(&secrets::needles(std::slice::from_ref(sample)), &redacted.text);
        if !leaks.is_empty() || redacted.count == 0 {
            missed.push(format!("{}: {leaks:?}\n  {}", sample.kind, redacted.text));
        }
        // The memory still says that a secret was there and what it was for.
        let prose = SecretKind::ALL.iter().fold(redacted.text.to_string(), |text, kind| {
            text.replace(&kind.marker(), " ")
        });
        if prose.chars().filter(|c| c.is_alphabetic()).count() < 8 {
            missed.push(format!("{}: the prose went too\n  {}", sample.kind, redacted.text));
        }
    }
    assert!(missed.is_empty(), "secrets the redactor missed:\n{}", missed.join("\n"));
    for survivor in secrets::survivors() {
        let redacted = redact(&survivor.text);
        assert_eq!(redacted.text, survivor.text, "ordinary engineering talk is left alone");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_reach_no_llm_and_no_derived_store_embedded() {
    secrets_stay_out(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_reach_no_llm_and_no_derived_store_cluster() {
    secrets_stay_out(Mode::Cluster).await;
}

async fn secrets_stay_out(mode: Mode) {
    let started = Instant::now();
    let corpus = secrets::corpus();
    let needles = secrets::needles(&corpus);
    let survivors = secrets::survivors();
    let llm = FakeOpenAi::start(8).await;
    let model = LeakyModel::new(&corpus);
    llm.set_chat_responder(move |body| model.answer(body));
    let mut app = TestApp::with(
        mode,
        Options {
            env: vec![
                ("LLM_URL", llm.base_url()),
                ("LLM_MODEL", "fake-model".into()),
                ("LLM_MAX_RETRIES", "0".into()),
                ("LLM_TIMEOUT_MS", "5000".into()),
                ("EXTRACT_IDLE_FLUSH_MS", "200".into()),
                ("SCENE_AFTER_L1_MS", "100".into()),
                ("SCENE_MIN_GAP_MS", "300".into()),
                ("SCENE_MAX_WAIT_MS", "3000".into()),
                ("PERSONA_MEMORY_THRESHOLD", "1".into()),
            ],
            ..Options::default()
        },
    )
    .await;
    // In the cluster the compact, scene and persona workers are processes of their own.
    let _workers = (mode == Mode::Cluster).then(|| {
        app.spawn_layer_workers();
        app.spawn_compact_worker().drop_guard()
    });
    let t = tenant();

    for sample in &corpus {
        app.append_ok(&t, SESSION, json!([{"role": sample.role, "content": sample.text}]))
            .await;
    }
    for survivor in &survivors {
        app.append_ok(&t, SESSION, json!([{"role": "user", "content": survivor.text}]))
            .await;
    }
    // Compaction keeps the last 5 turns as they are: these, so that every secret is folded.
    for i in 0..5 {
        let content = format!("thanks, step {i} of the checklist is done");
        app.append_ok(&t, SESSION, json!([{"role": "user", "content": content}]))
            .await;
    }
    app.wait_extracted(WAIT).await;
    compact(&app, &t).await;
    settle(&app, &t, &llm).await;

    // Every stage must have run and been sent secrets in redacted form, or it was not tested;
    // checked after the leaks, which say more when a stage sends secrets unredacted.
    let calls = llm.chat().recorded();
    let mut untested: Vec<&str> = [
        trace::L1_EXTRACT,
        trace::SESSION_COMPACT,
        trace::L2_SCENE,
        trace::L3_PERSONA,
    ]
    .into_iter()
    .filter(|stage| {
        !calls
            .iter()
            .filter(|c| c.header(HEADER_TRACE) == Some(*stage))
            .any(|c| c.body.to_string().contains(MARKER_PREFIX))
    })
    .collect();

    let mut found = Vec::new();
    let mut check = |place: &str, text: &str| {
        found.extend(
            secrets::leaks(&needles, text)
                .into_iter()
                .map(|l| format!("{place}: {l}")),
        );
    };
    for (i, call) in calls.iter().enumerate() {
        let stage = call.header(HEADER_TRACE).unwrap_or("unlabelled");
        check(&format!("LLM request {i} ({stage})"), &call.body.to_string());
    }
    for (i, body) in llm.embeddings().bodies().iter().enumerate() {
        check(&format!("embeddings request {i}"), &body.to_string());
    }

    // Memories, through the store (every status) and the API (with provenance and history).
    let memories = app
        .backends
        .memories
        .list_memories(&t, &MemoryFilter::default(), None, 1_000)
        .await
        .expect("list memories");
    assert!(
        memories.len() >= corpus.len() / 2,
        "{mode:?}: only {} memories",
        memories.len()
    );
    let contents: Vec<&str> = memories.iter().map(|m| m.content.as_str()).collect();
    for memory in &memories {
        check("memory (store)", &format!("{memory:?}"));
        let provenance = app
            .backends
            .memories
            .memory_provenance(&t, memory.id)
            .await
            .expect("provenance");
        check("memory provenance (store)", &format!("{provenance:?}"));
        let (status, detail) = get(&app, &t, &format!("/v1/memories/{}", memory.id)).await;
        assert_eq!(status, 200, "{detail}");
        check("memory detail (API)", &detail.to_string());
    }
    let failures = app.backends.memories.recent_failures(1_000).await.expect("failures");
    check(
        "failed extractions",
        &format!("{:?}", failures.iter().filter(|r| r.tenant == t).collect::<Vec<_>>()),
    );
    for status in ["active", "archived"] {
        let (code, page) = get(&app, &t, &format!("/v1/memories?status={status}&limit=500")).await;
        assert_eq!(code, 200, "{page}");
        check(&format!("{status} memories (API)"), &page.to_string());
    }
    assert!(
        contents.iter().any(|c| c.contains(MARKER_PREFIX)),
        "{mode:?}: no memory says that a secret was there"
    );
    for keep in survivors.iter().flat_map(|s| &s.keep) {
        assert!(
            contents.iter().any(|c| c.contains(keep.as_str())),
            "{mode:?}: {keep} was lost; hashes and ids are not secrets"
        );
    }

    // The compaction summary, stored and served, and as the system message of a context.
    let session = SessionId::parse(SESSION).expect("session id");
    let record = app
        .backends
        .compactions
        .compaction(&t, &session)
        .await
        .expect("read compaction")
        .expect("a compaction");
    let summary = record.summary.as_ref().expect("a stored summary");
    if !summary.content.contains(MARKER_PREFIX) {
        untested.push("the stored compaction summary");
    }
    check("compaction (store)", &format!("{record:?}"));
    let (_, state) = get(&app, &t, &format!("/v1/sessions/{SESSION}/compaction")).await;
    check("compaction (API)", &state.to_string());
    let (_, window) = get(&app, &t, &format!("/v1/sessions/{SESSION}/context?window_tokens=2000")).await;
    // The turns of a context window are L0 (see the module doc); its summary is not.
    for message in window["messages"].as_array().into_iter().flatten() {
        if message["seq"].is_null() {
            check("context summary message", &message.to_string());
        }
    }

    // Scenes and persona: rows, documents (every file of the app's store, journals and trash
    // included), API views and their provenance.
    let scenes = app.backends.scenes.scenes(&t, true).await.expect("scenes");
    assert!(!scenes.is_empty(), "{mode:?}: no scene was written");
    check("scene rows", &format!("{scenes:?}"));
    for scene in &scenes {
        let (_, detail) = get(&app, &t, &format!("/v1/scenes/{}", scene.id)).await;
        check("scene (API)", &detail.to_string());
    }
    let (_, list) = get(&app, &t, "/v1/scenes").await;
    check("scene list (API)", &list.to_string());
    let (status, persona) = get(&app, &t, "/v1/persona").await;
    assert_eq!(status, 200, "{mode:?}: no persona: {persona}");
    check("persona (API)", &persona.to_string());
    check(
        "persona row",
        &format!("{:?}", app.backends.scenes.persona(&t).await.expect("persona")),
    );
    for layer in [LAYER_L2, LAYER_L3] {
        let records = app
            .backends
            .scenes
            .artifact_provenance(&t, layer, None, 1_000)
            .await
            .expect("artifact provenance");
        check(&format!("{layer} provenance"), &format!("{records:?}"));
    }
    let files = app.backends.files.list("").await.expect("list files");
    assert!(!files.is_empty());
    for file in &files {
        let body = app
            .backends
            .files
            .get(&file.key)
            .await
            .expect("get file")
            .unwrap_or_default();
        check(&format!("file {}", file.key), &String::from_utf8_lossy(&body));
    }

    // Recall: memory items and the stable part (persona, scene navigation) come from derived
    // stores; turn items are L0.
    for sample in &corpus {
        let query: String = one_line(&sample.text).chars().take(200).collect();
        let mut recall = app.recall_ok(&t, json!({"query": query, "session_id": SESSION})).await;
        if let Some(items) = recall["dynamic"].as_array_mut() {
            items.retain(|item| item["kind"] != "turn");
        }
        check(&format!("recall for {}", sample.kind), &recall.to_string());
    }

    let (status, audit) = get(&app, &t, "/v1/audit").await;
    assert_eq!(status, 200, "{audit}");
    check("audit log", &audit.to_string());

    let metrics = app.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sediment_extract_redactions_total") && !l.ends_with(" 0")),
        "redactions are counted"
    );

    assert!(
        found.is_empty(),
        "{mode:?}: secrets leaked in {} places:\n{}",
        found.len(),
        found.join("\n")
    );
    assert!(
        untested.is_empty(),
        "{mode:?}: no call of {untested:?} carried a redacted secret, so they were not tested"
    );
    eprintln!(
        "{mode:?}: {} samples, {} needles, {} LLM calls, {} memories, {} scenes, {} files checked in {} ms",
        corpus.len(),
        needles.len(),
        calls.len(),
        memories.len(),
        scenes.len(),
        files.len(),
        started.elapsed().as_millis()
    );
    app.stop().await;
    llm.stop().await;
}

/// The scripted model: it answers each stage in its format, echoing what it was sent, and
/// quotes raw corpus turns on top (one more per answer, round the corpus).
struct LeakyModel {
    raw: Vec<Sample>,
    next: AtomicUsize,
}

impl LeakyModel {
    fn new(corpus: &[Sample]) -> Arc<Self> {
        Arc::new(Self {
            raw: corpus.to_vec(),
            next: AtomicUsize::new(0),
        })
    }

    /// The next raw turn to leak.
    fn leak(&self) -> &Sample {
        &self.raw[self.next.fetch_add(1, Ordering::SeqCst) % self.raw.len()]
    }

    fn answer(&self, body: &Value) -> Option<String> {
        let system = chat_message(body, "system").unwrap_or_default();
        let user = chat_message(body, "user").unwrap_or_default();
        if system == COMPACT_PROMPT {
            return Some(self.summary(&user));
        }
        let payload: Value = serde_json::from_str(&user).unwrap_or(Value::Null);
        // Before the scene agent: the persona prompt speaks of scene documents too.
        if payload.get("mode").is_some() && system.contains("persona") {
            return Some(self.persona(&payload));
        }
        if system.contains("scene documents") {
            return self.scene_step(body);
        }
        if let Some(turns) = payload["turns"].as_array() {
            return Some(self.cards(turns));
        }
        if let Some(cards) = payload["cards"].as_array() {
            let decisions: Vec<Value> = cards
                .iter()
                .map(|c| json!({"card": c["ref"], "action": "add", "targets": []}))
                .collect();
            return Some(json!({ "decisions": decisions }).to_string());
        }
        None
    }

    /// L1: a card per user turn with the turn's text, and one quoting a raw turn, under a scene
    /// label that is the raw turn's secret-bearing line.
    fn cards(&self, turns: &[Value]) -> String {
        let mut cards: Vec<Value> = turns
            .iter()
            .filter(|t| t["role"] == "user")
            .map(|t| {
                json!({
                    "content": t["content"],
                    "category": "work_fact",
                    "priority": 80,
                    "scene": "pasted credentials",
                    "occurred_at": null,
                    "source_message_ids": [t["ref"]],
                })
            })
            .collect();
        if let Some(first) = turns.iter().find(|t| t["role"] == "user") {
            let leak = self.leak();
            cards.push(json!({
                "content": format!("the user once pasted: {}", leak.text),
                "category": "work_fact",
                "priority": 50,
                "scene": secret_line(leak),
                "occurred_at": null,
                "source_message_ids": [first["ref"]],
            }));
        }
        json!({ "scenes": [{ "scene": "pasted credentials", "cards": cards }] }).to_string()
    }

    /// Compaction: every line it was sent as a request, and a raw turn as other context.
    fn summary(&self, user: &str) -> String {
        let lines: Vec<&str> = user.lines().filter(|l| !l.trim().is_empty()).collect();
        json!({
            "requests_and_intent": lines,
            "decisions": [],
            "objects_changed": [],
            "schema_changes": [],
            "data_operations": [],
            "errors_and_fixes": [],
            "todos": [],
            "user_preferences": [],
            "tool_calls": [],
            "other_context": [self.leak().text.clone()],
        })
        .to_string()
    }

    /// L2: one step creating a scene whose events are the memories it was given, its overview
    /// and conclusions quoting raw turns.
    fn scene_step(&self, body: &Value) -> Option<String> {
        let briefing: Value = body["messages"]
            .as_array()?
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| serde_json::from_str(m["content"].as_str()?).ok())?;
        let mut doc = format!(
            "# Pasted credentials\n- tags: security, credentials\n\n## Overview\nCredentials the user pasted, e.g. {}\n\n## Event chain\n",
            one_line(&self.leak().text)
        );
        for memory in briefing["memories"].as_array()? {
            let content = memory["content"].as_str().unwrap_or_default();
            doc.push_str(&format!("- [2026-12-05] {}\n", one_line(content)));
        }
        doc.push_str(&format!(
            "\n## Conclusions\n- rotate everything, starting with {}\n",
            one_line(&self.leak().text)
        ));
        Some(json!({"actions": [{"tool": "create", "content": doc}], "done": true, "persona_worthy": true}).to_string())
    }

    /// L3: the scenes it was given as preferences, a raw turn as methodology.
    fn persona(&self, payload: &Value) -> String {
        let scenes: Vec<String> = payload["scenes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .flat_map(|doc| {
                doc.lines()
                    .filter(|l| l.starts_with("- ["))
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        let persona = format!(
            "# Persona\n\n## Identity\n- on-call engineer who pastes credentials into chat\n\n## Preferences\n{}\n\n## Methodology\n- keeps {}\n\n## Worldview\n- ship first\n\n### Anti-patterns\n- never echo a secret back\n",
            scenes.iter().map(|s| format!("- remembers {s}")).collect::<Vec<_>>().join("\n"),
            one_line(&self.leak().text)
        );
        json!({ "persona": persona }).to_string()
    }
}

/// The first line of a sample holding one of its secrets whole (a model naming a topic after
/// it), or its kind when every secret spans lines (a PEM block).
fn secret_line(sample: &Sample) -> String {
    sample
        .text
        .lines()
        .find(|line| sample.secrets.iter().any(|s| line.contains(s.as_str())))
        .unwrap_or(sample.kind)
        .to_owned()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn get(app: &TestApp, t: &Tenant, path: &str) -> (u16, Value) {
    let response = app.req(Method::GET, path, t).send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Forces the session's compaction and waits for its summary.
async fn compact(app: &TestApp, t: &Tenant) {
    let response = app
        .req(Method::POST, &format!("/v1/sessions/{SESSION}/compact"), t)
        .send()
        .await
        .expect("compact");
    assert_eq!(response.status().as_u16(), 202);
    let started = Instant::now();
    loop {
        let (_, state) = get(app, t, &format!("/v1/sessions/{SESSION}/compaction")).await;
        if state["status"] == "success" {
            return;
        }
        assert!(started.elapsed() < WAIT, "no compaction: {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the layers have caught up with every memory and the model has been idle for a
/// while, so that the stores hold what the whole pipeline makes of the corpus.
async fn settle(app: &TestApp, t: &Tenant, llm: &FakeOpenAi) {
    let started = Instant::now();
    let mut calls = llm.chat().requests();
    let mut quiet_since = Instant::now();
    loop {
        let memories = app
            .backends
            .memories
            .list_memories(t, &MemoryFilter::default(), None, 1_000)
            .await
            .expect("memories");
        let newest = memories.iter().map(|m| m.created_at).max();
        let schedule = app.backends.scenes.scene_schedule(t).await.expect("schedule");
        let persona = app.backends.scenes.persona(t).await.expect("persona");
        let lag = app.backends.store.lag(EXTRACT_CONSUMER).await.expect("lag");
        let caught_up = newest.is_some() && schedule.memory_watermark >= newest && lag.turns == 0;
        let built = persona.is_some_and(|p| p.object_key.is_some());
        let now = llm.chat().requests();
        if now != calls {
            calls = now;
            quiet_since = Instant::now();
        }
        if caught_up && built && quiet_since.elapsed() > Duration::from_millis(1_500) {
            return;
        }
        assert!(
            started.elapsed() < WAIT,
            "the layers never settled: caught up {caught_up}, persona {built}, schedule {schedule:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
