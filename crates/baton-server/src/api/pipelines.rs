//! Pipelines (docs/pipelines.md): a graph of jobs submitted at once, read as a graph,
//! cancelled whole, a failed job re-run with the jobs it had skipped.
//!
//! Each job is a task, checked as a task's submit is (`admission`), written with its
//! needs in one transaction (`Store::pipeline_insert`); the jobs that need nothing are
//! queued after the commit as any submit's (design.md §4.1). Release is the store's:
//! the terminal write of a job's last need releases it in the same transaction (§4.16).

use super::openapi::Errors;
use super::tasks::traceparent;
use crate::admission::{admitted, new_task, own_group, sealing_now};
use crate::auth::User;
use crate::dispatch::submit;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::queue_defaults::DefaultsByQueue;
use crate::schedules::TaskRules;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use baton_client::{
    Pipeline, PipelineCancelled, PipelineJob, PipelineList, PipelineStatus, PipelineSummary,
    SubmitPipeline,
};
use baton_core::TaskStatus;
use baton_core::pipeline::{self, ReleaseRule};
use baton_core::validate::Invalid;
use baton_store::{NewPipeline, PipelineJobs, PipelineRecord, PipelineRows, StoreError};
use std::collections::{BTreeMap, HashMap, HashSet};
use uuid::Uuid;

/// The longest pipeline name, in characters.
pub(crate) const MAX_NAME_CHARS: usize = 128;

/// The most pipelines one page lists.
pub(crate) const LIST_MAX: i64 = 200;

