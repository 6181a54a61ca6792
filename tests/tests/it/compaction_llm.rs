//! The LLM summarizer against the scripted OpenAI-compatible server, through a real compaction
//! job on SQLite: the prompt and labels it sends, a long stretch folded in parts, one repair of
//! an invalid answer, and an unreachable endpoint failing the job for a later retry.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use integration_tests::fake_openai::{chat_message, FakeOpenAi};
use integration_tests::mixed_session;
use serde_json::{json, Value};
use shared::context::summary::COMPACT_PROMPT;
use shared::context::{Compactor, ContextSettings, JobOutcome, LlmSummarizer};
use shared::domain::{NewTurn, SessionId, Tenant};
use shared::llm::{ChatClient, ChatSettings, HEADER_SESSION, HEADER_TRACE};
use shared::store::compaction::{CompactionRecord, CompactionRequest, CompactionStatus, CompactionStore};
use shared::store::{SqliteStore, TranscriptStore};

const MODEL: &str = "fake-chat";

struct Fixture {
    store: Arc<SqliteStore>,
    fake: FakeOpenAi,
    tenant: Tenant,
    session: SessionId,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// A session of `turns` mixed turns with a queued compaction.
    async fn start(turns: usize) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(
            SqliteStore::open(&dir.path().join("sediment.db"))
                .await
                .expect("open sqlite"),
        );
        let tenant = Tenant::new(Some("dba-team"), Some("oncall-bot"), Some("alice")).expect("tenant");
        let session = SessionId::parse("compact-llm").expect("session");
        let new: Vec<NewTurn> = mixed_session::turns(5, turns)
            .iter()
            .map(|t| {
                NewTurn::new(
                    t["role"].as_str().expect("role"),
                    t["content"].as_str().expect("content"),
                    None,
                    None,
                    None,
                )
                .expect("turn")
            })
            .collect();
        store.append(&tenant, &session, &new).await.expect("append");
        let request = CompactionRequest {
            force: true,
            seen_last_seq: None,
            now: Utc::now(),
            lease: Duration::from_secs(120),
        };
        store
            .request_compaction(&tenant, &session, request)
            .await
            .expect("request");
        Self {
            store,
            fake: FakeOpenAi::start(8).await,
            tenant,
            session,
            _dir: dir,
        }
    }

    fn compactor(&self, input_tokens: u64) -> Compactor {
        let chat = ChatClient::new(ChatSettings {
            retry_base_delay: Duration::from_millis(10),
            timeout: Duration::from_secs(5),
            ..ChatSettings::new(self.fake.base_url(), MODEL)
        })
        .expect("chat client");
        let settings = ContextSettings {
            llm_input_tokens: input_tokens,
            ..ContextSettings::default()
        };
        Compactor::new(
            self.store.clone(),
            self.store.clone(),
            Arc::new(LlmSummarizer::new(Arc::new(chat), input_tokens)),
            settings,
        )
    }

    async fn run(&self, compactor: &Compactor) -> JobOutcome {
        compactor
            .run(&self.tenant, self.session.as_str())
            .await
            .expect("run the job")
    }

    async fn record(&self) -> CompactionRecord {
        self.store
            .compaction(&self.tenant, &self.session)
            .await
            .expect("read")
            .expect("a row")
    }
}

fn answer() -> Value {
    json!({
        "requests_and_intent": ["查看 orders 表北京区域的 amount 分布"],
        "decisions": ["orders 按月分区"],
        "objects_changed": [],
        "schema_changes": ["ALTER TABLE orders ADD COLUMN amount_note text"],
        "data_operations": [],
        "errors_and_fixes": ["deadlock in billing-worker fixed by locking in primary-key order"],
        "todos": ["archive 2023 orders before Monday"],
        "user_preferences": ["lowercase SQL keywords"],
        "tool_calls": [],
        "other_context": []
    })
}

