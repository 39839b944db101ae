//! The runner API: register, the batched exchange, and the single-item endpoints (lease,
//! heartbeat, start, logs, complete) kept for compatibility and for tools. All of them
//! are the same path (`dispatch::exchange`). Every report carries the lease id; the
//! store's compare-and-set on it is the fence that keeps a stale runner from changing
//! anything (design.md invariant 2).

mod reports;

use super::openapi::Errors;
use crate::auth::{RUNNER_TOKEN_PREFIX, Runner, hash_token, hashes_equal, new_token};
use crate::config::Limits;
use crate::dispatch::exchange::{self, Completion, ItemKey, RunnerCall, Start, chunk_key};
use crate::dispatch::{DispatchError, verdicts};
use crate::error::ApiError;
use crate::events::RunnerChange;
use crate::extract::{ApiJson, ApiPath, ApiQuery, RawBody};
use crate::state::AppState;
use crate::views::task_view;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_client::ErrorBody;
use baton_client::ErrorCode;
use baton_client::{
    CompleteTask, Exchange, ExchangeAnswer, Heartbeat, HeartbeatResponse, ItemAnswer, LeaseRequest,
    LeaseResponse, LogAck, RegisterRunner, RunnerLeaving, RunnerRegistered, StartTask, Started,
    Task,
};
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::validate::{self, Invalid};
use baton_core::{LabelSet, TaskStatus};
use baton_store::{LogWrite, NewRunner, Registering, Registration};
use reports::{completion, item_answer, run_end};
use serde::Deserialize;
use std::time::Duration;
use uuid::Uuid;

/// Most tasks a runner may say it runs at once.
pub(crate) const MAX_CAPACITY: i32 = 1024;
/// Longest runner name, in characters.
pub(crate) const MAX_NAME: usize = 128;
/// Longest agent version a runner may report, in characters.
pub(crate) const MAX_VERSION_CHARS: usize = 64;

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
    validate::check_range("capacity", req.capacity, 1, MAX_CAPACITY)?;
    if req.version.chars().count() > MAX_VERSION_CHARS || req.version.contains('\0') {
        return Err(Invalid::new("version", "at most 64 characters").into());
    }
    Ok(labels)
}

/// Registers a runner with the bootstrap registration token or one created through the
/// API (unrevoked, unexpired, with uses left — one is used up here — and allowing the
/// labels and queues the runner claims).
#[utoipa::path(operation_id = "register_runner", post, path = "/v1/runner/register", tag = "runner",
    request_body = RegisterRunner,
    responses((status = 201, description = "Registered; the token is shown this once", body = RunnerRegistered), Errors)
)]
pub(super) async fn register(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<RegisterRunner>,
) -> Result<(StatusCode, Json<RunnerRegistered>), ApiError> {
    let presented = hash_token(&req.registration_token);
    let bootstrap = state
        .bootstrap_registration_token
        .as_ref()
        .is_some_and(|t| hashes_equal(t, &presented));
    let labels = validate_registration(&req)?;
    let (mut registration_token_id, mut provisioner) = (None, None);
    if !bootstrap {
        let claims = Registering {
            labels: labels.as_slice(),
            queues: &req.queues,
        };
        match state
            .store
            .registration_token_consume(&presented, claims, state.clock.now())
            .await?
        {
            Registration::Accepted {
                token_id,
                provisioner: by,
            } => {
                registration_token_id = Some(token_id);
                provisioner = by;
            }
            Registration::OutOfScope { labels, queues } => {
                let any = |v: Option<Vec<String>>| v.map_or("any".to_string(), |v| v.join(","));
                return Err(ApiError::forbidden(format!(
                    "this registration token lets a runner claim labels [{}] and queues [{}] \
                     (a runner naming no queue serves them all, which a token limited to \
                     queues does not allow)",
                    any(labels),
                    any(queues)
                )));
            }
            Registration::Refused => {
                return Err(ApiError::unauthorized(
                    "unknown, revoked, expired or used-up registration token",
                ));
            }
        }
    }
    let token = new_token(RUNNER_TOKEN_PREFIX);
    let runner = state
        .store
        .runner_insert(
            &NewRunner {
                id: RunnerId::from(Uuid::now_v7()),
                name: req.name,
                labels: labels.into(),
                queues: req.queues,
                capacity: req.capacity,
                token_hash: hash_token(&token).to_vec(),
                version: req.version,
                registration_token_id,
                provisioner,
            },
            state.clock.now(),
        )
        .await
        .map_err(|e| match e {
            baton_store::StoreError::NotFound => {
                ApiError::unauthorized("this registration token was revoked as it was used")
            }
            e => e.into(),
        })?;
    tracing::info!(runner.id = %runner.id, runner.name = %runner.name, "runner registered");
    let by = crate::auth::provisioned_by(&state, runner.provisioner.clone());
    state
        .events
        .runner_provisioned(RunnerChange::Joined, runner.id, by)
        .await;
    Ok((
        StatusCode::CREATED,
        Json(RunnerRegistered {
            runner_id: runner.id,
            token,
        }),
    ))
}

