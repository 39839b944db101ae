//! Schedules as a node handles them: a request checked into settings, a row shown as
//! users see it, and a tick made into its task. When ticks fire is `baton_core::cron`
//! and `baton_core::schedule`; firing them is `services::scheduler`.

use crate::admission::new_task;
use crate::auth::User;
use crate::config::ServeConfig;
use crate::error::ApiError;
use crate::queue_defaults::DefaultsByQueue;
use crate::state::AppState;
use crate::webhooks::Webhooks;
use baton_client::{
    CreateSchedule, Schedule, ScheduleRun, SubmitPipeline, SubmitTask, UpdateSchedule,
};
use baton_core::cron::CronClock;
use baton_core::schedule::{CatchUp, Overlap};
use baton_core::validate::{self, Invalid};
use baton_store::{NewTask, PipelineRows, ScheduleRecord, ScheduleSettings};
use chrono::{DateTime, Duration, Utc};
use sqlx::types::Json;
use uuid::Uuid;

pub(crate) const DEFAULT_TIMEZONE: &str = "UTC";
pub(crate) const DEFAULT_OVERLAP: Overlap = Overlap::Skip;
pub(crate) const DEFAULT_CATCH_UP: CatchUp = CatchUp::Latest;
pub(crate) const DEFAULT_CATCH_UP_WINDOW_S: i64 = 86_400;
/// The longest catch-up window a schedule may ask for.
pub(crate) const MAX_CATCH_UP_WINDOW_S: i64 = 30 * 86_400;
/// The most a tick's task may be started late, spread.
pub(crate) const MAX_JITTER_S: i64 = 3_600;
/// Longest schedule name.
pub(crate) const MAX_NAME: usize = 128;

/// The task key of a tick: unique per (schedule, tick), so a tick fired twice (two nodes,
/// a retried transaction) is one task. No user's key can equal it: theirs are stored as
/// `<owner>:<key>`, and this has no colon.
pub(crate) fn tick_key(schedule: Uuid, tick: DateTime<Utc>) -> String {
    format!("sched/{schedule}/{}", tick.timestamp_millis())
}

/// The clock of a schedule's expression and zone.
pub(crate) fn clock_of(record: &ScheduleRecord) -> Result<CronClock, Invalid> {
    CronClock::new(&record.settings.cron, &record.settings.timezone)
}

/// The first tick at or after `start_at` (if later than `now`), after `now`, and not
/// after `end_at`.
pub(crate) fn first_tick(
    clock: &CronClock,
    now: DateTime<Utc>,
    start_at: Option<DateTime<Utc>>,
    end_at: Option<DateTime<Utc>>,
) -> Option<DateTime<Utc>> {
    let from = match start_at {
        Some(start) if start > now => start - Duration::microseconds(1),
        _ => now,
    };
    clock
        .next_after(from)
        .filter(|t| end_at.is_none_or(|end| *t <= end))
}

