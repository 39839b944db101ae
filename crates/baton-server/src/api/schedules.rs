//! The user API for schedules: create, list, read, change, pause, resume, trigger,
//! delete. Who may: a `submit` token makes schedules and changes its own; `read` sees
//! them all; `admin` changes any (docs/authorization.md).

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::schedules::{
    changed, clock_of, first_tick, moves_ticks, schedule_view, settings_of, tick_work,
};
use crate::state::AppState;
use crate::views::task_summary_view;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_client::{CreateSchedule, Schedule, ScheduleList, ScheduleRun, UpdateSchedule};
use baton_coord::Wake;
use baton_store::{ScheduleRecord, ScheduleSkip, StoreError, TaskRecord};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use uuid::Uuid;

/// How many next ticks and latest runs `GET /v1/schedules/{id}` shows.
const SHOWN: usize = 10;

/// How many of each a list shows per schedule: what the console's rows show, so it reads
/// the list alone (not each schedule's details).
const LISTED: usize = 3;

/// Creates a cron schedule that submits a task at each tick.
#[utoipa::path(operation_id = "create_schedule", post, path = "/v1/schedules", tag = "schedules", security(("bearer" = [])),
    request_body = CreateSchedule,
    responses((status = 201, description = "Created; `next_fire_at` is its first tick", body = Schedule), Errors)
)]
pub(super) async fn create(
    State(state): State<AppState>,
    user: User,
    ApiJson(req): ApiJson<CreateSchedule>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    user.require_submit()?;
    let settings = settings_of(&state, &user, req, state.clock.now(), None)?;
    let record = state
        .store
        .schedule_insert(Uuid::now_v7(), &settings, &user.token_id, state.clock.now())
        .await?;
    tracing::info!(schedule.id = %record.id, schedule.cron = %record.settings.cron, "schedule created");
    schedules_changed(&state).await;
    Ok((
        StatusCode::CREATED,
        Json(schedule_view(record, Vec::new(), Vec::new())),
    ))
}

/// Lists the schedules the token may see.
#[utoipa::path(operation_id = "list_schedules", get, path = "/v1/schedules", tag = "schedules", security(("bearer" = [])),
    responses((status = 200, description = "The schedules this token may see, by name", body = ScheduleList), Errors)
)]
pub(super) async fn list(
    State(state): State<AppState>,
    user: User,
) -> Result<Json<ScheduleList>, ApiError> {
    let owner = user.task_scope()?;
    let rows = state.store.schedules_list(owner).await?;
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut tasks: HashMap<Uuid, Vec<TaskRecord>> = HashMap::new();
    for task in state.store.schedules_runs(&ids, LISTED as i64).await? {
        if let Some(schedule) = task.schedule_id {
            tasks.entry(schedule).or_default().push(task);
        }
    }
    let mut skips: HashMap<Uuid, Vec<ScheduleSkip>> = HashMap::new();
    for (schedule, skip) in state.store.schedules_skips(&ids, LISTED as i64).await? {
        skips.entry(schedule).or_default().push(skip);
    }
    Ok(Json(ScheduleList {
        schedules: rows
            .into_iter()
            .map(|r| {
                let fires = next_fires(&r, LISTED);
                let runs = merged_runs(
                    tasks.remove(&r.id).unwrap_or_default(),
                    skips.remove(&r.id).unwrap_or_default(),
                    LISTED,
                );
                Schedule {
                    summary: true,
                    ..schedule_view(r, fires, runs)
                }
            })
            .collect(),
    }))
}

/// Its next `n` ticks (none while paused, none past its end).
fn next_fires(record: &ScheduleRecord, n: usize) -> Vec<DateTime<Utc>> {
    let settings = &record.settings;
    match (settings.next_fire_at, clock_of(record)) {
        (Some(next), Ok(clock)) if !settings.paused => {
            let mut ticks = vec![next];
            ticks.extend(clock.upcoming(next, n - 1));
            ticks.retain(|t| settings.end_at.is_none_or(|end| *t <= end));
            ticks
        }
        _ => Vec::new(),
    }
}

