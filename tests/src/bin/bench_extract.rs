//! L1 extraction throughput, LLM calls and tokens per 100 turns, through the real pipeline of
//! the embedded deployment (SQLite + Qdrant Edge, in-process bus and extract worker, keyword
//! candidates: no embedder), with the scripted OpenAI-compatible server playing a model that
//! takes a fixed time per call:
//!
//! ```sh
//! cargo run --release -p integration-tests --bin bench_extract
//! ```
//!
//! Workload: `USERS` users of one team, `SESSIONS_PER_USER` sessions each, `TURNS` turns per
//! session (user and assistant alternating), generated below: mixed Chinese/English DBA work
//! talk in which about a third of the user turns say something worth keeping (who they are,
//! preferences, instructions, facts, plans, decisions), the rest being questions, pasted SQL
//! and logs, and acknowledgements. A user's second session repeats some of the first
//! session's statements word for word and changes others (a new region, a new plan), so dedup
//! has discards and updates to decide.
//!
//! Scenarios: the rules engine, and the LLM engines with 0, 200 and 1000 ms per call, each in
//! `burst` (every session sends its turns one request per turn, all sessions at once, as fast
//! as the API takes them) and, at 200 ms, `paced` (one turn per session every `PACE`, a fast
//! live conversation, so the warm-up schedule runs as in production). Each scenario starts a
//! fresh app; the clock runs from the first append until nothing is left to extract or index
//! (`wait_extracted`), so the idle flush of the last partial batch (`EXTRACT_IDLE_FLUSH_MS`)
//! is included. The flush is 200 ms in every scenario, so that the runs end soon, and the paced
//! one runs once more with the service's default of 60 s: a flush shorter than the gaps between
//! a session's turns fires between them, each time on a partial batch.
//!
//! Arguments select scenarios by a word of their label (`bench_extract paced`); none runs all.
//!
//! The fake model answers like a careful one would: one card per worth-keeping user turn of
//! the batch (not the context), and per card `discard` when a candidate says the same, `update`
//! when a candidate is about the same topic, `add` otherwise. Tokens are reported twice: the
//! fake's `usage` (words and CJK bigrams) and `cl100k_base` counts of the same messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use integration_tests::app::{Mode, Options, TestApp};
use integration_tests::fake_openai::{chat_message, FakeOpenAi};
use integration_tests::rng::Rng;
use serde_json::{json, Value};
use shared::domain::Tenant;

const USERS: usize = 8;
const SESSIONS_PER_USER: usize = 2;
const TURNS: usize = 60;
const PACE: Duration = Duration::from_millis(100);
const WAIT: Duration = Duration::from_secs(600);

// ---------------------------------------------------------------------------------------------
// The conversation generator.

const TABLES: &[&str] = &["orders", "order_items", "payments", "users", "inventory", "shipments"];
const REGIONS: &[&str] = &["北京", "上海", "广州", "Frankfurt", "Singapore"];
const PRODUCTS: &[&str] = &["TDSQL-C", "PostgreSQL 16", "MySQL 8.0", "Redis 7"];

/// A worth-keeping statement: its topic (what a newer statement on it replaces), category and
/// priority as the model should judge them, and its text.
#[derive(Debug, Clone)]
struct Statement {
    topic: &'static str,
    category: &'static str,
    priority: u8,
    text: String,
}

