//! `FakeOpenAi`: a scripted OpenAI-compatible server on 127.0.0.1, so that no test ever calls a
//! real embeddings or LLM endpoint.
//!
//! - `POST /v1/embeddings` answers every input with [`embed_text`]: a hashed bag of words (and
//!   of character bigrams for CJK text), so texts sharing words are close and semantic-search
//!   tests mean something.
//! - `POST /v1/chat/completions` answers with the content its responder returns for the request
//!   ([`FakeOpenAi::set_chat_responder`]: a function of the request body, so that a test can
//!   answer by what was asked, e.g. by trace header or prompt text); when there is no responder
//!   or it returns `None`, with the next reply queued by [`FakeOpenAi::push_reply`]; and with a
//!   500 when there is neither. Every answer carries a `usage` block that counts the words of
//!   the prompt and of the reply the way [`embed_text`] tokenizes them.
//!
//! Each endpoint has a queue of [`Fault`]s, consumed one per request before the default
//! behaviour, and a standing fault ([`Endpoint::set_standing`]) that every request gets while
//! it is set and no queued one is left, and records what it received. [`FakeOpenAi::set_down`] turns every answer into a
//! 503; [`FakeOpenAi::stop`] closes the listener so that clients get connect errors.
//! [`FakeOpenAi::set_latency`] makes every answer take a fixed time, as a real model does (for
//! benchmarks), and [`FakeOpenAi::chat_usage`] sums the `usage` of every chat answer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Something an endpoint does instead of (or before) its normal answer, once.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Answer with this status and an OpenAI-shaped error body.
    Status(u16),
    /// Answer with this status, an optional `Retry-After` header (sent verbatim) and an optional
    /// body (sent verbatim as JSON; an OpenAI-shaped error when `None`).
    Respond {
        status: u16,
        retry_after: Option<String>,
        body: Option<String>,
    },
    /// Wait this long, then answer normally (or, for timeouts, after the client gave up).
    Delay(Duration),
    /// Answer 200 with a body that is not JSON.
    MalformedJson,
    /// Answer normally, but with vectors of this many dimensions (embeddings only).
    WrongDimension(usize),
    /// Answer normally, but with this many items in `data` (embeddings only; extra items
    /// repeat the last input's vector).
    WrongCount(usize),
}

impl Fault {
    /// `status` with a `Retry-After: seconds` header.
    pub fn retry_after(status: u16, seconds: u64) -> Self {
        Self::Respond {
            status,
            retry_after: Some(seconds.to_string()),
            body: None,
        }
    }

    /// `status` with an OpenAI error body carrying `message`.
    pub fn error(status: u16, message: &str) -> Self {
        Self::Respond {
            status,
            retry_after: None,
            body: Some(error_body(message, "invalid_request_error").to_string()),
        }
    }
}

/// One request as an endpoint received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The JSON body, or the raw text as a JSON string if it was not JSON.
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// Every header of the request.
    pub headers: HeaderMap,
}

impl Recorded {
    /// The value of header `name` (case-insensitive), if present and valid text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Decides a chat reply from the request body: `Some(content)` answers with it, `None` leaves
/// the request to the queued replies.
pub type ChatResponder = Arc<dyn Fn(&Value) -> Option<String> + Send + Sync>;

/// The `content` of the last message with `role` in a chat request body.
pub fn chat_message(body: &Value, role: &str) -> Option<String> {
    body.get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some(role))?
        .get("content")?
        .as_str()
        .map(str::to_owned)
}

/// The script and the records of one endpoint.
#[derive(Debug, Default)]
pub struct Endpoint {
    faults: Mutex<VecDeque<Fault>>,
    standing: Mutex<Option<Fault>>,
    requests: Mutex<Vec<Recorded>>,
}

impl Endpoint {
    /// Queues `fault` for a coming request (after those already queued).
    pub fn push(&self, fault: Fault) {
        lock(&self.faults).push_back(fault);
    }

    /// Queues `fault` for each of the next `times` requests.
    pub fn push_times(&self, fault: Fault, times: usize) {
        lock(&self.faults).extend(std::iter::repeat_n(fault, times));
    }

