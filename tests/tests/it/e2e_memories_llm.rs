//! L1 memories end to end in LLM mode, against the scripted OpenAI-compatible server: the
//! seed's second-turn case, invalid JSON that fails a batch visibly and is retried, a
//! failing dedup call that stores every card with a warning, and a card repeating a memory
//! word for word, discarded without a dedup call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::app::{tenant, Mode, Options, TestApp};
use integration_tests::fake_openai::{chat_message, FakeOpenAi, Fault};
use reqwest::Method;
use serde_json::{json, Value};
use shared::bus::WorkerKind;

const WAIT: Duration = Duration::from_secs(30);

fn user(content: &str) -> Value {
    json!([{ "role": "user", "content": content }])
}

/// The request's user message, parsed: `{"turns": ...}` for extraction, `{"cards": ...}` for
/// dedup.
fn payload(body: &Value) -> Value {
    chat_message(body, "user")
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

/// One persona card per user turn, in the model's own words, and `add` for every card.
fn good_answer(body: &Value) -> Option<String> {
    let payload = payload(body);
    if let Some(turns) = payload["turns"].as_array() {
        let cards: Vec<Value> = turns
            .iter()
            .filter(|t| t["role"] == "user")
            .map(|t| {
                json!({
                    "content": format!("用户自述：{}", t["content"].as_str().unwrap_or_default()),
                    "category": "persona",
                    "priority": 95,
                    "occurred_at": null,
                    "source_message_ids": [t["ref"]],
                })
            })
            .collect();
        return Some(json!({ "scenes": [{ "scene": "自我介绍", "cards": cards }] }).to_string());
    }
    if let Some(cards) = payload["cards"].as_array() {
        let decisions: Vec<Value> = cards
            .iter()
            .map(|c| json!({ "card": c["ref"], "action": "add", "targets": [], "content": null }))
            .collect();
        return Some(json!({ "decisions": decisions }).to_string());
    }
    None
}

async fn llm_app(llm: &FakeOpenAi, mode: Mode) -> TestApp {
    llm_app_with(llm, mode, Vec::new()).await
}

/// [`llm_app`] with more settings.
async fn llm_app_with(llm: &FakeOpenAi, mode: Mode, more: Vec<(&'static str, String)>) -> TestApp {
    let mut env = vec![
        ("LLM_URL", llm.base_url()),
        ("LLM_MODEL", "fake-model".into()),
        ("LLM_MAX_RETRIES", "0".into()),
        ("LLM_TIMEOUT_MS", "5000".into()),
        ("EXTRACT_IDLE_FLUSH_MS", "300".into()),
    ];
    env.extend(more);
    TestApp::with(
        mode,
        Options {
            env,
            ..Options::default()
        },
    )
    .await
}

async fn second_turn_recalls_the_first(mode: Mode) {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(good_answer);
    let app = llm_app(&llm, mode).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("我是腾讯云 DBA，主要管北京区的 TDSQL-C"))
        .await;
    app.wait_extracted(WAIT).await;

    let recall = app
        .recall_ok(&t, json!({ "query": "帮我看一下这个实例的慢查询", "session_id": "s1" }))
        .await;
    let first = &recall["dynamic"][0];
    assert_eq!(first["kind"], "memory", "{recall}");
    assert!(
        first["content"]
            .as_str()
            .unwrap()
            .contains("用户自述：我是腾讯云 DBA，主要管北京区的 TDSQL-C"),
        "{recall}"
    );
    let memory = app.memories(&t, "").await["items"][0].clone();
    let detail: Value = app
        .req(
            Method::GET,
            &format!("/v1/memories/{}", memory["id"].as_str().unwrap()),
            &t,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let provenance = &detail["provenance"][0];
    assert_eq!(provenance["model"], "fake-model", "{detail}");
    assert_eq!(provenance["template"]["id"], "l1-extract");
    assert_eq!(provenance["template"]["source"], "builtin");
    assert_eq!(provenance["template"]["hash"].as_str().unwrap().len(), 64);
    assert_eq!(memory["scene"], "自我介绍");
    // Every call is labelled with the tenant and a stable trace name.
    let first_call = &llm.chat().recorded()[0];
    assert_eq!(first_call.header("x-sediment-trace"), Some("memory.l1-extract"));
    assert_eq!(first_call.header("x-sediment-team"), Some(t.team.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_llm_second_turn_recalls_the_first() {
    second_turn_recalls_the_first(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_llm_second_turn_recalls_the_first() {
    second_turn_recalls_the_first(Mode::Cluster).await;
}

/// Invalid JSON, twice (the answer and its repair), fails the batch visibly: a `failed`
/// provenance record and a metric. The turns stay pending and the retry stores the memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_output_fails_visibly_and_is_retried() {
    let llm = FakeOpenAi::start(8).await;
    let bad = Arc::new(AtomicUsize::new(2));
    let countdown = bad.clone();
    llm.set_chat_responder(move |body| {
        if payload(body)["turns"].is_array()
            && countdown
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Some("Sure! Here are the cards: scenes = [".to_owned());
        }
        // The repair request carries the bad answer; answer it badly too while counting.
        if chat_message(body, "assistant").is_some()
            && countdown
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Some("still not json".to_owned());
        }
        good_answer(body)
    });
    let app = llm_app(&llm, Mode::Embedded).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I am the release manager for the mobile app."))
        .await;
    app.wait_extracted(WAIT).await;

    assert_eq!(bad.load(Ordering::SeqCst), 0, "both bad answers were consumed");
    assert_eq!(
        app.memory_contents(&t).await,
        ["用户自述：I am the release manager for the mobile app."],
        "the retried batch stored the memory"
    );
    let metrics = reqwest::get(app.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sediment_extract_failures_total{kind=\"malformed\"}")),
        "the failure is counted"
    );
    // The failed attempt left a provenance record with the error.
    let failed = failed_records(&app, &t).await;
    assert!(
        failed.iter().any(|d| d.contains("malformed")),
        "no failed provenance record: {failed:?}"
    );
}

/// The details of the `failed` provenance records of the tenant's batches.
async fn failed_records(app: &TestApp, tenant: &shared::domain::Tenant) -> Vec<String> {
    app.backends
        .memories
        .recent_failures(100)
        .await
        .expect("read failures")
        .into_iter()
        .filter(|r| r.tenant == *tenant && r.memory_id.is_none() && !r.input_message_ids.is_empty())
        .map(|r| r.detail.to_string())
        .collect()
}

/// A dedup call that fails stores every card and says so in the provenance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_dedup_call_adds_every_card_with_a_warning() {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(|body| {
        if payload(body)["cards"].is_array() {
            return None; // nothing queued: the fake answers 500
        }
        good_answer(body)
    });
    let app = llm_app(&llm, Mode::Embedded).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I work on the payments team.")).await;
    app.wait_extracted(WAIT).await;
    // Not word for word: a card repeating a memory exactly is discarded without a call.
    app.append_ok(&t, "s2", user("I work on the payments team now.")).await;
    app.wait_extracted(WAIT).await;

    let contents = app.memory_contents(&t).await;
    assert_eq!(
        contents.len(),
        2,
        "both cards are stored when dedup cannot run: {contents:?}"
    );
    let newest = app.memories(&t, "").await["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let detail: Value = app
        .req(Method::GET, &format!("/v1/memories/{newest}"), &t)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let warnings = detail["provenance"][0]["detail"]["warnings"].to_string();
    assert!(warnings.contains("judge failed"), "{detail}");
}

/// A card that repeats a stored memory word for word (the same text, category and time) is a
/// duplicate without asking the model: it is discarded with no dedup call. A card that differs
/// at all is still judged by the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_card_repeating_a_memory_word_for_word_is_discarded_without_a_call() {
    let llm = FakeOpenAi::start(8).await;
    let dedup_calls = Arc::new(AtomicUsize::new(0));
    let counted = dedup_calls.clone();
    llm.set_chat_responder(move |body| {
        if payload(body)["cards"].is_array() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        good_answer(body)
    });
    let app = llm_app(&llm, Mode::Embedded).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I work on the payments team.")).await;
    app.wait_extracted(WAIT).await;
    app.append_ok(&t, "s2", user("I  work on the PAYMENTS team.")).await;
    app.wait_extracted(WAIT).await;
    assert_eq!(dedup_calls.load(Ordering::SeqCst), 0, "an exact repeat needs no call");
    let contents = app.memory_contents(&t).await;
    assert_eq!(contents.len(), 1, "the repeat is discarded: {contents:?}");

    app.append_ok(&t, "s3", user("I work on the payments team in Berlin."))
        .await;
    app.wait_extracted(WAIT).await;
    assert_eq!(dedup_calls.load(Ordering::SeqCst), 1, "a card that differs is judged");
    assert_eq!(app.memory_contents(&t).await.len(), 2, "the fake adds it");
}

