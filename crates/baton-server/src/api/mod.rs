//! The HTTP surface (design.md §6).

mod admin;
mod attempts;
mod body_deadline;
mod bulk;
mod draining;
mod events;
mod http_span;
mod logs;
mod metrics;
mod openapi;
mod ops;
pub(crate) mod pipelines;
mod provisioning;
mod queues;
mod rerun;
mod runner;
mod runner_version;
mod schedules;
mod task_list;
mod task_ref;
pub(crate) mod tasks;
mod trends;
mod unread_body;
mod webhooks;

use crate::config::Limits;
use crate::state::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

/// Every route, each registered together with its OpenAPI description.
pub(crate) fn router(state: AppState) -> Router {
    // A node serves /metrics, so its process needs a recorder (installed once).
    crate::metrics::install();
    let limits = state.config.limits.clone();
    let (router, mut document) = routes(&limits);
    openapi::bounds::state(&mut document, &limits);
    let _ = state.openapi.set(document);
    router
        .merge(crate::ui::router())
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            body_deadline::bound_body_reads,
        ))
        .layer(axum::middleware::from_fn(runner_version::gate))
        // Outside every refusal, the version gate's 426 included.
        .layer(axum::middleware::from_fn(unread_body::drain_when_unread))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            draining::close_connections,
        ))
        .layer(axum::middleware::from_fn(crate::metrics::track_http))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(http_span::make_span)
                .on_response(http_span::on_response),
        )
        .with_state(state)
}

/// The routes and the OpenAPI document describing them, with the bounds the wire types
/// declare (`openapi::bounds` makes them those of the node's limits).
fn routes(limits: &Limits) -> (Router<AppState>, serde_json::Value) {
    // Log chunks are raw bytes with a limit of their own (answered 413 JSON).
    let runner_logs: UtoipaMethodRouter<AppState> = {
        let (schemas, paths, method) = routes!(runner::logs);
        (
            schemas,
            paths,
            method.layer(DefaultBodyLimit::max(limits.max_log_chunk_bytes)),
        )
    };
    // Registration takes no bearer token: what anyone may make the node read stays small.
    let register: UtoipaMethodRouter<AppState> = {
        let (schemas, paths, method) = routes!(runner::register);
        (
            schemas,
            paths,
            method.layer(DefaultBodyLimit::max(limits.max_registration_body_bytes)),
        )
    };
    let (router, document) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(metrics::metrics))
        .routes(routes!(openapi::openapi_json))
        .routes(routes!(tasks::submit, task_list::list))
        .routes(routes!(task_list::count))
        .routes(routes!(tasks::submit_batch))
        .routes(routes!(tasks::get))
        .routes(routes!(logs::logs))
        .routes(routes!(logs::marks))
        .routes(routes!(attempts::attempts))
        .routes(routes!(tasks::cancel))
        .routes(routes!(schedules::create, schedules::list))
        .routes(routes!(
            schedules::get,
            schedules::update,
            schedules::delete
        ))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::trigger))
        .routes(routes!(rerun::retry))
        .routes(routes!(pipelines::submit, pipelines::list))
        .routes(routes!(pipelines::get))
        .routes(routes!(pipelines::cancel))
        .routes(routes!(pipelines::retry_job))
        .routes(routes!(bulk::cancel_many))
        .routes(routes!(bulk::retry_many))
        .routes(routes!(admin::runners))
        .routes(routes!(admin::runner_delete))
        .routes(routes!(admin::runner_pause))
        .routes(routes!(admin::runner_resume))
        .routes(routes!(queues::queues))
        .routes(routes!(provisioning::demand))
        .routes(routes!(provisioning::provisioners))
        .routes(routes!(trends::trends))
        .routes(routes!(queues::pause))
        .routes(routes!(queues::resume))
        .routes(routes!(queues::set_defaults))
        .routes(routes!(admin::me))
        .routes(routes!(admin::token_create, admin::tokens))
        .routes(routes!(admin::token_revoke))
        .routes(routes!(
            admin::registration_token_create,
            admin::registration_tokens
        ))
        .routes(routes!(admin::registration_token_revoke))
        .routes(routes!(webhooks::secret))
        .routes(routes!(ops::nodes))
        .routes(routes!(events::events))
        .routes(register)
        .routes(routes!(runner::heartbeat))
        .routes(routes!(runner::unregister))
        .routes(routes!(runner::lease))
        .routes(routes!(runner::exchange))
        .routes(routes!(runner::start))
        .routes(runner_logs)
        .routes(routes!(runner::complete))
        .split_for_parts();
    let mut document = document;
    utoipa::Modify::modify(&openapi::CommandOrScript, &mut document);
    utoipa::Modify::modify(&openapi::OpenOperationsAndServer, &mut document);
    let document = serde_json::to_value(&document).expect("the OpenAPI document serialises");
    (router, document)
}