    /// Gives every coming request `fault` (once the queued faults are used up) until it is
    /// replaced or cleared with `None`: a provider that fails for a while, however often it is
    /// called meanwhile.
    pub fn set_standing(&self, fault: Option<Fault>) {
        *lock(&self.standing) = fault;
    }

    /// Faults not yet consumed.
    pub fn pending_faults(&self) -> usize {
        lock(&self.faults).len()
    }

    /// Requests received so far, faulted ones included.
    pub fn requests(&self) -> usize {
        lock(&self.requests).len()
    }

    /// Every request received so far, in arrival order.
    pub fn recorded(&self) -> Vec<Recorded> {
        lock(&self.requests).clone()
    }

    /// The bodies of every request received so far.
    pub fn bodies(&self) -> Vec<Value> {
        lock(&self.requests).iter().map(|r| r.body.clone()).collect()
    }

    /// The `Authorization` header of the latest request (`None` if it had none, or if there
    /// was no request).
    pub fn last_authorization(&self) -> Option<String> {
        lock(&self.requests).last().and_then(|r| r.authorization.clone())
    }

    fn record(&self, headers: &HeaderMap, body: &Bytes) {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let body = serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into()));
        lock(&self.requests).push(Recorded {
            body,
            authorization,
            headers: headers.clone(),
        });
    }

    fn next_fault(&self) -> Option<Fault> {
        lock(&self.faults).pop_front().or_else(|| lock(&self.standing).clone())
    }
}

