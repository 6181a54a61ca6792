//! The LLM port against the scripted fake server: retries and failure classes of the chat
//! client, the single repair of an invalid answer, the labels every call carries, template
//! resolution, and the two L1 engines mapping the model's refs, aliases and decisions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use integration_tests::fake_openai::{chat_message, FakeOpenAi, Fault};
use serde_json::{json, Value};
use shared::config::Secret;
use shared::domain::{Role, Tenant};
use shared::llm::{
    trace, CallLabels, ChatClient, ChatSettings, InstanceTemplates, LlmError, Message, OverrideLevel, OverridesError,
    Prompts, TemplateId, TemplateOverride, TemplateOverrides, HEADER_AGENT, HEADER_SESSION, HEADER_TEAM, HEADER_TRACE,
    HEADER_USER,
};
use shared::memory::llm::{LlmExtractor, LlmJudge};
use shared::memory::{
    Batch, BatchTurn, Candidate, Card, CardExtractor, Category, ConflictJudge, Decision, EngineError, Memory,
    MemoryStatus,
};
use shared::runtime::error_chain;
use uuid::Uuid;

const MODEL: &str = "fake-chat";

fn tenant() -> Tenant {
    Tenant::new(Some("dba-team"), Some("oncall-bot"), Some("alice")).unwrap()
}

/// Defaults, except for quick retries so that failure tests stay fast.
fn settings(fake: &FakeOpenAi) -> ChatSettings {
    ChatSettings {
        retry_base_delay: Duration::from_millis(10),
        timeout: Duration::from_secs(5),
        ..ChatSettings::new(fake.base_url(), MODEL)
    }
}

fn client(fake: &FakeOpenAi) -> ChatClient {
    ChatClient::new(settings(fake)).expect("valid settings")
}

fn labels() -> CallLabels {
    CallLabels::new(trace::L1_EXTRACT, &tenant(), Some("session-7"))
}

fn conversation() -> Vec<Message> {
    vec![
        Message::system("Answer with a JSON object {\"answer\": <integer>}."),
        Message::user("What is six times seven?"),
    ]
}

/// The schema of the test calls: an object with an integer `answer`.
fn answer(value: Value) -> Result<i64, String> {
    value
        .get("answer")
        .and_then(Value::as_i64)
        .ok_or_else(|| "answer: must be an integer".to_owned())
}

