//! The schedule table, and firing a tick.
//!
//! Every node runs the schedule service, so several may find the same tick due. Firing is
//! one transaction: a compare-and-set moves `next_fire_at` (and the held tick) from what
//! the node read to what comes after, and inserts the tick's tasks and skip records. The
//! node whose compare-and-set finds the row moved rolls back and makes nothing; and each
//! tick's task carries a key unique per (schedule, tick), so even two writers that both
//! passed the check could not make a tick twice. A node that dies mid-fire leaves the
//! transaction uncommitted: the tick is still due, and the next pass fires it.

use crate::Store;
use crate::error::StoreError;
use crate::tasks::{NewTask, TaskRecord};
use baton_core::LeaseId;
use baton_core::RunnerId;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::types::Json;
use uuid::Uuid;

/// `sql` with the schedule's `id` bound as `$1` and its settings `s` as `$2` to `$13`, in
/// the one column order the insert and the update share.
fn with_settings<'q>(
    sql: &'static str,
    id: Uuid,
    s: &'q ScheduleSettings,
) -> QueryAs<'q, sqlx::Postgres, ScheduleRecord, PgArguments> {
    sqlx::query_as(sql)
        .bind(id)
        .bind(&s.name)
        .bind(&s.cron)
        .bind(&s.timezone)
        .bind(&s.template)
        .bind(&s.overlap)
        .bind(&s.catch_up)
        .bind(s.catch_up_window_s)
        .bind(s.jitter_s)
        .bind(s.paused)
        .bind(s.start_at)
        .bind(s.end_at)
        .bind(s.next_fire_at)
}

/// A schedule's settings, as created or as a change leaves them: what a write of it
/// sets, and what a read of it finds beside what firing keeps ([`ScheduleRecord`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ScheduleSettings {
    /// Its name, unique per owner.
    pub name: String,
    /// Its cron expression (five fields).
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The task template, as `POST /v1/tasks` takes it.
    pub template: Json<Value>,
    /// What a tick does while the last tick's task still runs: a `schedule::Overlap` name.
    pub overlap: String,
    /// What happens to ticks missed while no node fired them: a `schedule::CatchUp` name.
    pub catch_up: String,
    /// How old a missed tick may be and still fire, in seconds.
    pub catch_up_window_s: i32,
    /// The most each tick's task is delayed at random, in seconds.
    pub jitter_s: i32,
    /// Whether it is paused: no tick fires.
    pub paused: bool,
    /// No tick fires before this.
    pub start_at: Option<DateTime<Utc>>,
    /// No tick fires after this.
    pub end_at: Option<DateTime<Utc>>,
    /// Its next tick under these settings (`None`: none left); each fire moves it on.
    pub next_fire_at: Option<DateTime<Utc>>,
}

/// A schedule as stored: its settings, and what its creation and its fires keep.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ScheduleRecord {
    /// Its id.
    pub id: Uuid,
    /// Its settings, as last written (`next_fire_at` as last fired).
    #[sqlx(flatten)]
    pub settings: ScheduleSettings,
    /// The token that created it.
    pub created_by: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When its settings last changed.
    pub updated_at: DateTime<Utc>,
    /// A tick held back until the last tick's task ends (overlap `queue`).
    pub buffered_for: Option<DateTime<Utc>>,
    /// How many ticks made a task.
    pub fired_count: i64,
    /// How many ticks were skipped.
    pub skipped_count: i64,
}

/// Ticks that made no task.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ScheduleSkip {
    /// The first tick skipped.
    pub scheduled_for: DateTime<Utc>,
    /// The last tick skipped.
    pub through: DateTime<Utc>,
    /// How many ticks were skipped.
    pub ticks: i64,
    /// `overlap`, `missed` or `invalid` (the template no longer passes the limits).
    pub reason: String,
    /// When the skip was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// A skipped range and its schedule, as [`Store::schedules_skips`] reads them.
#[derive(sqlx::FromRow)]
struct ScheduleSkipOf {
    schedule_id: Uuid,
    #[sqlx(flatten)]
    skip: ScheduleSkip,
}