struct Shared {
    dimension: usize,
    embeddings: Endpoint,
    chat: Endpoint,
    replies: Mutex<VecDeque<String>>,
    responder: Mutex<Option<ChatResponder>>,
    down: AtomicBool,
    shuffle: AtomicBool,
    dense: AtomicBool,
    served: AtomicU64,
    latency_micros: AtomicU64,
    completions: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

/// The sum of the `usage` blocks of the chat answers sent so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChatUsage {
    /// Answers with a completion (faults and errors are not counted).
    pub completions: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// A running fake server; dropping it stops it.
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl FakeOpenAi {
    /// Starts a server on an ephemeral port of 127.0.0.1 whose embeddings have `dimension`
    /// dimensions.
    pub async fn start(dimension: usize) -> Self {
        let shared = Arc::new(Shared {
            dimension,
            embeddings: Endpoint::default(),
            chat: Endpoint::default(),
            replies: Mutex::default(),
            responder: Mutex::default(),
            down: AtomicBool::new(false),
            shuffle: AtomicBool::new(false),
            dense: AtomicBool::new(false),
            served: AtomicU64::new(0),
            latency_micros: AtomicU64::new(0),
            completions: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            completion_tokens: AtomicU64::new(0),
        });
        let router = Router::new()
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/chat/completions", post(chat_completions))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake OpenAI server");
        let addr = listener.local_addr().expect("local address of a bound listener");
        let stop = CancellationToken::new();
        let signal = stop.clone().cancelled_owned();
        // Graceful shutdown drops the listener at once (new connections are refused) and closes
        // idle keep-alive connections, so a stopped fake looks down even to a pooled client.
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(signal).await {
                eprintln!("fake OpenAI server failed: {e}");
            }
        });
        Self { addr, shared, stop }
    }

    /// The API root, `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The dimension of the default embeddings.
    pub fn dimension(&self) -> usize {
        self.shared.dimension
    }

    /// The script and records of `POST /v1/embeddings`.
    pub fn embeddings(&self) -> &Endpoint {
        &self.shared.embeddings
    }

    /// The script and records of `POST /v1/chat/completions`.
    pub fn chat(&self) -> &Endpoint {
        &self.shared.chat
    }

    /// Queues a chat completion reply (its `choices[0].message.content`).
    pub fn push_reply(&self, content: impl Into<String>) {
        lock(&self.shared.replies).push_back(content.into());
    }

    /// Chat replies not yet consumed.
    pub fn pending_replies(&self) -> usize {
        lock(&self.shared.replies).len()
    }

    /// Answers every chat request for which `responder` returns `Some(content)` with that
    /// content (after any queued fault, before the queued replies), replacing an earlier
    /// responder. It sees the request body, e.g. `body["messages"]`; see [`chat_message`].
    pub fn set_chat_responder(&self, responder: impl Fn(&Value) -> Option<String> + Send + Sync + 'static) {
        *lock(&self.shared.responder) = Some(Arc::new(responder));
    }

    /// Removes the responder: only queued replies answer again.
    pub fn clear_chat_responder(&self) {
        *lock(&self.shared.responder) = None;
    }

    /// While `down`, every request is answered 503 and no fault or reply is consumed.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Makes every answer of either endpoint (faults and errors included) wait `latency` after
    /// the request arrived; requests wait side by side, like calls to a real model do.
    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_micros.store(micros, Ordering::SeqCst);
    }

    /// The `usage` the chat endpoint reported so far, summed. The counts are the fake's own
    /// (words, and CJK bigrams), not a real tokenizer's.
    pub fn chat_usage(&self) -> ChatUsage {
        ChatUsage {
            completions: self.shared.completions.load(Ordering::SeqCst),
            prompt_tokens: self.shared.prompt_tokens.load(Ordering::SeqCst),
            completion_tokens: self.shared.completion_tokens.load(Ordering::SeqCst),
        }
    }

    /// While on, the items of each embeddings `data` list come in a shuffled order (their
    /// `index` fields still say which input each belongs to).
    pub fn set_shuffle(&self, shuffle: bool) {
        self.shared.shuffle.store(shuffle, Ordering::SeqCst);
    }

    /// While on, embeddings come from [`embed_text_dense`] instead of [`embed_text`]: every
    /// dimension is used, as with a real model, which is what index benchmarks need.
    pub fn set_dense(&self, dense: bool) {
        self.shared.dense.store(dense, Ordering::SeqCst);
    }

    /// Stops the server for good and waits until its port refuses connections.
    pub async fn stop(&self) {
        self.stop.cancel();
        for _ in 0..500 {
            if tokio::net::TcpStream::connect(self.addr).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "fake OpenAI server on {} still accepts connections after stop",
            self.addr
        );
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The fake's embedding of `text`: lowercase alphanumeric words, plus bigrams of consecutive
/// CJK characters (a lone CJK character counts alone), each hashed (FNV-1a) into one of
/// `dimension` buckets and counted; the counts are L2-normalised. Text without any token maps
/// to a fixed unit vector rather than zeros, which cosine similarity cannot handle.
pub fn embed_text(text: &str, dimension: usize) -> Vec<f32> {
    embed_tokens(text, dimension, |token, vector| {
        let bucket = (fnv1a(token.as_bytes()) % vector.len() as u64) as usize;
        vector[bucket] += 1.0;
    })
}

/// Adds each token of `text` into a `dimension`-long vector with `add`, then L2-normalises
/// it. A text without tokens counts as one empty token.
fn embed_tokens(text: &str, dimension: usize, add: impl Fn(&str, &mut [f32])) -> Vec<f32> {
    let mut vector = vec![0f32; dimension];
    if dimension == 0 {
        return vector;
    }
    let mut tokens = tokens(text);
    if tokens.is_empty() {
        tokens.push(String::new());
    }
    for token in &tokens {
        add(token, &mut vector);
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
    for x in &mut vector {
        *x /= norm;
    }
    vector
}

/// A dense variant of [`embed_text`]: each token is a fixed pseudo-random direction (seeded by
/// its hash, components uniform in [-1, 1]) and a text is the L2-normalised sum of its tokens'.
/// Texts sharing tokens are close, and unrelated texts have small but non-zero cosines, so an
/// HNSW graph over these vectors behaves as over a real model's, unlike over the hashed counts
/// (a dozen non-zero dimensions, most pairs exactly orthogonal).
pub fn embed_text_dense(text: &str, dimension: usize) -> Vec<f32> {
    embed_tokens(text, dimension, |token, vector| {
        let mut state = fnv1a(token.as_bytes()) | 1;
        for x in vector {
            // xorshift64: deterministic across processes, like the hash.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *x += (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
        }
    })
}

fn tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush_cjk = |cjk: &mut Vec<char>, tokens: &mut Vec<String>| {
        match cjk.len() {
            0 => {}
            1 => tokens.push(cjk[0].to_string()),
            _ => tokens.extend(cjk.windows(2).map(|pair| pair.iter().collect::<String>())),
        }
        cjk.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            cjk.push(c);
        } else {
            flush_cjk(&mut cjk, &mut tokens);
            if c.is_alphanumeric() {
                word.extend(c.to_lowercase());
            } else if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
        }
    }
    flush_cjk(&mut cjk, &mut tokens);
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{3040}'..='\u{30FF}'     // hiragana, katakana
        | '\u{3400}'..='\u{4DBF}'   // CJK extension A
        | '\u{4E00}'..='\u{9FFF}'   // CJK unified ideographs
        | '\u{AC00}'..='\u{D7AF}'   // hangul syllables
        | '\u{F900}'..='\u{FAFF}'   // CJK compatibility ideographs
        | '\u{20000}'..='\u{2FA1F}' // CJK extensions B and later
    )
}

