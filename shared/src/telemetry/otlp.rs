//! The OTLP/HTTP span exporter, on the binary's own reqwest client.
//!
//! The SDK's batch processor exports from a thread of its own, outside any Tokio runtime, while
//! reqwest's async client needs one; so each export is spawned onto the runtime that was
//! current at start-up and the processor's thread just waits for it. That keeps a single HTTP
//! stack in the binary (no blocking client, no hyper copy).
//!
//! The processor's queue is bounded (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048 spans by default): when
//! the collector is down or slow, new spans are dropped rather than held, and ending a span
//! never waits for the network.

use std::time::Duration;

use async_trait::async_trait;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{filter_fn, FilterFn};

use crate::config::TraceSettings;

/// How long one export request may take, connection included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
const TRACES_PATH: &str = "/v1/traces";
/// Standard variables that turn export on when `SEDIMENT_OTLP_ENDPOINT` is unset.
const OTEL_ENDPOINT_VARS: &[&str] = &["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// The tracer provider that exports to the configured endpoint, or `None` when no endpoint is
/// configured or there is no Tokio runtime to export on.
pub(super) fn provider(service: &str, settings: &TraceSettings) -> Result<Option<SdkTracerProvider>, String> {
    let endpoint = match &settings.otlp_endpoint {
        Some(url) => Some(traces_url(url)),
        // The exporter reads the standard variables itself (and appends `/v1/traces` to the
        // generic one, per the OTLP spec).
        None if OTEL_ENDPOINT_VARS.iter().any(|var| env_set(var)) => None,
        None => return Ok(None),
    };
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| "no Tokio runtime to export on".to_owned())?;
    let client = reqwest::Client::builder()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("build the OTLP HTTP client: {e}"))?;
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(ReqwestOnRuntime { client, runtime })
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(EXPORT_TIMEOUT);
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    let exporter = builder.build().map_err(|e| format!("build the OTLP exporter: {e}"))?;

    let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    // The standard variable names the service in a deployment that renames it; else the binary.
    if !env_set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(service.to_owned());
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sample_ratio,
        ))))
        .with_resource(resource.build())
        .build();
    Ok(Some(provider))
}

/// What becomes part of a trace: spans at `info` and above, and `warn` and `error` events (as
/// span events); never the exporter's own HTTP calls, whose spans would need exporting in turn.
pub(super) fn span_filter() -> FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    filter_fn(|metadata| {
        let target = metadata.target();
        let wanted = if metadata.is_span() {
            *metadata.level() <= tracing::Level::INFO
        } else {
            *metadata.level() <= tracing::Level::WARN
        };
        wanted
            && !["hyper", "h2", "reqwest", "rustls", "opentelemetry"]
                .iter()
                .any(|prefix| target.starts_with(prefix))
    })
}

/// `base` with the OTLP traces path, unless it already names it.
fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with(TRACES_PATH) {
        base.to_owned()
    } else {
        format!("{base}{TRACES_PATH}")
    }
}

fn env_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

/// Sends the exporter's requests with reqwest on a Tokio runtime, whatever thread asks.
#[derive(Debug)]
struct ReqwestOnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for ReqwestOnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let exchange = async move {
            let (parts, body) = request.into_parts();
            let response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            let mut out = Response::new(body);
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok::<_, HttpError>(out)
        };
        self.runtime.spawn(exchange).await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("https://c/otlp"), "https://c/otlp/v1/traces");
    }
}
