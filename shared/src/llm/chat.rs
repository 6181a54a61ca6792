//! A client for any OpenAI-compatible `POST {base_url}/chat/completions` endpoint (OpenAI,
//! vLLM, Ollama, LiteLLM, DeepSeek, Qwen ...), for calls whose answer is a JSON object.
//!
//! One [`ChatClient::complete_json`] call is one or two completions:
//! 1. the conversation as given, with `response_format: {"type": "json_object"}`;
//! 2. only if the answer fails validation: the same conversation plus the bad answer plus a
//!    message that quotes the validation error and asks for valid JSON only (the repair).
//!
//! Each completion is an HTTP request retried by `http_retry` (connect errors, timeouts, 429
//! and 5xx, with backoff or `Retry-After`). What the caller gets back:
//! - [`LlmError::Unavailable`]: the provider kept failing transiently; retry later;
//! - [`LlmError::Rejected`]: any other 4xx (bad key, unknown model, context too long); a retry
//!   will not help until someone changes the configuration;
//! - [`LlmError::Malformed`]: the answers (first and repair) did not validate, or the provider
//!   answered 200 with something that is not a chat completion.
//!
//! Recording a metric cannot fail a call: the `metrics` facade is infallible.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Url};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tracing::Instrument as _;

use crate::config::{LlmSettings, Secret};
use crate::domain::Tenant;
use crate::http_retry::{self, Outcome, RetryError, RetryPolicy};
use crate::metrics;

/// Header carrying the trace name of a call.
pub const HEADER_TRACE: &str = "x-sediment-trace";
/// Header carrying the tenant's team id (percent-encoded outside visible ASCII).
pub const HEADER_TEAM: &str = "x-sediment-team";
/// Header carrying the tenant's agent id (percent-encoded outside visible ASCII).
pub const HEADER_AGENT: &str = "x-sediment-agent";
/// Header carrying the tenant's user id (percent-encoded outside visible ASCII).
pub const HEADER_USER: &str = "x-sediment-user";
/// Header carrying the session id, when the call belongs to one.
pub const HEADER_SESSION: &str = "x-sediment-session";

/// Longest OpenAI `user` field sent as is; a longer `team/agent/user` is sent as its SHA-256
/// (providers cap the field, and a refused request would fail every call of that tenant).
const MAX_USER_FIELD_CHARS: usize = 64;
/// Answers are quoted in debug logs up to this many characters.
const MAX_LOGGED_ANSWER_CHARS: usize = 2_000;

/// Settings of a [`ChatClient`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatSettings {
    /// The API root including its version segment, e.g. `https://api.openai.com/v1`; requests
    /// go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// The `model` field of every request.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<Secret>,
    /// Limit of one HTTP request, from connecting to the last byte of the answer.
    pub timeout: Duration,
    /// Retries of one request after its first attempt, on transient failures only.
    pub max_retries: u32,
    /// Backoff before the first retry; it doubles with every further retry.
    pub retry_base_delay: Duration,
}

impl ChatSettings {
    /// Settings with the defaults: no key, 60 s per request, 2 retries starting at 500 ms.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 2,
            retry_base_delay: Duration::from_millis(500),
        }
    }

    /// The settings read from the environment (`SEDIMENT_LLM_*`).
    pub fn from_config(settings: &LlmSettings) -> Self {
        Self {
            api_key: settings.api_key.clone(),
            timeout: settings.timeout,
            max_retries: settings.max_retries,
            ..Self::new(&settings.url, &settings.model)
        }
    }
}

/// Settings a [`ChatClient`] cannot be built from.
#[derive(Debug, thiserror::Error)]
#[error("invalid LLM settings: {0}")]
pub struct InvalidSettings(String);

/// Why an LLM call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider could not be reached, timed out or kept answering 429/5xx.
    #[error("LLM unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The provider refused the request (a 4xx other than 429): a retry will not help.
    #[error("LLM call rejected")]
    Rejected(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The answer did not validate, even after the repair attempt; the reason is the last
    /// validation error.
    #[error("LLM output invalid: {0}")]
    Malformed(String),
}

impl LlmError {
    /// Whether the same call may succeed later: an outage may end, and a model that answered
    /// badly once may answer well next time; a refused request stays refused.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable(_) | Self::Malformed(_) => true,
            Self::Rejected(_) => false,
        }
    }
}