async fn ask(client: &ChatClient) -> Result<shared::llm::JsonReply<i64>, LlmError> {
    client.complete_json(&labels(), conversation(), answer).await
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_waited_out_then_succeeds() {
    let fake = FakeOpenAi::start(8).await;
    fake.chat().push(Fault::retry_after(429, 1));
    fake.push_reply(r#"{"answer": 42}"#);

    let started = Instant::now();
    let reply = ask(&client(&fake)).await.unwrap();

    assert_eq!((reply.value, reply.repaired), (42, false));
    assert_eq!(fake.chat().requests(), 2, "the 429 and its retry");
    // The backoff alone would be ~10 ms: waiting a second shows Retry-After was honoured.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
}

#[tokio::test]
async fn server_errors_are_retried_away() {
    let fake = FakeOpenAi::start(8).await;
    fake.chat().push(Fault::Status(503));
    fake.chat().push(Fault::Status(502));
    fake.push_reply(r#"{"answer": 42}"#);

    let reply = ask(&client(&fake)).await.unwrap();

    assert_eq!(reply.value, 42);
    assert_eq!(fake.chat().requests(), 3);
    assert_eq!(reply.usage.completions, 1, "failed attempts are not completions");
}

#[tokio::test]
async fn server_errors_on_every_attempt_end_unavailable() {
    let fake = FakeOpenAi::start(8).await;
    let client = ChatClient::new(ChatSettings {
        max_retries: 1,
        ..settings(&fake)
    })
    .unwrap();
    fake.set_down(true);

    let error = ask(&client).await.unwrap_err();

    assert!(matches!(error, LlmError::Unavailable(_)), "{error:?}");
    assert!(error.is_retryable());
    assert!(error_chain(&error).contains("503"), "{}", error_chain(&error));
    assert_eq!(fake.chat().requests(), 2, "first attempt and 1 retry");
}

#[tokio::test]
async fn slow_answers_time_out_then_end_unavailable() {
    let fake = FakeOpenAi::start(8).await;
    let timeout = Duration::from_millis(300);
    let client = ChatClient::new(ChatSettings {
        timeout,
        max_retries: 1,
        ..settings(&fake)
    })
    .unwrap();
    fake.chat().push_times(Fault::Delay(Duration::from_secs(30)), 2);

    let started = Instant::now();
    let error = ask(&client).await.unwrap_err();
    let elapsed = started.elapsed();

    assert!(matches!(error, LlmError::Unavailable(_)), "{error:?}");
    assert!(error_chain(&error).contains("timed out"), "{}", error_chain(&error));
    assert_eq!(fake.chat().requests(), 2);
    assert!(elapsed >= timeout * 2, "{elapsed:?}");
    assert!(elapsed < timeout * 2 + Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn client_errors_are_rejected_at_once_with_the_provider_message() {
    let fake = FakeOpenAi::start(8).await;
    let client = client(&fake);
    for status in [400, 401, 403, 404] {
        let before = fake.chat().requests();
        let message = format!("refused with {status}: Incorrect API key provided");
        fake.chat().push(Fault::error(status, &message));

        let error = ask(&client).await.unwrap_err();

        assert!(matches!(error, LlmError::Rejected(_)), "{status}: {error:?}");
        assert!(!error.is_retryable());
        let chain = error_chain(&error);
        assert!(
            chain.contains(&message) && chain.contains(&status.to_string()),
            "{chain}"
        );
        assert_eq!(fake.chat().requests(), before + 1, "{status} was retried");
    }
}

#[tokio::test]
async fn invalid_json_gets_one_repair_that_quotes_the_problem() {
    let fake = FakeOpenAi::start(8).await;
    fake.push_reply("Sure! The answer is 42.");
    fake.push_reply("```json\n{\"answer\": 42}\n```");

    let reply = ask(&client(&fake)).await.unwrap();

    assert_eq!((reply.value, reply.repaired), (42, true));
    assert_eq!(reply.usage.completions, 2);
    assert!(
        reply.usage.prompt_tokens > 0 && reply.usage.completion_tokens > 0,
        "{:?}",
        reply.usage
    );
    let bodies = fake.chat().bodies();
    assert_eq!(bodies.len(), 2);
    let repair = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        repair.len(),
        4,
        "the conversation, the bad answer and the repair request"
    );
    assert_eq!(repair[..2], bodies[0]["messages"].as_array().unwrap()[..]);
    assert_eq!(
        repair[2],
        json!({"role": "assistant", "content": "Sure! The answer is 42."})
    );
    let request = chat_message(&bodies[1], "user").unwrap();
    assert!(request.contains("the answer is not valid JSON"), "{request}");
    assert!(request.contains("only the corrected JSON"), "{request}");
}

#[tokio::test]
async fn schema_violation_gets_one_repair_that_quotes_the_validation_error() {
    let fake = FakeOpenAi::start(8).await;
    fake.push_reply(r#"{"answer": "forty-two"}"#);
    fake.push_reply(r#"{"answer": 42}"#);

    let reply = ask(&client(&fake)).await.unwrap();

    assert_eq!((reply.value, reply.repaired), (42, true));
    let request = chat_message(&fake.chat().bodies()[1], "user").unwrap();
    assert!(request.contains("answer: must be an integer"), "{request}");
}

#[tokio::test]
async fn invalid_twice_is_malformed_after_exactly_one_repair() {
    let fake = FakeOpenAi::start(8).await;
    fake.push_reply(r#"{"answer": "forty-two"}"#);
    fake.push_reply(r#"{"result": 42}"#);
    fake.push_reply(r#"{"answer": 42}"#);

    let error = ask(&client(&fake)).await.unwrap_err();

    let LlmError::Malformed(reason) = &error else {
        panic!("expected Malformed, got {error:?}");
    };
    assert!(reason.contains("answer: must be an integer"), "{reason}");
    assert!(error.is_retryable(), "a later run may get a better answer");
    assert_eq!(fake.chat().requests(), 2);
    assert_eq!(fake.pending_replies(), 1, "no third call");
}

#[tokio::test]
async fn a_200_that_is_not_a_chat_completion_is_malformed() {
    let fake = FakeOpenAi::start(8).await;
    fake.chat().push(Fault::MalformedJson);

    let error = ask(&client(&fake)).await.unwrap_err();

    let LlmError::Malformed(reason) = &error else {
        panic!("expected Malformed, got {error:?}");
    };
    assert!(reason.contains("not a chat completion"), "{reason}");
    assert_eq!(
        fake.chat().requests(),
        1,
        "the endpoint, not the model, is broken: no repair"
    );
}

#[tokio::test]
async fn labels_model_key_and_json_mode_arrive_at_the_server() {
    let fake = FakeOpenAi::start(8).await;
    let client = ChatClient::new(ChatSettings {
        api_key: Some(Secret::new("sk-chat-123")),
        ..settings(&fake)
    })
    .unwrap();
    assert!(!format!("{client:?}").contains("sk-chat-123"));
    fake.push_reply(r#"{"answer": 42}"#);
    let tenant = Tenant::new(Some("数据库组"), Some("oncall-bot"), Some("alice")).unwrap();

    client
        .complete_json(
            &CallLabels::new(trace::L1_DEDUP, &tenant, Some("session-7")),
            conversation(),
            answer,
        )
        .await
        .unwrap();

    let recorded = fake.chat().recorded().pop().unwrap();
    assert_eq!(recorded.header(HEADER_TRACE), Some("memory.l1-dedup"));
    assert_eq!(
        recorded.header(HEADER_TEAM),
        Some("%E6%95%B0%E6%8D%AE%E5%BA%93%E7%BB%84")
    );
    assert_eq!(recorded.header(HEADER_AGENT), Some("oncall-bot"));
    assert_eq!(recorded.header(HEADER_USER), Some("alice"));
    assert_eq!(recorded.header(HEADER_SESSION), Some("session-7"));
    assert_eq!(recorded.authorization.as_deref(), Some("Bearer sk-chat-123"));
    assert_eq!(recorded.body["model"], json!(MODEL));
    assert_eq!(recorded.body["user"], json!("数据库组/oncall-bot/alice"));
    assert_eq!(recorded.body["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        recorded.body["messages"][1],
        json!({"role": "user", "content": "What is six times seven?"})
    );
}

#[tokio::test]
async fn calls_tokens_and_repairs_are_counted_by_trace() {
    let handle = shared::metrics::prometheus();
    let fake = FakeOpenAi::start(8).await;
    fake.chat().push(Fault::Status(500));
    fake.push_reply("not json");
    fake.push_reply(r#"{"answer": 42}"#);

    ask(&client(&fake)).await.unwrap();

    let rendered = handle.render();
    let line = |metric: &str, labels: &[&str]| {
        rendered
            .lines()
            .find(|l| l.starts_with(metric) && labels.iter().all(|label| l.contains(label)))
            .unwrap_or_else(|| panic!("no {metric} {labels:?} in:\n{rendered}"))
            .to_owned()
    };
    let trace = r#"trace="memory.l1-extract""#;
    for (metric, labels) in [
        (shared::metrics::LLM_CALLS, vec![trace, r#"result="ok""#]),
        (shared::metrics::LLM_CALLS, vec![trace, r#"result="retry""#]),
        (shared::metrics::LLM_TOKENS, vec![trace, r#"kind="prompt""#]),
        (shared::metrics::LLM_TOKENS, vec![trace, r#"kind="completion""#]),
        (shared::metrics::LLM_REPAIRS, vec![trace, r#"result="ok""#]),
        (shared::metrics::LLM_MALFORMED, vec![trace]),
    ] {
        let found = line(metric, &labels);
        assert!(!found.ends_with(" 0"), "{found}");
    }
    assert!(rendered.contains(shared::metrics::LLM_LATENCY), "{rendered}");
}

#[tokio::test]
async fn fake_responder_answers_by_content_and_falls_back_to_the_queue() {
    let fake = FakeOpenAi::start(8).await;
    fake.set_chat_responder(|body| {
        chat_message(body, "user")
            .filter(|m| m.contains("six times seven"))
            .map(|_| r#"{"answer": 42}"#.to_owned())
    });
    fake.push_reply(r#"{"answer": 7}"#);
    let client = client(&fake);

    assert_eq!(ask(&client).await.unwrap().value, 42);
    let other = vec![Message::system("JSON please"), Message::user("something else")];
    let queued = client.complete_json(&labels(), other, answer).await.unwrap();
    assert_eq!(queued.value, 7, "None falls back to the queued reply");
    fake.clear_chat_responder();
    assert!(ask(&client).await.is_err(), "no responder and no reply left: 500");
}

// ---------------------------------------------------------------------------------------------
// Templates and engines

fn turn(seq: i64, role: Role, content: &str) -> BatchTurn {
    BatchTurn {
        id: Uuid::new_v4(),
        seq,
        role,
        content: content.into(),
        created_at: Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, seq as u32).unwrap(),
    }
}

/// Two context turns (`m1`, `m2`) and three turns to extract from (`m3`..`m5`).
fn batch() -> Batch {
    Batch {
        tenant: tenant(),
        session_id: "session-7".into(),
        context: vec![
            turn(1, Role::User, "早上好"),
            turn(2, Role::Assistant, "早上好！有什么可以帮你？"),
        ],
        turns: vec![
            turn(3, Role::User, "我是腾讯云 DBA，主要管北京区的 TDSQL-C"),
            turn(4, Role::Assistant, "明白了。"),
            turn(5, Role::User, "以后回答请用表格"),
        ],
    }
}

struct Stored(Vec<TemplateOverride>);

#[async_trait]
impl TemplateOverrides for Stored {
    async fn overrides(&self, _tenant: &Tenant, _id: TemplateId) -> Result<Vec<TemplateOverride>, OverridesError> {
        Ok(self.0.clone())
    }
}

fn stored(level: OverrideLevel, text: &str) -> TemplateOverride {
    TemplateOverride {
        id: "l1-extract".into(),
        level,
        team: "dba-team".into(),
        agent: (level == OverrideLevel::Agent).then(|| "oncall-bot".to_owned()),
        version: format!("{}-3", level.as_str()),
        content: text.into(),
    }
}

#[tokio::test]
async fn the_most_specific_template_is_sent_and_recorded_with_its_hash() {
    let fake = FakeOpenAi::start(8).await;
    fake.set_chat_responder(|_| Some(r#"{"scenes": []}"#.to_owned()));
    let chat = Arc::new(client(&fake));
    let instance = InstanceTemplates::from_files([(
        "l1-extract.md",
        "---\nid: l1-extract\nversion: 9\n---\nInstance prompt: extract memories as JSON.\n",
    )])
    .unwrap();
    let team = stored(OverrideLevel::Team, "Team prompt: extract memories as JSON.");
    let agent = stored(OverrideLevel::Agent, "Agent prompt: extract memories as JSON.");
    let cases = [
        (
            vec![team.clone(), agent.clone()],
            "agent",
            "agent-3",
            "Agent prompt: extract memories as JSON.",
            "2de04f021297f99abcf4514372ea2c372b4bd25a68161cafb44024783cb1ffcd",
        ),
        (
            vec![team],
            "team",
            "team-3",
            "Team prompt: extract memories as JSON.",
            "0aaa31251737dce74e881772360c7a62ff0109492d75a2c0e822d19f8cae1292",
        ),
        (
            vec![],
            "instance",
            "9",
            "Instance prompt: extract memories as JSON.",
            "7d3ac1d1301c16e59b367c32e13d41640d36bc7c857748ba49ad7ed9fbffc27f",
        ),
    ];
    for (overrides, source, version, text, hash) in cases {
        let prompts = Prompts::new(instance.clone(), Arc::new(Stored(overrides)));
        let extraction = LlmExtractor::new(chat.clone(), prompts)
            .extract(&batch())
            .await
            .unwrap();

        assert!(extraction.cards.is_empty());
        let run = &extraction.run;
        assert_eq!(
            (
                run.template.source.as_str(),
                run.template.version.as_str(),
                run.template.hash.as_str()
            ),
            (source, version, hash)
        );
        assert_eq!((run.template.id.as_str(), run.model.as_str()), ("l1-extract", MODEL));
        let sent = fake.chat().bodies().pop().unwrap();
        assert_eq!(chat_message(&sent, "system").as_deref(), Some(text));
    }

    let builtin = LlmExtractor::new(chat.clone(), Prompts::builtin())
        .extract(&batch())
        .await
        .unwrap();
    assert_eq!(builtin.run.template.source, "builtin");
    let sent = chat_message(&fake.chat().bodies().pop().unwrap(), "system").unwrap();
    assert!(
        sent.contains("source_message_ids") && sent.contains("work_artifact"),
        "{sent}"
    );
    assert!(!sent.starts_with("---"), "front matter is not part of the prompt");
}

#[tokio::test]
async fn extractor_maps_refs_and_aliases_into_cards() {
    let fake = FakeOpenAi::start(8).await;
    // A near-miss answer: aliased fields and categories, refs in other spellings, one ref to a
    // context turn, one unknown, and a card with no usable ref at all.
    fake.push_reply(
        json!({"topics": [{
            "name": "自我介绍",
            "memories": [
                {"text": "用户是腾讯云 DBA，主要负责北京区的 TDSQL-C", "type": "profile", "importance": 95, "sources": ["M3", "m1", "m42"]},
                {"text": "用户希望回答使用表格", "type": "Preference", "importance": "high", "sources": "5"},
                {"text": "用户打了招呼", "type": "episode", "importance": 300, "sources": ["m2"]},
                {"text": "", "type": "fact"},
            ],
        }]})
        .to_string(),
    );
    let batch = batch();
    let extractor = LlmExtractor::new(Arc::new(client(&fake)), Prompts::builtin());

    let extraction = extractor.extract(&batch).await.unwrap();

    let ids: Vec<Uuid> = batch.turns.iter().map(|t| t.id).collect();
    assert_eq!(
        extraction.cards,
        vec![
            Card {
                content: "用户是腾讯云 DBA，主要负责北京区的 TDSQL-C".into(),
                category: Category::Persona,
                priority: 95,
                scene: Some("自我介绍".into()),
                occurred_at: None,
                source_message_ids: vec![ids[0]],
            },
            Card {
                content: "用户希望回答使用表格".into(),
                category: Category::Instruction,
                priority: 80,
                scene: Some("自我介绍".into()),
                occurred_at: None,
                source_message_ids: vec![ids[2]],
            },
            Card {
                content: "用户打了招呼".into(),
                category: Category::Episodic,
                priority: 100,
                scene: Some("自我介绍".into()),
                occurred_at: None,
                source_message_ids: ids.clone(),
            },
        ]
    );
    assert_eq!(extraction.run.template.source, "builtin");

    let sent = fake.chat().bodies().pop().unwrap();
    let input: Value = serde_json::from_str(&chat_message(&sent, "user").unwrap()).unwrap();
    assert_eq!(input["context"][0]["ref"], json!("m1"));
    assert_eq!(input["turns"][0]["ref"], json!("m3"));
    assert_eq!(
        input["turns"][0]["content"],
        json!("我是腾讯云 DBA，主要管北京区的 TDSQL-C")
    );
    assert_eq!(input["turns"][2]["time"], json!("2026-03-02T09:00:05Z"));
    let text = sent.to_string();
    for id in batch.context.iter().chain(&batch.turns).map(|t| t.id) {
        assert!(!text.contains(&id.to_string()), "a turn id reached the model");
    }
}

#[tokio::test]
async fn extractor_failures_keep_their_class() {
    let fake = FakeOpenAi::start(8).await;
    let extractor = LlmExtractor::new(
        Arc::new(
            ChatClient::new(ChatSettings {
                max_retries: 0,
                ..settings(&fake)
            })
            .unwrap(),
        ),
        Prompts::builtin(),
    );

    fake.push_reply(r#"{"scenes": [{"cards": [{"content": "x", "category": "weather"}]}]}"#);
    fake.push_reply(r#"{"scenes": [{"cards": [{"content": "x", "category": "climate"}]}]}"#);
    let error = extractor.extract(&batch()).await.unwrap_err();
    let EngineError::Malformed(reason) = &error else {
        panic!("expected Malformed, got {error:?}");
    };
    assert!(
        reason.contains("scenes[0].cards[0].category: \"climate\" is not a category"),
        "{reason}"
    );
    let repair = chat_message(&fake.chat().bodies()[1], "user").unwrap();
    assert!(repair.contains("\"weather\" is not a category"), "{repair}");

    fake.chat().push(Fault::Status(503));
    assert!(matches!(
        extractor.extract(&batch()).await,
        Err(EngineError::Unavailable(_))
    ));
    fake.chat().push(Fault::error(401, "bad key"));
    assert!(matches!(
        extractor.extract(&batch()).await,
        Err(EngineError::Rejected(_))
    ));

    struct Down;
    #[async_trait]
    impl TemplateOverrides for Down {
        async fn overrides(&self, _: &Tenant, _: TemplateId) -> Result<Vec<TemplateOverride>, OverridesError> {
            Err(OverridesError("store unreachable".into()))
        }
    }
    let before = fake.chat().requests();
    let blind = LlmExtractor::new(
        Arc::new(client(&fake)),
        Prompts::new(InstanceTemplates::default(), Arc::new(Down)),
    );
    assert!(matches!(
        blind.extract(&batch()).await,
        Err(EngineError::Unavailable(_))
    ));
    assert_eq!(fake.chat().requests(), before, "no call without knowing the template");
}

fn new_card(content: &str) -> Card {
    Card {
        content: content.into(),
        category: Category::WorkFact,
        priority: 60,
        scene: Some("TDSQL-C".into()),
        occurred_at: None,
        source_message_ids: vec![Uuid::new_v4()],
    }
}

fn memory(content: &str) -> Candidate {
    let at = Utc.with_ymd_and_hms(2026, 2, 1, 8, 0, 0).unwrap();
    Candidate {
        memory: Memory {
            id: Uuid::new_v4(),
            tenant: tenant(),
            session_id: "session-1".into(),
            content: content.into(),
            category: Category::WorkFact,
            priority: 60,
            scene: None,
            occurred_at: None,
            source_message_ids: vec![Uuid::new_v4()],
            status: MemoryStatus::Active,
            superseded_by: None,
            task: None,
            created_at: at,
            updated_at: at,
        },
        similarity: Some(0.88),
    }
}

#[tokio::test]
async fn judge_maps_decisions_and_adds_on_a_foreign_target() {
    let fake = FakeOpenAi::start(8).await;
    let judge = LlmJudge::new(Arc::new(client(&fake)), Prompts::builtin());
    let cards = vec![
        new_card("实例 A 使用 TDSQL-C 8.0"),
        new_card("实例 A 在北京区"),
        // Not word for word the stored memory, which would be discarded without asking.
        new_card("实例 A 的备份保留七天"),
        new_card("实例 B 是新买的"),
        new_card("用户喜欢表格"),
    ];
    let (v57, beijing, region, backup) = (
        memory("实例 A 使用 TDSQL-C 5.7"),
        memory("实例 A 位于北京"),
        memory("实例 A 属于华北地区"),
        memory("实例 A 的备份保留 7 天"),
    );
    let candidates = vec![
        vec![v57.clone()],
        vec![beijing.clone(), region.clone()],
        vec![backup.clone()],
        vec![v57.clone()],
        vec![],
    ];
    // The model answers by ref: c1 = v57, c2 = beijing, c3 = region, c4 = backup. Card n4 names
    // c4, which is not one of its candidates; card n5 has none and is not shown at all.
    fake.set_chat_responder(|body| {
        let input: Value = serde_json::from_str(&chat_message(body, "user")?).ok()?;
        let shown: Vec<&str> = input["cards"].as_array()?.iter().filter_map(|c| c["ref"].as_str()).collect();
        (shown == ["n1", "n2", "n3", "n4"]).then(|| {
            json!({"decisions": [
                {"card": "n1", "action": "update", "targets": ["c1"], "content": null},
                {"card": "n2", "action": "combine", "target": ["c2", "c3"], "merged_content": "实例 A 位于华北地区的北京区"},
                {"card": "n3", "decision": "skip", "duplicate_of": "c4"},
                {"card": "n4", "action": "discard", "targets": ["c4"]},
            ]})
            .to_string()
        })
    });

    let (decisions, run) = judge.decide(&batch(), &cards, &candidates).await.unwrap();

    assert_eq!(
        decisions,
        vec![
            Decision::Update {
                target: v57.memory.id,
                content: None
            },
            Decision::Merge {
                targets: vec![beijing.memory.id, region.memory.id],
                content: Some("实例 A 位于华北地区的北京区".into())
            },
            Decision::Discard {
                duplicate_of: Some(backup.memory.id)
            },
            Decision::Add,
            Decision::Add,
        ]
    );
    assert_eq!(fake.chat().requests(), 1, "one call for the whole batch");
    assert_eq!((run.template.id.as_str(), run.model.as_str()), ("l1-dedup", MODEL));
    let sent = fake.chat().recorded().pop().unwrap();
    assert_eq!(sent.header(HEADER_TRACE), Some("memory.l1-dedup"));
    let text = sent.body.to_string();
    assert!(
        !text.contains(&v57.memory.id.to_string()),
        "a memory id reached the model"
    );
}

#[tokio::test]
async fn judge_adds_missing_decisions_and_skips_the_call_without_candidates() {
    let fake = FakeOpenAi::start(8).await;
    let judge = LlmJudge::new(Arc::new(client(&fake)), Prompts::builtin());
    let cards = vec![new_card("a"), new_card("b")];

    let (decisions, run) = judge.decide(&batch(), &cards, &[vec![], vec![]]).await.unwrap();
    assert_eq!(decisions, vec![Decision::Add, Decision::Add]);
    assert_eq!(run.template.source, "builtin");
    assert_eq!(fake.chat().requests(), 0, "nothing to compare: no call");

    let stored = memory("b, stored");
    fake.push_reply(r#"{"decisions": []}"#);
    let (decisions, _) = judge
        .decide(&batch(), &cards, &[vec![], vec![stored.clone()]])
        .await
        .unwrap();
    assert_eq!(decisions, vec![Decision::Add, Decision::Add]);
    assert_eq!(fake.chat().requests(), 1);

    fake.push_reply(r#"{"decisions": "none"}"#);
    fake.push_reply(r#"{"decisions": [{"card": "n2", "action": "perhaps"}]}"#);
    let error = judge
        .decide(&batch(), &cards, &[vec![], vec![stored]])
        .await
        .unwrap_err();
    let EngineError::Malformed(reason) = error else {
        panic!("expected Malformed, got {error:?}");
    };
    assert!(
        reason.contains("decisions[0].action: \"perhaps\" is not an action"),
        "{reason}"
    );
}
