//! W3C trace context (`traceparent`, `tracestate`) across process boundaries: out of a span
//! into an event on the bus, and from a delivery or an HTTP request into the span that handles
//! it.
//!
//! Context comes from the OpenTelemetry layer, so without an OTLP endpoint there is none to
//! carry: [`TraceContext::of`] is empty and [`TraceContext::set_parent_of`] does nothing. A
//! `traceparent` that arrives at a process that exports nothing therefore ends there. Keeping
//! it alive would mean building OpenTelemetry data for every span of every process, for a trace
//! that no process of this deployment reports; all processes of a deployment normally share one
//! configuration, so either the whole chain exports or none of it does.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Header (HTTP and AMQP) with the trace id, parent span id and sampling flag.
pub const TRACEPARENT: &str = "traceparent";
/// Header with vendor-specific trace state, passed on unchanged.
pub const TRACESTATE: &str = "tracestate";

/// The W3C trace context of a message or request: the raw header values, so that any carrier
/// (AMQP headers, an in-memory message, HTTP headers) can hold it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context that makes `span` the parent of whatever receives it; empty when `span` is
    /// not traced (no exporter, or filtered out).
    pub fn of(span: &tracing::Span) -> Self {
        let mut out = Self::default();
        if span.is_disabled() {
            return out;
        }
        let cx = span.context();
        if cx.span().span_context().is_valid() {
            TraceContextPropagator::new().inject_context(&cx, &mut out);
        }
        out
    }

    /// [`of`](Self::of) the current span.
    pub fn current() -> Self {
        Self::of(&tracing::Span::current())
    }

    /// From header values, e.g. of an incoming HTTP request; blank values count as absent.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Self {
        let clean = |v: Option<&str>| v.map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        Self {
            traceparent: clean(traceparent),
            tracestate: clean(tracestate),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.traceparent.is_none()
    }

    /// Makes `span` a child of this context, so the work it covers joins the sender's trace.
    /// Call it before the span is first entered; a missing or malformed `traceparent` leaves
    /// `span` where it was (a new trace, or its local parent's).
    pub fn set_parent_of(&self, span: &tracing::Span) {
        if self.is_empty() || span.is_disabled() {
            return;
        }
        let cx = TraceContextPropagator::new().extract(self);
        if cx.span().span_context().is_valid() {
            // Fails only when the layer is absent or the span already started; either way the
            // span keeps its local parent, which is the best left to do.
            let _ = span.set_parent(cx);
        }
    }
}

impl Injector for TraceContext {
    fn set(&mut self, key: &str, value: String) {
        match key {
            TRACEPARENT => self.traceparent = Some(value),
            TRACESTATE => self.tracestate = Some(value).filter(|v| !v.is_empty()),
            _ => {}
        }
    }
}

impl Extractor for TraceContext {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => self.traceparent.as_deref(),
            TRACESTATE => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        let mut keys = Vec::with_capacity(2);
        if self.traceparent.is_some() {
            keys.push(TRACEPARENT);
        }
        if self.tracestate.is_some() {
            keys.push(TRACESTATE);
        }
        keys
    }
}

/// The producer span of one publish: a child of the current span, and the parent of the
/// consumer span of every delivery of the message.
pub fn publish_span(routing_key: &'static str, system: &'static str) -> tracing::Span {
    tracing::info_span!(
        "publish",
        otel.name = %format!("publish {routing_key}"),
        otel.kind = "producer",
        messaging.system = system,
        "messaging.operation.type" = "send",
        messaging.destination.name = routing_key,
        messaging.message.id = tracing::field::Empty,
    )
}

/// The consumer span of one delivery, parented to the publisher's span when the message
/// carries its context.
pub fn consume_span(worker: &'static str, message_id: &str, attempt: u32, trace: &TraceContext) -> tracing::Span {
    let span = tracing::info_span!(
        "process",
        otel.name = %format!("process {worker}"),
        otel.kind = "consumer",
        "messaging.operation.type" = "process",
        messaging.consumer.group.name = worker,
        messaging.message.id = message_id,
        messaging.message.delivery_attempt = attempt,
        otel.status_code = tracing::field::Empty,
    );
    trace.set_parent_of(&span);
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_layer_nothing_is_carried_and_nothing_breaks() {
        let incoming = TraceContext::from_headers(
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some(" "),
        );
        assert_eq!(incoming.tracestate, None);
        let span = consume_span("index", "m-1", 1, &incoming);
        let _entered = span.enter();
        assert!(TraceContext::current().is_empty());
    }

    #[test]
    fn the_header_names_round_trip() {
        let mut cx = TraceContext::default();
        cx.set(TRACEPARENT, "tp".into());
        cx.set(TRACESTATE, "a=b".into());
        cx.set("other", "x".into());
        assert_eq!(cx.get(TRACEPARENT), Some("tp"));
        assert_eq!(cx.get(TRACESTATE), Some("a=b"));
        assert_eq!(cx.keys(), vec![TRACEPARENT, TRACESTATE]);
    }
}