/// Who a call is for and what it is, for the provider, the trace and the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLabels {
    /// A name from [`super::trace`].
    pub trace: &'static str,
    pub tenant: Tenant,
    pub session: Option<String>,
}

impl CallLabels {
    pub fn new(trace: &'static str, tenant: &Tenant, session: Option<&str>) -> Self {
        Self {
            trace,
            tenant: tenant.clone(),
            session: session.map(str::to_owned),
        }
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: &str| {
            // Percent-encoding leaves only visible ASCII, which every header value accepts.
            if let Ok(value) = HeaderValue::from_str(&percent_encode(value)) {
                headers.insert(HeaderName::from_static(name), value);
            }
        };
        put(HEADER_TRACE, self.trace);
        put(HEADER_TEAM, &self.tenant.team);
        put(HEADER_AGENT, &self.tenant.agent);
        put(HEADER_USER, &self.tenant.user);
        if let Some(session) = &self.session {
            put(HEADER_SESSION, session);
        }
        headers
    }

    /// The OpenAI `user` field: `team/agent/user`, or its hex SHA-256 when that is too long.
    fn user_field(&self) -> String {
        let user = format!("{}/{}/{}", self.tenant.team, self.tenant.agent, self.tenant.user);
        if user.chars().count() <= MAX_USER_FIELD_CHARS {
            user
        } else {
            sha256_hex(&user)
        }
    }
}

/// The author of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    System,
    User,
    Assistant,
}

/// One message of a chat conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: ChatRole,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: ChatRole::System,
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: ChatRole::User,
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: ChatRole::Assistant,
            content: content.into(),
        }
    }
}

/// What the completions of one call cost, summed over the first call and the repair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Completions that answered (1, or 2 with a repair).
    pub completions: u32,
    /// Prompt tokens as the provider reported them (0 if it reported none).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// A validated answer.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonReply<T> {
    pub value: T,
    pub usage: Usage,
    /// Whether the value came from the repair call.
    pub repaired: bool,
}

/// An OpenAI-compatible chat endpoint. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct ChatClient {
    client: Client,
    url: Url,
    model: String,
    api_key: Option<Secret>,
    retry: RetryPolicy,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
    response_format: ResponseFormat,
    user: &'a str,
}

