//! A fake OpenTelemetry collector: accepts OTLP/HTTP protobuf trace exports
//! (`POST /v1/traces`) and records every span, so tests can check what a process exported.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

/// One exported span, ids as lowercase hex (empty parent: a root span).
#[derive(Debug, Clone)]
pub struct RecordedSpan {
    /// `service.name` of the resource that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// OTLP `SpanKind`: 2 server, 4 producer, 5 consumer.
    pub kind: i32,
    /// Attributes with string, integer or boolean values, as text.
    pub attributes: HashMap<String, String>,
}

pub const KIND_SERVER: i32 = 2;
pub const KIND_PRODUCER: i32 = 4;
pub const KIND_CONSUMER: i32 = 5;

#[derive(Clone, Default)]
struct Recorded {
    spans: Arc<Mutex<Vec<RecordedSpan>>>,
    requests: Arc<Mutex<u64>>,
}

/// The running collector; stops when dropped.
pub struct FakeCollector {
    /// Base URL, for `SEDIMENT_OTLP_ENDPOINT`.
    pub endpoint: String,
    recorded: Recorded,
    server: tokio::task::JoinHandle<()>,
}

impl FakeCollector {
    pub async fn start() -> FakeCollector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let recorded = Recorded::default();
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(recorded.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeCollector {
            endpoint: format!("http://{addr}"),
            recorded,
            server,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<RecordedSpan> {
        self.recorded
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Export requests received so far (including empty ones).
    pub fn requests(&self) -> u64 {
        *self.recorded.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `done` holds for the spans received, or panics after `timeout` with what
    /// arrived.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[RecordedSpan]) -> bool,
    ) -> Vec<RecordedSpan> {
        let start = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                start.elapsed() < timeout,
                "the collector did not receive {what} within {timeout:?}; it has:\n{}",
                describe(&spans)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for FakeCollector {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// One line per span, for assertion messages.
pub fn describe(spans: &[RecordedSpan]) -> String {
    spans
        .iter()
        .map(|s| {
            format!(
                "  {} {:?} kind={} trace={} span={} parent={}",
                s.service, s.name, s.kind, s.trace_id, s.span_id, s.parent_span_id
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn export(State(recorded): State<Recorded>, body: Bytes) -> impl IntoResponse {
    *recorded.requests.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| attributes(&r.attributes).remove("service.name"))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(RecordedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                });
            }
        }
    }
    recorded
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(spans);
    let response = ExportTraceServiceResponse::default().encode_to_vec();
    ([(header::CONTENT_TYPE, "application/x-protobuf")], response).into_response()
}

fn attributes(list: &[KeyValue]) -> HashMap<String, String> {
    list.iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => s.clone(),
                Value::IntValue(i) => i.to_string(),
                Value::BoolValue(b) => b.to_string(),
                Value::DoubleValue(d) => d.to_string(),
                Value::ArrayValue(_) | Value::KvlistValue(_) | Value::BytesValue(_) | Value::StringValueStrindex(_) => {
                    return None
                }
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
