//! The invariants every fault must leave intact, read back through the API (and the Edge
//! index directory once the server has stopped) and compared with what the load was told.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{json, Value};
use shared::domain::Tenant;
use shared::index::{EdgeIndex, PointKind, SearchIndex as _};
use shared::store::memory::EXTRACT_CONSUMER;
use shared::store::INDEX_CONSUMER;

use super::load::{word_in, Outcome, Sent};
use crate::app::TenantHeaders as _;
use crate::process::ApiProcess;

/// Searches in flight at once while checking that every accepted turn is found.
const SEARCHES_AT_ONCE: usize = 8;
/// Most items of an example list in a failed check's detail.
const EXAMPLES: usize = 5;

/// One invariant's verdict.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    /// A known defect that makes this check fail at times, not yet fixed: a failure is shown
    /// as `KNOWN` with it, and does not fail the scenario.
    pub known: Option<&'static str>,
}

impl Check {
    /// Whether the scenario may pass with this verdict.
    pub fn passes(&self) -> bool {
        self.ok || self.known.is_some()
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.ok, self.known) {
            (true, _) => write!(f, "ok   {}: {}", self.name, self.detail),
            (false, None) => write!(f, "FAIL {}: {}", self.name, self.detail),
            (false, Some(known)) => write!(f, "KNOWN {}: {} (known defect: {known})", self.name, self.detail),
        }
    }
}

/// The verdicts of one scenario, in the order they were checked.
#[derive(Debug, Clone, Default)]
pub struct Checks(pub Vec<Check>);

impl Checks {
    pub fn push(&mut self, name: &'static str, ok: bool, detail: impl Into<String>) {
        self.0.push(Check {
            name,
            ok,
            detail: detail.into(),
            known: None,
        });
    }

    /// A check that `known`, a defect not fixed yet, makes fail at times.
    pub fn push_known(&mut self, name: &'static str, ok: bool, known: &'static str, detail: impl Into<String>) {
        self.0.push(Check {
            name,
            ok,
            detail: detail.into(),
            known: Some(known),
        });
    }
}