#[derive(Serialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<UsageBody>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<AssistantMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct AssistantMessage {
    content: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct UsageBody {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

/// One answered completion, not yet validated.
struct Completion {
    content: String,
    /// Why there is no usable content, when there is none (a refusal, an empty answer).
    missing: Option<String>,
    truncated: bool,
    usage: Usage,
}

impl ChatClient {
    /// Validates `settings` and builds the HTTP client. Makes no request: a probe would cost
    /// tokens, and the first real call reports a bad URL or key just as clearly.
    pub fn new(settings: ChatSettings) -> Result<Self, InvalidSettings> {
        if settings.model.trim().is_empty() {
            return Err(InvalidSettings("model is empty".into()));
        }
        if settings.timeout.is_zero() {
            return Err(InvalidSettings("timeout must be positive".into()));
        }
        let url = http_retry::endpoint_url(&settings.base_url, "chat/completions")
            .map_err(|reason| InvalidSettings(format!("base_url {:?}: {reason}", settings.base_url)))?;
        let client = Client::builder()
            .timeout(settings.timeout)
            .build()
            .map_err(|e| InvalidSettings(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            url,
            model: settings.model,
            api_key: settings.api_key,
            retry: RetryPolicy {
                max_retries: settings.max_retries,
                base_delay: settings.retry_base_delay,
            },
        })
    }

    /// The model every request names, for provenance.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Sends `messages` and returns the answer's JSON as `validate` accepts it.
    ///
    /// The answer's JSON is taken leniently (a Markdown code fence, a `<think>` block or prose
    /// around one object are ignored), then handed to `validate`, whose `Err` is a precise,
    /// model-readable reason. On the first `Err`, exactly one repair call follows; a second
    /// `Err` is [`LlmError::Malformed`] with that reason.
    pub async fn complete_json<T, F>(
        &self,
        labels: &CallLabels,
        messages: Vec<Message>,
        validate: F,
    ) -> Result<JsonReply<T>, LlmError>
    where
        F: Fn(Value) -> Result<T, String>,
    {
        let span = tracing::info_span!(
            "llm.call",
            trace = labels.trace,
            team = %labels.tenant.team,
            agent = %labels.tenant.agent,
            user = %labels.tenant.user,
            session = labels.session.as_deref(),
            model = %self.model,
            prompt_tokens = tracing::field::Empty,
            completion_tokens = tracing::field::Empty,
            repaired = tracing::field::Empty,
        );
        self.validated(labels, messages, validate).instrument(span).await
    }

    async fn validated<T, F>(
        &self,
        labels: &CallLabels,
        mut messages: Vec<Message>,
        validate: F,
    ) -> Result<JsonReply<T>, LlmError>
    where
        F: Fn(Value) -> Result<T, String>,
    {
        let trace = labels.trace;
        let mut usage = Usage::default();
        let first = self.complete(labels, &messages, &mut usage).await?;
        let reason = match check(&first, &validate) {
            Ok(value) => return Ok(finish(value, usage, false)),
            Err(reason) => reason,
        };
        ::metrics::counter!(metrics::LLM_MALFORMED, "trace" => trace).increment(1);
        tracing::warn!(%reason, "LLM answer failed validation; asking for a repair");
        tracing::debug!(answer = %http_retry::shorten(&first.content, MAX_LOGGED_ANSWER_CHARS), "invalid LLM answer");
        messages.push(Message::assistant(first.content));
        messages.push(Message::user(repair_request(&reason)));
        let second = match self.complete(labels, &messages, &mut usage).await {
            Ok(second) => second,
            Err(error) => {
                ::metrics::counter!(metrics::LLM_REPAIRS, "trace" => trace, "result" => "error").increment(1);
                return Err(error);
            }
        };
        match check(&second, &validate) {
            Ok(value) => {
                ::metrics::counter!(metrics::LLM_REPAIRS, "trace" => trace, "result" => "ok").increment(1);
                Ok(finish(value, usage, true))
            }
            Err(reason) => {
                ::metrics::counter!(metrics::LLM_MALFORMED, "trace" => trace).increment(1);
                ::metrics::counter!(metrics::LLM_REPAIRS, "trace" => trace, "result" => "failed").increment(1);
                tracing::debug!(answer = %http_retry::shorten(&second.content, MAX_LOGGED_ANSWER_CHARS), "invalid repaired LLM answer");
                Err(LlmError::Malformed(reason))
            }
        }
    }

    /// One completion with retries; adds its usage to `usage`.
    async fn complete(
        &self,
        labels: &CallLabels,
        messages: &[Message],
        usage: &mut Usage,
    ) -> Result<Completion, LlmError> {
        let trace = labels.trace;
        let user = labels.user_field();
        let request = ChatRequest {
            model: &self.model,
            messages,
            response_format: ResponseFormat { kind: "json_object" },
            user: &user,
        };
        let body = http_retry::with_retries(
            self.retry,
            "chat",
            |_| {
                http_retry::post_json(
                    &self.client,
                    &self.url,
                    self.api_key.as_ref(),
                    labels.headers(),
                    &request,
                )
            },
            |report| {
                ::metrics::histogram!(metrics::LLM_LATENCY, "trace" => trace).record(report.elapsed.as_secs_f64());
                let result = match report.outcome {
                    Outcome::Ok => "ok",
                    Outcome::Retry => "retry",
                    Outcome::GaveUp => "unavailable",
                    Outcome::Permanent => "rejected",
                };
                ::metrics::counter!(metrics::LLM_CALLS, "trace" => trace, "result" => result).increment(1);
                if report.outcome == Outcome::Ok {
                    tracing::debug!(
                        attempt = report.attempt,
                        elapsed_ms = report.elapsed.as_millis() as u64,
                        "LLM answered"
                    );
                }
            },
        )
        .await
        .map_err(|error| match error {
            RetryError::Permanent(error) => LlmError::Rejected(Box::new(error)),
            RetryError::Unavailable(error) => LlmError::Unavailable(Box::new(error)),
        })?;
        let completion = parse_completion(&body).map_err(|reason| {
            ::metrics::counter!(metrics::LLM_MALFORMED, "trace" => trace).increment(1);
            LlmError::Malformed(format!("POST {} answered 200 with {reason}", self.url))
        })?;
        let this = completion.usage;
        ::metrics::counter!(metrics::LLM_TOKENS, "trace" => trace, "kind" => "prompt").increment(this.prompt_tokens);
        ::metrics::counter!(metrics::LLM_TOKENS, "trace" => trace, "kind" => "completion")
            .increment(this.completion_tokens);
        usage.completions += this.completions;
        usage.prompt_tokens += this.prompt_tokens;
        usage.completion_tokens += this.completion_tokens;
        let span = tracing::Span::current();
        span.record("prompt_tokens", usage.prompt_tokens);
        span.record("completion_tokens", usage.completion_tokens);
        Ok(completion)
    }
}

fn finish<T>(value: T, usage: Usage, repaired: bool) -> JsonReply<T> {
    tracing::Span::current().record("repaired", repaired);
    JsonReply { value, usage, repaired }
}

/// The first choice of a 2xx body, with this completion's usage.
fn parse_completion(body: &[u8]) -> Result<Completion, String> {
    let response: ChatResponse =
        serde_json::from_slice(body).map_err(|e| format!("a body that is not a chat completion: {e}"))?;
    let Some(choice) = response.choices.into_iter().next() else {
        return Err("a chat completion without choices".into());
    };
    let usage = Usage {
        completions: 1,
        prompt_tokens: response.usage.as_ref().and_then(|u| u.prompt_tokens).unwrap_or(0),
        completion_tokens: response.usage.as_ref().and_then(|u| u.completion_tokens).unwrap_or(0),
    };
    let (content, refusal) = match choice.message {
        Some(message) => (message.content.unwrap_or_default(), message.refusal),
        None => (String::new(), None),
    };
    let missing = match (content.trim().is_empty(), refusal) {
        (true, Some(refusal)) => Some(format!("the model refused: {refusal}")),
        (true, None) => Some("the answer is empty".into()),
        (false, _) => None,
    };
    Ok(Completion {
        content,
        missing,
        truncated: choice.finish_reason.as_deref() == Some("length"),
        usage,
    })
}

/// Parses and validates one answer.
fn check<T>(completion: &Completion, validate: &impl Fn(Value) -> Result<T, String>) -> Result<T, String> {
    if let Some(missing) = &completion.missing {
        return Err(missing.clone());
    }
    let value = json_in(&completion.content).map_err(|reason| {
        if completion.truncated {
            format!("{reason} (the answer was cut off at the output token limit: answer shorter)")
        } else {
            reason
        }
    })?;
    validate(value)
}

/// The JSON value in a model's answer. Models that were asked for JSON still often wrap it in
/// a Markdown fence, prefix it with their reasoning (`<think>...</think>`) or a sentence; all
/// of that is ignored, but only around one complete value.
pub(crate) fn json_in(answer: &str) -> Result<Value, String> {
    let mut text = answer.trim();
    if let Some((_, after)) = text.rsplit_once("</think>") {
        text = after.trim();
    }
    if let Some(fenced) = text.strip_prefix("```") {
        // The fence's info string (`json`) runs to the end of its line.
        let inner = fenced.split_once('\n').map_or("", |(_, rest)| rest);
        text = inner.trim_end().strip_suffix("```").unwrap_or(inner).trim();
    }
    let error = match serde_json::from_str::<Value>(text) {
        Ok(value) => return Ok(value),
        Err(error) => error,
    };
    if let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) {
        if start < end {
            if let Ok(value) = serde_json::from_str::<Value>(&text[start..=end]) {
                return Ok(value);
            }
        }
    }
    Err(format!("the answer is not valid JSON ({error})"))
}

