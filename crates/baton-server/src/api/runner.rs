//! The runner API: register, lease (also a heartbeat), start, logs, complete. Every report
//! carries the lease id; the store's compare-and-set on it is the fence that keeps a stale
//! runner from changing anything (design.md invariant 2).

use crate::api::views::task_view;
use crate::auth::{RUNNER_TOKEN_PREFIX, Runner, hash_token, hashes_equal, new_token};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, RawBody};
use crate::lease;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_client::{
    CompleteTask, LeaseRequest, LeaseResponse, LogAck, RegisterRunner, RunnerRegistered, StartTask,
    Started, Task,
};
use baton_core::validate::{self, Invalid};
use baton_core::{LabelSet, TaskStatus};
use baton_store::{Completion, NewRunner};
use chrono::Utc;
use serde::Deserialize;
use std::time::Duration;
use uuid::Uuid;

const MAX_CAPACITY: i32 = 1024;
const MAX_NAME: usize = 128;
const MAX_ERROR_TEXT: usize = 64 << 10;

pub async fn register(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<RegisterRunner>,
) -> Result<(StatusCode, Json<RunnerRegistered>), ApiError> {
    let presented = hash_token(&req.registration_token);
    let accepted = state
        .bootstrap_registration_token
        .as_ref()
        .is_some_and(|t| hashes_equal(t, &presented));
    if !accepted {
        return Err(ApiError::unauthorized(
            "unknown or expired registration token",
        ));
    }
    if req.name.trim().is_empty()
        || req.name.len() > MAX_NAME
        || req.name.chars().any(char::is_control)
    {
        return Err(
            Invalid::new("name", format!("must be 1-{MAX_NAME} printable characters")).into(),
        );
    }
    let labels = LabelSet::new(req.labels)?;
    for queue in &req.queues {
        validate::check_queue(queue)?;
    }
    if !(1..=MAX_CAPACITY).contains(&req.capacity) {
        return Err(
            Invalid::new("capacity", format!("must be between 1 and {MAX_CAPACITY}")).into(),
        );
    }
    if req.version.len() > 64 {
        return Err(Invalid::new("version", "at most 64 characters").into());
    }
    let token = new_token(RUNNER_TOKEN_PREFIX);
    let runner = state
        .store
        .runner_insert(
            &NewRunner {
                id: Uuid::now_v7(),
                name: req.name,
                labels: labels.into(),
                queues: req.queues,
                capacity: req.capacity,
                token_hash: hash_token(&token).to_vec(),
                version: req.version,
            },
            Utc::now(),
        )
        .await?;
    tracing::info!(runner.id = %runner.id, runner.name = %runner.name, "runner registered");
    Ok((
        StatusCode::CREATED,
        Json(RunnerRegistered {
            runner_id: runner.id,
            token,
        }),
    ))
}

pub async fn lease(
    State(state): State<AppState>,
    runner: Runner,
    ApiJson(req): ApiJson<LeaseRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    let limits = &state.config.limits;
    if req.max == 0 || req.max > limits.max_lease {
        return Err(
            Invalid::new("max", format!("must be between 1 and {}", limits.max_lease)).into(),
        );
    }
    if req.wait_s > limits.max_wait_s {
        return Err(Invalid::new(
            "wait_s",
            format!("must be between 0 and {}", limits.max_wait_s),
        )
        .into());
    }
    let now_ms = Utc::now().timestamp_millis();
    state
        .coord
        .presence_touch(runner.id, req.boot_id, now_ms)
        .await?;
    let wait = Duration::from_secs(req.wait_s.into());
    let tasks = lease::lease(&state, &runner, req.max, wait).await?;
    Ok(Json(LeaseResponse {
        tasks,
        cancel: Vec::new(),
        gone: Vec::new(),
    }))
}

pub async fn start(
    State(state): State<AppState>,
    runner: Runner,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<StartTask>,
) -> Result<Json<Started>, ApiError> {
    let task = state
        .store
        .task_start(id, runner.id, req.lease_id, Utc::now())
        .await?;
    tracing::info!(task.id = %id, runner.id = %runner.id, attempt = task.attempt, "task started");
    Ok(Json(Started {
        status: task.status,
        attempt: task.attempt,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    lease_id: Uuid,
    offset: i64,
}

pub async fn logs(
    State(state): State<AppState>,
    runner: Runner,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<LogQuery>,
    RawBody(chunk): RawBody,
) -> Result<Json<LogAck>, ApiError> {
    if q.offset < 0 {
        return Err(Invalid::new("offset", "must not be negative").into());
    }
    let append = state
        .store
        .task_log_append(
            id,
            runner.id,
            q.lease_id,
            q.offset,
            &chunk,
            state.config.limits.max_log_bytes,
        )
        .await?;
    Ok(Json(LogAck {
        acked: append.acked,
        cancel: append.status == TaskStatus::Cancelling,
    }))
}

pub async fn complete(
    State(state): State<AppState>,
    runner: Runner,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<CompleteTask>,
) -> Result<Json<Task>, ApiError> {
    if req.error.as_ref().is_some_and(|e| e.len() > MAX_ERROR_TEXT) {
        return Err(ApiError::too_large(
            "error_too_large",
            format!("error text over {MAX_ERROR_TEXT} bytes"),
        ));
    }
    if let Some(outputs) = &req.outputs {
        let size = serde_json::to_vec(outputs)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > state.config.limits.max_payload_bytes {
            return Err(ApiError::too_large(
                "outputs_too_large",
                format!("outputs of {size} bytes, over the limit"),
            ));
        }
    }
    if req.log_size.is_some_and(|s| s < 0) {
        return Err(Invalid::new("log_size", "must not be negative").into());
    }
    let report = Completion {
        outcome: req.outcome.status(),
        exit_code: req.exit_code,
        error: req.error,
        outputs: req.outputs,
        log_size: req.log_size,
    };
    let task = state
        .store
        .task_complete(id, runner.id, req.lease_id, &report, Utc::now())
        .await?;
    // Postgres holds the terminal state; the claim goes second. If this node dies in
    // between, repair drops a claim whose task is terminal.
    if let Err(e) = state.coord.claim_release(id, req.lease_id).await {
        tracing::warn!(error = %e, task.id = %id, "claim of a finished task not dropped; repair will");
    }
    tracing::info!(task.id = %id, runner.id = %runner.id, status = %task.status, exit_code = ?task.exit_code, "task finished");
    Ok(Json(task_view(task)))
}
