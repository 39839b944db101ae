//! W3C trace context across processes: one trace per task, whichever node or runner
//! handles it. The context travels in `traceparent` headers between processes and is
//! stored with the task (and handed to its runner with the lease) between requests.
//!
//! Everything here is a no-op when no tracer is installed: spans have no OpenTelemetry
//! context, so nothing is injected and parents set on them are ignored.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header, and the key of a stored context, that carries a trace across processes.
pub const TRACEPARENT: &str = "traceparent";

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Adds the current span's context to outgoing request headers.
pub fn inject_current(headers: &mut HeaderMap) {
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    }
}

/// The caller's context from incoming request headers (empty when there is none).
pub fn extract(headers: &HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// A stored `traceparent` as a parent context.
pub fn from_traceparent(traceparent: &str) -> Context {
    let carrier = HashMap::from([(TRACEPARENT.to_string(), traceparent.to_string())]);
    TraceContextPropagator::new().extract(&carrier)
}

/// The `traceparent` of `span`, to store or hand on; `None` when it is not traced.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` a child of the stored `traceparent`, if there is one. Call it before the
/// span is entered: a span's parent is fixed once it starts.
pub fn adopt_parent(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(tp) = traceparent {
        let parent = from_traceparent(tp);
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_traceparent_round_trips_through_a_context() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = from_traceparent(tp);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        assert_eq!(carrier.get(TRACEPARENT).map(String::as_str), Some(tp));
    }

    #[test]
    fn garbage_gives_no_parent() {
        assert!(
            !from_traceparent("00-xyz-01")
                .span()
                .span_context()
                .is_valid()
        );
    }
}
