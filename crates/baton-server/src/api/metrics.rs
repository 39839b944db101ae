//! `GET /metrics`: Prometheus text. Unauthenticated, like `/healthz`: what it shows is
//! counts and timings, no task data, and a scraper should need no token (put the port
//! behind the network policy that guards the other operations endpoints).

use crate::state::AppState;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

/// The Prometheus text exposition format.
const CONTENT: &str = "text/plain; version=0.0.4";

/// This node's metrics (docs/metrics.md). Cluster-wide gauges (queue depths, tasks by
/// status, live nodes) are read from Redis and Postgres at scrape time, within a bound;
/// if they cannot be read the scrape still answers, with their last values.
#[utoipa::path(operation_id = "get_metrics", get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", content_type = "text/plain; version=0.0.4", body = String))
)]
pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    crate::metrics::refresh(&state).await;
    let text = crate::metrics::install().render();
    let mut text = crate::metrics::cpu_seconds_as_a_counter(text);
    text.push_str(&crate::metrics::render_queue_depths());
    ([(CONTENT_TYPE, CONTENT)], text)
}