/// One pass's firing of one schedule: what it read, and what it writes.
#[derive(Debug, Clone)]
pub struct Fire {
    /// `next_fire_at` and `buffered_for` as read: the compare-and-set.
    pub read_next: Option<DateTime<Utc>>,
    /// The held tick as read.
    pub read_buffered: Option<DateTime<Utc>>,
    /// The tasks the ticks make.
    pub tasks: Vec<NewTask>,
    /// The pipelines the ticks make (docs/pipelines.md): each with its jobs and their
    /// edges `(task, needs)`, keyed to its tick.
    pub pipelines: Vec<crate::PipelineRows>,
    /// The ticks skipped.
    pub skips: Vec<ScheduleSkip>,
    /// The next tick after these.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The tick held back after these, if any.
    pub buffered_for: Option<DateTime<Utc>>,
    /// Earlier runs to cancel in the same transaction (overlap `cancel`), each with the
    /// (runner, lease) of a lease held in Redis only, if it has one.
    pub cancel: Vec<(Uuid, Option<(RunnerId, LeaseId)>)>,
}

/// What a fire wrote: the tasks it made, and the earlier runs it cancelled.
#[derive(Debug, Clone, Default)]
pub struct Fired {
    /// The tasks made (a pipeline's jobs among them).
    pub made: Vec<TaskRecord>,
    /// The earlier runs cancelled (those that had ended meanwhile are not among them).
    pub cancelled: Vec<crate::Cancelled>,
}

/// Skip records kept per schedule.
const SKIPS_KEPT: i64 = 200;

