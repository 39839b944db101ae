//! Re-running an ended task (`POST /v1/tasks/{id}/retry`): a new task made from the old
//! one's definition, linked both ways — `retry_of` on the new task, `retried_by` in the
//! old task's view — so the old task's end stays what it was (a terminal status is never
//! left, and `failed` stays final).
//!
//! One re-run per task: the re-run carries the idempotency key `retry-of:<id>` under the
//! old task's owner, so a resent request, a double click or two nodes asked at once make
//! one task, and asking again answers 200 with it. To run it once more, re-run the re-run.
//!
//! The re-run is a submit like any other (`dispatch::submit`: Postgres first, then
//! Redis), its definition checked again against the node's limits and the caller's token
//! limits. It keeps the old task's owner, so whoever saw and could cancel the old task
//! sees and can cancel the new one. A task that ran with `secret_env` is refused
//! (409 `secrets_erased`): the values were erased when it ended, and a re-run without
//! them would be another task under the same name.

use super::openapi::Errors;
use super::task_ref;
use super::tasks::traceparent;
use crate::admission::{admitted, new_task};
use crate::auth::User;
use crate::dispatch::submit;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::state::AppState;
use crate::views::task_view;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use baton_client::ErrorCode;
use baton_client::TaskRef;
use baton_client::{SubmitTask, Task};
use baton_store::{StoreError, TaskRecord, rerun_key};
use uuid::Uuid;

/// Re-runs an ended task as a new task.
#[utoipa::path(operation_id = "retry_task", post, path = "/v1/tasks/{id}/retry", tag = "tasks", security(("bearer" = [])),
    params(("id" = String, Path, description = "Task id, or its short id: the last 12 hex digits of the id")),
    responses(
        (status = 201, description = "Re-run as a new task, linked by `retry_of`", body = Task),
        (status = 200, description = "The task already had its re-run: that task", body = Task),
        Errors
    )
)]
pub(super) async fn retry(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    ApiPath(id): ApiPath<TaskRef>,
) -> Result<(StatusCode, Json<Task>), ApiError> {
    let id = task_ref::resolve_to_change(id, &state, &user).await?;
    let old = changeable(&state, &user, id).await?;
    let (rerun, created) = rerun_one(&state, &user, old, traceparent(&headers)).await?;
    let status = if created {
        tracing::info!(task.id = %rerun.id, retry_of = %id, "task re-run");
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(task_view(rerun))))
}

/// Task `id`, if this caller may change it — as for a cancel: `admin` any task, a
/// `submit` token those it submitted; another's is not found when it may not see it,
/// forbidden when it may (`docs/authorization.md`).
async fn changeable(state: &AppState, user: &User, id: Uuid) -> Result<TaskRecord, ApiError> {
    user.require_submit()?;
    let owner = user.task_change_scope()?;
    let task = state.store.task_get(id).await?;
    match owner {
        Some(owner) if task.created_by != owner => Err(if user.task_scope()?.is_none() {
            ApiError::forbidden("this token may re-run only the tasks it submitted")
        } else {
            StoreError::NotFound.into()
        }),
        _ => Ok(task),
    }
}

