//! The bounded open-loop load a fault runs under: appends at Poisson arrival times, each turn
//! carrying a word no other turn has, so the checks can find every turn again by itself.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shared::domain::Tenant;
use tokio::task::{JoinHandle, JoinSet};

use crate::app::TenantHeaders as _;
use crate::stats::poisson_arrivals_seeded;

/// Longest wait for one answer; a server that is down refuses the connection at once, so
/// only a hung one reaches it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Letters of the unique words: no vowel (no stop word can come of them) and no `s`, `d`, `g`,
/// `y` (no stemmer's suffix); each word also ends in `q`, which no stemmer strips.
const ALPHABET: &[u8] = b"bcfhjklmnprtvwxz";
/// Every unique word is this long, so none is a prefix or stem of another.
const WORD_LEN: usize = 7;

/// What the load sends: `rate` requests a second for `seconds`, spread round-robin over
/// `sessions` sessions of one tenant, each request `turns` turns.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub rate: f64,
    pub seconds: f64,
    pub sessions: usize,
    pub turns: usize,
    pub seed: u64,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 201: the server says its turns are stored.
    Accepted,
    /// Any other status, with the body's error code.
    Refused { status: u16, code: String },
    /// No answer: the connection was refused or dropped, or the request timed out.
    NoAnswer(&'static str),
}

/// One request of the load: its session, the unique words of its turns, and how it ended.
#[derive(Debug, Clone)]
pub struct Sent {
    pub session: String,
    pub words: Vec<String>,
    pub outcome: Outcome,
    /// When it was scheduled, from the load's start.
    pub at: Duration,
    /// When it actually went out and when its outcome came, from the load's start: on a
    /// loaded machine a request can go out well after its scheduled time.
    pub sent: Duration,
    pub answered: Duration,
}

/// The load's requests and how they ended.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub sent: usize,
    pub accepted: usize,
    /// Everything that was not a 201, by what it was (`503 backend_unavailable`, `no answer:
    /// connect`, ...).
    pub other: BTreeMap<String, usize>,
}

impl Tally {
    pub fn of(sent: &[Sent]) -> Self {
        let mut tally = Tally {
            sent: sent.len(),
            ..Tally::default()
        };
        for request in sent {
            let key = match &request.outcome {
                Outcome::Accepted => {
                    tally.accepted += 1;
                    continue;
                }
                Outcome::Refused { status, code } => format!("{status} {code}"),
                Outcome::NoAnswer(why) => format!("no answer ({why})"),
            };
            *tally.other.entry(key).or_default() += 1;
        }
        tally
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} requests sent, {} answered 201", self.sent, self.accepted)?;
        for (what, n) in &self.other {
            write!(f, ", {n} {what}")?;
        }
        Ok(())
    }
}

/// The `n`th unique word: `zq`, four letters, `q`.
pub fn word(n: usize) -> String {
    let mut letters = vec![b'q'; WORD_LEN];
    letters[0] = b'z';
    let mut rest = n;
    for slot in letters[2..WORD_LEN - 1].iter_mut().rev() {
        *slot = ALPHABET[rest % ALPHABET.len()];
        rest /= ALPHABET.len();
    }
    assert_eq!(rest, 0, "more turns than unique words");
    String::from_utf8(letters).expect("ascii")
}

/// The unique word in a turn's content, if it has one.
pub fn word_in(content: &str) -> Option<&str> {
    content
        .split(|c: char| !c.is_ascii_alphabetic())
        .find(|t| t.len() == WORD_LEN && t.starts_with("zq") && t.ends_with('q'))
}

/// The session names of `plan`.
pub fn sessions(plan: &Plan) -> Vec<String> {
    (0..plan.sessions).map(|i| format!("chaos-{i}")).collect()
}

/// A load running in the background.
pub struct Load {
    /// The moment every time of a [`Sent`] counts from.
    pub started: Instant,
    requests: JoinHandle<Vec<Sent>>,
    in_flight: Arc<AtomicUsize>,
}

impl Load {
    /// Starts sending `plan` to `base` as `tenant`, each request at its scheduled time whether
    /// or not the ones before it were answered.
    pub fn start(base: String, tenant: Tenant, plan: Plan) -> Self {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let requests = tokio::spawn(run(base, tenant, plan, started, in_flight.clone()));
        Self {
            started,
            requests,
            in_flight,
        }
    }