/// Reads a schedule: its settings, next tick and counts.
#[utoipa::path(operation_id = "get_schedule", get, path = "/v1/schedules/{id}", tag = "schedules", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Schedule id")),
    responses((status = 200, description = "The schedule, its next ticks and its latest runs", body = Schedule), Errors)
)]
pub(super) async fn get(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Schedule>, ApiError> {
    let record = visible(&state, user.task_scope()?, id).await?;
    let next_fires = next_fires(&record, SHOWN);
    let n = SHOWN as i64;
    let last_runs = merged_runs(
        state.store.schedule_runs(id, n).await?,
        state.store.schedule_skips(id, n).await?,
        SHOWN,
    );
    Ok(Json(schedule_view(record, next_fires, last_runs)))
}

/// The latest `n` ticks: tasks (as summaries) and skipped ranges merged, newest first.
fn merged_runs(tasks: Vec<TaskRecord>, skips: Vec<ScheduleSkip>, n: usize) -> Vec<ScheduleRun> {
    let mut runs: Vec<ScheduleRun> = tasks
        .into_iter()
        .map(|t| ScheduleRun {
            scheduled_for: t.scheduled_for.unwrap_or(t.created_at),
            outcome: "fired".to_string(),
            task: Some(task_summary_view(t)),
            through: None,
            ticks: None,
        })
        .collect();
    runs.extend(skips.into_iter().map(|s| ScheduleRun {
        scheduled_for: s.scheduled_for,
        outcome: format!("skipped_{}", s.reason),
        task: None,
        through: Some(s.through),
        ticks: Some(s.ticks),
    }));
    runs.sort_by_key(|run| std::cmp::Reverse(run.scheduled_for));
    runs.truncate(n);
    runs
}

/// Changes a schedule's settings; its next tick follows them.
#[utoipa::path(operation_id = "update_schedule", patch, path = "/v1/schedules/{id}", tag = "schedules", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Schedule id")),
    request_body = UpdateSchedule,
    responses((status = 200, description = "Changed", body = Schedule), Errors)
)]
pub(super) async fn update(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(change): ApiJson<UpdateSchedule>,
) -> Result<Json<Schedule>, ApiError> {
    let record = changeable(&state, &user, id).await?;
    let after = changed(&record, change)?;
    let keep = (!moves_ticks(&record, &after)).then_some(record.settings.next_fire_at);
    let settings = settings_of(&state, &user, after, state.clock.now(), keep)?;
    let record = state
        .store
        .schedule_update(id, &settings, state.clock.now())
        .await
        .map_err(not_found)?;
    schedules_changed(&state).await;
    Ok(Json(schedule_view(record, Vec::new(), Vec::new())))
}

