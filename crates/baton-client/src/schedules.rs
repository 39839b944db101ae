//! Wire types of `/v1/schedules`.

use crate::wire::{SubmitPipeline, SubmitTask, Task};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `POST /v1/schedules`: a task template fired on a cron expression. Unknown fields are
/// refused.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    /// Unique among the caller's schedules.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._ -]*$"
    )]
    pub name: String,
    /// Five fields (minute hour day month weekday), six with a leading seconds field, or
    /// `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`.
    #[schema(min_length = 1, max_length = 200)]
    pub cron: String,
    /// An IANA zone the expression is read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64)]
    pub timezone: Option<String>,
    /// The task each tick makes: everything `POST /v1/tasks` takes, but `run_at`,
    /// `idempotency_key`, `secret_env` and `depends_on` (the schedule sets the first two
    /// itself). Left out when the schedule fires a `pipeline`.
    #[serde(default)]
    pub task: SubmitTask,
    /// The pipeline each tick submits instead of a task (docs/pipelines.md), its jobs
    /// under the same rules as a task template; the tick keys it, so a tick makes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<SubmitPipeline>,
    /// A tick while a run of this schedule is unfinished: `allow` it, `skip` it (the
    /// default), `cancel` the unfinished run, or `queue` one tick until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(allow|skip|cancel|queue)$")]
    pub overlap: Option<String>,
    /// Ticks missed while no node could fire them: fire the `latest` (the default),
    /// `all`, or `skip` them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(skip|latest|all)$")]
    pub catch_up: Option<String>,
    /// A missed tick older than this never fires (default 86400: a day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 2592000)]
    pub catch_up_window_s: Option<i64>,
    /// Created paused: no tick fires until it is resumed.
    #[serde(default)]
    pub paused: bool,
    /// No tick before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    /// No tick after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    /// Each tick's task starts up to this many seconds late, spread evenly and the same
    /// for the same tick whichever node fires it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 3600)]
    pub jitter_s: Option<i64>,
}

/// `PATCH /v1/schedules/{id}`: the fields given replace the schedule's; a changed
/// expression, zone or start time fires from the next tick after now.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpdateSchedule {
    /// A new name, unique among the creator's schedules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._ -]*$"
    )]
    pub name: Option<String>,
    /// A new expression, in any form `POST` takes: the schedule then fires from the next
    /// tick after now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 200)]
    pub cron: Option<String>,
    /// A new IANA zone: the schedule then fires from the next tick after now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64)]
    pub timezone: Option<String>,
    /// A new template, replacing the old one whole (not merged field by field); a
    /// schedule that fired a pipeline fires this task from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<SubmitTask>,
    /// A new pipeline template, replacing the old template whole, task or pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<SubmitPipeline>,
    /// A new overlap policy: `allow`, `skip`, `cancel` or `queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(allow|skip|cancel|queue)$")]
    pub overlap: Option<String>,
    /// A new catch-up policy: `skip`, `latest` or `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(skip|latest|all)$")]
    pub catch_up: Option<String>,
    /// A new age, in seconds, past which a missed tick never fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 2592000)]
    pub catch_up_window_s: Option<i64>,
    /// A new first moment: the schedule then fires from the next tick after now. A change
    /// can move it but not remove it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    /// A new last moment. A change can move it but not remove it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    /// A new most each tick's task may start late, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 3600)]
    pub jitter_s: Option<i64>,
}