/// A hash that is the same in every process and Rust version, unlike the std hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock must not hide its own failure behind ours.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn error_body(message: &str, kind: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

fn respond(status: StatusCode, retry_after: Option<&str>, body: String) -> Response {
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(seconds) = retry_after {
        response = response.header(header::RETRY_AFTER, seconds);
    }
    response.body(Body::from(body)).expect("a valid fake response")
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    respond(status, None, body.to_string())
}

/// What the common part of request handling decided.
enum Next {
    /// The whole answer (a scripted status, a malformed body, the server being down).
    Answer(Response),
    /// The endpoint answers, applying this fault if it knows it.
    Proceed(Option<Fault>),
}

async fn preamble(shared: &Shared, endpoint: &Endpoint, headers: &HeaderMap, body: &Bytes) -> Next {
    endpoint.record(headers, body);
    let latency = shared.latency_micros.load(Ordering::SeqCst);
    if latency > 0 {
        tokio::time::sleep(Duration::from_micros(latency)).await;
    }
    if shared.down.load(Ordering::SeqCst) {
        // Faults stay queued for when the server is back up.
        return Next::Answer(json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &error_body("fake: the server is down", "server_error"),
        ));
    }
    let Some(fault) = endpoint.next_fault() else {
        return Next::Proceed(None);
    };
    match fault {
        Fault::Status(code) => Next::Answer(status_response(code, None, None)),
        Fault::Respond {
            status,
            retry_after,
            body,
        } => Next::Answer(status_response(status, retry_after.as_deref(), body)),
        Fault::Delay(delay) => {
            tokio::time::sleep(delay).await;
            Next::Proceed(None)
        }
        Fault::MalformedJson => Next::Answer(respond(
            StatusCode::OK,
            None,
            "{\"object\": \"list\", \"data\": [".into(),
        )),
        Fault::WrongDimension(_) | Fault::WrongCount(_) => Next::Proceed(Some(fault)),
    }
}

fn status_response(code: u16, retry_after: Option<&str>, body: Option<String>) -> Response {
    let status = StatusCode::from_u16(code).expect("a scripted status between 100 and 999");
    let body = body.unwrap_or_else(|| error_body(&format!("fake: scripted status {code}"), "fake_error").to_string());
    respond(status, retry_after, body)
}

async fn embeddings(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let fault = match preamble(&shared, &shared.embeddings, &headers, &body).await {
        Next::Answer(response) => return response,
        Next::Proceed(fault) => fault,
    };
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let inputs: Vec<String> = if let Some(Value::String(s)) = request.get("input") {
        vec![s.clone()]
    } else if let Some(items) = request
        .get("input")
        .and_then(Value::as_array)
        .filter(|items| items.iter().all(Value::is_string))
    {
        items.iter().filter_map(Value::as_str).map(str::to_owned).collect()
    } else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &error_body(
                "'input' must be a string or an array of strings",
                "invalid_request_error",
            ),
        );
    };
    let Some(model) = request.get("model").and_then(Value::as_str) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &error_body("'model' is required", "invalid_request_error"),
        );
    };
    let mut dimension = shared.dimension;
    let mut count = inputs.len();
    if let Some(Fault::WrongDimension(d)) = fault {
        dimension = d;
    }
    if let Some(Fault::WrongCount(n)) = fault {
        count = n;
    }
    let mut data: Vec<Value> = (0..count)
        .map(|i| {
            let text = inputs.get(i).or(inputs.last()).map_or("", String::as_str);
            let embedding = if shared.dense.load(Ordering::SeqCst) {
                embed_text_dense(text, dimension)
            } else {
                embed_text(text, dimension)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    if shared.shuffle.load(Ordering::SeqCst) {
        let seed = shared.served.fetch_add(1, Ordering::SeqCst);
        shuffle(&mut data, seed);
    }
    let token_count: usize = inputs.iter().map(|t| tokens(t).len()).sum();
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": token_count, "total_tokens": token_count},
        }),
    )
}

