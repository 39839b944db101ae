//! One server span per HTTP request, named after its route (never the raw path, which
//! holds ids), with its status and, for task routes, the task id. A request that carries
//! a `traceparent` continues the caller's trace: a runner's start, log and complete
//! calls join their task's trace this way, on whichever node they land.

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use baton_client::trace_context;
use std::time::Duration;
use tracing::Span;
use tracing::field::Empty;

pub(super) fn make_span(request: &Request) -> Span {
    let method = request.method().as_str();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
        .unwrap_or("unmatched");
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        http.route = route,
        url.path = request.uri().path(),
        http.response.status_code = Empty,
        task.id = Empty,
    );
    if let Some(task) = task_id(route, request.uri().path()) {
        span.record("task.id", task);
    }
    let parent = trace_context::extract(request.headers());
    if opentelemetry::trace::TraceContextExt::span(&parent)
        .span_context()
        .is_valid()
    {
        let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
    }
    span
}

pub(super) fn on_response(response: &Response, _latency: Duration, span: &Span) {
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

/// The `{id}` of a task route (`/v1/tasks/{id}...`, `/v1/runner/tasks/{id}/...`).
fn task_id<'a>(route: &str, path: &'a str) -> Option<&'a str> {
    if !route.contains("tasks/{id}") {
        return None;
    }
    let mut segments = path.split('/');
    segments.find(|s| *s == "tasks")?;
    segments.next().filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::task_id;

    #[test]
    fn the_task_id_comes_from_task_routes_only() {
        let id = "0190a0b0-0000-7000-8000-000000000001";
        assert_eq!(
            task_id("/v1/tasks/{id}", &format!("/v1/tasks/{id}")),
            Some(id)
        );
        assert_eq!(
            task_id(
                "/v1/runner/tasks/{id}/complete",
                &format!("/v1/runner/tasks/{id}/complete")
            ),
            Some(id)
        );
        assert_eq!(task_id("/v1/tasks", "/v1/tasks"), None);
        assert_eq!(task_id("/v1/runners/{id}", "/v1/runners/x"), None);
    }
}