/// The statements of a user: one per topic; `variant` changes the facts a later session
/// corrects (region, plan, decision).
fn statements(user: usize, variant: usize) -> Vec<Statement> {
    let mut rng = Rng::new(user as u64 * 7919);
    let table = rng.pick(TABLES);
    let product = rng.pick(PRODUCTS);
    let region = REGIONS[(user + variant) % REGIONS.len()];
    let s = |topic, category, priority, text: String| Statement {
        topic,
        category,
        priority,
        text,
    };
    let zh = user.is_multiple_of(2);
    vec![
        s(
            "role",
            "persona",
            95,
            if zh {
                format!("我是腾讯云 DBA，主要管{region}区的 {product}。")
            } else {
                format!("I am the on-call DBA for the {product} fleet in {region}.")
            },
        ),
        s(
            "language",
            "instruction",
            90,
            if zh {
                "请用中文回答，SQL 和命令保持英文。".to_owned()
            } else {
                "Please always answer in English and keep it short.".to_owned()
            },
        ),
        s(
            "format",
            "instruction",
            80,
            if zh {
                "不要给我长篇解释，直接给可以执行的命令。".to_owned()
            } else {
                "Never paste whole query plans back to me, summarize them.".to_owned()
            },
        ),
        s(
            "tool",
            "instruction",
            60,
            if zh {
                "我喜欢用 psql，不用图形界面。".to_owned()
            } else {
                "I prefer pgcli over GUI clients.".to_owned()
            },
        ),
        s(
            "plan",
            "work_task",
            75,
            if variant == 0 {
                format!("下周三我们要把 {table} 表迁移到按月分区。")
            } else {
                format!("The {table} partitioning moved to next Friday, 22:00 UTC.")
            },
        ),
        s(
            "decision",
            "work_method",
            70,
            if variant == 0 {
                "We decided to use pg_repack instead of VACUUM FULL for bloat.".to_owned()
            } else {
                "我们决定改用 gh-ost 做在线 DDL，不再用 pt-osc。".to_owned()
            },
        ),
        s(
            "fact",
            "work_fact",
            65,
            format!("Remember: the {table} primary is db-{user}.internal, replicas are read-only."),
        ),
    ]
}

const QUESTIONS: &[&str] = &[
    "这个慢查询怎么优化？ SELECT * FROM {table} WHERE created_at > now() - interval '1 day' ORDER BY id DESC LIMIT 50;",
    "Why does EXPLAIN show a Seq Scan on {table} even though there is an index on user_id?",
    "能解释一下这个报错吗：ERROR: deadlock detected DETAIL: Process 4242 waits for ShareLock on transaction 99812.",
    "How long would CREATE INDEX CONCURRENTLY take on {table} with 80M rows?",
    "帮我看下这个执行计划：Nested Loop (cost=0.57..1234.56 rows=10 width=64) -> Index Scan using {table}_pkey on {table}",
    "What is the safest way to add a NOT NULL column to {table} without locking it?",
    "复制延迟突然涨到 30s 了，replica lag 怎么排查？",
    "Here is the log: 2026-05-01 03:12:44 UTC [8812] LOG: checkpoints are occurring too frequently (12 seconds apart)",
    "{\"table\": \"{table}\", \"dead_tuples\": 1840221, \"last_autovacuum\": null, \"n_live_tup\": 90211833}",
    "autovacuum 一直跑不完 {table}，要不要调 autovacuum_vacuum_cost_limit？",
];
const ACKS: &[&str] = &["ok", "好的", "收到", "thanks!", "👍", "嗯嗯", "got it"];
const ANSWERS: &[&str] = &[
    "可以先在 {table}.created_at 上建一个索引：\n```sql\nCREATE INDEX CONCURRENTLY idx_{table}_created_at ON {table} (created_at);\n```\n然后用 EXPLAIN (ANALYZE, BUFFERS) 再看一次，确认走了 Index Scan。",
    "The planner picks a Seq Scan when it estimates that most rows match. Run `ANALYZE {table};` first; if the estimate is still off, raise the statistics target on that column.",
    "死锁一般是两个事务以相反的顺序更新同一批行。建议统一按主键顺序更新，或者把批量更新拆小。",
    "On 80M rows expect roughly 10-20 minutes, depending on I/O. It does not block writes, but it waits for every open transaction at the start, so check pg_stat_activity first.",
    "Add the column as NULL with a default, backfill in batches of 10k rows, then add a CHECK constraint NOT VALID, validate it, and only then SET NOT NULL.",
    "先看 pg_stat_replication 的 write_lag / flush_lag / replay_lag，如果是 replay_lag 高，多半是备库上有长查询或者 I/O 跟不上。",
    "Checkpoints every 12 seconds mean max_wal_size is too small for this write rate. Raise it (e.g. to 16GB) and watch checkpoint_timeout.",
    "1.8M dead tuples with no autovacuum run: lower autovacuum_vacuum_scale_factor for {table} to 0.01 and raise the cost limit.",
];

