//! Bulk actions (`POST /v1/tasks/cancel`, `POST /v1/tasks/retry`): the tasks a filter
//! selects, oldest first and at most `limit` per call, each cancelled or re-run by the
//! very path of the single action (`tasks::cancel_one`, `rerun::rerun_one`) — the same
//! compare-and-set in Postgres, the same Redis tidy-up after it, the same authorization.
//! Nothing here writes a task itself.
//!
//! A call is not one transaction, and need not be: each task's action stands on its own,
//! and one that something else changed first (it ended, it was re-run) is answered in its
//! item. The filter selects only what the action can take — unfinished tasks not being
//! cancelled yet; ended tasks with no re-run and no secrets — so calling again while
//! `more` goes on where the last call stopped, and a repeated call does nothing twice.
//! A `submit` token's filter takes only the tasks it submitted.

use super::openapi::Errors;
use super::rerun::rerun_one;
use super::tasks::{cancel_one, traceparent};
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use baton_client::{BulkAnswer, BulkItem, BulkRequest};
use baton_core::TaskStatus;
use baton_core::validate::{self, Invalid};
use baton_store::{BulkAction, TaskFilter};

const BULK_DEFAULT: i64 = 100;
/// Most tasks one bulk call acts on.
pub(crate) const BULK_MAX: i64 = 1000;

/// Cancels the tasks a filter selects (with `dry_run`, says which, changing nothing).
#[utoipa::path(operation_id = "cancel_tasks", post, path = "/v1/tasks/cancel", tag = "tasks", security(("bearer" = [])),
    request_body = BulkRequest,
    responses((status = 200, description = "What was cancelled (or, in a dry run, would be)", body = BulkAnswer), Errors)
)]
pub(super) async fn cancel_many(
    State(state): State<AppState>,
    user: User,
    ApiJson(req): ApiJson<BulkRequest>,
) -> Result<Json<BulkAnswer>, ApiError> {
    bulk(&state, &user, req, BulkAction::Cancel, None).await
}

/// Re-runs the ended tasks a filter selects, each as a new task (with `dry_run`, says which).
#[utoipa::path(operation_id = "retry_tasks", post, path = "/v1/tasks/retry", tag = "tasks", security(("bearer" = [])),
    request_body = BulkRequest,
    responses((status = 200, description = "What was re-run (or, in a dry run, would be)", body = BulkAnswer), Errors)
)]
pub(super) async fn retry_many(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    ApiJson(req): ApiJson<BulkRequest>,
) -> Result<Json<BulkAnswer>, ApiError> {
    bulk(&state, &user, req, BulkAction::Retry, traceparent(&headers)).await
}

/// Checks the filter, counts and takes the tasks, then acts on each in turn. A failure
/// of Redis or Postgres stops the call where it is: the items so far are answered, the
/// failing one with its error, and `more` says to call again.
async fn bulk(
    state: &AppState,
    user: &User,
    req: BulkRequest,
    action: BulkAction,
    traceparent: Option<String>,
) -> Result<Json<BulkAnswer>, ApiError> {
    user.require_submit()?;
    let filter = filter_of(user, &req, action)?;
    let matched = state.store.tasks_bulk_count(&filter, action).await?;
    let tasks = state.store.tasks_bulk(&filter, action).await?;
    let with_secrets = match action {
        BulkAction::Retry => Some(state.store.tasks_bulk_with_secrets(&filter).await?),
        BulkAction::Cancel => None,
    };
    let mut answer = BulkAnswer {
        dry_run: req.dry_run,
        matched,
        more: matched > tasks.len() as i64,
        tasks: Vec::with_capacity(tasks.len()),
        acted: 0,
        with_secrets,
    };
    for task in tasks {
        let mut item = BulkItem {
            id: task.id,
            status: task.status,
            retried_by: None,
            error: None,
        };
        if !req.dry_run {
            let done = match action {
                BulkAction::Cancel => cancel_one(state, user, task.id)
                    .await
                    .map(|t| item.status = t.status),
                BulkAction::Retry => rerun_one(state, user, task, traceparent.clone())
                    .await
                    .map(|(rerun, _)| item.retried_by = Some(rerun.id)),
            };
            match done {
                Ok(()) => answer.acted += 1,
                Err(e) => {
                    let stop = e.status.is_server_error();
                    item.error = Some(e.detail());
                    if stop {
                        answer.tasks.push(item);
                        answer.more = true;
                        break;
                    }
                }
            }
        }
        answer.tasks.push(item);
    }
    tracing::info!(action = ?action, dry_run = req.dry_run, matched, acted = answer.acted, "bulk action");
    Ok(Json(answer))
}

/// The request as a store filter, or which field is wrong. The caller's own tasks only,
/// unless it may change any.
fn filter_of(user: &User, req: &BulkRequest, action: BulkAction) -> Result<TaskFilter, ApiError> {
    if req.queue.is_none()
        && req.status.is_none()
        && req.created_after.is_none()
        && req.created_before.is_none()
        && req.schedule_id.is_none()
    {
        return Err(Invalid::new(
            "filter",
            "give at least one of queue, status, schedule_id, created_after and created_before \
             (to take every task, say created_before: now)",
        )
        .into());
    }
    if let Some(queue) = &req.queue {
        validate::check_queue(queue)?;
    }
    let status = match &req.status {
        None => None,
        Some(s) => {
            let status: TaskStatus = s
                .parse()
                .map_err(|e| Invalid::new("status", format!("{e}")))?;
            if !action.statuses().contains(&status) {
                let takes: Vec<&str> = action.statuses().iter().map(|s| s.as_str()).collect();
                return Err(Invalid::new(
                    "status",
                    format!(
                        "a bulk {} takes tasks that are {}, not {status}",
                        match action {
                            BulkAction::Cancel => "cancel",
                            BulkAction::Retry => "retry",
                        },
                        takes.join(", ")
                    ),
                )
                .into());
            }
            Some(status)
        }
    };
    if let (Some(after), Some(before)) = (req.created_after, req.created_before)
        && before <= after
    {
        return Err(Invalid::new("created_before", "must be later than created_after").into());
    }
    let limit = req.limit.unwrap_or(BULK_DEFAULT);
    validate::check_range("limit", limit, 1, BULK_MAX)?;
    Ok(TaskFilter {
        status,
        queue: req.queue.clone(),
        created_by: user.task_change_scope()?.map(str::to_string),
        before: None,
        schedule_id: req.schedule_id,
        limit,
        created_after: req.created_after,
        created_before: req.created_before,
    })
}
