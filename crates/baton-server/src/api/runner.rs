//! The runner API: register, lease (also a heartbeat), start, logs, complete. Every report
//! carries the lease id; the store's compare-and-set on it is the fence that keeps a stale
//! runner from changing anything (design.md invariant 2).

use super::openapi::Errors;
use crate::api::views::task_view;
use crate::auth::{RUNNER_TOKEN_PREFIX, Runner, hash_token, hashes_equal, new_token};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, RawBody};
use crate::finalize;
use crate::lease;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_client::ErrorBody;
use baton_client::{
    CompleteTask, Heartbeat, HeartbeatResponse, LeaseRequest, LeaseResponse, LogAck,
    RegisterRunner, RunnerRegistered, RunningLease, StartTask, Started, Task,
};
use baton_core::validate::{self, Invalid};
use baton_core::{LabelSet, TaskStatus};
use baton_store::{Fence, NewRunner, RunEnd, TaskRecord};
use chrono::Utc;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use uuid::Uuid;

const MAX_CAPACITY: i32 = 1024;
const MAX_NAME: usize = 128;
const MAX_ERROR_TEXT: usize = 64 << 10;

/// The registration's fields, checked before a limited token is spent on it.
fn validate_registration(req: &RegisterRunner) -> Result<LabelSet, ApiError> {
    if req.name.trim().is_empty()
        || req.name.chars().count() > MAX_NAME
        || req.name.chars().any(char::is_control)
    {
        return Err(
            Invalid::new("name", format!("must be 1-{MAX_NAME} printable characters")).into(),
        );
    }
    let labels = LabelSet::new(req.labels.clone())?;
    for queue in &req.queues {
        validate::check_queue(queue)?;
    }
    if !(1..=MAX_CAPACITY).contains(&req.capacity) {
        return Err(
            Invalid::new("capacity", format!("must be between 1 and {MAX_CAPACITY}")).into(),
        );
    }
    if req.version.chars().count() > 64 || req.version.contains('\0') {
        return Err(Invalid::new("version", "at most 64 characters").into());
    }
    Ok(labels)
}

/// Registers a runner with the bootstrap registration token or one created through the
/// API (unexpired, with uses left — one is used up here).
#[utoipa::path(post, path = "/v1/runner/register", tag = "runner",
    request_body = RegisterRunner,
    responses((status = 201, description = "Registered; the token is shown this once", body = RunnerRegistered), Errors)
)]
pub async fn register(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<RegisterRunner>,
) -> Result<(StatusCode, Json<RunnerRegistered>), ApiError> {
    let presented = hash_token(&req.registration_token);
    let bootstrap = state
        .bootstrap_registration_token
        .as_ref()
        .is_some_and(|t| hashes_equal(t, &presented));
    let labels = validate_registration(&req)?;
    let accepted = bootstrap
        || state
            .store
            .registration_token_consume(&presented, Utc::now())
            .await?;
    if !accepted {
        return Err(ApiError::unauthorized(
            "unknown or expired registration token",
        ));
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

#[utoipa::path(post, path = "/v1/runner/lease", tag = "runner", security(("bearer" = [])),
    request_body = LeaseRequest,
    responses((status = 200, description = "Tasks leased (none after `wait_s`), and verdicts on the runner's running leases", body = LeaseResponse), Errors)
)]
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
    // Presence is recorded by the lease itself (with its replay marker, one round trip).
    // A runner with work is woken early when one of its tasks is cancelled.
    let wait = Duration::from_secs(req.wait_s.into());
    let started = std::time::Instant::now();
    let tasks = lease::lease(&state, &runner, &req, wait).await;
    crate::metrics::lease_answered(started, &tasks);
    let tasks = tasks?;
    // One Postgres query, and only when the runner has work.
    let (cancel, gone) = if req.running.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let ids: Vec<Uuid> = req.running.iter().map(|r| r.task_id).collect();
        verdicts(&runner, &req.running, &state.store.tasks_map(&ids).await?)
    };
    Ok(Json(LeaseResponse {
        tasks,
        cancel,
        gone,
    }))
}

/// A runner's proof of life while it runs tasks, and its way to learn which of them to
/// stop: those being cancelled, and those whose lease is no longer its own.
#[utoipa::path(post, path = "/v1/runner/heartbeat", tag = "runner", security(("bearer" = [])),
    request_body = Heartbeat,
    responses((status = 200, description = "Tasks to cancel and leases that are gone", body = HeartbeatResponse), Errors)
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    runner: Runner,
    ApiJson(req): ApiJson<Heartbeat>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    let now_ms = Utc::now().timestamp_millis();
    state
        .coord
        .presence_touch(runner.id, req.boot_id, now_ms)
        .await?;
    // One read answers both questions: which listed leases to cancel or drop, and which
    // runs this boot holds but no longer lists.
    let ids: Vec<Uuid> = req.running.iter().map(|r| r.task_id).collect();
    let forgotten_after =
        chrono::Duration::seconds(state.config.timings.forgotten_run_after_s as i64);
    let tasks = match state
        .store
        .tasks_for_heartbeat(&ids, runner.id, req.boot_id, Utc::now() - forgotten_after)
        .await
    {
        Ok(tasks) => tasks,
        // Presence is recorded; if Postgres is out, the verdicts wait for the next beat
        // rather than turning the beat into an error the runner would fence itself over.
        Err(e) => {
            let e = ApiError::from(e);
            if e.status != StatusCode::SERVICE_UNAVAILABLE {
                return Err(e);
            }
            tracing::warn!(runner.id = %runner.id, error = %e.message, "heartbeat without verdicts: postgres unavailable");
            return Ok(Json(HeartbeatResponse::default()));
        }
    };
    let listed: HashSet<Uuid> = ids.into_iter().collect();
    let (listed_tasks, forgotten): (Vec<TaskRecord>, Vec<TaskRecord>) =
        tasks.into_iter().partition(|t| listed.contains(&t.id));
    end_forgotten_runs(&state, &runner, forgotten).await;
    let (cancel, gone) = verdicts(&runner, &req.running, &by_id(listed_tasks));
    Ok(Json(HeartbeatResponse { cancel, gone }))
}

