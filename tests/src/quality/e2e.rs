//! The end-to-end quality harness behind the `recall_e2e` binary: it starts the real API in
//! the embedded deployment (SQLite, in-process queue and workers, Qdrant Edge, the local
//! embedder, the rules extractor), ingests a dev set through `POST /v1/sessions/{id}/messages`,
//! waits for indexing and L1 extraction, then asks every question through
//! `/v1/conversations/search` (hybrid, keyword, semantic) and `/v1/recall`, and scores R@5,
//! R@10, R@20 and MRR@20 overall and per question kind.
//!
//! A retrieved turn is a hit when it is one of the question's evidence turns; a recalled
//! memory is a hit when its `source_message_ids` cite one.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::{DateTime, Utc};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shared::domain::Tenant;
use uuid::Uuid;

use super::chitchat::ChatDataset;
use super::{Dataset, Role};
use crate::app::{Mode, Options, TestApp};

/// The cut-offs reported.
pub const KS: [usize; 3] = [5, 10, 20];
/// Items asked of every search and recall: the largest cut-off.
const LIMIT: usize = 20;
/// Requests in flight while asking the questions.
const CONCURRENCY: usize = 4;
/// How long ingested turns may take to be indexed and extracted.
const CATCH_UP: Duration = Duration::from_secs(3 * 3600);