async fn chat_completions(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    // Embedding-only faults mean nothing to a chat: it answers normally.
    if let Next::Answer(response) = preamble(&shared, &shared.chat, &headers, &body).await {
        return response;
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // Cloned out of the lock: a responder may take its time, or call back into the fake.
    let responder = lock(&shared.responder).clone();
    let answer = responder.and_then(|respond| respond(&request));
    let Some(content) = answer.or_else(|| lock(&shared.replies).pop_front()) else {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &error_body("fake: no scripted chat reply left", "server_error"),
        );
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let prompt_tokens: usize = request
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(|text| tokens(text).len())
        .sum();
    let completion_tokens = tokens(&content).len();
    shared.prompt_tokens.fetch_add(prompt_tokens as u64, Ordering::SeqCst);
    shared
        .completion_tokens
        .fetch_add(completion_tokens as u64, Ordering::SeqCst);
    shared.completions.fetch_add(1, Ordering::SeqCst);
    let id = shared.served.fetch_add(1, Ordering::SeqCst);
    json_response(
        StatusCode::OK,
        &json!({
            "id": format!("chatcmpl-fake-{id}"),
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }),
    )
}

/// A Fisher-Yates shuffle driven by a fixed LCG, so a failing test sees the same order again.
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    for i in (1..items.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn embeddings_are_unit_length_and_deterministic() {
        for text in ["Hello, world", "", "!!!", "数据库迁移", "é"] {
            let v = embed_text(text, 64);
            assert_eq!(v.len(), 64);
            assert!((cosine(&v, &v) - 1.0).abs() < 1e-5, "{text:?}");
            assert_eq!(v, embed_text(text, 64));
        }
        assert!(embed_text("anything", 0).is_empty());
    }

    #[test]
    fn dense_embeddings_use_every_dimension_and_keep_similarity() {
        let query = embed_text_dense("postgres migration failed", 384);
        assert_eq!(query, embed_text_dense("postgres migration failed", 384));
        assert!((cosine(&query, &query) - 1.0).abs() < 1e-5);
        assert!(
            query.iter().filter(|x| **x == 0.0).count() < 4,
            "dense, not hashed counts"
        );
        let near = embed_text_dense("The Postgres migration failed at step 3", 384);
        let far = embed_text_dense("lunch with the team on friday", 384);
        assert!(cosine(&query, &near) > cosine(&query, &far) + 0.3);
        assert!(
            cosine(&query, &far) != 0.0,
            "unrelated texts are not exactly orthogonal"
        );
        assert!(embed_text_dense("anything", 0).is_empty());
    }

    #[test]
    fn shared_words_make_texts_similar() {
        let query = embed_text("postgres migration failed", 256);
        let near = embed_text("The Postgres migration failed at step 3", 256);
        let far = embed_text("lunch with the team on friday", 256);
        assert!(cosine(&query, &near) > cosine(&query, &far) + 0.3);
    }

    #[test]
    fn chinese_is_split_into_bigrams() {
        assert_eq!(tokens("数据库 ok"), vec!["数据", "据库", "ok"]);
        assert_eq!(tokens("a中b"), vec!["a", "中", "b"]);
        let query = embed_text("数据库迁移", 256);
        let near = embed_text("昨天的数据库迁移失败了", 256);
        let far = embed_text("周五和团队吃午饭", 256);
        assert!(cosine(&query, &near) > cosine(&query, &far) + 0.3);
    }

    #[test]
    fn shuffle_permutes() {
        let mut items: Vec<usize> = (0..50).collect();
        shuffle(&mut items, 7);
        assert_ne!(items, (0..50).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..50).collect::<Vec<_>>());
    }
}