impl Store {
    /// Creates the schedule `id` with `settings`, owned by `created_by`.
    pub async fn schedule_insert(
        &self,
        id: Uuid,
        s: &ScheduleSettings,
        created_by: &str,
        now: DateTime<Utc>,
    ) -> Result<ScheduleRecord, StoreError> {
        let insert = with_settings(
            "INSERT INTO schedules (id, name, cron, timezone, template, overlap, catch_up,
                                    catch_up_window_s, jitter_s, paused, start_at, end_at,
                                    next_fire_at, created_by, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15)
             ON CONFLICT (created_by, name) DO NOTHING
             RETURNING *",
            id,
            s,
        );
        insert
            .bind(created_by)
            .bind(now)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::Duplicate("a schedule of that name exists"))
    }

    /// Replaces a schedule's settings; a held tick is dropped with the old settings.
    pub async fn schedule_update(
        &self,
        id: Uuid,
        s: &ScheduleSettings,
        now: DateTime<Utc>,
    ) -> Result<ScheduleRecord, StoreError> {
        let update = with_settings(
            "UPDATE schedules
             SET name = $2, cron = $3, timezone = $4, template = $5, overlap = $6,
                 catch_up = $7, catch_up_window_s = $8, jitter_s = $9, paused = $10,
                 start_at = $11, end_at = $12, next_fire_at = $13, updated_at = $14,
                 buffered_for = CASE WHEN $6 = 'queue' THEN buffered_for END
             WHERE id = $1
             RETURNING *",
            id,
            s,
        );
        update
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| match &e {
                sqlx::Error::Database(d) if d.is_unique_violation() => {
                    StoreError::Duplicate("a schedule of that name exists")
                }
                _ => e.into(),
            })?
            .ok_or(StoreError::NotFound)
    }

    /// The schedule `id`.
    pub async fn schedule_get(&self, id: Uuid) -> Result<ScheduleRecord, StoreError> {
        sqlx::query_as::<_, ScheduleRecord>("SELECT * FROM schedules WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)
    }

    /// Every schedule, or `owner`'s only, by name, each template cut as a list shows a
    /// task (`tasks::summary_columns`): its command's first 16 words and each, like its
    /// script, to 256 characters; no `env`, `payload` or `secret_env`. A schedule's
    /// template may be a MiB, and a list holds up to 1,000.
    pub async fn schedules_list(
        &self,
        owner: Option<&str>,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        Ok(sqlx::query_as::<_, ScheduleRecord>(
            "SELECT id, name, cron, timezone,
                    template - 'payload' - 'env' - 'secret_env'
                    || CASE WHEN jsonb_typeof(template->'script') = 'string'
                            THEN jsonb_build_object('script', left(template->>'script', 256))
                            ELSE '{}'::jsonb END
                    || CASE WHEN jsonb_typeof(template->'command') = 'array'
                            THEN jsonb_build_object('command', (
                                SELECT coalesce(jsonb_agg(left(word, 256) ORDER BY n), '[]')
                                FROM jsonb_array_elements_text(template->'command')
                                     WITH ORDINALITY AS c(word, n)
                                WHERE n <= 16))
                            ELSE '{}'::jsonb END AS template,
                    overlap, catch_up, catch_up_window_s, jitter_s, paused, start_at, end_at,
                    created_by, created_at, updated_at, next_fire_at, buffered_for,
                    fired_count, skipped_count
             FROM schedules WHERE ($1::text IS NULL OR created_by = $1)
             ORDER BY name, id LIMIT 1000",
        )
        .bind(owner)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Deletes a schedule; the tasks it made stay (their `schedule_id` then names none).
    pub async fn schedule_delete(&self, id: Uuid) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM schedules WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        crate::changed_one(&done)
    }

    /// The time by Postgres's clock, and the schedules due at it: a tick at or before it,
    /// or a held tick waiting for its previous run. Postgres's clock is the one every node
    /// fires by, whatever their own clocks say.
    pub async fn schedules_due(
        &self,
        limit: i64,
    ) -> Result<(DateTime<Utc>, Vec<ScheduleRecord>), StoreError> {
        let now: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&self.pool)
            .await?;
        let due = sqlx::query_as::<_, ScheduleRecord>(
            "SELECT * FROM schedules
             WHERE NOT paused AND (next_fire_at <= $1 OR buffered_for IS NOT NULL)
             ORDER BY next_fire_at LIMIT $2",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok((now, due))
    }

    /// How long until the next tick of any running schedule, by Postgres's clock.
    pub async fn schedules_next_tick_in(&self) -> Result<Option<chrono::Duration>, StoreError> {
        let micros: Option<i64> = sqlx::query_scalar(
            "SELECT (EXTRACT(EPOCH FROM min(next_fire_at) - clock_timestamp()) * 1e6)::int8
             FROM schedules WHERE NOT paused AND next_fire_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(micros.map(chrono::Duration::microseconds))
    }

    /// The ids of a schedule's runs that have not finished.
    pub async fn schedule_unfinished_runs(&self, id: Uuid) -> Result<Vec<Uuid>, StoreError> {
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM tasks WHERE schedule_id = $1 AND {}",
            *crate::UNFINISHED
        )))
        .bind(id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// A schedule's latest runs, newest tick first.
    pub async fn schedule_runs(&self, id: Uuid, n: i64) -> Result<Vec<TaskRecord>, StoreError> {
        self.schedules_runs(&[id], n).await
    }

    /// The latest `n` tasks of each of `ids`, as summaries (`tasks::summary_columns`):
    /// one statement for a whole list of schedules.
    pub async fn schedules_runs(
        &self,
        ids: &[Uuid],
        n: i64,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(concat!(
            "SELECT runs.* FROM unnest($1::uuid[]) AS listed(schedule)
             CROSS JOIN LATERAL (SELECT ",
            crate::tasks::summary_columns!(),
            " FROM tasks WHERE schedule_id = listed.schedule
                ORDER BY scheduled_for DESC, id DESC LIMIT $2) AS runs"
        ))
        .bind(ids)
        .bind(n)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The latest `n` skipped ranges of each of `ids`, with the schedule of each.
    pub async fn schedules_skips(
        &self,
        ids: &[Uuid],
        n: i64,
    ) -> Result<Vec<(Uuid, ScheduleSkip)>, StoreError> {
        let rows: Vec<ScheduleSkipOf> = sqlx::query_as(
            "SELECT listed.schedule AS schedule_id, skips.* FROM unnest($1::uuid[]) AS listed(schedule)
             CROSS JOIN LATERAL (
                 SELECT scheduled_for, through, ticks, reason, recorded_at FROM schedule_skips
                 WHERE schedule_id = listed.schedule ORDER BY scheduled_for DESC LIMIT $2) AS skips",
        )
        .bind(ids)
        .bind(n)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|r| (r.schedule_id, r.skip)).collect())
    }

    /// A schedule's latest skipped ticks, newest first.
    pub async fn schedule_skips(&self, id: Uuid, n: i64) -> Result<Vec<ScheduleSkip>, StoreError> {
        let skips = self.schedules_skips(&[id], n).await?;
        Ok(skips.into_iter().map(|(_, skip)| skip).collect())
    }

    /// Fires one pass's ticks of schedule `id`, if nobody fired them first: `None` when
    /// the row no longer holds what this pass read (another node fired it, or it was
    /// changed or paused meanwhile). Returns the tasks made and the runs cancelled.
    pub async fn schedule_fire(
        &self,
        id: Uuid,
        fire: &Fire,
        now: DateTime<Utc>,
    ) -> Result<Option<Fired>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let moved = sqlx::query(
            "UPDATE schedules
             SET next_fire_at = $4, buffered_for = $5,
                 fired_count = fired_count + $6, skipped_count = skipped_count + $7
             WHERE id = $1 AND NOT paused
               AND next_fire_at IS NOT DISTINCT FROM $2
               AND buffered_for IS NOT DISTINCT FROM $3",
        )
        .bind(id)
        .bind(fire.read_next)
        .bind(fire.read_buffered)
        .bind(fire.next_fire_at)
        .bind(fire.buffered_for)
        .bind((fire.tasks.len() + fire.pipelines.len()) as i64)
        .bind(fire.skips.iter().map(|s| s.ticks).sum::<i64>())
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() == 0 {
            return Ok(None);
        }
        let inserted = crate::transitions::insert_in(&mut tx, &fire.tasks, now).await?;
        let mut made = Vec::with_capacity(inserted.len());
        for answer in inserted {
            let (task, created) = answer?;
            if created {
                made.push(task);
            }
        }
        for p in &fire.pipelines {
            if let Some((_, rows)) =
                crate::pipelines::insert_pipeline_in(&mut tx, &p.pipeline, &p.jobs, &p.needs, now)
                    .await?
            {
                made.extend(rows);
            }
        }
        let mut cancelled = Vec::with_capacity(fire.cancel.len());
        for (task, lease) in &fire.cancel {
            match crate::cancel::cancel_in(&mut tx, *task, None, *lease, now).await {
                Ok(done) => cancelled.push(done),
                // Ended (or gone) since the pass read it: nothing to cancel.
                Err(StoreError::Conflict { .. } | StoreError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        for skip in &fire.skips {
            sqlx::query(
                "INSERT INTO schedule_skips (schedule_id, scheduled_for, through, ticks, reason, recorded_at)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(skip.scheduled_for)
            .bind(skip.through)
            .bind(skip.ticks)
            .bind(&skip.reason)
            .bind(skip.recorded_at)
            .execute(&mut *tx)
            .await?;
        }
        if !fire.skips.is_empty() {
            sqlx::query(
                "DELETE FROM schedule_skips WHERE schedule_id = $1 AND scheduled_for <
                   (SELECT scheduled_for FROM schedule_skips WHERE schedule_id = $1
                    ORDER BY scheduled_for DESC OFFSET $2 LIMIT 1)",
            )
            .bind(id)
            .bind(SKIPS_KEPT)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        for done in &cancelled {
            if done.task.status != done.was
                && let Some(run) = crate::runs::EndedRun::of(&done.task)
            {
                crate::runs::count_ended(&run);
            }
        }
        Ok(Some(Fired { made, cancelled }))
    }
}