fn by_id(tasks: Vec<TaskRecord>) -> HashMap<Uuid, TaskRecord> {
    tasks.into_iter().map(|t| (t.id, t)).collect()
}

/// Runs this runner holds (same boot, going longer than a heartbeat can be in flight)
/// but no longer lists: it gave up on them — it could not report, or it fenced itself
/// while cut off. Nothing executes them, so they end now (or retry) instead of waiting
/// for their timeout.
async fn end_forgotten_runs(state: &AppState, runner: &Runner, forgotten: Vec<TaskRecord>) {
    for task in forgotten {
        let Some(lease_id) = task.lease_id else {
            continue;
        };
        let Some(lock) = finalize::lock(state, task.id, Duration::ZERO).await else {
            continue;
        };
        let end = RunEnd::by_server(TaskStatus::Failed, "the runner no longer runs it");
        let fence = Fence {
            lease_id,
            runner_id: None,
        };
        match finalize::finish_run(state, task.id, fence, &end).await {
            Ok(ended) => {
                tracing::warn!(task.id = %task.id, runner.id = %runner.id, status = %ended.status, "run forgotten by its runner ended")
            }
            Err(e) => {
                tracing::debug!(error = %e, task.id = %task.id, "forgotten run already moved on")
            }
        }
        finalize::unlock(state, Some(lock)).await;
    }
}

/// Of the leases a runner says it runs (`tasks` holds their rows): which to cancel, and
/// which are gone.
fn verdicts(
    runner: &Runner,
    running: &[RunningLease],
    tasks: &HashMap<Uuid, TaskRecord>,
) -> (Vec<Uuid>, Vec<Uuid>) {
    let (mut cancel, mut gone) = (Vec::new(), Vec::new());
    for lease in running {
        match tasks.get(&lease.task_id) {
            Some(t)
                if t.runner_id == Some(runner.id)
                    && t.lease_id == Some(lease.lease_id)
                    && t.status.is_dispatched() =>
            {
                if t.status == TaskStatus::Cancelling {
                    cancel.push(t.id);
                }
            }
            _ => gone.push(lease.task_id),
        }
    }
    (cancel, gone)
}

/// An ephemeral runner leaving after its one task: the same as an operator deleting it.
#[utoipa::path(post, path = "/v1/runner/unregister", tag = "runner", security(("bearer" = [])),
    responses((status = 204, description = "The runner is deleted"), Errors)
)]
pub async fn unregister(
    State(state): State<AppState>,
    runner: Runner,
) -> Result<StatusCode, ApiError> {
    state.store.runner_delete(runner.id, Utc::now()).await?;
    state.tokens.forget_runner(runner.id);
    let _ = state
        .coord
        .publish(&baton_coord::Wake::Revoke(runner.id))
        .await;
    tracing::info!(runner.id = %runner.id, "runner unregistered itself");
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/runner/tasks/{id}/start", tag = "runner", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = StartTask,
    responses((status = 200, description = "Started: the runner may run it now", body = Started), Errors)
)]
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

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogChunkQuery {
    lease_id: Uuid,
    /// Where in the output this chunk starts.
    #[param(minimum = 0)]
    offset: i64,
}

#[utoipa::path(post, path = "/v1/runner/tasks/{id}/logs", tag = "runner", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Task id"), LogChunkQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "Raw output bytes starting at `offset`"),
    responses(
        (status = 200, description = "Stored (or already held)", body = LogAck),
        (status = 416, description = "The chunk starts past the end; `error.offset` is where to resume", body = ErrorBody),
        Errors
    )
)]
pub async fn logs(
    State(state): State<AppState>,
    runner: Runner,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<LogChunkQuery>,
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
    // Followers on any node read on.
    if let Err(e) = state.coord.publish(&baton_coord::Wake::Log(id)).await {
        tracing::debug!(error = %e, task.id = %id, "log followers will notice on their own");
    }
    Ok(Json(LogAck {
        acked: append.acked,
        cancel: append.status == TaskStatus::Cancelling,
    }))
}

#[utoipa::path(post, path = "/v1/runner/tasks/{id}/complete", tag = "runner", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = CompleteTask,
    responses((status = 200, description = "The task after the report", body = Task), Errors)
)]
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
        super::tasks::check_json_floats("outputs", outputs)?;
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
    let end = RunEnd {
        outcome: req.outcome.status(),
        exit_code: req.exit_code,
        error: req.error,
        outputs: req.outputs,
        log_size: req.log_size,
    };
    // A reconciler finalizing the same run holds the lock briefly; wait for it rather
    // than race it (the compare-and-set would settle the race either way).
    let lock = finalize::lock(&state, id, Duration::from_secs(2)).await;
    let fence = Fence {
        lease_id: req.lease_id,
        runner_id: Some(runner.id),
    };
    let ended = finalize::finish_run(&state, id, fence, &end).await;
    finalize::unlock(&state, lock).await;
    let task = ended?;
    tracing::info!(task.id = %id, runner.id = %runner.id, status = %task.status, exit_code = ?task.exit_code, "task finished");
    Ok(Json(task_view(task)))
}