/// Leases up to `max` tasks to the calling runner, parking up to `wait_s` for work.
#[utoipa::path(operation_id = "lease_tasks", post, path = "/v1/runner/lease", tag = "runner", security(("bearer" = [])),
    request_body = LeaseRequest,
    responses((status = 200, description = "Tasks leased (none after `wait_s`), and verdicts on the runner's running leases", body = LeaseResponse), Errors)
)]
pub(super) async fn lease(
    State(state): State<AppState>,
    runner: Runner,
    ApiJson(req): ApiJson<LeaseRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    check_ask(&state.config.limits, req.max, 1, req.wait_s)?;
    check_running(&state.config.limits, req.running.len())?;
    let started = std::time::Instant::now();
    let answer = exchange::handle(
        &state.dispatcher,
        &runner,
        RunnerCall {
            request_id: req.request_id,
            // This endpoint never said whether a request is a resend: every request is
            // looked up.
            retry: true,
            boot_id: Some(req.boot_id),
            running: (!req.running.is_empty()).then_some(req.running),
            max: req.max,
            wait: Duration::from_secs(req.wait_s.into()),
            secrets_at_start: takes_secrets_at_start(&state, req.secrets_at_start),
            ..RunnerCall::empty()
        },
    )
    .await;
    crate::metrics::lease_answered(started, answer.as_ref().map(|a| a.tasks.len()));
    let answer = answer?;
    Ok(Json(LeaseResponse {
        tasks: answer.tasks,
        cancel: answer.verdicts.cancel,
        gone: answer.verdicts.gone,
    }))
}

/// A runner's ask for work, as the lease and the exchange take it: `max` tasks, from
/// `least_max` (a lease must ask for one; an exchange may only report) up to
/// `max_lease`, parked for at most `max_wait_s`.
fn check_ask(limits: &Limits, max: u32, least_max: u32, wait_s: u32) -> Result<(), ApiError> {
    validate::check_range("max", max, least_max, limits.max_lease)?;
    Ok(validate::check_range(
        "wait_s",
        wait_s,
        0,
        limits.max_wait_s,
    )?)
}

/// A runner's list of what it runs, bounded on every endpoint that takes one: each lease
/// in it costs a look-up.
fn check_running(limits: &Limits, running: usize) -> Result<(), ApiError> {
    if running > limits.max_exchange_items {
        return Err(ApiError::too_large(
            ErrorCode::ExchangeTooLarge,
            format!(
                "{running} running leases, over the limit of {}",
                limits.max_exchange_items
            ),
        ));
    }
    Ok(())
}

/// Whether a runner's secrets wait for its start: when it says so, and, unless the
/// cluster still serves agents from before the field (`secrets_with_lease`), when it
/// says nothing.
fn takes_secrets_at_start(state: &AppState, asked: bool) -> bool {
    asked || !state.config.secrets_with_lease
}