fn repair_request(reason: &str) -> String {
    format!(
        "Your previous answer cannot be used: {reason}.\n\
         Answer again with only the corrected JSON object, in exactly the format the \
         instructions describe, and nothing else: no explanation, no Markdown."
    )
}

/// Every byte outside visible ASCII, and `%` itself, as `%XX`.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(team: &str, agent: &str, user: &str) -> Tenant {
        Tenant {
            team: team.into(),
            agent: agent.into(),
            user: user.into(),
        }
    }

    #[test]
    fn json_is_found_inside_fences_reasoning_and_prose() {
        let expected = serde_json::json!({"cards": []});
        for answer in [
            r#"{"cards": []}"#,
            "```json\n{\"cards\": []}\n```",
            "```\n{\"cards\": []}\n```\n",
            "<think>the user said hi, nothing to keep</think>\n{\"cards\": []}",
            "Here is the JSON:\n{\"cards\": []}\nHope this helps.",
        ] {
            assert_eq!(json_in(answer).unwrap(), expected, "{answer:?}");
        }
        assert_eq!(json_in("[1, 2]").unwrap(), serde_json::json!([1, 2]));
    }

    #[test]
    fn broken_json_is_explained() {
        for answer in ["", "I cannot help with that.", "{\"cards\": [", "{\"a\": 1, \"b\": "] {
            let error = json_in(answer).unwrap_err();
            assert!(
                error.starts_with("the answer is not valid JSON ("),
                "{answer:?}: {error}"
            );
        }
    }

    #[test]
    fn completions_are_parsed_with_their_usage() {
        let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{}"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":120,"completion_tokens":7,"total_tokens":127}}"#;
        let completion = parse_completion(body).unwrap();
        assert_eq!(completion.content, "{}");
        assert!(completion.missing.is_none() && !completion.truncated);
        assert_eq!(
            completion.usage,
            Usage {
                completions: 1,
                prompt_tokens: 120,
                completion_tokens: 7
            }
        );

        let refused = br#"{"choices":[{"message":{"content":null,"refusal":"I can't"},"finish_reason":"stop"}]}"#;
        let completion = parse_completion(refused).unwrap();
        assert_eq!(completion.usage.prompt_tokens, 0, "no usage block");
        assert_eq!(completion.missing.as_deref(), Some("the model refused: I can't"));
        let cut = br#"{"choices":[{"message":{"content":"{\"a\":"},"finish_reason":"length"}]}"#;
        let completion = parse_completion(cut).unwrap();
        let error = check(&completion, &|v| Ok::<_, String>(v)).unwrap_err();
        assert!(error.contains("cut off"), "{error}");

        for (body, expected) in [
            (&b"<html>bad gateway</html>"[..], "not a chat completion"),
            (&br#"{"choices":[]}"#[..], "without choices"),
        ] {
            let error = parse_completion(body).err().unwrap();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn labels_become_encoded_headers_and_a_bounded_user_field() {
        let labels = CallLabels::new(
            "memory.l1-extract",
            &tenant("数据库团队", "dba bot", "u%1"),
            Some("s-1"),
        );
        let headers = labels.headers();
        let get = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_owned();
        assert_eq!(get(HEADER_TRACE), "memory.l1-extract");
        assert_eq!(get(HEADER_TEAM), "%E6%95%B0%E6%8D%AE%E5%BA%93%E5%9B%A2%E9%98%9F");
        assert_eq!(get(HEADER_AGENT), "dba%20bot");
        assert_eq!(get(HEADER_USER), "u%251");
        assert_eq!(get(HEADER_SESSION), "s-1");
        assert_eq!(labels.user_field(), "数据库团队/dba bot/u%1");

        let anonymous = CallLabels::new("session.compact", &tenant("t", "a", "u"), None);
        assert!(anonymous.headers().get(HEADER_SESSION).is_none());
        let long = CallLabels::new("memory.l1-dedup", &tenant(&"t".repeat(100), "a", "u"), None);
        let field = long.user_field();
        assert_eq!(field.len(), 64);
        assert!(field.chars().all(|c| c.is_ascii_hexdigit()), "{field}");
    }

    #[test]
    fn settings_are_validated() {
        let ok = ChatSettings::new("http://localhost:11434/v1", "qwen2.5");
        assert!(ChatClient::new(ok.clone()).is_ok());
        for broken in [
            ChatSettings {
                model: " ".into(),
                ..ok.clone()
            },
            ChatSettings {
                timeout: Duration::ZERO,
                ..ok.clone()
            },
            ChatSettings {
                base_url: "localhost:11434".into(),
                ..ok.clone()
            },
        ] {
            assert!(ChatClient::new(broken.clone()).is_err(), "{broken:?} accepted");
        }
        let from_config = ChatSettings::from_config(&LlmSettings {
            url: "http://x/v1".into(),
            model: "m".into(),
            api_key: Some(Secret::new("k")),
            timeout: Duration::from_secs(5),
            max_retries: 4,
            prompts_dir: None,
        });
        assert_eq!(
            (from_config.timeout, from_config.max_retries, from_config.api_key),
            (Duration::from_secs(5), 4, Some(Secret::new("k")))
        );
    }

    #[test]
    fn errors_classify_themselves() {
        assert!(LlmError::Unavailable("x".into()).is_retryable());
        assert!(LlmError::Malformed("x".into()).is_retryable());
        assert!(!LlmError::Rejected("x".into()).is_retryable());
    }
}