    /// Waits, for at most `within`, until a request is in flight, so that a fault injected
    /// next lands mid-request; says whether one was.
    pub async fn mid_request(&self, within: Duration) -> bool {
        let start = Instant::now();
        while self.in_flight.load(Ordering::Relaxed) == 0 {
            if start.elapsed() > within {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }

    /// Waits for the last request's outcome; returns every request in the order it was sent.
    pub async fn finish(self) -> Vec<Sent> {
        self.requests.await.expect("the load's task")
    }
}

async fn run(base: String, tenant: Tenant, plan: Plan, start: Instant, in_flight: Arc<AtomicUsize>) -> Vec<Sent> {
    let client = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("build the load's client");
    let sessions = sessions(&plan);
    let schedule = poisson_arrivals_seeded(plan.rate, plan.seconds, plan.seed);
    let mut requests = JoinSet::new();
    for (i, at) in schedule.into_iter().enumerate() {
        tokio::time::sleep_until((start + at).into()).await;
        let session = sessions[i % sessions.len()].clone();
        let words: Vec<String> = (0..plan.turns).map(|j| word(i * plan.turns + j)).collect();
        let (client, base, tenant, in_flight) = (client.clone(), base.clone(), tenant.clone(), in_flight.clone());
        requests.spawn(async move {
            in_flight.fetch_add(1, Ordering::Relaxed);
            let sent = start.elapsed();
            let outcome = append(&client, &base, &tenant, &session, &words).await;
            let answered = start.elapsed();
            in_flight.fetch_sub(1, Ordering::Relaxed);
            Sent {
                session,
                words,
                outcome,
                at,
                sent,
                answered,
            }
        });
    }
    let mut sent = requests.join_all().await;
    sent.sort_by_key(|s| s.at);
    sent
}

/// Turns that read like a conversation with a stated preference in it, so the rules
/// extractor makes memories of them.
pub(super) fn turns(words: &[String]) -> Vec<Value> {
    words
        .iter()
        .enumerate()
        .map(|(j, w)| match j % 2 {
            0 => json!({"role": "user", "content": format!("I prefer {w} for my deploys, please remember that")}),
            _ => json!({"role": "assistant", "content": format!("Noted: {w} for your deploys.")}),
        })
        .collect()
}

async fn append(client: &reqwest::Client, base: &str, tenant: &Tenant, session: &str, words: &[String]) -> Outcome {
    append_turns(client, base, tenant, session, turns(words)).await
}

/// Appends `turns` to `session` and says how the request ended.
pub(super) async fn append_turns(
    client: &reqwest::Client,
    base: &str,
    tenant: &Tenant,
    session: &str,
    turns: Vec<Value>,
) -> Outcome {
    let response = client
        .post(format!("{base}/v1/sessions/{session}/messages"))
        .tenant_headers(tenant)
        .json(&json!({ "messages": turns }))
        .send()
        .await;
    let response = match response {
        Ok(response) => response,
        Err(e) if e.is_connect() => return Outcome::NoAnswer("connect"),
        Err(e) if e.is_timeout() => return Outcome::NoAnswer("timeout"),
        Err(_) => return Outcome::NoAnswer("dropped"),
    };
    let status = response.status().as_u16();
    if status == 201 {
        // A 201 whose body was cut off still means stored; the body is not needed.
        return Outcome::Accepted;
    }
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let code = body["code"].as_str().unwrap_or("no code").to_owned();
    Outcome::Refused { status, code }
}

/// One read of [`Reads`]: a recall or a search, and how it ended.
#[derive(Debug, Clone)]
pub struct Read {
    pub what: &'static str,
    /// When it went out and when its answer came, from the load's start.
    pub sent: Duration,
    pub answered: Duration,
    /// The status, `None` without an answer.
    pub status: Option<u16>,
    /// The codes of the degradations a 200 reported (`errors[].code`).
    pub errors: Vec<String>,
    /// A recall whose stable part listed scenes.
    pub scene_list: bool,
}

/// Recalls and searches, one after the other every `READ_EVERY`, beside a [`Load`]: what an
/// agent asks while a fault is under way.
pub struct Reads(JoinHandle<Vec<Read>>);

/// The pause between two reads of [`Reads`].
const READ_EVERY: Duration = Duration::from_millis(250);

impl Reads {
    /// Starts reading from `base` as `tenant` until `seconds` after `start`.
    pub fn start(base: String, tenant: Tenant, start: Instant, seconds: f64) -> Self {
        Self(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .build()
                .expect("build the reads' client");
            let end = Duration::from_secs_f64(seconds);
            let mut reads = Vec::new();
            while start.elapsed() < end {
                let (what, path, body) = read_request(reads.len());
                let sent = start.elapsed();
                let response = client
                    .post(format!("{base}{path}"))
                    .tenant_headers(&tenant)
                    .json(&body)
                    .send()
                    .await;
                let (status, body) = match response {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        (Some(status), response.json().await.unwrap_or(Value::Null))
                    }
                    Err(_) => (None, Value::Null),
                };
                let errors = body["errors"]
                    .as_array()
                    .map(|errors| {
                        errors
                            .iter()
                            .map(|e| e["code"].as_str().unwrap_or("no code").to_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                reads.push(Read {
                    what,
                    sent,
                    answered: start.elapsed(),
                    status,
                    errors,
                    scene_list: body["stable"]["scene_navigation"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty()),
                });
                tokio::time::sleep(READ_EVERY).await;
            }
            reads
        }))
    }

    /// Waits for the last read; returns every read in the order it was sent.
    pub async fn finish(self) -> Vec<Read> {
        self.0.await.expect("the reads' task")
    }
}

/// The `n`-th read of a load: a recall and a search in turn.
pub(super) fn read_request(n: usize) -> (&'static str, &'static str, Value) {
    if n.is_multiple_of(2) {
        (
            "recall",
            "/v1/recall",
            json!({"query": "which deploys do I prefer?", "session_id": "chaos-0"}),
        )
    } else {
        (
            "search",
            "/v1/conversations/search",
            json!({"query": "deploys", "limit": 5}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_words_are_distinct_and_found_again() {
        let words: Vec<String> = (0..5_000).map(word).collect();
        let distinct: std::collections::HashSet<&String> = words.iter().collect();
        assert_eq!(distinct.len(), words.len());
        for w in &words {
            let content = format!("I prefer {w} for my deploys, please remember that");
            assert_eq!(word_in(&content), Some(w.as_str()));
        }
        assert_eq!(word(0), "zqbbbbq");
        assert_eq!(word_in("Noted: zqbbbcq for your deploys."), Some("zqbbbcq"));
        assert_eq!(word_in("no word here"), None);
    }
}