/// How long after `since` the lag of `consumer` (`index`, `extract`) was first seen at zero,
/// polling every 50 ms for at most `bound`; `None` if it never was. A server or store that
/// does not answer counts as not caught up.
pub async fn lag_zero(server: &ApiProcess, consumer: &str, since: Instant, bound: Duration) -> Option<Duration> {
    loop {
        if server.try_lag(consumer).await == Some(0) {
            return Some(since.elapsed());
        }
        if since.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the lag of `consumer` for `span` (a fault's length) and returns the highest seen, or
/// `None` if it could not be read at all; it returns after `span` whatever the server does.
pub async fn peak_lag(server: &ApiProcess, consumer: &str, span: Duration) -> Option<i64> {
    let end = tokio::time::Instant::now() + span;
    let mut peak = None;
    while tokio::time::Instant::now() < end {
        if let Ok(lag) = tokio::time::timeout_at(end, server.try_lag(consumer)).await {
            peak = peak.max(lag);
        }
        tokio::time::sleep_until(end.min(tokio::time::Instant::now() + Duration::from_millis(250))).await;
    }
    peak
}

/// Waits, for at most `bound`, until both the index and the extraction have caught up with
/// the store, seen three times in a row 200 ms apart (an idle flush of extraction can still
/// be due after a first zero); returns how long that took.
pub async fn drained(server: &ApiProcess, bound: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut quiet = 0;
    while quiet < 3 {
        if start.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let index = server.try_lag(INDEX_CONSUMER).await;
        let extract = server.try_lag(EXTRACT_CONSUMER).await;
        quiet = if index == Some(0) && extract == Some(0) {
            quiet + 1
        } else {
            0
        };
    }
    Some(start.elapsed())
}

/// A stored turn, as the API lists it.
#[derive(Debug, Clone)]
pub struct StoredTurn {
    pub id: String,
    pub role: String,
    pub content: String,
}

/// Every turn of `sessions`, read page by page through the API.
pub async fn stored_turns(server: &ApiProcess, tenant: &Tenant, sessions: &[String]) -> Vec<StoredTurn> {
    const PAGE: usize = 1_000;
    let mut turns = Vec::new();
    for session in sessions {
        let mut after = 0;
        loop {
            let page: Value = server
                .client
                .get(format!(
                    "{}/v1/sessions/{session}/messages?after_seq={after}&limit={PAGE}",
                    server.base
                ))
                .tenant_headers(tenant)
                .send()
                .await
                .expect("list the session's turns")
                .json()
                .await
                .expect("the session's turns");
            let messages = page["messages"].as_array().cloned().unwrap_or_default();
            for m in &messages {
                turns.push(StoredTurn {
                    id: m["id"].as_str().unwrap_or_default().to_owned(),
                    role: m["role"].as_str().unwrap_or_default().to_owned(),
                    content: m["content"].as_str().unwrap_or_default().to_owned(),
                });
                after = m["seq"].as_i64().unwrap_or(after);
            }
            if messages.len() < PAGE {
                break;
            }
        }
    }
    turns
}

/// The transcript against the load: every accepted turn stored exactly once, no turn stored
/// twice, and nothing stored of a request the server refused with a status.
pub fn check_transcript(checks: &mut Checks, sent: &[Sent], stored: &[StoredTurn]) {
    let mut copies: HashMap<&str, usize> = HashMap::new();
    for turn in stored {
        *copies.entry(word_in(&turn.content).unwrap_or("")).or_default() += 1;
    }
    let count = |w: &str| copies.get(w).copied().unwrap_or(0);
    let accepted: Vec<&str> = words_where(sent, |o| *o == Outcome::Accepted);
    let missing: Vec<&str> = accepted.iter().copied().filter(|w| count(w) == 0).collect();
    checks.push(
        "every accepted turn is stored",
        missing.is_empty(),
        format!(
            "{} accepted turns, {} missing{}",
            accepted.len(),
            missing.len(),
            examples(&missing)
        ),
    );
    let twice: Vec<&str> = copies.iter().filter(|(_, n)| **n > 1).map(|(w, _)| *w).collect();
    checks.push(
        "no turn is stored twice",
        twice.is_empty(),
        format!(
            "{} turns stored ({} beyond the accepted, from requests not answered), {} stored more than once{}",
            stored.len(),
            stored.len().saturating_sub(accepted.len()),
            twice.len(),
            examples(&twice)
        ),
    );
    let refused: Vec<&str> = words_where(sent, |o| matches!(o, Outcome::Refused { .. }));
    let kept: Vec<&str> = refused.iter().copied().filter(|w| count(w) > 0).collect();
    checks.push(
        "no refused turn is stored",
        kept.is_empty(),
        format!(
            "{} turns refused with a status, {} stored anyway{}",
            refused.len(),
            kept.len(),
            examples(&kept)
        ),
    );
}

/// Every accepted turn is found exactly once by a keyword search for its unique word.
pub async fn check_search(checks: &mut Checks, server: &ApiProcess, tenant: &Tenant, sent: &[Sent]) {
    let accepted = words_where(sent, |o| *o == Outcome::Accepted);
    let found: Vec<(&str, usize)> = futures::stream::iter(accepted.iter().copied())
        .map(|w| async move { (w, hits(server, tenant, w).await) })
        .buffer_unordered(SEARCHES_AT_ONCE)
        .collect()
        .await;
    let wrong: Vec<String> = found
        .iter()
        .filter(|(_, n)| *n != 1)
        .map(|(w, n)| format!("{w} found {n} times"))
        .collect();
    checks.push(
        "every accepted turn is indexed once",
        wrong.is_empty(),
        format!(
            "{} keyword searches, {} not found exactly once{}",
            found.len(),
            wrong.len(),
            examples(&wrong)
        ),
    );
}

/// How many search results for `word` contain it.
async fn hits(server: &ApiProcess, tenant: &Tenant, word: &str) -> usize {
    let found: Value = server
        .client
        .post(format!("{}/v1/conversations/search", server.base))
        .tenant_headers(tenant)
        .json(&json!({"query": word, "strategy": "keyword", "limit": 10}))
        .send()
        .await
        .expect("search")
        .json()
        .await
        .expect("search results");
    found["items"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|i| i["content"].as_str().and_then(word_in) == Some(word))
            .count()
    })
}

/// Memories after replayed batches: every accepted user turn (each states one preference) is
/// cited by exactly one active memory, none is an active copy of another (same text from the
/// same turns), and every one cites only stored turns.
pub async fn check_memories(
    checks: &mut Checks,
    server: &ApiProcess,
    tenant: &Tenant,
    sent: &[Sent],
    stored: &[StoredTurn],
) {
    let memories = active_memories(server, tenant).await;
    let mut seen = HashSet::new();
    let mut copies = Vec::new();
    let mut citations: HashMap<&str, usize> = HashMap::new();
    for memory in &memories {
        let content = memory["content"].as_str().unwrap_or_default();
        let mut sources: Vec<&str> = memory["source_message_ids"]
            .as_array()
            .map(|ids| ids.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        sources.sort_unstable();
        for id in &sources {
            *citations.entry(id).or_default() += 1;
        }
        if !seen.insert((content, sources)) {
            copies.push(content.to_owned());
        }
    }
    let accepted: HashSet<&str> = words_where(sent, |o| *o == Outcome::Accepted).into_iter().collect();
    let user_turns: Vec<&StoredTurn> = stored
        .iter()
        .filter(|t| t.role == "user" && word_in(&t.content).is_some_and(|w| accepted.contains(w)))
        .collect();
    let wrong: Vec<String> = user_turns
        .iter()
        .map(|t| (t, citations.get(t.id.as_str()).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 1)
        .map(|(t, n)| format!("{} cited {n} times", word_in(&t.content).unwrap_or_default()))
        .collect();
    checks.push(
        "every accepted user turn is extracted once",
        wrong.is_empty() && !user_turns.is_empty(),
        format!(
            "{} active memories, {} accepted user turns, {} not cited by exactly one{}",
            memories.len(),
            user_turns.len(),
            wrong.len(),
            examples(&wrong)
        ),
    );
    checks.push(
        "no memory is duplicated",
        copies.is_empty(),
        format!(
            "{} active memories that copy another{}",
            copies.len(),
            examples(&copies)
        ),
    );
    let turn_ids: HashSet<&str> = stored.iter().map(|t| t.id.as_str()).collect();
    let orphans: Vec<&str> = citations.keys().copied().filter(|id| !turn_ids.contains(id)).collect();
    checks.push(
        "memories cite stored turns",
        orphans.is_empty(),
        format!("{} cited turns not stored{}", orphans.len(), examples(&orphans)),
    );
}

async fn active_memories(server: &ApiProcess, tenant: &Tenant) -> Vec<Value> {
    let mut memories = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut request = server
            .client
            .get(format!("{}/v1/memories", server.base))
            .tenant_headers(tenant)
            .query(&[("status", "active"), ("limit", "500")]);
        if let Some(cursor) = &cursor {
            request = request.query(&[("cursor", cursor)]);
        }
        let page: Value = request
            .send()
            .await
            .expect("list memories")
            .json()
            .await
            .expect("memories");
        memories.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return memories,
        }
    }
}

/// No message parked on any queue the server can see (the embedded bus parks none).
pub async fn check_parked(checks: &mut Checks, server: &ApiProcess) {
    let state = server.ops_state().await.unwrap_or(Value::Null);
    let queues = state["queues"].as_array().cloned().unwrap_or_default();
    let parked: u64 = queues.iter().filter_map(|q| q["parked"].as_u64()).sum();
    let unknown = queues.iter().filter(|q| q["parked"].is_null()).count();
    let on: Vec<String> = queues
        .iter()
        .filter(|q| q["parked"].as_u64().is_some_and(|n| n > 0))
        .map(|q| format!("{} on {}", q["parked"], q["queue"].as_str().unwrap_or("?")))
        .collect();
    checks.push(
        "no message parked",
        parked == 0 && unknown == 0,
        format!(
            "{parked} parked on {} queues{}{}",
            queues.len(),
            examples(&on),
            if unknown > 0 {
                format!(", {unknown} queues did not answer")
            } else {
                String::new()
            }
        ),
    );
}

/// Every worker this process runs consumes its queue again: a heartbeat and a subscription.
pub async fn check_consumers(checks: &mut Checks, server: &ApiProcess) {
    let (workers, idle) = in_process_workers(server).await;
    checks.push(
        "in-process workers consume again",
        idle.is_empty() && workers > 0,
        format!(
            "{workers} in-process workers, {} not consuming{}",
            idle.len(),
            examples(&idle)
        ),
    );
}

/// Waits, for at most `bound`, until every in-process worker is healthy and consuming (each
/// subscribes again on its own after a broker outage); returns how long that took.
pub async fn consuming(server: &ApiProcess, since: Instant, bound: Duration) -> Option<Duration> {
    loop {
        let (workers, idle) = in_process_workers(server).await;
        if workers > 0 && idle.is_empty() {
            return Some(since.elapsed());
        }
        if since.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The in-process workers `/ops/state` lists, and those of them not consuming.
async fn in_process_workers(server: &ApiProcess) -> (usize, Vec<String>) {
    let state = server.ops_state().await.unwrap_or(Value::Null);
    let workers: Vec<&Value> = state["workers"]
        .as_array()
        .map(|rows| rows.iter().filter(|w| w["runs"] == "in_process").collect())
        .unwrap_or_default();
    let idle = workers
        .iter()
        .filter(|w| w["status"] != "ok" || w["consumers"].as_u64().unwrap_or(0) == 0)
        .map(|w| format!("{} {} with {} consumers", w["worker"], w["status"], w["consumers"]))
        .collect();
    (workers.len(), idle)
}

/// The Edge index of a stopped server holds one turn point per stored turn: with each
/// accepted turn found by search, none is missing and none is extra.
pub async fn check_index_points(checks: &mut Checks, index_dir: &Path, tenant: &Tenant, stored: usize) {
    let index = EdgeIndex::open(index_dir, 5_000, None).expect("open the stopped server's index");
    let points = index.count(tenant, PointKind::Turn).await.expect("count turn points");
    checks.push(
        "one index point per stored turn",
        points == stored as u64,
        format!("{points} turn points for {stored} stored turns"),
    );
}

fn words_where(sent: &[Sent], keep: impl Fn(&Outcome) -> bool) -> Vec<&str> {
    sent.iter()
        .filter(|s| keep(&s.outcome))
        .flat_map(|s| s.words.iter().map(String::as_str))
        .collect()
}

fn examples<T: fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = items.iter().take(EXAMPLES).map(ToString::to_string).collect();
    format!(" (e.g. {})", shown.join(", "))
}
