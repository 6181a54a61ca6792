//! Logging and tracing set-up shared by every binary.
//!
//! Every binary logs through `tracing`. With an OTLP endpoint configured
//! ([`TraceSettings`](crate::config::TraceSettings)), its spans are also exported to an
//! OpenTelemetry collector; without one no OpenTelemetry layer is installed at all, so the
//! cost is that of plain `tracing` spans. [`propagate`] carries the W3C trace context through
//! the event bus, so one ingest and the worker deliveries it causes form a single trace.

mod otlp;
pub mod propagate;

use std::time::Duration;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::TraceSettings;

/// How long a binary's exit may wait for its last spans to reach the collector: short, since
/// it comes on top of the drain and a collector that is down must not eat the grace period.
pub const FLUSH_DEADLINE: Duration = Duration::from_secs(2);

/// What [`init`] installed that needs an orderly end: the span exporter, whose queued spans
/// are lost unless [`Telemetry::shutdown`] flushes them.
#[must_use = "call shutdown() before exiting, or queued spans are lost"]
pub struct Telemetry {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still queued and stops the exporter, giving up after `deadline` (a
    /// collector that is down must not hold up the exit).
    pub async fn shutdown(self, deadline: Duration) {
        let Some(provider) = self.provider else {
            return;
        };
        // The flush blocks its thread while the export runs on this runtime: keep it off the
        // runtime's workers, or a single-threaded runtime would wait for itself.
        let flush = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(deadline));
        match tokio::time::timeout(deadline + Duration::from_millis(500), flush).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(error = %error, "trace exporter did not flush"),
            Ok(Err(error)) => tracing::warn!(error = %error, "trace exporter flush panicked"),
            Err(_) => tracing::warn!("trace exporter flush timed out"),
        }
    }
}

/// Installs the global `tracing` subscriber: logs to stderr, and spans to the OTLP endpoint of
/// `traces` if there is one, as service `service`. `RUST_LOG` wins over `default_filter` for
/// the logs; traces take `info` spans whatever the log level. Calling it twice is harmless (the second call keeps the first subscriber and exports
/// nothing), so tests may call it too. Export needs a Tokio runtime: call it from one.
pub fn init(service: &str, default_filter: &str, format: &str, traces: &TraceSettings) -> Telemetry {
    // The log filter is the logs' alone: `SEDIMENT_LOG=warn` must not empty the traces.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let logs = if format == "json" {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .json()
            .with_filter(filter)
            .boxed()
    } else {
        // stderr, as the docs say: `sediment mcp` keeps stdout for the protocol alone.
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_filter(filter)
            .boxed()
    };
    let provider = otlp::provider(service, traces).unwrap_or_else(|error| {
        // No subscriber yet to log through; a broken exporter must not stop the service.
        eprintln!("trace export disabled: {error}");
        None
    });
    let spans = provider.as_ref().map(|provider| {
        let tracer = opentelemetry::trace::TracerProvider::tracer(provider, "sediment");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_filter(otlp::span_filter())
    });
    let result = tracing_subscriber::registry().with(logs).with(spans).try_init();
    if result.is_err() {
        // Someone else's subscriber is in place; ours would never see a span.
        if let Some(provider) = provider {
            let _ = provider.shutdown();
        }
        return Telemetry { provider: None };
    }
    tracing::info!(
        service,
        version = env!("CARGO_PKG_VERSION"),
        traces = provider.is_some(),
        "starting"
    );
    Telemetry { provider }
}
