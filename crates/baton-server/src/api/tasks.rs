//! The user API for tasks: submit (one or a batch), read, list, logs.
//!
//! Submitting goes through `dispatch::submit` (design.md §4.1: the Postgres insert
//! commits first, then the Redis add); this layer checks the input field by field.

#[cfg(test)]
mod tests;

use super::openapi::Errors;
use super::task_ref;
use crate::admission::{admitted, new_task, own_group, sealing_now};
use crate::auth::User;
use crate::dispatch::submit;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;
use crate::views::task_view;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use baton_client::ErrorCode;
use baton_client::TaskRef;
use baton_client::{SubmitBatch, SubmitTask, Task, TaskList};
use baton_core::validate;
use baton_store::{StoreError, TaskRecord};
use uuid::Uuid;

/// The trace context kept with the task, so every later span joins its trace: this
/// request's span when traces are exported (a child of the caller's, if it sent one),
/// otherwise the caller's own `traceparent`, passed through.
pub(super) fn traceparent(headers: &HeaderMap) -> Option<String> {
    baton_client::trace_context::traceparent_of(&tracing::Span::current())
        .or_else(|| caller_traceparent(headers))
}

fn caller_traceparent(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("traceparent")?.to_str().ok()?;
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let well_formed = parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2);
    well_formed.then(|| value.to_ascii_lowercase())
}

/// Submits a task; answered once it is durably accepted.
#[utoipa::path(operation_id = "submit_task", post, path = "/v1/tasks", tag = "tasks", security(("bearer" = [])),
    request_body = SubmitTask,
    responses(
        (status = 201, description = "Accepted: committed, and queued (or scheduled)", body = Task),
        (status = 200, description = "An existing task with this idempotency key", body = Task),
        Errors
    )
)]
pub(crate) async fn submit(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    ApiJson(mut req): ApiJson<SubmitTask>,
) -> Result<(StatusCode, Json<Task>), ApiError> {
    user.require_submit()?;
    own_group(&user, &mut req);
    let seal = sealing_now(&state, std::slice::from_ref(&req)).await;
    let queues = state.queue_defaults.current(&state.store).await?;
    let depends_on = req.depends_on.clone();
    let task = new_task(
        req,
        &queues,
        &state.config.limits,
        &state.webhooks.policy,
        &state.config.timings.retry_backoff(),
        &user.token_id,
        traceparent(&headers),
    )
    .and_then(|t| admitted(&state, &user, t, seal))?;
    let (record, created) = submit_waiting(&state, &user, vec![(task, depends_on)])
        .await?
        .pop()
        .expect("one answer");
    if created {
        tracing::info!(task.id = %record.id, task.queue = %record.queue, "task submitted");
    }
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(task_view(record))))
}

