//! A task's runs, one by one (`GET /v1/tasks/{id}/attempts`): those a retry followed, as
//! the store kept each when its retry was written, and the last — running, or the one
//! that ended the task — from the task's own row, which holds it.

use super::openapi::Errors;
use super::task_ref;
use super::tasks::visible_task;
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_client::TaskRef;
use baton_client::{TaskAttempt, TaskAttempts};
use baton_core::{RunnerId, TaskStatus};
use baton_store::{AttemptRecord, TaskRecord};

/// Reads every run of a task: runner, times, exit code, error and how each ended.
#[utoipa::path(operation_id = "list_task_attempts", get, path = "/v1/tasks/{id}/attempts", tag = "tasks", security(("bearer" = [])),
    params(("id" = String, Path, description = "Task id, or its short id: the last 12 hex digits of the id")),
    responses((status = 200, description = "Its runs, first to last", body = TaskAttempts), Errors)
)]
pub(super) async fn attempts(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<TaskRef>,
) -> Result<Json<TaskAttempts>, ApiError> {
    let id = task_ref::resolve(id, &state, &user).await?;
    let task = visible_task(&state, &user, id).await?;
    let ended = state.store.task_attempts(id).await?;
    let mut attempts: Vec<TaskAttempt> = ended.into_iter().map(ended_view).collect();
    let latest = running_view(&task).or_else(|| last_run(&task));
    if let Some(latest) = latest
        && attempts.last().is_none_or(|a| a.attempt < latest.attempt)
    {
        attempts.push(latest);
    }
    // Runner names are the operators' to know (`GET /v1/runners` is theirs): a token that
    // may read only its own tasks sees which runner by id, as its task shows it.
    if user.task_scope()?.is_some() {
        for a in &mut attempts {
            a.runner_name = None;
        }
    } else {
        name_runners(&state, &mut attempts).await?;
    }
    Ok(Json(TaskAttempts {
        task_id: id,
        attempts,
    }))
}

/// Names the runners of the runs read from the task's row (the history's come named).
async fn name_runners(state: &AppState, attempts: &mut [TaskAttempt]) -> Result<(), ApiError> {
    let unnamed: Vec<RunnerId> = attempts
        .iter()
        .filter(|a| a.runner_name.is_none())
        .filter_map(|a| a.runner_id)
        .collect();
    if unnamed.is_empty() {
        return Ok(());
    }
    let runners = state.store.runners_by_ids(&unnamed).await?;
    for a in attempts.iter_mut().filter(|a| a.runner_name.is_none()) {
        a.runner_name = runners
            .iter()
            .find(|r| Some(r.id) == a.runner_id)
            .map(|r| r.name.clone());
    }
    Ok(())
}

fn ended_view(a: AttemptRecord) -> TaskAttempt {
    TaskAttempt {
        attempt: a.attempt,
        runner_id: a.runner_id,
        runner_name: a.runner_name,
        lease_id: a.lease_id,
        leased_at: a.leased_at,
        started_at: a.started_at,
        ended_at: Some(a.ended_at),
        duration_ms: a
            .started_at
            .map(|start| (a.ended_at - start).num_milliseconds()),
        ended_as: Some(a.outcome),
        retried: true,
        exit_code: a.exit_code,
        error: a.error,
    }
}

/// The run that ended the task, as its row holds it. An expiry, or a cancel before the
/// task's next run, ended no run: the row's times are then an earlier run's, which the
/// history holds (or, for a run retried before the history was kept, nobody does).
fn last_run(task: &TaskRecord) -> Option<TaskAttempt> {
    let ended_no_run = task.status == TaskStatus::Expired
        || (task.status == TaskStatus::Cancelled
            && task.error.as_deref() == Some(baton_store::CANCELLED_BEFORE_IT_RAN));
    let ran =
        task.status.is_terminal() && !ended_no_run && task.attempt > 0 && task.started_at.is_some();
    ran.then(|| TaskAttempt {
        ended_at: task.finished_at,
        duration_ms: task
            .started_at
            .zip(task.finished_at)
            .map(|(start, end)| (end - start).num_milliseconds()),
        ended_as: Some(task.status.as_str().to_string()),
        exit_code: task.exit_code,
        error: task.error.clone(),
        ..run_of_row(task)
    })
}

/// The run under way, if the task's row holds one: started (so counted as an attempt)
/// and not ended.
fn running_view(task: &TaskRecord) -> Option<TaskAttempt> {
    let running = matches!(task.status, TaskStatus::Running | TaskStatus::Cancelling);
    running.then(|| run_of_row(task))
}

/// The run the task's row holds, as far as a run under way is known: who and since when.
fn run_of_row(task: &TaskRecord) -> TaskAttempt {
    TaskAttempt {
        attempt: task.attempt,
        runner_id: task.runner_id,
        runner_name: None,
        lease_id: task.lease_id,
        leased_at: task.leased_at,
        started_at: task.started_at,
        ended_at: None,
        duration_ms: None,
        ended_as: None,
        retried: false,
        exit_code: None,
        error: None,
    }
}