/// Re-runs `old`, which the caller may change: the re-run and whether this call made it
/// (false: it existed). Each task of a bulk retry goes through here too.
pub(super) async fn rerun_one(
    state: &AppState,
    user: &User,
    old: TaskRecord,
    traceparent: Option<String>,
) -> Result<(TaskRecord, bool), ApiError> {
    if !old.status.is_terminal() {
        return Err(StoreError::Conflict {
            status: old.status,
            reason: "the task has not ended: only an ended task is re-run (cancel it first)",
        }
        .into());
    }
    if let Some(rerun) = state.store.task_rerun(&old).await? {
        return Ok((rerun, false));
    }
    if !old.secret_env.0.is_empty() {
        let names: Vec<&str> = old.secret_env.0.keys().map(String::as_str).collect();
        return Err(ApiError {
            task_status: Some(old.status),
            ..ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::SecretsErased,
                format!(
                    "the task ran with secret_env ({}), whose values were erased when it \
                     ended; a re-run cannot have them: submit it again with its secrets",
                    names.join(", ")
                ),
            )
        });
    }
    let queues = state.queue_defaults.current(&state.store).await?;
    if old.pipeline_id.is_some() {
        return rerun_job(state, user, old, &queues, traceparent).await;
    }
    let mut task = new_task(
        definition(&old),
        &queues,
        &state.config.limits,
        &state.webhooks.policy,
        &state.config.timings.retry_backoff(),
        &old.created_by,
        traceparent,
    )
    .map_err(|mut e| {
        e.message = format!("the re-run no longer passes: {}", e.message);
        e
    })?;
    task.retry_of = Some(old.id);
    task.idempotency_key = Some(rerun_key(&old));
    let task = admitted(state, user, task, true)?;
    let (rerun, created) = submit::submit(&state.dispatcher, vec![task])
        .await?
        .pop()
        .expect("one answer");
    if rerun.retry_of != Some(old.id) {
        // Only a task its owner submitted with this very key can hold it.
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::Conflict,
            format!(
                "task {} holds the idempotency key of this task's re-run (retry-of:{})",
                rerun.id, old.id
            ),
        ));
    }
    Ok((rerun, created))
}

/// Re-runs a pipeline's job (docs/pipelines.md): a new task for it and for each job it
/// had skipped, each checked as a re-run is, in one transaction
/// (`Store::pipeline_rerun_job`); then told and queued as a submit's.
async fn rerun_job(
    state: &AppState,
    user: &User,
    old: TaskRecord,
    queues: &crate::queue_defaults::DefaultsByQueue,
    traceparent: Option<String>,
) -> Result<(TaskRecord, bool), ApiError> {
    let make = |model: &TaskRecord| -> Result<baton_store::NewTask, StoreError> {
        if !model.secret_env.0.is_empty() {
            return Err(StoreError::Conflict {
                status: model.status,
                reason: "a job to re-run ran with secret_env, whose values were erased when it ended",
            });
        }
        let mut definition = definition(model);
        // What its needs gave it last time: its release gives it again, afresh.
        definition
            .env
            .retain(|name, _| !name.starts_with(baton_core::pipeline::NEEDS_PREFIX));
        let task = new_task(
            definition,
            queues,
            &state.config.limits,
            &state.webhooks.policy,
            &state.config.timings.retry_backoff(),
            &model.created_by,
            traceparent.clone(),
        )
        .and_then(|t| admitted(state, user, t, true))
        .map_err(|e| {
            StoreError::InvalidValue(format!("the re-run no longer passes: {}", e.message))
        })?;
        Ok(baton_store::NewTask {
            concurrency_key: model.concurrency_key.clone(),
            concurrency_limit: model.concurrency_limit,
            ..task
        })
    };
    let made = state
        .store
        .pipeline_rerun_job(&old, state.dispatcher.clock.now(), make)
        .await?;
    match made {
        Some(rows) => {
            submit::tell_and_enqueue(&state.dispatcher, &rows.iter().collect::<Vec<_>>()).await;
            let job = rows
                .into_iter()
                .next()
                .expect("the job's own task comes first");
            Ok((job, true))
        }
        None => {
            let rerun = state
                .store
                .task_rerun(&old)
                .await?
                .ok_or(StoreError::NotFound)?;
            Ok((rerun, false))
        }
    }
}

/// What the old task ran, as a submission: everything but its identity, its secrets
/// (none: refused above), its delayed start (a re-run runs now) and its idempotency key
/// (the re-run has its own).
fn definition(old: &TaskRecord) -> SubmitTask {
    SubmitTask {
        queue: Some(old.queue.clone()),
        labels: old.labels.clone(),
        command: old.command.clone(),
        script: old.script.clone(),
        env: old.env.0.clone(),
        payload: old.payload.as_ref().map(|p| p.0.clone()),
        priority: old.priority,
        timeout_s: Some(old.timeout_s.into()),
        queue_timeout_s: Some(old.queue_timeout_s.into()),
        max_attempts: Some(old.max_attempts),
        notify_url: old.notify_url.clone(),
        retry: old.retry_policy.as_ref().map(|p| p.0.clone()),
        ..SubmitTask::default()
    }
}