/// One session's turns, and the worth-keeping statements among them (text → statement).
fn session(user: usize, index: usize) -> (Vec<Value>, Vec<Statement>) {
    let mut rng = Rng::new((((user * 31 + index) as u64) << 8) | 0x5eed);
    let table = rng.pick(TABLES);
    let mine = statements(user, index);
    let mut said = Vec::new();
    let mut next_statement = 0;
    let mut turns = Vec::with_capacity(TURNS);
    while turns.len() < TURNS {
        let roll = rng.below(100);
        let user_text = if roll < 35 && next_statement < mine.len() {
            let statement = mine[next_statement].clone();
            next_statement += 1;
            let text = statement.text.clone();
            said.push(statement);
            text
        } else if roll < 80 {
            rng.pick(QUESTIONS).replace("{table}", table)
        } else {
            rng.pick(ACKS).to_string()
        };
        turns.push(json!({"role": "user", "content": user_text}));
        if turns.len() < TURNS {
            turns.push(json!({"role": "assistant", "content": rng.pick(ANSWERS).replace("{table}", table)}));
        }
    }
    (turns, said)
}

// ---------------------------------------------------------------------------------------------
// The fake model.

/// What the fake model knows: every worth-keeping text, and every completion it sent.
struct Model {
    statements: HashMap<String, Statement>,
    completions: Mutex<Vec<String>>,
}

impl Model {
    fn answer(&self, body: &Value) -> Option<String> {
        let payload: Value = serde_json::from_str(&chat_message(body, "user")?).ok()?;
        let answer = if let Some(turns) = payload["turns"].as_array() {
            let cards: Vec<Value> = turns
                .iter()
                .filter(|t| t["role"] == "user")
                .filter_map(|t| {
                    let statement = self.statements.get(t["content"].as_str()?)?;
                    Some(json!({
                        "content": statement.text,
                        "category": statement.category,
                        "priority": statement.priority,
                        "occurred_at": null,
                        "source_message_ids": [t["ref"]],
                    }))
                })
                .collect();
            json!({"scenes": [{"scene": "DBA 日常", "cards": cards}]})
        } else {
            let decisions: Vec<Value> = payload["cards"]
                .as_array()?
                .iter()
                .map(|card| self.decide(card))
                .collect();
            json!({"decisions": decisions})
        };
        let answer = answer.to_string();
        self.completions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(answer.clone());
        Some(answer)
    }