/// Deletes a schedule: no tick of it fires again.
#[utoipa::path(operation_id = "delete_schedule", delete, path = "/v1/schedules/{id}", tag = "schedules", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Schedule id")),
    responses((status = 204, description = "Deleted; the tasks it made stay"), Errors)
)]
pub(super) async fn delete(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    changeable(&state, &user, id).await?;
    state.store.schedule_delete(id).await.map_err(not_found)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pauses a schedule: no tick fires until it is resumed.
#[utoipa::path(operation_id = "pause_schedule", post, path = "/v1/schedules/{id}/pause", tag = "schedules", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Schedule id")),
    responses((status = 200, description = "Paused: no tick fires until resumed", body = Schedule), Errors)
)]
pub(super) async fn pause(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Schedule>, ApiError> {
    set_paused(&state, &user, id, true).await
}

/// Resumes a schedule from its next tick.
#[utoipa::path(operation_id = "resume_schedule", post, path = "/v1/schedules/{id}/resume", tag = "schedules", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Schedule id")),
    responses((status = 200, description = "Resumed: fires from the next tick after now; ticks while paused do not fire", body = Schedule), Errors)
)]
pub(super) async fn resume(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Schedule>, ApiError> {
    set_paused(&state, &user, id, false).await
}

/// Pausing keeps the schedule as it is; resuming starts it again from the next tick after
/// now, so the ticks that passed while it was paused neither fire nor count as missed.
async fn set_paused(
    state: &AppState,
    user: &User,
    id: Uuid,
    paused: bool,
) -> Result<Json<Schedule>, ApiError> {
    let record = changeable(state, user, id).await?;
    let was = &record.settings;
    if was.paused == paused {
        return Ok(Json(schedule_view(record, Vec::new(), Vec::new())));
    }
    let now = state.clock.now();
    let next = match paused {
        true => was.next_fire_at,
        false => first_tick(&clock_of(&record)?, now, was.start_at, was.end_at),
    };
    let mut req = changed(&record, UpdateSchedule::default())?;
    req.paused = paused;
    let settings = settings_of(state, user, req, now, Some(next))?;
    let record = state
        .store
        .schedule_update(id, &settings, now)
        .await
        .map_err(not_found)?;
    tracing::info!(schedule.id = %id, paused, "schedule paused or resumed");
    schedules_changed(state).await;
    Ok(Json(schedule_view(record, Vec::new(), Vec::new())))
}

/// Makes a task from the schedule's template now, outside its ticks (overlap not
/// applied; a paused schedule too).
#[utoipa::path(operation_id = "trigger_schedule", post, path = "/v1/schedules/{id}/trigger", tag = "schedules", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Schedule id")),
    responses((status = 200, description = "A task was made from the template now, outside the ticks (overlap not applied); the schedule's latest runs show it", body = Schedule), Errors)
)]
pub(super) async fn trigger(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Schedule>, ApiError> {
    let record = changeable(&state, &user, id).await?;
    let now = state.clock.now();
    let key = format!("sched/{id}/trigger/{}", Uuid::now_v7());
    let queues = state.queue_defaults.current(&state.store).await?;
    match tick_work((&state.config, &state.webhooks), &queues, &record, now, key)? {
        crate::schedules::TickWork::Task(task) => {
            let made = crate::dispatch::submit::submit(&state.dispatcher, vec![*task]).await?;
            if let Some((task, _)) = made.first() {
                tracing::info!(schedule.id = %id, task.id = %task.id, "schedule triggered");
            }
        }
        crate::schedules::TickWork::Pipeline(rows) => {
            let (made, _, _) = super::pipelines::submit_rows(&state, rows).await?;
            tracing::info!(schedule.id = %id, pipeline.id = %made.id, "schedule triggered");
        }
    }
    get(State(state), user, ApiPath(id)).await
}

/// Wakes every node's schedule service, which otherwise looks for new or changed schedules
/// only every `schedule_poll_ms`. Lost (Redis down), the change is seen at that poll.
async fn schedules_changed(state: &AppState) {
    let _ = state.coord.publish(&Wake::Schedules).await;
}

/// The schedule, if this caller may see it (`owner`: only its own).
async fn visible(
    state: &AppState,
    owner: Option<&str>,
    id: Uuid,
) -> Result<ScheduleRecord, ApiError> {
    let record = state.store.schedule_get(id).await.map_err(not_found)?;
    if owner.is_some_and(|o| record.created_by != o) {
        return Err(not_found(StoreError::NotFound));
    }
    Ok(record)
}

/// The schedule, if this caller may change it: its own, or any for `admin`. Another's it
/// may see is forbidden to it, not missing.
async fn changeable(state: &AppState, user: &User, id: Uuid) -> Result<ScheduleRecord, ApiError> {
    let owner = user.task_change_scope()?;
    let record = visible(state, user.task_scope()?, id).await?;
    if owner.is_some_and(|o| record.created_by != o) {
        return Err(ApiError::forbidden(
            "this token may change only the schedules it created".to_string(),
        ));
    }
    Ok(record)
}

fn not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::not_found("no such schedule"),
        other => other.into(),
    }
}