/// Submits a pipeline: every job written, with its needs, or none.
#[utoipa::path(operation_id = "submit_pipeline", post, path = "/v1/pipelines", tag = "pipelines", security(("bearer" = [])),
    request_body = SubmitPipeline,
    responses(
        (status = 201, description = "Accepted: its jobs that need nothing are queued, the others wait", body = Pipeline),
        (status = 200, description = "An existing pipeline with this idempotency key", body = Pipeline),
        Errors
    )
)]
pub(super) async fn submit(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    ApiJson(req): ApiJson<SubmitPipeline>,
) -> Result<(StatusCode, Json<Pipeline>), ApiError> {
    user.require_submit()?;
    let made = pipeline_rows(&state, &user, req, traceparent(&headers)).await?;
    let edges = made.needs.clone();
    let (record, rows, created) = submit_rows(&state, made).await?;
    if created {
        tracing::info!(pipeline.id = %record.id, jobs = rows.len(), "pipeline submitted");
    }
    let view = if created {
        view(
            &record,
            &PipelineJobs {
                needs: edges,
                tasks: rows,
            },
        )
    } else {
        // The first submit's pipeline, read with its own edges, not this request's.
        view(&record, &state.store.pipeline_jobs(record.id).await?)
    };
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

/// The rows of a pipeline submit, checked: the pipeline, its jobs as tasks, and the
/// edges `(task, needs)` between them. `schedule`: the schedule and tick firing it.
pub(crate) async fn pipeline_rows(
    state: &AppState,
    user: &User,
    mut req: SubmitPipeline,
    traceparent: Option<String>,
) -> Result<PipelineRows, ApiError> {
    for job in &mut req.jobs {
        own_group(user, &mut job.task);
    }
    let seal = {
        let tasks: Vec<_> = req.jobs.iter().map(|j| j.task.clone()).collect();
        sealing_now(state, &tasks).await
    };
    let queues = state.queue_defaults.current(&state.store).await?;
    pipeline_of(
        (&state.config, &state.webhooks),
        &queues,
        &user.token_id,
        req,
        traceparent,
        None,
        &|t| admitted(state, user, t, seal),
    )
}

/// A pipeline request checked into its rows, for `owner`: each job's task checked as a
/// task's submit is (`admit` adds the submitter's own checks: its token's limits, its
/// secrets sealed), the graph as `pipeline::check_graph` says. `schedule`: the schedule
/// and tick firing it, which its jobs carry.
pub(crate) fn pipeline_of(
    (config, webhooks): TaskRules<'_>,
    queues: &DefaultsByQueue,
    owner: &str,
    req: SubmitPipeline,
    traceparent: Option<String>,
    schedule: Option<(Uuid, chrono::DateTime<chrono::Utc>)>,
    admit: &dyn Fn(baton_store::NewTask) -> Result<baton_store::NewTask, ApiError>,
) -> Result<PipelineRows, ApiError> {
    let name = req.name.unwrap_or_else(|| "pipeline".to_string());
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(Invalid::new(
            "name",
            format!("1 to {MAX_NAME_CHARS} characters, none a control character"),
        )
        .into());
    }
    if let Some(key) = &req.idempotency_key {
        baton_core::validate::check_idempotency_key(key)?;
    }
    let graph: Vec<(String, Vec<String>)> = req
        .jobs
        .iter()
        .map(|j| (j.name.clone(), j.needs.clone()))
        .collect();
    pipeline::check_graph(&graph, config.limits.max_pipeline_jobs)?;
    let needed: HashSet<&str> = graph
        .iter()
        .flat_map(|(_, needs)| needs.iter().map(String::as_str))
        .collect();
    let id = Uuid::now_v7();
    let retry_default = config.timings.retry_backoff();
    let mut tasks = Vec::with_capacity(req.jobs.len());
    for mut job in req.jobs {
        let at = |e: ApiError| ApiError {
            message: format!("jobs.{}: {}", job.name, e.message),
            ..e
        };
        if !job.task.depends_on.is_empty() {
            return Err(Invalid::new(
                format!("jobs.{}.depends_on", job.name),
                "a job names the jobs it waits for in needs",
            )
            .into());
        }
        let when = job.task.when.take();
        if job.needs.is_empty() && when.is_some() {
            return Err(Invalid::new(
                format!("jobs.{}.when", job.name),
                "a job that needs nothing is queued at once: when applies to jobs with needs",
            )
            .into());
        }
        if job.task.run_at.is_some() {
            return Err(Invalid::new(
                format!("jobs.{}.run_at", job.name),
                "a job starts when its needs have ended, not at a time",
            )
            .into());
        }
        if job.task.idempotency_key.is_some() {
            return Err(Invalid::new(
                format!("jobs.{}.idempotency_key", job.name),
                "the pipeline's key makes its submit safe to repeat; its jobs take none",
            )
            .into());
        }
        let mut task = new_task(
            job.task,
            queues,
            &config.limits,
            &webhooks.policy,
            &retry_default,
            owner,
            traceparent.clone(),
        )
        .and_then(admit)
        .map_err(at)?;
        task.pipeline_id = Some(id);
        task.has_dependents = needed.contains(job.name.as_str());
        task.needs_pending = i32::try_from(job.needs.len()).unwrap_or(i32::MAX);
        task.release_when =
            (!job.needs.is_empty()).then(|| when.unwrap_or_default().as_str().to_string());
        if let Some((schedule, tick)) = schedule {
            task.schedule_id = Some(schedule);
            task.scheduled_for = Some(tick);
        }
        task.job = Some(job.name);
        tasks.push(task);
    }
    let ids: HashMap<String, Uuid> = tasks
        .iter()
        .map(|t| (t.job.clone().unwrap_or_default(), t.id))
        .collect();
    let edges = graph
        .iter()
        .flat_map(|(name, needs)| needs.iter().map(|n| (ids[name], ids[n])))
        .collect();
    let pipeline = NewPipeline {
        id,
        name,
        created_by: owner.to_string(),
        idempotency_key: req
            .idempotency_key
            .map(|k| baton_core::idempotency::scoped(owner, &k)),
        schedule_id: schedule.map(|(s, _)| s),
        scheduled_for: schedule.map(|(_, t)| t),
    };
    Ok(PipelineRows {
        pipeline,
        jobs: tasks,
        needs: edges,
    })
}

/// Writes a checked pipeline, then tells and queues its jobs as a submit does.
pub(crate) async fn submit_rows(
    state: &AppState,
    made: PipelineRows,
) -> Result<(PipelineRecord, Vec<baton_store::TaskRecord>, bool), ApiError> {
    crate::dispatch::queue_caps::check(&state.dispatcher, &made.jobs).await?;
    let (record, rows, created) = state
        .store
        .pipeline_insert(
            &made.pipeline,
            &made.jobs,
            &made.needs,
            state.dispatcher.clock.now(),
        )
        .await?;
    if created {
        submit::tell_and_enqueue(&state.dispatcher, &rows.iter().collect::<Vec<_>>()).await;
    }
    Ok((record, rows, created))
}

