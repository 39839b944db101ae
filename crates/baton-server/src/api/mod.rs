//! The HTTP surface (design.md §6).

mod admin;
mod logs;
mod ops;
mod runner;
mod tasks;
pub mod views;

use crate::state::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tower_http::trace::{DefaultMakeSpan, TraceLayer};
use tracing::Level;

pub fn router(state: AppState) -> Router {
    let limits = &state.config.limits;
    // Log chunks are raw bytes with a limit of their own (answered 413 JSON).
    let runner_logs = post(runner::logs).layer(DefaultBodyLimit::max(limits.max_log_chunk_bytes));
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/v1/tasks", post(tasks::submit).get(tasks::list))
        .route("/v1/tasks/batch", post(tasks::submit_batch))
        .route("/v1/tasks/{id}", get(tasks::get))
        .route("/v1/tasks/{id}/logs", get(logs::logs))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel))
        .route("/v1/runners", get(admin::runners))
        .route(
            "/v1/runners/{id}",
            axum::routing::delete(admin::runner_delete),
        )
        .route("/v1/runners/{id}/pause", post(admin::runner_pause))
        .route("/v1/runners/{id}/resume", post(admin::runner_resume))
        .route("/v1/tokens", post(admin::token_create).get(admin::tokens))
        .route(
            "/v1/tokens/{id}",
            axum::routing::delete(admin::token_revoke),
        )
        .route(
            "/v1/registration-tokens",
            post(admin::registration_token_create),
        )
        .route("/v1/nodes", get(ops::nodes))
        .route("/v1/runner/register", post(runner::register))
        .route("/v1/runner/heartbeat", post(runner::heartbeat))
        .route("/v1/runner/unregister", post(runner::unregister))
        .route("/v1/runner/lease", post(runner::lease))
        .route("/v1/runner/tasks/{id}/start", post(runner::start))
        .route("/v1/runner/tasks/{id}/logs", runner_logs)
        .route("/v1/runner/tasks/{id}/complete", post(runner::complete))
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(TraceLayer::new_for_http().make_span_with(DefaultMakeSpan::new().level(Level::INFO)))
        .with_state(state)
}
