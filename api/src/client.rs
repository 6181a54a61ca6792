//! A small client of the `/v1` API, for the callers inside this binary (the MCP tools, the
//! command line): one call is a method, a path and a JSON body, sent either through the
//! router of an API in this process or over HTTP to a running sediment. Either way the answer
//! is the API's JSON, or its error with the API's `code`.

use axum::http::{header, HeaderMap, Method, StatusCode};
use serde_json::Value;
use tower::ServiceExt as _;

/// Largest answer read (a page of 500 memories fits many times over).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Marks a `/v1` request made in this process by an MCP tool: the `/mcp` request that made it
/// was already counted against the team's rate limit. Only code in this process can set a
/// request extension, so a client cannot claim it.
#[derive(Clone, Copy)]
pub(crate) struct Counted;

/// Where the tools' `/v1` calls go.
#[derive(Clone)]
pub enum Upstream {
    /// The API in this process: each call runs through its router, middleware included.
    /// `counted`: the calls serve `/mcp` requests, which the rate limit has already counted.
    Router { router: axum::Router, counted: bool },
    /// A sediment over HTTP, at `base` (no trailing slash).
    Http { client: reqwest::Client, base: String },
}

/// Why a `/v1` call did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The API answered with an error: its status, `code` and message.
    #[error("{code} ({status}): {message}")]
    Api { status: u16, code: String, message: String },
    /// No answer came, or it could not be read.
    #[error("sediment could not be reached: {0}")]
    Unreachable(String),
}

impl Upstream {
    /// One `/v1` call with `headers`; the answer's JSON (`null` for an empty body).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &HeaderMap,
        body: Option<&Value>,
    ) -> Result<Value, CallError> {
        let (status, bytes) = match self {
            Self::Router { router, counted } => {
                let mut request = axum::http::Request::builder().method(method).uri(path);
                if *counted {
                    request = request.extension(Counted);
                }
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                let body = match body {
                    Some(body) => {
                        request = request.header(header::CONTENT_TYPE, "application/json");
                        axum::body::Body::from(body.to_string())
                    }
                    None => axum::body::Body::empty(),
                };
                let request = request
                    .body(body)
                    .map_err(|e| CallError::Unreachable(format!("build the request: {e}")))?;
                let response = match router.clone().oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES)
                    .await
                    .map_err(|e| CallError::Unreachable(format!("read the answer: {e}")))?;
                (status, bytes.to_vec())
            }
            Self::Http { client, base } => {
                let mut request = client.request(method, format!("{base}{path}")).headers(headers.clone());
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|e| CallError::Unreachable(format!("{base}: {}", shared::runtime::error_chain(&e))))?;
                let status = response.status();
                let bytes = response
                    .bytes()
                    .await
                    .map_err(|e| CallError::Unreachable(format!("read the answer: {e}")))?;
                (status, bytes.to_vec())
            }
        };
        answer(status, &bytes)
    }
}

/// The JSON of a `/v1` answer, or its error.
pub(crate) fn answer(status: StatusCode, bytes: &[u8]) -> Result<Value, CallError> {
    let value: Option<Value> = if bytes.is_empty() {
        Some(Value::Null)
    } else {
        serde_json::from_slice(bytes).ok()
    };
    if status.is_success() {
        return value.ok_or_else(|| CallError::Unreachable(format!("a {status} answer that is not JSON")));
    }
    let field = |name: &str| {
        value
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Err(CallError::Api {
        status: status.as_u16(),
        code: field("code").unwrap_or_else(|| format!("http_{}", status.as_u16())),
        message: field("message").unwrap_or_else(|| String::from_utf8_lossy(bytes).chars().take(200).collect()),
    })
}

/// `name=value` pairs as a query string, the absent ones left out.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let encoded: Vec<String> = pairs
        .iter()
        .filter_map(|(name, value)| value.as_ref().map(|v| format!("{name}={}", encode(v))))
        .collect();
    if encoded.is_empty() {
        String::new()
    } else {
        format!("?{}", encoded.join("&"))
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters (path segments and query values).
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(byte as char),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_the_api_code() {
        let body = br#"{"code":"memory_not_found","message":"no memory 42"}"#;
        let err = answer(StatusCode::NOT_FOUND, body).unwrap_err();
        assert_eq!(err.to_string(), "memory_not_found (404): no memory 42");
        let err = answer(StatusCode::BAD_GATEWAY, b"<html>proxy</html>").unwrap_err();
        assert_eq!(err.to_string(), "http_502 (502): <html>proxy</html>");
        assert_eq!(answer(StatusCode::NO_CONTENT, b"").unwrap(), Value::Null);
        assert!(matches!(
            answer(StatusCode::OK, b"nope"),
            Err(CallError::Unreachable(_))
        ));
    }

    #[test]
    fn queries_and_paths_are_encoded() {
        assert_eq!(encode("a b/c?d&é"), "a%20b%2Fc%3Fd%26%C3%A9");
        assert_eq!(
            query(&[("a", Some("x y".into())), ("b", None), ("c", Some("1".into()))]),
            "?a=x%20y&c=1"
        );
        assert_eq!(query(&[("a", None)]), "");
    }
}