/// Checks a schedule request into the settings to store, the first tick computed from
/// `now`; `keep_next` keeps an existing schedule's next tick when nothing that decides it
/// changed.
pub(crate) fn settings_of(
    state: &AppState,
    user: &User,
    mut req: CreateSchedule,
    now: DateTime<Utc>,
    keep_next: Option<Option<DateTime<Utc>>>,
) -> Result<ScheduleSettings, ApiError> {
    check_name(&req.name)?;
    let timezone = req.timezone.unwrap_or_else(|| DEFAULT_TIMEZONE.to_string());
    let clock = CronClock::new(&req.cron, &timezone)?;
    let overlap = req.overlap.as_deref().map(Overlap::parse).transpose()?;
    let catch_up = req.catch_up.as_deref().map(CatchUp::parse).transpose()?;
    let window = req.catch_up_window_s.unwrap_or(DEFAULT_CATCH_UP_WINDOW_S);
    validate::check_seconds("catch_up_window_s", window, MAX_CATCH_UP_WINDOW_S)?;
    let jitter = req.jitter_s.unwrap_or(0);
    validate::check_range("jitter_s", jitter, 0, MAX_JITTER_S)?;
    if let (Some(start), Some(end)) = (req.start_at, req.end_at)
        && end <= start
    {
        return Err(Invalid::new("end_at", "must be after start_at").into());
    }
    let template = match req.pipeline.take() {
        Some(mut pipeline) => {
            if req.task != SubmitTask::default() {
                return Err(Invalid::new(
                    "task",
                    "a schedule fires a task or a pipeline: give one of them",
                )
                .into());
            }
            for job in &mut pipeline.jobs {
                crate::admission::own_group(user, &mut job.task);
            }
            template_pipeline(state, user, &pipeline)?;
            serde_json::json!({ PIPELINE_TEMPLATE: pipeline })
        }
        None => {
            crate::admission::own_group(user, &mut req.task);
            template_task(state, user, &req.task)?;
            serde_json::to_value(&req.task).expect("a task serialises")
        }
    };
    let next_fire_at = match keep_next {
        Some(next) => next.filter(|t| req.end_at.is_none_or(|end| *t <= end)),
        None => first_tick(&clock, now, req.start_at, req.end_at),
    };
    Ok(ScheduleSettings {
        name: req.name,
        cron: req.cron,
        timezone,
        template: Json(template),
        overlap: overlap.unwrap_or(DEFAULT_OVERLAP).as_str().to_string(),
        catch_up: catch_up.unwrap_or(DEFAULT_CATCH_UP).as_str().to_string(),
        catch_up_window_s: i32::try_from(window).expect("bounded above"),
        jitter_s: i32::try_from(jitter).expect("bounded above"),
        paused: req.paused,
        start_at: req.start_at,
        end_at: req.end_at,
        next_fire_at,
    })
}

/// A change applied to a schedule, as the whole request it makes.
pub(crate) fn changed(
    record: &ScheduleRecord,
    change: UpdateSchedule,
) -> Result<CreateSchedule, ApiError> {
    let was = &record.settings;
    let (task_template, pipeline_template) = match (change.task, change.pipeline) {
        (task, Some(pipeline)) => (task.unwrap_or_default(), Some(pipeline)),
        (Some(task), None) => (task, None),
        (None, None) => match template_of(record)? {
            Template::Task(task) => (*task, None),
            Template::Pipeline(pipeline) => (SubmitTask::default(), Some(pipeline)),
        },
    };
    Ok(CreateSchedule {
        name: change.name.unwrap_or_else(|| was.name.clone()),
        cron: change.cron.unwrap_or_else(|| was.cron.clone()),
        timezone: Some(change.timezone.unwrap_or_else(|| was.timezone.clone())),
        task: task_template,
        pipeline: pipeline_template,
        overlap: Some(change.overlap.unwrap_or_else(|| was.overlap.clone())),
        catch_up: Some(change.catch_up.unwrap_or_else(|| was.catch_up.clone())),
        catch_up_window_s: Some(
            change
                .catch_up_window_s
                .unwrap_or(was.catch_up_window_s.into()),
        ),
        paused: was.paused,
        start_at: change.start_at.or(was.start_at),
        end_at: change.end_at.or(was.end_at),
        jitter_s: Some(change.jitter_s.unwrap_or(was.jitter_s.into())),
    })
}

/// Whether a change moves when the schedule fires (then it fires from the next tick
/// after now, not from the tick it was waiting for).
pub(crate) fn moves_ticks(record: &ScheduleRecord, after: &CreateSchedule) -> bool {
    let was = &record.settings;
    was.cron != after.cron
        || Some(&was.timezone) != after.timezone.as_ref()
        || was.start_at != after.start_at
}

/// A schedule's template: the task each tick makes, or the pipeline it submits.
pub(crate) enum Template {
    Task(Box<SubmitTask>),
    Pipeline(SubmitPipeline),
}

/// A pipeline's template is stored as `{"pipeline": <its submit>}`; a task's is the
/// task's submit itself, which has no such field.
const PIPELINE_TEMPLATE: &str = "pipeline";