/// A runner's proof of life while it runs tasks, and its way to learn which of them to
/// stop: those being cancelled, and those whose lease is no longer its own.
#[utoipa::path(operation_id = "send_runner_heartbeat", post, path = "/v1/runner/heartbeat", tag = "runner", security(("bearer" = [])),
    request_body = Heartbeat,
    responses((status = 200, description = "Tasks to cancel and leases that are gone", body = HeartbeatResponse), Errors)
)]
pub(super) async fn heartbeat(
    State(state): State<AppState>,
    runner: Runner,
    ApiJson(req): ApiJson<Heartbeat>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    check_running(&state.config.limits, req.running.len())?;
    let answer = exchange::handle(
        &state.dispatcher,
        &runner,
        RunnerCall {
            boot_id: Some(req.boot_id),
            running: Some(req.running),
            ..RunnerCall::empty()
        },
    )
    .await;
    match answer {
        Ok(answer) => Ok(Json(HeartbeatResponse {
            cancel: answer.verdicts.cancel,
            gone: answer.verdicts.gone,
        })),
        // Presence is recorded; if the stores are out, the verdicts wait for the next
        // beat rather than turning the beat into an error the runner would fence itself
        // over.
        Err(DispatchError::Unavailable { message, .. }) if !state.draining.is_cancelled() => {
            tracing::warn!(runner.id = %runner.id, error = %message, "heartbeat without verdicts: stores unavailable");
            Ok(Json(HeartbeatResponse::default()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Everything a runner has to say and its request for more work, in one round trip:
/// each item answered on its own, the whole replayable by its request id.
#[utoipa::path(operation_id = "exchange_runner_items", post, path = "/v1/runner/exchange", tag = "runner", security(("bearer" = [])),
    request_body = Exchange,
    responses((status = 200, description = "Each item's answer, the new tasks, and the heartbeat's verdicts", body = ExchangeAnswer), Errors)
)]
pub(super) async fn exchange(
    State(state): State<AppState>,
    runner: Runner,
    ApiJson(req): ApiJson<Exchange>,
) -> Result<Json<ExchangeAnswer>, ApiError> {
    let limits = &state.config.limits;
    check_ask(limits, req.max, 0, req.wait_s)?;
    let items = req.starts.len() + req.completions.len();
    if items > limits.max_exchange_items {
        return Err(ApiError::too_large(
            ErrorCode::ExchangeTooLarge,
            format!(
                "{items} items in one exchange, over the limit of {}",
                limits.max_exchange_items
            ),
        ));
    }
    check_running(limits, req.running.as_ref().map_or(0, Vec::len))?;
    // A malformed item is a malformed request: refused whole, nothing changed.
    let mut logs = Vec::new();
    let mut completions = Vec::new();
    for (i, c) in req.completions.iter().enumerate() {
        let (completion, tail) = completion(&state, &runner, c).map_err(|mut e| {
            e.message = format!("completions[{i}]: {}", e.message);
            e
        })?;
        completions.push(completion);
        logs.extend(tail);
    }
    let started = std::time::Instant::now();
    let answer = exchange::handle(
        &state.dispatcher,
        &runner,
        RunnerCall {
            request_id: req.request_id,
            retry: req.retry,
            boot_id: Some(req.boot_id),
            starts: req
                .starts
                .iter()
                .map(|s| Start {
                    task: s.task_id,
                    lease_id: s.lease_id,
                    traceparent: s.traceparent.clone(),
                })
                .collect(),
            logs,
            completions,
            running: req.running,
            running_as_of: req.running_as_of,
            max: req.max,
            wait: Duration::from_secs(req.wait_s.into()),
            start_leased: req.start_leased,
            secrets_at_start: takes_secrets_at_start(&state, req.secrets_at_start),
        },
    )
    .await;
    if req.max > 0 {
        crate::metrics::lease_answered(started, answer.as_ref().map(|a| a.tasks.len()));
    }
    let answer = answer?;
    let completions = req
        .completions
        .iter()
        .map(|c| {
            let key = ItemKey {
                task: c.task_id,
                lease: c.lease_id,
            };
            item_answer(c.task_id, answer.completion(key), |t| {
                (Some(t.status), None)
            })
        })
        .collect();
    let starts = req
        .starts
        .iter()
        .map(|s| {
            (
                s,
                answer.start(ItemKey {
                    task: s.task_id,
                    lease: s.lease_id,
                }),
            )
        })
        .map(|(s, r)| match r {
            Ok(answer) => ItemAnswer {
                secret_env: answer.secret_env,
                ..item_answer(s.task_id, Ok(answer.started), |st| {
                    (Some(st.status), Some(st.attempt))
                })
            },
            Err(e) => item_answer(s.task_id, Err::<(), _>(e), |_| (None, None)),
        })
        .collect();
    let leased_after_ms =
        (!answer.tasks.is_empty()).then_some(answer.leased_after.as_millis() as u64);
    Ok(Json(ExchangeAnswer {
        starts,
        completions,
        tasks: answer.tasks,
        cancel: answer.verdicts.cancel,
        gone: answer.verdicts.gone,
        answered_at: Some(state.clock.now()),
        presence_recorded: Some(exchange::vouches(&state.dispatcher)),
        leased_after_ms,
    }))
}

/// An ephemeral runner leaving after its one task. It says what it still holds: every
/// other run of its boot ends as forgotten first — it will start none of them now — so a
/// task whose answer came back after the runner's fence ends for that, not as a deleted
/// runner's run. Then the same as an operator deleting it. With no body (agents of earlier
/// releases), only the delete.
#[utoipa::path(operation_id = "unregister_runner", post, path = "/v1/runner/unregister", tag = "runner", security(("bearer" = [])),
    request_body(content = Option<RunnerLeaving>, description = "What the runner holds as it leaves"),
    responses((status = 204, description = "The runs it left out are ended, and the runner is deleted"), Errors)
)]
pub(super) async fn unregister(
    State(state): State<AppState>,
    runner: Runner,
    leaving: Option<ApiJson<RunnerLeaving>>,
) -> Result<StatusCode, ApiError> {
    let leaving = leaving.map(|ApiJson(leaving)| leaving);
    if let Some(leaving) = &leaving {
        check_running(&state.config.limits, leaving.running.len())?;
        // Until they are all ended it is not deleted, so the call may be repeated.
        end_left_out(&state, &runner, leaving).await?;
    }
    crate::auth::delete_runner(&state, runner.id).await?;
    // A start of one of its exchanges that got past its check before the delete and
    // committed after the look above: none can commit now (`RUNNER_MAY_TAKE`).
    if let Some(leaving) = &leaving
        && let Err(e) = end_left_out(&state, &runner, leaving).await
    {
        tracing::warn!(error = %e, runner.id = %runner.id, "a start that landed as the runner left is left to the reconciler");
    }
    tracing::info!(runner.id = %runner.id, "runner unregistered itself");
    Ok(StatusCode::NO_CONTENT)
}

/// Ends as forgotten every run of the leaving runner's boot that it does not list,
/// however recently started: a leaving runner starts nothing from now on.
async fn end_left_out(
    state: &AppState,
    runner: &Runner,
    leaving: &RunnerLeaving,
) -> Result<(), DispatchError> {
    let any_start = state.clock.now() + chrono::Duration::days(1);
    verdicts::end_runs_left_out(
        &state.dispatcher,
        runner,
        leaving.boot_id,
        &leaving.running,
        any_start,
    )
    .await
}

/// Acknowledges a lease: the task is recorded as running under it.
#[utoipa::path(operation_id = "start_task", post, path = "/v1/runner/tasks/{id}/start", tag = "runner", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = StartTask,
    responses((status = 200, description = "Started: the runner may run it now", body = Started), Errors)
)]
pub(super) async fn start(
    State(state): State<AppState>,
    runner: Runner,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<StartTask>,
) -> Result<Json<Started>, ApiError> {
    let start = Start {
        task: id,
        lease_id: req.lease_id,
        traceparent: None,
    };
    let key = start.key();
    let answer = exchange::handle(&state.dispatcher, &runner, RunnerCall::one(start)).await?;
    let answer = answer.start(key)?;
    let started = answer.started;
    tracing::info!(task.id = %id, runner.id = %runner.id, attempt = started.attempt, "task started");
    Ok(Json(Started {
        status: started.status,
        attempt: started.attempt,
        secret_env: answer.secret_env,
    }))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct LogChunkQuery {
    lease_id: LeaseId,
    /// Where in the output this chunk starts.
    #[param(minimum = 0)]
    offset: i64,
}

/// Appends a chunk of a run's output at its offset.
#[utoipa::path(operation_id = "append_task_logs", post, path = "/v1/runner/tasks/{id}/logs", tag = "runner", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Task id"), LogChunkQuery,
        ("x-baton-log-marks" = Option<String>, Header, description = "When the chunk's bytes came and on which stream: `offset@milliseconds:o|e`, space-separated, in order of offset, each within the chunk, at most 150")),
    request_body(content = baton_client::wire::RawBytes, content_type = "application/octet-stream", description = "Raw output bytes starting at `offset`"),
    responses(
        (status = 200, description = "Stored (or already held)", body = LogAck),
        (status = 416, description = "The chunk starts past the end; `error.offset` is where to resume", body = ErrorBody),
        Errors
    )
)]
pub(super) async fn logs(
    State(state): State<AppState>,
    runner: Runner,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(q): ApiQuery<LogChunkQuery>,
    headers: axum::http::HeaderMap,
    RawBody(chunk): RawBody,
) -> Result<Json<LogAck>, ApiError> {
    validate::check_not_negative("offset", q.offset)?;
    let marks_text = match headers.get(baton_core::log_marks::HEADER) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| {
            validate::Invalid::new(baton_core::log_marks::HEADER, "must be ASCII".to_string())
        })?),
    };
    let marks = reports::chunk_marks(marks_text, q.offset, chunk.len())
        .map_err(|e| validate::Invalid::new(baton_core::log_marks::HEADER, e))?;
    let chunk = LogWrite {
        task: id,
        runner_id: runner.id,
        lease_id: q.lease_id,
        offset: q.offset,
        data: chunk.to_vec(),
        marks,
    };
    let key = chunk_key(&chunk);
    let answer = exchange::handle(&state.dispatcher, &runner, RunnerCall::one(chunk)).await?;
    let append = answer.log(key)?;
    Ok(Json(LogAck {
        acked: append.acked,
        cancel: append.status == TaskStatus::Cancelling,
    }))
}

/// Reports the end of a run under its lease.
#[utoipa::path(operation_id = "complete_task", post, path = "/v1/runner/tasks/{id}/complete", tag = "runner", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Task id")),
    request_body = CompleteTask,
    responses((status = 200, description = "The task after the report", body = Task), Errors)
)]
pub(super) async fn complete(
    State(state): State<AppState>,
    runner: Runner,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(req): ApiJson<CompleteTask>,
) -> Result<Json<Task>, ApiError> {
    let end = run_end(
        &state,
        req.outcome,
        req.exit_code,
        req.error,
        req.outputs,
        req.log_size,
    )?;
    let completion = Completion {
        task: id,
        lease_id: req.lease_id,
        end,
        traceparent: None,
    };
    let key = completion.key();
    let answer = exchange::handle(&state.dispatcher, &runner, RunnerCall::one(completion)).await?;
    let task = answer.completion(key)?;
    tracing::info!(task.id = %id, runner.id = %runner.id, status = %task.status, exit_code = ?task.exit_code, "task finished");
    Ok(Json(task_view(task)))
}