/// The pipeline as its reader sees it: each job's latest task, the jobs it needs, its
/// layer.
pub(crate) fn view(record: &PipelineRecord, jobs: &PipelineJobs) -> Pipeline {
    let latest = jobs.latest();
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for task in &jobs.tasks {
        if let Some(job) = task.job.as_deref() {
            *runs.entry(job).or_default() += 1;
        }
    }
    let needed = jobs.needed_jobs();
    let graph: Vec<(String, Vec<String>)> = latest
        .iter()
        .map(|(name, t)| (name.to_string(), needed.of(t.id).into_iter().collect()))
        .collect();
    let layers: HashMap<&str, usize> = pipeline::check_graph(&graph, usize::MAX)
        .map(|order| {
            order
                .into_iter()
                .map(|(i, layer)| (graph[i].0.as_str(), layer))
                .collect()
        })
        .unwrap_or_default();
    let mut out: Vec<PipelineJob> = graph
        .iter()
        .map(|(name, needs)| {
            let t = latest[name.as_str()];
            PipelineJob {
                name: name.clone(),
                needs: needs.clone(),
                when: t
                    .release_when
                    .as_deref()
                    .and_then(ReleaseRule::parse)
                    .unwrap_or_default(),
                layer: layers.get(name.as_str()).copied().unwrap_or(0),
                task_id: t.id,
                status: t.status,
                attempt: t.attempt,
                runs: runs.get(name.as_str()).copied().unwrap_or(1),
                queued_at: t.queued_at,
                started_at: t.started_at,
                finished_at: t.finished_at,
                exit_code: t.exit_code,
                error: t.error.clone(),
            }
        })
        .collect();
    out.sort_by(|a, b| (a.layer, &a.name).cmp(&(b.layer, &b.name)));
    let status = PipelineStatus::of(out.iter().map(|j| j.status));
    let finished_at = (status != PipelineStatus::Running)
        .then(|| out.iter().filter_map(|j| j.finished_at).max())
        .flatten();
    Pipeline {
        id: record.id,
        name: record.name.clone(),
        status,
        created_at: record.created_at,
        finished_at,
        schedule_id: record.schedule_id,
        jobs: out,
    }
}

/// The pipeline `id`, if this caller may read it (its jobs are its owner's tasks).
async fn visible(state: &AppState, user: &User, id: Uuid) -> Result<PipelineRecord, ApiError> {
    let owner = user.task_scope()?;
    let record = state.store.pipeline_get(id).await?;
    if owner.is_some_and(|o| record.created_by != o) {
        return Err(StoreError::NotFound.into());
    }
    Ok(record)
}

/// The pipeline `id`, if this caller may change it: `admin` any, a `submit` token its
/// own; another's is not found when it may not see it, forbidden when it may.
async fn changeable(state: &AppState, user: &User, id: Uuid) -> Result<PipelineRecord, ApiError> {
    user.require_submit()?;
    let record = visible(state, user, id).await?;
    match user.task_change_scope()? {
        Some(owner) if record.created_by != owner => Err(ApiError::forbidden(
            "this token may change only the pipelines it submitted",
        )),
        _ => Ok(record),
    }
}

/// Reads a pipeline: its jobs, their statuses and timings.
#[utoipa::path(operation_id = "get_pipeline", get, path = "/v1/pipelines/{id}", tag = "pipelines", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Pipeline id")),
    responses((status = 200, description = "The pipeline", body = Pipeline), Errors)
)]
pub(super) async fn get(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<Pipeline>, ApiError> {
    let record = visible(&state, &user, id).await?;
    let jobs = state.store.pipeline_jobs(id).await?;
    Ok(Json(view(&record, &jobs)))
}

/// `GET /v1/pipelines`'s query.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// Only pipelines older than this one (the previous page's `next_cursor`).
    before: Option<Uuid>,
    /// At most this many (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<i64>,
}