/// The stored template, as the request it came from.
pub(crate) fn template_of(record: &ScheduleRecord) -> Result<Template, ApiError> {
    let stored = &record.settings.template.0;
    let read = match stored.get(PIPELINE_TEMPLATE) {
        Some(pipeline) => serde_json::from_value(pipeline.clone()).map(Template::Pipeline),
        None => serde_json::from_value(stored.clone()).map(|t| Template::Task(Box::new(t))),
    };
    read.map_err(|e| {
        ApiError::from(baton_store::StoreError::Internal(format!(
            "schedule {} has an unreadable template: {e}",
            record.id
        )))
    })
}

/// A pipeline template checked as a submit by `user` would be, with a task template's
/// rules for each job (errors named `pipeline.<field>`): the tick keys it, and no job
/// keeps secrets.
fn template_pipeline(
    state: &AppState,
    user: &User,
    pipeline: &SubmitPipeline,
) -> Result<(), ApiError> {
    let refused = |field: String, why: &str| -> ApiError {
        Invalid::new(format!("pipeline.{field}"), why.to_string()).into()
    };
    if pipeline.idempotency_key.is_some() {
        return Err(refused(
            "idempotency_key".into(),
            "a schedule keys each tick's pipeline itself",
        ));
    }
    if let Some(job) = pipeline.jobs.iter().find(|j| !j.task.secret_env.is_empty()) {
        return Err(refused(
            format!("jobs.{}.secret_env", job.name),
            "schedules do not keep secrets; give the job its credentials another way",
        ));
    }
    let rules = (&*state.config, &*state.webhooks);
    crate::api::pipelines::pipeline_of(
        rules,
        &DefaultsByQueue::new(),
        &user.token_id,
        pipeline.clone(),
        None,
        None,
        &|t| {
            user.may_submit_to(&t.queue, &t.labels, t.priority)?;
            Ok(t)
        },
    )
    .map_err(|mut e| {
        e.message = format!("pipeline.{}", e.message);
        e
    })?;
    Ok(())
}

fn check_name(name: &str) -> Result<(), Invalid> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ' '));
    if ok {
        Ok(())
    } else {
        Err(Invalid::new(
            "name",
            format!(
                "{name:?} is not a valid schedule name: 1-{MAX_NAME} letters, digits, '.', \
                 '_', '-' or spaces, starting with a letter or digit"
            ),
        ))
    }
}

/// The template checked as a submit by `user` would be: every field as `POST /v1/tasks`
/// checks it (errors named `task.<field>`), within the token's queues and labels. The
/// schedule sets `run_at` and the key itself; secrets are not kept in templates.
fn template_task(state: &AppState, user: &User, task: &SubmitTask) -> Result<NewTask, ApiError> {
    let refused = |field: &str, why: &str| -> ApiError {
        Invalid::new(format!("task.{field}"), why.to_string()).into()
    };
    if task.run_at.is_some() {
        return Err(refused(
            "run_at",
            "a schedule's ticks set when its tasks run",
        ));
    }
    if task.idempotency_key.is_some() {
        return Err(refused(
            "idempotency_key",
            "a schedule keys each tick's task itself",
        ));
    }
    if !task.secret_env.is_empty() {
        return Err(refused(
            "secret_env",
            "schedules do not keep secrets; give the task its credentials another way",
        ));
    }
    // A tick's task is written without edges: one that waited would wait forever. A
    // graph of jobs is a pipeline, which a schedule fires whole.
    if !task.depends_on.is_empty() || task.when.is_some() {
        return Err(refused(
            if task.when.is_some() {
                "when"
            } else {
                "depends_on"
            },
            "a schedule's task waits for no task: fire a pipeline instead",
        ));
    }
    // The template alone: its tasks take their queue's defaults as they are at each tick.
    let rules = (&*state.config, &*state.webhooks);
    let made = tick_task_of(rules, &DefaultsByQueue::new(), task.clone(), &user.token_id)
        .map_err(prefixed)?;
    user.may_submit_to(&made.queue, &made.labels, made.priority)?;
    Ok(made)
}

