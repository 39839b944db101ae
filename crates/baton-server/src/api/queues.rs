//! Queues as operators see and steer them (docs/flow-control.md): `GET /v1/queues`,
//! pause/resume, and the defaults their tasks take. Postgres holds the paused flag; Redis' `paused` set, which the lease
//! script reads, follows it (and the repair pass mends the set if a node died between
//! the two).

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::queue_defaults;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_client::{QueueDefaults, QueueList, QueueView};
use baton_core::validate;
use baton_store::QueueRecord;

fn queue_view(q: QueueRecord) -> QueueView {
    let defaults = q.defaults.and_then(|d| queue_defaults::read(&q.name, d.0));
    QueueView {
        name: q.name,
        paused: q.paused,
        depth: q.waiting,
        running: q.running,
        oldest_waiting: q.oldest_waiting,
        paused_at: q.paused_at,
        resumed_at: q.resumed_at,
        defaults,
    }
}

/// Lists the queues: waiting and running counts, pause state and defaults.
#[utoipa::path(operation_id = "list_queues", get, path = "/v1/queues", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "Every queue with settings, unfinished tasks or tasks in the last hour", body = QueueList), Errors)
)]
pub(super) async fn queues(
    State(state): State<AppState>,
    user: User,
) -> Result<Json<QueueList>, ApiError> {
    user.require_read()?;
    let mut queues: Vec<QueueView> = state
        .store
        .queues_list(None)
        .await?
        .into_iter()
        .map(queue_view)
        .collect();
    // A queue whose backlog drained stays listed while it has history: an operator
    // looking for the queue that just finished its work finds it, at zero.
    for name in super::trends::recently_busy(&state).await {
        if !queues.iter().any(|q| q.name == name) {
            queues.push(QueueView {
                name,
                paused: false,
                depth: 0,
                running: 0,
                oldest_waiting: None,
                paused_at: None,
                resumed_at: None,
                defaults: None,
            });
        }
    }
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(QueueList { queues }))
}

/// Postgres first (the truth), then Redis: a node killed in between leaves a flag the
/// repair pass mirrors. A Redis failure is answered 503 and the call may be repeated
/// (it is idempotent), since until the mirror holds, a pause is not in force.
async fn set_paused(
    state: AppState,
    user: User,
    name: String,
    paused: bool,
) -> Result<Json<QueueView>, ApiError> {
    user.require_admin()?;
    validate::check_queue(&name)?;
    state
        .store
        .queue_set_paused(&name, paused, state.clock.now())
        .await?;
    state.coord.queue_paused_set(&name, paused).await?;
    tracing::info!(queue = %name, paused, "queue paused or resumed");
    queue_now(&state, &name).await
}

async fn queue_now(state: &AppState, name: &str) -> Result<Json<QueueView>, ApiError> {
    let queue = state.store.queues_list(Some(name)).await?.pop();
    Ok(Json(queue.map(queue_view).ok_or_else(|| {
        ApiError::not_found(format!("queue {name} vanished"))
    })?))
}

/// Sets a queue's defaults, which tasks submitted to it without their own take.
#[utoipa::path(operation_id = "set_queue_defaults", put, path = "/v1/queues/{name}/defaults", tag = "admin", security(("bearer" = [])),
    params(("name" = String, Path, description = "Queue name", pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")),
    request_body = QueueDefaults,
    responses((status = 200, description = "Set: tasks submitted to the queue from now on take them (on every node within a second); `{}` clears them", body = QueueView), Errors)
)]
pub(super) async fn set_defaults(
    State(state): State<AppState>,
    user: User,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<QueueDefaults>,
) -> Result<Json<QueueView>, ApiError> {
    user.require_admin()?;
    validate::check_queue(&name)?;
    let defaults = queue_defaults::checked(
        &name,
        req,
        &state.config.limits,
        &state.config.timings.retry_backoff(),
    )?;
    let stored = (!defaults.is_empty())
        .then(|| serde_json::to_value(&defaults).expect("defaults serialise"));
    state
        .store
        .queue_set_defaults(&name, stored.as_ref(), state.clock.now())
        .await?;
    state.queue_defaults.forget();
    tracing::info!(queue = %name, defaults = ?stored, "queue defaults set");
    queue_now(&state, &name).await
}

/// Pauses a queue: its tasks stay queued and none is leased until it is resumed.
#[utoipa::path(operation_id = "pause_queue", post, path = "/v1/queues/{name}/pause", tag = "admin", security(("bearer" = [])),
    params(("name" = String, Path, description = "Queue name", pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")),
    responses((status = 200, description = "Paused: it hands out nothing, takes submits, and its tasks do not expire", body = QueueView), Errors)
)]
pub(super) async fn pause(
    State(state): State<AppState>,
    user: User,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<QueueView>, ApiError> {
    set_paused(state, user, name, true).await
}

/// Resumes a paused queue: its waiting tasks are leased again.
#[utoipa::path(operation_id = "resume_queue", post, path = "/v1/queues/{name}/resume", tag = "admin", security(("bearer" = [])),
    params(("name" = String, Path, description = "Queue name", pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")),
    responses((status = 200, description = "Resumed: its tasks go out at once; their queue timeout counts again from now", body = QueueView), Errors)
)]
pub(super) async fn resume(
    State(state): State<AppState>,
    user: User,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<QueueView>, ApiError> {
    set_paused(state, user, name, false).await
}
