//! Reading a task's output: a slice from an offset, or a stream that follows the output
//! as it arrives until the task is over (any node: new chunks are announced through
//! Redis, so a follower on node A hears of output shipped to node B at once).

use super::openapi::Errors;
use super::task_ref;
use super::tasks::visible_task;
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use baton_client::TaskRef;
use baton_client::log_headers;
use baton_client::{LogMark, LogMarks};
use baton_coord::Wake;
use baton_core::validate::check_not_negative;
use futures::StreamExt;
use serde::Deserialize;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct LogQuery {
    #[param(minimum = 0)]
    offset: Option<i64>,
    /// Which attempt's output (default: the latest).
    attempt: Option<i32>,
    /// Stream new output until the task is over (or a retry starts a new attempt, or 30 s
    /// pass with no new output: then ask again from the bytes received).
    #[serde(default)]
    follow: bool,
}

/// Most bytes one log read returns; readers continue from `x-baton-next-offset`.
const LOG_READ_MAX: usize = 1 << 20;

/// A follower looks again at least this often even if no announcement reaches it.
const FOLLOW_RECHECK: Duration = Duration::from_secs(2);

/// A follow stream with no new output for this long ends; the client asks again from
/// the bytes it has. Proxies and idle-connection reapers then never cut it mid-way.
const FOLLOW_IDLE: Duration = Duration::from_secs(30);

fn octet_stream(mut resp: Response, status: &'static str, attempt: i32) -> Response {
    let headers = resp.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(log_headers::TASK_STATUS, HeaderValue::from_static(status));
    headers.insert(log_headers::ATTEMPT, HeaderValue::from(attempt));
    resp
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct MarksQuery {
    /// Which attempt's output (default: the latest).
    attempt: Option<i32>,
}

/// Reads when each part of a task's output came and on which stream: a line's time and
/// stream are those of the last mark at or before its first byte.
#[utoipa::path(operation_id = "get_task_log_marks", get, path = "/v1/tasks/{id}/logs/marks", tag = "tasks", security(("bearer" = [])),
    params(("id" = String, Path, description = "Task id, or its short id: the last 12 hex digits of the id"), MarksQuery),
    responses((status = 200, description = "The attempt's marks, by offset (none from a runner of an earlier release)", body = LogMarks), Errors)
)]
pub(super) async fn marks(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<TaskRef>,
    ApiQuery(q): ApiQuery<MarksQuery>,
) -> Result<Json<LogMarks>, ApiError> {
    let id = task_ref::resolve(id, &state, &user).await?;
    visible_task(&state, &user, id).await?;
    let (attempt, marks) = state.store.task_log_marks(id, q.attempt).await?;
    Ok(Json(LogMarks {
        attempt,
        marks: marks
            .into_iter()
            .map(|m| LogMark {
                offset: m.offset,
                at: chrono::DateTime::from_timestamp_millis(m.at_ms).unwrap_or_default(),
                stream: m.stream,
            })
            .collect(),
    }))
}

/// Reads a task's output, from an offset, or follows it as it is written.
#[utoipa::path(operation_id = "get_task_logs", get, path = "/v1/tasks/{id}/logs", tag = "tasks", security(("bearer" = [])),
    params(("id" = String, Path, description = "Task id, or its short id: the last 12 hex digits of the id"), LogQuery),
    responses(
        (status = 200, description = "Raw output bytes (streamed with `follow`)", content_type = "application/octet-stream", body = baton_client::wire::RawBytes,
         headers(
            ("x-baton-next-offset" = i64, description = "The offset to read from next (absent when following)"),
            ("x-baton-task-status" = String, description = "The task's status when read"),
            ("x-baton-attempt" = i32, description = "The attempt whose output this is")
         )),
        Errors
    )
)]
pub(super) async fn logs(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<TaskRef>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<Response, ApiError> {
    let id = task_ref::resolve(id, &state, &user).await?;
    let offset = check_not_negative("offset", q.offset.unwrap_or(0))?;
    let task = visible_task(&state, &user, id).await?;
    if q.follow {
        // Before its first start a task is at attempt 0: follow the first run to come.
        let attempt = q.attempt.unwrap_or(task.attempt.max(1));
        let limit = state.config.limits.max_follows_per_token;
        let held = state
            .follows
            .take(user.token_id.clone(), limit)
            .ok_or_else(|| {
                ApiError::too_many(format!(
                    "this token already follows {limit} logs on this node \
                     (max_follows_per_token); close one first"
                ))
            })?;
        // The place is held as long as the stream lives.
        let stream = follow(state, id, attempt, offset).map(move |item| {
            let _ = &held;
            item
        });
        let body = Body::from_stream(stream);
        return Ok(octet_stream(
            body.into_response(),
            task.status.as_str(),
            attempt,
        ));
    }
    let chunk = state
        .store
        .task_log_read(id, q.attempt, offset, LOG_READ_MAX)
        .await?;
    let mut resp = octet_stream(
        chunk.data.into_response(),
        chunk.status.as_str(),
        chunk.attempt,
    );
    resp.headers_mut().insert(
        log_headers::NEXT_OFFSET,
        HeaderValue::from(chunk.next_offset),
    );
    Ok(resp)
}

/// The output of one attempt from `offset`, as it arrives; ends when the task is over or
/// a newer attempt has started, once everything of this one was sent.
fn follow(
    state: AppState,
    task: Uuid,
    attempt: i32,
    offset: i64,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::unfold(Some(offset), move |offset| {
        let state = state.clone();
        async move {
            let mut offset = offset?;
            // Listen before looking, so a chunk stored between the two still wakes us.
            let mut wakes = state.wake.subscribe();
            let idle_until = tokio::time::Instant::now() + FOLLOW_IDLE;
            loop {
                if tokio::time::Instant::now() >= idle_until {
                    return None;
                }
                let chunk = match state
                    .store
                    .task_log_read(task, Some(attempt), offset, LOG_READ_MAX)
                    .await
                {
                    Ok(chunk) => chunk,
                    Err(e) => return Some((Err(std::io::Error::other(e.to_string())), None)),
                };
                if !chunk.data.is_empty() {
                    offset = chunk.next_offset;
                    return Some((Ok(Bytes::from(chunk.data)), Some(offset)));
                }
                let latest = state
                    .store
                    .task_get(task)
                    .await
                    .map(|t| t.attempt)
                    .unwrap_or(attempt);
                if chunk.status.is_terminal() || latest > attempt {
                    return None;
                }
                let woken = tokio::time::timeout(FOLLOW_RECHECK, async {
                    loop {
                        match wakes.recv().await {
                            Ok(Wake::Log(id)) if id == task => return,
                            Ok(Wake::All) | Err(RecvError::Lagged(_)) => return,
                            Ok(_) => continue,
                            Err(RecvError::Closed) => return,
                        }
                    }
                });
                tokio::select! {
                    _ = woken => {}
                    _ = state.draining.cancelled() => return None,
                }
            }
        }
    })
}