/// Lists pipelines, newest first, each with its jobs counted by status.
#[utoipa::path(operation_id = "list_pipelines", get, path = "/v1/pipelines", tag = "pipelines", security(("bearer" = [])),
    params(ListQuery),
    responses((status = 200, description = "A page of pipelines", body = PipelineList), Errors)
)]
pub(super) async fn list(
    State(state): State<AppState>,
    user: User,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<PipelineList>, ApiError> {
    let owner = user.task_scope()?;
    let limit = q.limit.unwrap_or(50);
    baton_core::validate::check_range("limit", limit, 1, LIST_MAX)?;
    let rows = state.store.pipelines_list(owner, q.before, limit).await?;
    let next_cursor = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    let pipelines = rows
        .into_iter()
        .map(|r| {
            let statuses: Vec<TaskStatus> =
                r.statuses.iter().filter_map(|s| s.parse().ok()).collect();
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for s in &statuses {
                *counts.entry(s.to_string()).or_default() += 1;
            }
            PipelineSummary {
                id: r.id,
                name: r.name,
                status: PipelineStatus::of(statuses.iter().copied()),
                created_at: r.created_at,
                finished_at: r.finished_at,
                schedule_id: r.schedule_id,
                jobs: statuses.len(),
                counts,
            }
        })
        .collect();
    Ok(Json(PipelineList {
        pipelines,
        next_cursor,
    }))
}

/// Cancels a pipeline: every job not ended — those waiting at once, the others each as
/// a task's cancel (a running one through its runner).
#[utoipa::path(operation_id = "cancel_pipeline", post, path = "/v1/pipelines/{id}/cancel", tag = "pipelines", security(("bearer" = [])),
    params(("id" = Uuid, Path, description = "Pipeline id")),
    responses((status = 200, description = "Its unfinished jobs cancelled, or cancelling", body = PipelineCancelled), Errors)
)]
pub(super) async fn cancel(
    State(state): State<AppState>,
    user: User,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<PipelineCancelled>, ApiError> {
    let record = changeable(&state, &user, id).await?;
    let dispatcher = &state.dispatcher;
    let (mut cancelled, mut cancelling) = (0, 0);
    // A running job that ends while this goes on may release the jobs after it (a
    // `cancelling` run may still end as its runner reports): go round until nothing
    // unfinished is left but runs being cancelled. Each round ends a layer at least.
    for _ in 0..64 {
        let waiting = state
            .store
            .pipeline_cancel_waiting(id, dispatcher.clock.now())
            .await?;
        cancelled += waiting.len();
        if waiting.iter().any(|t| t.notify_url.is_some()) {
            let _ = dispatcher.coord.publish(&baton_coord::Wake::Outbox).await;
        }
        dispatcher
            .events
            .tasks(&waiting.iter().collect::<Vec<_>>())
            .await;
        let ended = crate::dispatch::releases::rows_ended_with_dependents(&waiting);
        crate::dispatch::releases::follow(
            &dispatcher.store,
            &dispatcher.coord,
            &dispatcher.events,
            &ended,
        )
        .await;
        let jobs = state.store.pipeline_jobs(id).await?;
        let open: Vec<Uuid> = jobs
            .tasks
            .iter()
            .filter(|t| !t.status.is_terminal() && t.status != TaskStatus::Cancelling)
            .map(|t| t.id)
            .collect();
        if open.is_empty() {
            break;
        }
        for task in open {
            match crate::dispatch::cancel::cancel(dispatcher, task, None).await {
                Ok(done) if done.task.status == TaskStatus::Cancelling => cancelling += 1,
                Ok(done) if done.task.status != done.was => cancelled += 1,
                Ok(_) => {}
                // Ended meanwhile: the next round sees what its end released.
                Err(crate::dispatch::DispatchError::Store(StoreError::Conflict { .. })) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    tracing::info!(pipeline.id = %id, cancelled, cancelling, "pipeline cancel");
    let jobs = state.store.pipeline_jobs(id).await?;
    Ok(Json(PipelineCancelled {
        cancelled,
        cancelling,
        pipeline: view(&record, &jobs),
    }))
}

/// Re-runs a job: a new task for it, and for each job it had skipped since, each
/// released as its needs end.
#[utoipa::path(operation_id = "retry_pipeline_job", post, path = "/v1/pipelines/{id}/jobs/{job}/retry", tag = "pipelines", security(("bearer" = [])),
    params(
        ("id" = Uuid, Path, description = "Pipeline id"),
        ("job" = String, Path, description = "The job's name"),
    ),
    responses(
        (status = 201, description = "Re-run: the pipeline with the job's new task", body = Pipeline),
        (status = 200, description = "The job's latest task already had its re-run", body = Pipeline),
        Errors
    )
)]
pub(super) async fn retry_job(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    ApiPath((id, job)): ApiPath<(Uuid, String)>,
) -> Result<(StatusCode, Json<Pipeline>), ApiError> {
    let record = changeable(&state, &user, id).await?;
    let jobs = state.store.pipeline_jobs(id).await?;
    let latest = jobs
        .latest()
        .get(job.as_str())
        .map(|t| (*t).clone())
        .ok_or(StoreError::NotFound)?;
    let (_, created) =
        super::rerun::rerun_one(&state, &user, latest, traceparent(&headers)).await?;
    let jobs = state.store.pipeline_jobs(id).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view(&record, &jobs))))
}