/// Submits a batch of tasks, all or none.
#[utoipa::path(operation_id = "submit_tasks", post, path = "/v1/tasks/batch", tag = "tasks", security(("bearer" = [])),
    request_body = SubmitBatch,
    responses(
        (status = 201, description = "All accepted (existing idempotency keys give their tasks)", body = TaskList),
        (status = 200, description = "Every key already existed", body = TaskList),
        Errors
    )
)]
pub(crate) async fn submit_batch(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    ApiJson(req): ApiJson<SubmitBatch>,
) -> Result<(StatusCode, Json<TaskList>), ApiError> {
    user.require_submit()?;
    let limits = &state.config.limits;
    if req.tasks.is_empty() {
        return Err(validate::Invalid::new("tasks", "a batch needs at least one task").into());
    }
    if req.tasks.len() > limits.max_batch {
        return Err(ApiError::too_large(
            ErrorCode::BatchTooLarge,
            format!(
                "{} tasks in one batch, over the limit of {}",
                req.tasks.len(),
                limits.max_batch
            ),
        ));
    }
    let trace = traceparent(&headers);
    let retry_default = state.config.timings.retry_backoff();
    let seal = sealing_now(&state, &req.tasks).await;
    let queues = state.queue_defaults.current(&state.store).await?;
    let tasks = req
        .tasks
        .into_iter()
        .enumerate()
        .map(|(i, mut t)| {
            own_group(&user, &mut t);
            let depends_on = t.depends_on.clone();
            new_task(
                t,
                &queues,
                limits,
                &state.webhooks.policy,
                &retry_default,
                &user.token_id,
                trace.clone(),
            )
            .and_then(|t| admitted(&state, &user, t, seal))
            .map(|t| (t, depends_on))
            .map_err(|mut e| {
                e.message = format!("tasks[{i}]: {}", e.message);
                e
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rows = submit_waiting(&state, &user, tasks).await?;
    let status = if rows.iter().all(|(_, created)| !created) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(TaskList {
            tasks: rows.into_iter().map(|(t, _)| task_view(t)).collect(),
            next_cursor: None,
        }),
    ))
}

/// Submits `tasks`, each with the tasks it waits for (`depends_on`): the hot path's
/// submit when none waits; else one transaction that writes the tasks with their needs
/// (docs/pipelines.md), each need one the caller may read.
async fn submit_waiting(
    state: &AppState,
    user: &User,
    tasks: Vec<(baton_store::NewTask, Vec<Uuid>)>,
) -> Result<Vec<(TaskRecord, bool)>, ApiError> {
    if tasks.iter().all(|(_, needs)| needs.is_empty()) {
        let tasks = tasks.into_iter().map(|(t, _)| t).collect();
        return Ok(submit::submit(&state.dispatcher, tasks).await?);
    }
    let named: Vec<Uuid> = tasks.iter().flat_map(|(_, n)| n.iter().copied()).collect();
    let found = state.store.tasks_map(&named).await?;
    let owner = user.task_scope()?;
    for id in &named {
        let readable = found
            .get(id)
            .is_some_and(|t| owner.is_none_or(|o| t.created_by == o));
        if !readable {
            return Err(validate::Invalid::new(
                "depends_on",
                format!("no task {id} that this token may read"),
            )
            .into());
        }
    }
    let edges: Vec<(Uuid, Uuid)> = tasks
        .iter()
        .flat_map(|(t, needs)| needs.iter().map(move |n| (t.id, *n)))
        .collect();
    let tasks = tasks.into_iter().map(|(t, _)| t).collect();
    Ok(submit::submit_with_needs(&state.dispatcher, tasks, &edges).await?)
}

/// The task, if this caller may see it: a `submit`-only token sees only its own.
pub(super) async fn visible_task(
    state: &AppState,
    user: &User,
    id: Uuid,
) -> Result<TaskRecord, ApiError> {
    let owner = user.task_scope()?;
    let task = state.store.task_get(id).await?;
    if owner.is_some_and(|o| task.created_by != o) {
        return Err(StoreError::NotFound.into());
    }
    Ok(task)
}

/// Reads a task: its status, attempts, timings and result.
#[utoipa::path(operation_id = "get_task", get, path = "/v1/tasks/{id}", tag = "tasks", security(("bearer" = [])),
    params(("id" = String, Path, description = "Task id, or its short id: the last 12 hex digits of the id")),
    responses((status = 200, description = "The task", body = Task), Errors)
)]
pub(crate) async fn get(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<TaskRef>,
) -> Result<Json<Task>, ApiError> {
    let id = task_ref::resolve(id, &state, &user).await?;
    let task = visible_task(&state, &user, id).await?;
    Ok(Json(
        crate::task_reads::detail(&state.dispatcher, task).await?,
    ))
}

/// Cancels a task: at once if it has not started, through its runner if it runs. Redis
/// follows Postgres: the queue or delayed entry goes, a lease's claim goes (its runner's
/// `start` is refused), and a running task's runner is woken if it is parked.
#[utoipa::path(operation_id = "cancel_task", post, path = "/v1/tasks/{id}/cancel", tag = "tasks", security(("bearer" = [])),
    params(("id" = String, Path, description = "Task id, or its short id: the last 12 hex digits of the id")),
    responses((status = 200, description = "Cancelled, or cancelling while its runner stops it", body = Task), Errors)
)]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<TaskRef>,
) -> Result<Json<Task>, ApiError> {
    let id = task_ref::resolve_to_change(id, &state, &user).await?;
    cancel_one(&state, &user, id)
        .await
        .map(|t| Json(task_view(t)))
}

/// The cancel of one task, as its caller may: the single cancel, and each task of a bulk
/// cancel (`task_actions.rs`).
pub(super) async fn cancel_one(
    state: &AppState,
    user: &User,
    id: Uuid,
) -> Result<TaskRecord, ApiError> {
    user.require_submit()?;
    let owner = user.task_change_scope()?;
    if let Some(owner) = owner
        && user.task_scope()?.is_none()
    {
        // It may see every task: another's is forbidden to it, not missing.
        let task = state.store.task_get(id).await?;
        if task.created_by != owner {
            return Err(ApiError::forbidden(
                "this token may cancel only the tasks it submitted".to_string(),
            ));
        }
    }
    let cancelled = crate::dispatch::cancel::cancel(&state.dispatcher, id, owner).await?;
    let task = &cancelled.task;
    tracing::info!(task.id = %id, from = %cancelled.was, to = %task.status, "task cancel");
    Ok(cancelled.task)
}