#[tokio::test]
async fn the_llm_summarizer_sends_the_compaction_prompt_and_stores_its_answer() {
    let f = Fixture::start(20).await;
    let reply = answer().to_string();
    f.fake.set_chat_responder(move |_| Some(reply.clone()));
    let outcome = f.run(&f.compactor(100_000)).await;
    assert_eq!(outcome, JobOutcome::Compacted { turns: 15 });

    let record = f.record().await;
    assert_eq!(record.status, CompactionStatus::Success);
    let summary = record.summary.expect("summary");
    assert_eq!(summary.summary, answer());
    assert_eq!(summary.summarizer, format!("llm:{MODEL}"));
    assert_eq!(
        (summary.first_seq, summary.last_seq, summary.message_count),
        (1, 15, 15)
    );
    assert!(summary
        .content
        .contains("## Decisions and conclusions\n- orders 按月分区\n"));

    let calls = f.fake.chat().recorded();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(chat_message(&call.body, "system").as_deref(), Some(COMPACT_PROMPT));
    let user = chat_message(&call.body, "user").expect("user message");
    assert!(user.contains("turns 1–15"), "{user}");
    assert!(user.contains("[#1 user] "), "{user}");
    assert!(user.contains("[#15 user] "), "{user}");
    assert!(!user.contains("[#16 "), "the last 5 turns stay out: {user}");
    assert!(!user.contains("Previous summary"), "{user}");
    assert_eq!(call.body["model"], MODEL);
    assert_eq!(call.header(HEADER_TRACE), Some("session.compact"));
    assert_eq!(call.header(HEADER_SESSION), Some("compact-llm"));
}

#[tokio::test]
async fn a_long_stretch_is_folded_in_parts_each_building_on_the_last() {
    let f = Fixture::start(40).await;
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    f.fake.set_chat_responder(move |body| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let user = chat_message(body, "user").unwrap_or_default();
        // Each part after the first gets the summary so far.
        let previous = user.starts_with("Previous summary (JSON)");
        Some(json!({ "todos": [format!("part {n} (previous: {previous})")] }).to_string())
    });
    // ~55 tokens a turn: a few turns per part.
    let outcome = f.run(&f.compactor(300)).await;
    assert_eq!(outcome, JobOutcome::Compacted { turns: 35 });
    let parts = calls.load(Ordering::SeqCst);
    assert!(parts >= 4, "only {parts} parts");
    let record = f.record().await;
    assert_eq!(record.status, CompactionStatus::Success);
    let summary = record.summary.expect("summary");
    assert_eq!(
        (summary.first_seq, summary.last_seq, summary.message_count),
        (1, 35, 35)
    );
    assert_eq!(
        summary.summary["todos"],
        json!([format!("part {parts} (previous: true)")])
    );
    let firsts: Vec<bool> = f
        .fake
        .chat()
        .bodies()
        .iter()
        .map(|b| {
            chat_message(b, "user")
                .unwrap_or_default()
                .starts_with("Previous summary")
        })
        .collect();
    assert!(!firsts[0]);
    assert!(firsts[1..].iter().all(|p| *p), "{firsts:?}");
}

#[tokio::test]
async fn an_invalid_answer_is_repaired_once_then_fails_the_job() {
    let f = Fixture::start(12).await;
    f.fake
        .set_chat_responder(|_| Some(json!({"mood": ["fine"]}).to_string()));
    assert_eq!(f.run(&f.compactor(100_000)).await, JobOutcome::Failed);
    assert_eq!(f.fake.chat().requests(), 2, "one answer and one repair");
    let record = f.record().await;
    assert_eq!(record.status, CompactionStatus::Failed);
    let error = record.error.expect("error");
    assert!(error.contains("LLM output invalid"), "{error}");
    assert!(record.retry_at.is_some());
    assert_eq!(record.summary, None);
}

#[tokio::test]
async fn an_unreachable_llm_fails_the_job_for_a_later_retry() {
    let f = Fixture::start(12).await;
    f.fake.set_down(true);
    assert_eq!(f.run(&f.compactor(100_000)).await, JobOutcome::Failed);
    let record = f.record().await;
    assert_eq!(record.status, CompactionStatus::Failed);
    assert!(record.error.expect("error").contains("LLM unavailable"));
    assert!(record.retry_at.expect("retry time") > Utc::now());
}