/// A backlog runs batch after batch in one go; each batch's memories must be in the index
/// before the next one looks for its dedup candidates there. Otherwise a fact repeated two
/// batches later (or in the owner's other session, running beside it) is stored twice.
async fn a_backlog_dedups_against_its_own_earlier_batches(mode: Mode) {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(good_answer);
    // Two turns a batch: the first batch takes turns 1-2, the second (due at once, as the
    // warm-up asks for 2 more) turns 3-4, in the same run.
    let mut app = llm_app_with(&llm, mode, vec![("EXTRACT_BATCH_TURNS", "2".into())]).await;
    let t = tenant();
    let turns = [
        "I work on the payments team.",
        "Our database runs on Postgres 15.",
        "I work on the payments team.",
        "We deploy on Fridays.",
    ];
    let messages: Vec<Value> = turns.iter().map(|c| json!({"role": "user", "content": c})).collect();
    app.append_ok(&t, "s1", Value::Array(messages)).await;
    app.wait_extracted(WAIT).await;
    let mut contents = app.memory_contents(&t).await;
    contents.sort();
    assert_eq!(
        contents,
        [
            "用户自述：I work on the payments team.",
            "用户自述：Our database runs on Postgres 15.",
            "用户自述：We deploy on Fridays.",
        ],
        "{mode:?}: the repeat in the second batch is found and discarded"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_dedups_against_its_own_earlier_batches_embedded() {
    a_backlog_dedups_against_its_own_earlier_batches(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_dedups_against_its_own_earlier_batches_cluster() {
    a_backlog_dedups_against_its_own_earlier_batches(Mode::Cluster).await;
}

/// An LLM down for longer than a wake-up's delivery attempts parks no wake-up: the failed
/// batch is recorded and stays pending, and the sweep extracts it once the model answers, so a
/// parked copy would only be work for a human (the chaos suite's llm-faults parked 27 after a
/// 60 s outage).
async fn an_llm_outage_parks_no_wake_up(mode: Mode) {
    let llm = FakeOpenAi::start(8).await;
    llm.set_chat_responder(good_answer);
    llm.chat().set_standing(Some(Fault::Status(500)));
    // Sweeps far enough apart that the wake-up's attempts do not find the session claimed by
    // one (and give up on it without failing).
    let more = vec![
        ("WORKER_MAX_ATTEMPTS", "2".to_owned()),
        ("WORKER_RETRY_DELAY_MS", "50".to_owned()),
        ("WORKER_SWEEP_INTERVAL_MS", "1000".to_owned()),
    ];
    let app = llm_app_with(&llm, mode, more).await;
    let t = tenant();
    app.append_ok(&t, "s1", user("I am the release manager for the mobile app."))
        .await;
    // Both attempts of the wake-up (50 ms apart) and a sweep or two have failed.
    let started = std::time::Instant::now();
    while llm.chat().requests() < 4 {
        assert!(started.elapsed() < WAIT, "the extraction never called the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    llm.chat().set_standing(None);
    app.wait_extracted(WAIT).await;

    assert_eq!(
        app.memory_contents(&t).await,
        ["用户自述：I am the release manager for the mobile app."]
    );
    let stats = app.backends.bus.stats(WorkerKind::Extract).await.expect("queue stats");
    assert_eq!(stats.parked, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_llm_outage_parks_no_wake_up() {
    an_llm_outage_parks_no_wake_up(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_llm_outage_parks_no_wake_up() {
    an_llm_outage_parks_no_wake_up(Mode::Cluster).await;
}