/// A schedule as users see it.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Schedule {
    /// Names it in `/v1/schedules/{id}`, and in the `schedule_id` of each task it makes.
    pub id: Uuid,
    /// Unique among its creator's schedules.
    pub name: String,
    /// The expression, as given: five fields, six with seconds, or an `@` shorthand.
    pub cron: String,
    /// The IANA zone the expression is read in (`UTC` unless one was given).
    pub timezone: String,
    /// The template each tick's task is made from (empty for a pipeline's schedule).
    pub task: SubmitTask,
    /// The pipeline each tick submits, for a schedule that fires one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<SubmitPipeline>,
    /// What a tick does while a run of this schedule is unfinished: `allow`, `skip`,
    /// `cancel` or `queue`.
    pub overlap: String,
    /// What becomes of ticks missed while no node could fire them: `skip`, `latest` or
    /// `all`.
    pub catch_up: String,
    /// A missed tick older than this, in seconds, never fires.
    pub catch_up_window_s: i64,
    /// Each tick's task starts up to this many seconds late (0: on the tick).
    pub jitter_s: i64,
    /// No tick fires while paused, nor counts as missed; a resume fires from the next tick
    /// after now.
    pub paused: bool,
    /// No tick before this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    /// No tick after this: past it, `next_fire_at` is absent for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    /// When it was made; `fired_count` and `skipped_count` count from here.
    pub created_at: DateTime<Utc>,
    /// When its settings last changed; firing does not change it.
    pub updated_at: DateTime<Utc>,
    /// The next tick due (absent: none left; a paused schedule keeps it, and fires
    /// nothing until resumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire_at: Option<DateTime<Utc>>,
    /// With `overlap: queue`, the tick held until the unfinished run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered_for: Option<DateTime<Utc>>,
    /// Ticks that made a task, since it was created.
    pub fired_count: i64,
    /// Ticks that made no task: skipped for overlap, missed beyond catch-up, or with a
    /// template no longer valid.
    pub skipped_count: i64,
    /// The next ticks: ten in `GET /v1/schedules/{id}`, three in the list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_fires: Vec<DateTime<Utc>>,
    /// The latest ticks, newest first, each with its task (a summary) or why it made
    /// none: ten in `GET /v1/schedules/{id}`, three in the list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_runs: Vec<ScheduleRun>,
    /// True in the list: the template's `command` is cut to its first 16 words and each,
    /// like its `script`, to 256 characters, and its `env` and `payload` are left out;
    /// `GET /v1/schedules/{id}` shows it whole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub summary: bool,
}

/// One tick, or a range of skipped ones.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScheduleRun {
    /// The tick, or the first of a skipped range.
    pub scheduled_for: DateTime<Utc>,
    /// `fired` (see `task`), or why it made none: `skipped_overlap`, `skipped_missed`,
    /// `skipped_invalid`.
    pub outcome: String,
    /// The task the tick made, with its status and outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    /// For a skipped range: its last tick and how many ticks it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<DateTime<Utc>>,
    /// How many ticks the skipped range holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticks: Option<i64>,
}

/// `GET /v1/schedules`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleList {
    /// The schedules the caller may see (its own, or all for `read` and `admin`), by name;
    /// at most 1,000.
    pub schedules: Vec<Schedule>,
}

/// The schedule calls of the typed client.
impl crate::Client {
    /// Creates a schedule: it fires from the first tick after now (and at or after
    /// `start_at`).
    pub async fn schedule_create(
        &self,
        req: &CreateSchedule,
    ) -> Result<Schedule, crate::ClientError> {
        Self::json(
            self.request(reqwest::Method::POST, "/v1/schedules")
                .json(req),
        )
        .await
    }

    /// The schedules this token may see, by name.
    pub async fn schedules(&self) -> Result<ScheduleList, crate::ClientError> {
        Self::json(self.request(reqwest::Method::GET, "/v1/schedules")).await
    }

    /// One schedule, with its next ticks and its latest runs.
    pub async fn schedule_get(&self, id: Uuid) -> Result<Schedule, crate::ClientError> {
        Self::json(self.request(reqwest::Method::GET, &format!("/v1/schedules/{id}"))).await
    }

    /// Changes the fields `req` gives; the rest stay.
    pub async fn schedule_update(
        &self,
        id: Uuid,
        req: &UpdateSchedule,
    ) -> Result<Schedule, crate::ClientError> {
        Self::json(
            self.request(reqwest::Method::PATCH, &format!("/v1/schedules/{id}"))
                .json(req),
        )
        .await
    }

    /// `pause`, `resume` or `trigger`.
    pub async fn schedule_action(
        &self,
        id: Uuid,
        action: &str,
    ) -> Result<Schedule, crate::ClientError> {
        Self::json(self.request(
            reqwest::Method::POST,
            &format!("/v1/schedules/{id}/{action}"),
        ))
        .await
    }

    /// Deletes a schedule; the tasks it made stay.
    pub async fn schedule_delete(&self, id: Uuid) -> Result<(), crate::ClientError> {
        Self::send(self.request(reqwest::Method::DELETE, &format!("/v1/schedules/{id}"))).await?;
        Ok(())
    }
}