/// A turn as it is sent to the API.
#[derive(Debug, Clone)]
pub struct E2eTurn {
    /// The dataset's id (the API assigns its own).
    pub id: Uuid,
    pub role: &'static str,
    pub content: String,
    pub metadata: Value,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct E2eSession {
    pub id: String,
    pub turns: Vec<E2eTurn>,
}

#[derive(Debug, Clone)]
pub struct E2eConversation {
    pub tenant: Tenant,
    pub sessions: Vec<E2eSession>,
}

#[derive(Debug, Clone)]
pub struct E2eQuestion {
    pub conversation: usize,
    pub text: String,
    pub kind: &'static str,
    pub evidence: Vec<Uuid>,
}

/// A dev set in the shape the harness sends: the chitchat set or the synthetic one.
#[derive(Debug, Clone)]
pub struct E2eSet {
    pub name: String,
    pub conversations: Vec<E2eConversation>,
    pub questions: Vec<E2eQuestion>,
    /// Median share of question content words found in the evidence, when measured.
    pub median_overlap: Option<f64>,
}

fn role_str(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

impl E2eSet {
    pub fn from_chitchat(d: &ChatDataset) -> Self {
        let conversations = d
            .conversations
            .iter()
            .map(|c| E2eConversation {
                tenant: c.tenant.clone(),
                sessions: c
                    .sessions
                    .iter()
                    .map(|s| E2eSession {
                        id: s.id.clone(),
                        turns: s
                            .turns
                            .iter()
                            .map(|t| E2eTurn {
                                id: t.id,
                                role: role_str(t.role),
                                content: t.content.clone(),
                                metadata: c.metadata(t),
                                created_at: t.created_at,
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        let questions = d
            .questions
            .iter()
            .map(|q| E2eQuestion {
                conversation: q.conversation,
                text: q.text.clone(),
                kind: q.kind.as_str(),
                evidence: q.evidence.clone(),
            })
            .collect();
        Self {
            name: "chitchat".into(),
            conversations,
            questions,
            median_overlap: Some(d.median_overlap()),
        }
    }

    /// The synthetic set (`Dataset`): one conversation per owner, its turns a minute apart
    /// from 09:00 on the session's date, the speaker in the metadata.
    pub fn from_synthetic(d: &Dataset) -> Self {
        let conversations = d
            .owners
            .iter()
            .map(|o| E2eConversation {
                tenant: o.tenant.clone(),
                sessions: o
                    .sessions
                    .iter()
                    .map(|s| {
                        let opening = s.date.and_hms_opt(9, 0, 0).expect("a valid time").and_utc();
                        E2eSession {
                            id: s.id.clone(),
                            turns: s
                                .turns
                                .iter()
                                .enumerate()
                                .map(|(i, t)| E2eTurn {
                                    id: t.id,
                                    role: role_str(t.role),
                                    content: t.content.clone(),
                                    metadata: json!({ "speaker": t.speaker }),
                                    created_at: opening + chrono::Duration::minutes(i as i64),
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            })
            .collect();
        let questions = d
            .questions
            .iter()
            .map(|q| E2eQuestion {
                conversation: q.owner,
                text: q.text.clone(),
                kind: q.kind.as_str(),
                evidence: q.evidence.clone(),
            })
            .collect();
        Self {
            name: "synthetic".into(),
            conversations,
            questions,
            median_overlap: None,
        }
    }

    pub fn turn_count(&self) -> usize {
        self.conversations
            .iter()
            .flat_map(|c| &c.sessions)
            .map(|s| s.turns.len())
            .sum()
    }

    pub fn session_count(&self) -> usize {
        self.conversations.iter().map(|c| c.sessions.len()).sum()
    }

    /// One line of sizes, then the questions per kind.
    pub fn describe(&self) -> String {
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for q in &self.questions {
            *kinds.entry(q.kind).or_default() += 1;
        }
        format!(
            "dataset {}: {} conversations, {} sessions, {} turns, {} questions {:?}{}",
            self.name,
            self.conversations.len(),
            self.session_count(),
            self.turn_count(),
            self.questions.len(),
            kinds,
            self.median_overlap
                .map(|o| format!(", median question/evidence word overlap {o:.2}"))
                .unwrap_or_default()
        )
    }

    /// Everything the harness sends and asks, for reading the set.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "conversations": self.conversations.iter().map(|c| json!({
                "tenant": c.tenant.user,
                "sessions": c.sessions.iter().map(|s| json!({
                    "id": s.id,
                    "turns": s.turns.iter().map(|t| json!({
                        "id": t.id, "role": t.role, "content": t.content,
                        "metadata": t.metadata, "created_at": t.created_at.to_rfc3339(),
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "questions": self.questions.iter().map(|q| json!({
                "conversation": q.conversation, "text": q.text, "kind": q.kind, "evidence": q.evidence,
            })).collect::<Vec<_>>(),
        })
    }
}

/// How the questions are asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Channel {
    Hybrid,
    Keyword,
    Semantic,
    Recall,
}

impl Channel {
    pub const ALL: [Self; 4] = [Self::Hybrid, Self::Keyword, Self::Semantic, Self::Recall];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hybrid => "search-hybrid",
            Self::Keyword => "search-keyword",
            Self::Semantic => "search-semantic",
            Self::Recall => "recall",
        }
    }
}

/// The 1-based rank of the first item that stands for an evidence turn.
fn first_hit(ranked: &[Vec<Uuid>], evidence: &[Uuid]) -> Option<usize> {
    ranked
        .iter()
        .position(|ids| ids.iter().any(|id| evidence.contains(id)))
        .map(|p| p + 1)
}

/// Hits of a set of questions at each cut-off of `KS`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub questions: usize,
    pub hits: [usize; 3],
    /// Sum of 1 / rank of the first hit (0 without one): MRR@20 once divided.
    pub reciprocal_ranks: f64,
}

impl Tally {
    /// Scores one question: `ranked[i]` is the set of dataset turn ids item `i` stands for.
    pub fn add(&mut self, ranked: &[Vec<Uuid>], evidence: &[Uuid]) {
        self.questions += 1;
        let first = first_hit(ranked, evidence);
        for (i, k) in KS.into_iter().enumerate() {
            if first.is_some_and(|r| r <= k) {
                self.hits[i] += 1;
            }
        }
        self.reciprocal_ranks += first.map_or(0.0, |r| 1.0 / r as f64);
    }

    pub fn recall(&self, i: usize) -> f64 {
        if self.questions == 0 {
            0.0
        } else {
            self.hits[i] as f64 / self.questions as f64
        }
    }

    pub fn mrr(&self) -> f64 {
        if self.questions == 0 {
            0.0
        } else {
            self.reciprocal_ranks / self.questions as f64
        }
    }
}

/// What one channel returned over all questions, besides the ranks.
#[derive(Debug, Clone, Default)]
pub struct ChannelStats {
    /// Error codes in the responses, with counts.
    pub errors: BTreeMap<String, usize>,
    /// Items returned (summed over questions), and how many of them were memories.
    pub items: usize,
    pub memories: usize,
    /// Responses that returned fewer items than asked.
    pub short: usize,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub dataset: String,
    pub conversations: usize,
    pub sessions: usize,
    pub turns: usize,
    pub questions: usize,
    pub median_overlap: Option<f64>,
    /// Active L1 memories after extraction, over all conversations.
    pub memories: usize,
    pub ingest_seconds: f64,
    pub index_seconds: f64,
    pub extract_seconds: f64,
    pub query_seconds: f64,
    /// (channel, kind or "all") -> tally.
    pub tallies: BTreeMap<(Channel, String), Tally>,
    pub stats: BTreeMap<Channel, ChannelStats>,
    /// (question index, channel) -> rank of the first hit (1-based), for paired comparisons
    /// of two runs question by question.
    pub first_hits: BTreeMap<(usize, Channel), Option<usize>>,
}

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The local model's directory (else the app's default: `SEDIMENT_MODEL_DIR`, then
    /// `~/.cache/sediment/models/all-MiniLM-L6-v2`).
    pub model_dir: Option<PathBuf>,
    /// Extra `SEDIMENT_*` settings (without the prefix), e.g. to try a lever.
    pub env: Vec<(&'static str, String)>,
}

/// Runs the whole measurement of `set` on a fresh embedded app.
pub async fn run(set: &E2eSet, options: &RunOptions) -> anyhow::Result<Report> {
    let mut env: Vec<(&'static str, String)> = vec![
        ("EMBEDDING", "local".into()),
        // The last turns of a session are extracted once it has been idle this long: the
        // default minute would only make the run wait.
        ("EXTRACT_IDLE_FLUSH_MS", "1000".into()),
    ];
    if let Some(dir) = &options.model_dir {
        env.push(("MODEL_DIR", dir.display().to_string()));
    }
    env.extend(options.env.iter().cloned());
    let app = TestApp::with(
        Mode::Embedded,
        Options {
            env,
            ..Options::default()
        },
    )
    .await;

    let start = Instant::now();
    let ids = ingest(&app, set).await?;
    let ingest_seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "ingested {} turns in {} sessions in {ingest_seconds:.0} s",
        set.turn_count(),
        set.session_count()
    );

    let start = Instant::now();
    let backends = &app.backends;
    wait_for("indexing", move || async move {
        let lag = backends.store.lag(shared::store::INDEX_CONSUMER).await?;
        Ok(lag.turns as u64)
    })
    .await?;
    app.wait_indexed(CATCH_UP).await;
    let index_seconds = start.elapsed().as_secs_f64();

    let start = Instant::now();
    wait_for("extraction", move || async move {
        let lag = backends.store.lag(shared::store::memory::EXTRACT_CONSUMER).await?;
        let outbox = backends.memories.outbox(1000).await?;
        Ok(lag.turns as u64 + outbox.len() as u64)
    })
    .await?;
    app.wait_extracted(CATCH_UP).await;
    let extract_seconds = start.elapsed().as_secs_f64();

    let mut memories = 0;
    for c in &set.conversations {
        memories += count_memories(&app, &c.tenant).await?;
    }
    eprintln!("indexed in {index_seconds:.0} s, extracted {memories} memories in {extract_seconds:.0} s more");

    let start = Instant::now();
    let (tallies, stats, first_hits) = ask(&app, set, &ids).await?;
    let query_seconds = start.elapsed().as_secs_f64();
    Ok(Report {
        dataset: set.name.clone(),
        conversations: set.conversations.len(),
        sessions: set.session_count(),
        turns: set.turn_count(),
        questions: set.questions.len(),
        median_overlap: set.median_overlap,
        memories,
        ingest_seconds,
        index_seconds,
        extract_seconds,
        query_seconds,
        tallies,
        stats,
        first_hits,
    })
}

/// Appends every session in one request; returns the API's turn id -> the dataset's.
async fn ingest(app: &TestApp, set: &E2eSet) -> anyhow::Result<HashMap<Uuid, Uuid>> {
    let mut ids = HashMap::new();
    for c in &set.conversations {
        for s in &c.sessions {
            let messages: Vec<Value> = s
                .turns
                .iter()
                .map(|t| {
                    json!({
                        "role": t.role,
                        "content": t.content,
                        "metadata": t.metadata,
                        "created_at": t.created_at.to_rfc3339(),
                    })
                })
                .collect();
            let response = app.append(&c.tenant, &s.id, Value::Array(messages)).await;
            let status = response.status();
            let body: Value = response.json().await.context("append response")?;
            if status != 201 {
                bail!("append to {} failed with {status}: {body}", s.id);
            }
            let appended = body["messages"].as_array().context("append returns messages")?;
            anyhow::ensure!(
                appended.len() == s.turns.len(),
                "append returned {} ids",
                appended.len()
            );
            for (turn, stored) in s.turns.iter().zip(appended) {
                let id: Uuid = stored["id"].as_str().context("an id")?.parse()?;
                ids.insert(id, turn.id);
            }
        }
    }
    Ok(ids)
}

/// Polls `pending` until it is 0, printing it every 15 s.
async fn wait_for<F, Fut>(what: &str, pending: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u64>>,
{
    let start = Instant::now();
    let mut reported = Instant::now();
    loop {
        let left = pending().await?;
        if left == 0 {
            return Ok(());
        }
        if reported.elapsed() >= Duration::from_secs(15) {
            eprintln!("  {what}: {left} left after {:.0} s", start.elapsed().as_secs_f64());
            reported = Instant::now();
        }
        if start.elapsed() > CATCH_UP {
            bail!("{what} still has {left} left after {CATCH_UP:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn count_memories(app: &TestApp, tenant: &Tenant) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("?status=active&limit=500&cursor={c}"),
            None => "?status=active&limit=500".to_owned(),
        };
        let page = app.memories(tenant, &query).await;
        count += page["items"].as_array().map_or(0, Vec::len);
        match page["next"].as_str() {
            Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
            _ => return Ok(count),
        }
    }
}

/// One channel's answer to one question.
struct Answer {
    ranked: Vec<Vec<Uuid>>,
    errors: Vec<String>,
    memories: usize,
}

async fn query(
    app: &TestApp,
    tenant: &Tenant,
    channel: Channel,
    text: &str,
    ids: &HashMap<Uuid, Uuid>,
) -> anyhow::Result<Answer> {
    let map = |id: &Value| -> Uuid {
        id.as_str()
            .and_then(|s| s.parse::<Uuid>().ok())
            .and_then(|id| ids.get(&id).copied())
            .unwrap_or_default()
    };
    let errors = |body: &Value| -> Vec<String> {
        body["errors"]
            .as_array()
            .map(|e| e.iter().filter_map(|e| e["code"].as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let search = |strategy: &str| {
        (
            "/v1/conversations/search",
            json!({ "query": text, "limit": LIMIT, "strategy": strategy }),
        )
    };
    let (path, body) = match channel {
        Channel::Hybrid => search("hybrid"),
        Channel::Keyword => search("keyword"),
        Channel::Semantic => search("semantic"),
        Channel::Recall => (
            "/v1/recall",
            // A budget and deadline that cut nothing: this measures the ranking, not the fit.
            json!({
                "query": text,
                "limit": LIMIT,
                "budget": {"total_chars": 1_000_000},
                "timeout_ms": 60_000,
            }),
        ),
    };
    let response = app
        .req(reqwest::Method::POST, path, tenant)
        .json(&body)
        .send()
        .await
        .with_context(|| format!("send {path}"))?;
    let status = response.status();
    let body: Value = response.json().await.with_context(|| format!("{path} response"))?;
    if status != 200 {
        bail!("{path} failed with {status}: {body}");
    }
    let answer = match channel {
        Channel::Recall => {
            let items = body["dynamic"].as_array().context("recall returns dynamic")?;
            let ranked: Vec<Vec<Uuid>> = items
                .iter()
                .map(|item| match item["kind"].as_str() {
                    Some("memory") => item["source"]["source_message_ids"]
                        .as_array()
                        .map(|sources| sources.iter().map(map).collect())
                        .unwrap_or_default(),
                    _ => vec![map(&item["id"])],
                })
                .collect();
            Answer {
                memories: items.iter().filter(|i| i["kind"] == "memory").count(),
                ranked,
                errors: errors(&body),
            }
        }
        Channel::Hybrid | Channel::Keyword | Channel::Semantic => Answer {
            ranked: body["items"]
                .as_array()
                .context("search returns items")?
                .iter()
                .map(|item| vec![map(&item["id"])])
                .collect(),
            errors: errors(&body),
            memories: 0,
        },
    };
    Ok(answer)
}

type Tallies = BTreeMap<(Channel, String), Tally>;
type FirstHits = BTreeMap<(usize, Channel), Option<usize>>;

async fn ask(
    app: &TestApp,
    set: &E2eSet,
    ids: &HashMap<Uuid, Uuid>,
) -> anyhow::Result<(Tallies, BTreeMap<Channel, ChannelStats>, FirstHits)> {
    let jobs: Vec<(usize, Channel)> = (0..set.questions.len())
        .flat_map(|q| Channel::ALL.into_iter().map(move |c| (q, c)))
        .collect();
    let total = jobs.len();
    let mut answers = stream::iter(jobs)
        .map(|(q, channel)| async move {
            let question = &set.questions[q];
            let tenant = &set.conversations[question.conversation].tenant;
            query(app, tenant, channel, &question.text, ids)
                .await
                .map(|answer| (q, channel, answer))
        })
        .buffer_unordered(CONCURRENCY);
    let mut tallies = Tallies::new();
    let mut first_hits = FirstHits::new();
    let mut stats: BTreeMap<Channel, ChannelStats> = BTreeMap::new();
    let mut done = 0;
    let start = Instant::now();
    while let Some(answer) = answers.next().await {
        let (q, channel, answer) = answer?;
        let question = &set.questions[q];
        first_hits.insert((q, channel), first_hit(&answer.ranked, &question.evidence));
        for kind in ["all", question.kind] {
            tallies
                .entry((channel, kind.to_owned()))
                .or_default()
                .add(&answer.ranked, &question.evidence);
        }
        let s = stats.entry(channel).or_default();
        for code in answer.errors {
            *s.errors.entry(code).or_default() += 1;
        }
        s.items += answer.ranked.len();
        s.memories += answer.memories;
        if answer.ranked.len() < LIMIT {
            s.short += 1;
        }
        done += 1;
        if done % 200 == 0 {
            eprintln!("  asked {done}/{total} in {:.0} s", start.elapsed().as_secs_f64());
        }
    }
    Ok((tallies, stats, first_hits))
}

fn pct(x: f64) -> String {
    format!("{:5.1}", 100.0 * x)
}

impl Report {
    /// The result table: one line per channel, then per channel and question kind.
    pub fn print(&self) {
        println!(
            "dataset {}: {} conversations, {} sessions, {} turns, {} questions, {} memories after extraction",
            self.dataset, self.conversations, self.sessions, self.turns, self.questions, self.memories,
        );
        println!(
            "time: ingest {:.0} s, index {:.0} s, extract {:.0} s, questions {:.0} s",
            self.ingest_seconds, self.index_seconds, self.extract_seconds, self.query_seconds
        );
        println!();
        let kinds: Vec<&String> = {
            let mut k: Vec<&String> = self.tallies.keys().map(|(_, k)| k).filter(|k| *k != "all").collect();
            k.sort();
            k.dedup();
            k
        };
        for kind in std::iter::once(&"all".to_owned()).chain(kinds.iter().copied()) {
            for channel in Channel::ALL {
                let Some(t) = self.tallies.get(&(channel, kind.clone())) else {
                    continue;
                };
                println!(
                    "{:<9} {:<16} {:<18} n={:<4} R@5 {}  R@10 {}  R@20 {}  MRR {:.3}",
                    self.dataset,
                    channel.as_str(),
                    kind,
                    t.questions,
                    pct(t.recall(0)),
                    pct(t.recall(1)),
                    pct(t.recall(2)),
                    t.mrr()
                );
            }
            println!();
        }
        for (channel, s) in &self.stats {
            let asked = self
                .tallies
                .get(&(*channel, "all".to_owned()))
                .map_or(0, |t| t.questions);
            println!(
                "{}: {:.1} items per answer ({:.1} memories), {} short answers, errors {:?}",
                channel.as_str(),
                s.items as f64 / asked.max(1) as f64,
                s.memories as f64 / asked.max(1) as f64,
                s.short,
                s.errors
            );
        }
    }

    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .tallies
            .iter()
            .map(|((channel, kind), t)| {
                json!({
                    "channel": channel.as_str(), "kind": kind, "questions": t.questions,
                    "r5": t.recall(0), "r10": t.recall(1), "r20": t.recall(2), "mrr20": t.mrr(),
                })
            })
            .collect();
        let stats: serde_json::Map<String, Value> = self
            .stats
            .iter()
            .map(|(channel, s)| {
                (
                    channel.as_str().to_owned(),
                    json!({"items": s.items, "memories": s.memories, "short": s.short, "errors": s.errors}),
                )
            })
            .collect();
        json!({
            "dataset": self.dataset,
            "conversations": self.conversations,
            "sessions": self.sessions,
            "turns": self.turns,
            "questions": self.questions,
            "median_overlap": self.median_overlap,
            "memories": self.memories,
            "seconds": {
                "ingest": self.ingest_seconds, "index": self.index_seconds,
                "extract": self.extract_seconds, "questions": self.query_seconds,
            },
            "rows": rows,
            "stats": stats,
            "first_hits": self
                .first_hits
                .iter()
                .map(|((q, channel), rank)| json!({"question": q, "channel": channel.as_str(), "rank": rank}))
                .collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::chitchat::{ChatConfig, Corpus};
    use std::collections::HashSet;

    use super::super::GenConfig;
    use super::*;

    #[test]
    fn tally_counts_memories_by_their_sources() {
        let u = Uuid::from_u128;
        let mut t = Tally::default();
        // A memory citing turns 7 and 8 at rank 1.
        t.add(&[vec![u(7), u(8)], vec![u(1)]], &[u(8)]);
        // The evidence at rank 6: a hit at 10 and 20, not at 5.
        let ranked: Vec<Vec<Uuid>> = (1..=6).map(|i| vec![u(100 + i)]).collect();
        t.add(&ranked, &[u(106)]);
        t.add(&[], &[u(1)]);
        assert_eq!(t.questions, 3);
        assert_eq!(t.hits, [1, 2, 2]);
        assert!((t.mrr() - (1.0 + 1.0 / 6.0) / 3.0).abs() < 1e-12);
    }

    #[test]
    fn both_sets_map_to_the_harness_shape() {
        let chat = ChatDataset::generate_with(
            1,
            &Corpus::sample(),
            &ChatConfig {
                conversations: 2,
                sessions: (8, 9),
                turns: (14, 18),
                span_days: (40, 60),
                ..Default::default()
            },
        );
        let set = E2eSet::from_chitchat(&chat);
        assert_eq!(set.turn_count(), chat.turn_count());
        let ids: HashSet<Uuid> = set
            .conversations
            .iter()
            .flat_map(|c| &c.sessions)
            .flat_map(|s| &s.turns)
            .map(|t| t.id)
            .collect();
        assert!(set.questions.iter().all(|q| q.evidence.iter().all(|e| ids.contains(e))));
        assert!(set
            .conversations
            .iter()
            .flat_map(|c| &c.sessions)
            .flat_map(|s| &s.turns)
            .all(|t| t.metadata["speaker"].is_string()));

        let synthetic = Dataset::generate_with(
            3,
            &GenConfig {
                owners: 2,
                ..Default::default()
            },
        );
        let set = E2eSet::from_synthetic(&synthetic);
        assert_eq!(set.turn_count(), synthetic.turn_count());
        assert_eq!(set.questions.len(), synthetic.questions.len());
        for s in set.conversations.iter().flat_map(|c| &c.sessions) {
            assert!(s.turns.windows(2).all(|w| w[0].created_at < w[1].created_at));
        }
    }
}