fn prefixed(mut e: ApiError) -> ApiError {
    e.message = format!("task.{}", e.message);
    e
}

/// What a tick's task is made by: the node's limits and timings, and the webhook
/// address policy.
pub(crate) type TaskRules<'a> = (&'a ServeConfig, &'a Webhooks);

fn tick_task_of(
    (config, webhooks): TaskRules<'_>,
    queues: &DefaultsByQueue,
    task: SubmitTask,
    owner: &str,
) -> Result<NewTask, ApiError> {
    new_task(
        task,
        queues,
        &config.limits,
        &webhooks.policy,
        &config.timings.retry_backoff(),
        owner,
        None,
    )
}

/// What a tick makes: a task, or a pipeline with its jobs and their edges.
pub(crate) enum TickWork {
    Task(Box<NewTask>),
    Pipeline(PipelineRows),
}

/// What a tick makes from the schedule's template, keyed to the tick: a task (starting
/// after the tick's jitter), or a pipeline (whose jobs carry the schedule and tick; no
/// jitter: its first jobs are queued at once).
pub(crate) fn tick_work(
    rules: TaskRules<'_>,
    queues: &DefaultsByQueue,
    record: &ScheduleRecord,
    tick: DateTime<Utc>,
    key: String,
) -> Result<TickWork, ApiError> {
    let template = match template_of(record)? {
        Template::Task(task) => *task,
        Template::Pipeline(pipeline) => {
            let mut rows = crate::api::pipelines::pipeline_of(
                rules,
                queues,
                &record.created_by,
                pipeline,
                None,
                Some((record.id, tick)),
                &Ok,
            )?;
            // As a tick's task key, unscoped: no user's key can equal it.
            rows.pipeline.idempotency_key = Some(key);
            return Ok(TickWork::Pipeline(rows));
        }
    };
    let mut task = tick_task_of(rules, queues, template, &record.created_by)?;
    let jitter = u32::try_from(record.settings.jitter_s).unwrap_or(0);
    if jitter > 0 {
        task.run_at =
            Some(tick + baton_core::schedule::jitter_of(record.id.as_u128(), tick, jitter));
    }
    task.idempotency_key = Some(key);
    task.schedule_id = Some(record.id);
    task.scheduled_for = Some(tick);
    Ok(TickWork::Task(Box::new(task)))
}

/// A schedule as users see it; `detail` adds its next ticks and latest runs.
pub(crate) fn schedule_view(
    record: ScheduleRecord,
    next_fires: Vec<DateTime<Utc>>,
    last_runs: Vec<ScheduleRun>,
) -> Schedule {
    let (mut task, pipeline) = match template_of(&record) {
        Ok(Template::Task(task)) => (*task, None),
        Ok(Template::Pipeline(pipeline)) => (SubmitTask::default(), Some(pipeline)),
        Err(_) => (SubmitTask::default(), None),
    };
    let settings = record.settings;
    // The template's webhook address is shown as a task's is.
    task.notify_url = task
        .notify_url
        .map(|url| crate::webhooks::redacted(&url).into_owned());
    Schedule {
        id: record.id,
        name: settings.name,
        cron: settings.cron,
        timezone: settings.timezone,
        task,
        pipeline,
        overlap: settings.overlap,
        catch_up: settings.catch_up,
        catch_up_window_s: settings.catch_up_window_s.into(),
        jitter_s: settings.jitter_s.into(),
        paused: settings.paused,
        start_at: settings.start_at,
        end_at: settings.end_at,
        created_at: record.created_at,
        updated_at: record.updated_at,
        next_fire_at: settings.next_fire_at.filter(|_| !settings.paused),
        buffered_for: record.buffered_for,
        fired_count: record.fired_count,
        skipped_count: record.skipped_count,
        next_fires,
        last_runs,
        summary: false,
    }
}