    fn decide(&self, card: &Value) -> Value {
        let topic = |content: &Value| content.as_str().and_then(|c| self.statements.get(c)).map(|s| s.topic);
        let candidates = card["candidates"].as_array().cloned().unwrap_or_default();
        let same = candidates.iter().find(|c| c["content"] == card["content"]);
        let related = candidates
            .iter()
            .find(|c| topic(&c["content"]).is_some() && topic(&c["content"]) == topic(&card["content"]));
        let (action, target) = match (same, related) {
            (Some(c), _) => ("discard", Some(c)),
            (None, Some(c)) => ("update", Some(c)),
            (None, None) => ("add", None),
        };
        json!({
            "card": card["ref"],
            "action": action,
            "targets": target.map(|c| vec![c["ref"].clone()]).unwrap_or_default(),
            "content": null,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

#[derive(Debug, Clone, Copy)]
enum Engine {
    Rules,
    Llm(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Arrival {
    Burst,
    Paced,
}

/// A counter's value in a Prometheus text page, summed over the series whose labels include
/// every `label="value"` of `labels`.
fn counter(page: &str, name: &str, labels: &[&str]) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn metrics(app: &TestApp) -> String {
    reqwest::get(app.url("/metrics"))
        .await
        .expect("scrape metrics")
        .text()
        .await
        .expect("metrics page")
}

async fn run(engine: Engine, arrival: Arrival, idle_flush: Duration, cl100k: &tiktoken_rs::CoreBPE) -> String {
    let mut all = HashMap::new();
    let mut sessions = Vec::new();
    for user in 0..USERS {
        for index in 0..SESSIONS_PER_USER {
            let (turns, said) = session(user, index);
            all.extend(said.into_iter().map(|s| (s.text.clone(), s)));
            sessions.push((user, index, turns));
        }
    }
    let model = Arc::new(Model {
        statements: all,
        completions: Mutex::default(),
    });
    let fake = FakeOpenAi::start(8).await;
    let mut env = vec![("EXTRACT_IDLE_FLUSH_MS", idle_flush.as_millis().to_string())];
    if let Engine::Llm(latency) = engine {
        fake.set_latency(latency);
        let answering = model.clone();
        fake.set_chat_responder(move |body| answering.answer(body));
        env.extend([
            ("LLM_URL", fake.base_url()),
            ("LLM_MODEL", "fake-model".to_owned()),
            ("LLM_TIMEOUT_MS", "30000".to_owned()),
        ]);
    }
    let app = Arc::new(
        TestApp::with(
            Mode::Embedded,
            Options {
                env,
                ..Options::default()
            },
        )
        .await,
    );
    let team = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let before = metrics(&app).await;
    let total_turns: usize = sessions.iter().map(|(_, _, t)| t.len()).sum();

    let start = Instant::now();
    let clients = sessions.into_iter().map(|(user, index, turns)| {
        let app = app.clone();
        let tenant = Tenant {
            team: team.clone(),
            agent: "dba-assistant".to_owned(),
            user: format!("user-{user}"),
        };
        tokio::spawn(async move {
            let session = format!("s-{user}-{index}");
            for turn in turns {
                let pace = tokio::time::sleep(PACE);
                app.append_ok(&tenant, &session, json!([turn])).await;
                if arrival == Arrival::Paced {
                    pace.await;
                }
            }
        })
    });
    for client in futures::future::join_all(clients).await {
        client.expect("client task");
    }
    let ingested = start.elapsed();
    app.wait_extracted(WAIT).await;
    let elapsed = start.elapsed();
    let after = metrics(&app).await;
    // What is kept: the active memories of every user at the end.
    let mut active = 0;
    for user in 0..USERS {
        let tenant = Tenant {
            team: team.clone(),
            agent: "dba-assistant".to_owned(),
            user: format!("user-{user}"),
        };
        active += app
            .backends
            .memories
            .count_memories(&tenant, shared::memory::MemoryStatus::Active)
            .await
            .expect("count memories");
    }
    if let Ok(mut app) = Arc::try_unwrap(app) {
        app.stop().await;
    }

    let delta = |name: &str, labels: &[&str]| counter(&after, name, labels) - counter(&before, name, labels);
    let per_100 = |n: f64| n * 100.0 / total_turns as f64;
    let batches = delta("sediment_extract_batches_total", &["result=\"ok\""])
        + delta("sediment_extract_batches_total", &["result=\"empty\""]);
    let raced = delta("sediment_extract_batches_total", &["result=\"raced\""]);
    let reason = |r: &str| delta("sediment_extract_batch_reasons_total", &[&format!("reason=\"{r}\"")]);
    let failed = delta("sediment_extract_batches_total", &["result=\"failed\""]);
    let input_turns = delta("sediment_extract_input_turns_total", &[]);
    let junk = delta("sediment_extract_junk_turns_total", &[]);
    let cards = delta("sediment_extract_cards_total", &[]);
    let decision = |d: &str| delta("sediment_extract_decisions_total", &[&format!("decision=\"{d}\"")]);

    let recorded = fake.chat().recorded();
    let calls = |trace: &str| {
        recorded
            .iter()
            .filter(|r| r.header("x-sediment-trace") == Some(trace))
            .count() as f64
    };
    let usage = fake.chat_usage();
    let prompt_cl100k: usize = recorded
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["content"].as_str().map(|c| cl100k.encode_ordinary(c).len()))
        .sum();
    let completion_cl100k: usize = model
        .completions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|c| cl100k.encode_ordinary(c).len())
        .sum();

    let label = match engine {
        Engine::Rules => "rules".to_owned(),
        Engine::Llm(latency) => format!("llm {} ms", latency.as_millis()),
    };
    let arrival_label = match arrival {
        Arrival::Burst => "burst",
        Arrival::Paced => "paced",
    };
    eprintln!(
        "{label} {arrival_label}: {total_turns} turns ingested in {:.2} s, extracted in {:.2} s; \
         {input_turns} turns read by batches ({junk} junk); decisions add {} update {} discard {}; \
         raced {raced}, failed {failed}; {active} active memories at the end",
        ingested.as_secs_f64(),
        elapsed.as_secs_f64(),
        decision("add"),
        decision("update"),
        decision("discard"),
    );
    format!(
        "| {label} | {arrival_label} | {} | {total_turns} | {:.1} | {:.0} | {batches:.0} | {:.0} / {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} / {:.0} | {:.0} / {:.0} | {cards:.0} | {active} |",
        flush_label(idle_flush),
        elapsed.as_secs_f64(),
        total_turns as f64 / elapsed.as_secs_f64(),
        reason("threshold"),
        reason("idle"),
        per_100(batches),
        per_100(calls("memory.l1-extract")),
        per_100(calls("memory.l1-dedup")),
        per_100(usage.completions as f64),
        per_100(usage.prompt_tokens as f64),
        per_100(usage.completion_tokens as f64),
        per_100(prompt_cl100k as f64),
        per_100(completion_cl100k as f64),
    )
}

#[global_allocator]
static ALLOCATOR: shared::Allocator = shared::Allocator;

fn flush_label(idle_flush: Duration) -> String {
    if idle_flush.as_millis().is_multiple_of(1000) {
        format!("{} s", idle_flush.as_secs())
    } else {
        format!("{} ms", idle_flush.as_millis())
    }
}

#[tokio::main]
async fn main() {
    let cl100k = tiktoken_rs::cl100k_base().expect("load cl100k_base");
    let short = Duration::from_millis(200);
    let scenarios = [
        (Engine::Rules, Arrival::Burst, short),
        (Engine::Llm(Duration::ZERO), Arrival::Burst, short),
        (Engine::Llm(Duration::from_millis(200)), Arrival::Burst, short),
        (Engine::Llm(Duration::from_millis(1000)), Arrival::Burst, short),
        (Engine::Llm(Duration::from_millis(200)), Arrival::Paced, short),
        // The service's default (`SEDIMENT_EXTRACT_IDLE_FLUSH_MS`).
        (
            Engine::Llm(Duration::from_millis(200)),
            Arrival::Paced,
            Duration::from_secs(60),
        ),
    ];
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let mut rows = Vec::new();
    for (engine, arrival, idle_flush) in scenarios {
        let label = format!("{engine:?} {arrival:?} {}", flush_label(idle_flush)).to_lowercase();
        if !wanted.is_empty() && !wanted.iter().any(|w| label.contains(&w.to_lowercase())) {
            continue;
        }
        rows.push(run(engine, arrival, idle_flush, &cl100k).await);
    }
    println!(
        "| engine | arrival | idle flush | turns | wall s | turns/s | batches | by threshold / idle | batches /100 turns | extract calls /100 | dedup calls /100 | LLM calls /100 | fake tokens /100 (prompt / completion) | cl100k tokens /100 (prompt / completion) | cards | active memories |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
