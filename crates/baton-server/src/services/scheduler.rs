//! The schedule service, on every node: fires the ticks that fall due, each exactly once
//! across the cluster (`baton_store::Store::schedule_fire` says how), by Postgres's
//! clock, so the nodes' own clocks may disagree or be stepped without firing a tick twice
//! or early. It sleeps until the next tick, or until a schedule is made or changed on
//! any node (`Wake::Schedules`), or at most `schedule_poll_ms` (a backstop for a lost
//! wake-up): an on-time tick fires within milliseconds, and a cluster with nothing due
//! soon asks Postgres only at that poll. A pass that fails, or one of whose queries
//! outlasts its limit (a store cut off mid-query answers nothing, ever), is tried again after
//! `schedule_retry_ms`: nothing wakes the service when a store comes back, so ticks
//! resume within `schedule_retry_ms` + the query limit + a second of the store taking
//! writes again (docs/schedules.md).
//!
//! It submits and cancels as the API does (the queue add after the commit, a cancel's
//! Redis tidy-up), through the node's dispatcher.

use crate::config::ServeConfig;
use crate::dispatch::Dispatcher;
use crate::queue_defaults::QueueDefaultsCache;
use crate::schedules::{TickWork, clock_of, tick_key, tick_work};
use crate::services::ServiceError;
use crate::services::service::{Passed, Service};
use crate::webhooks::Webhooks;
use baton_coord::Wake;
use baton_core::TaskStatus;
use baton_core::fault::Fault;
use baton_core::schedule::{CatchUp, CatchUpRule, DueTicks, Overlap, due_ticks, plan_overlap};
use baton_store::{Fire, NewTask, ScheduleRecord, ScheduleSkip, StoreError, TaskRecord};
use chrono::{DateTime, Duration, Utc};
use std::future::Future;
use std::sync::Arc;

/// Most schedules handled per pass; more due ones wait for the next (at once) pass.
const BATCH: i64 = 100;
/// The shortest sleep between passes, so a clock read a hair early does not spin.
const MIN_SLEEP: std::time::Duration = std::time::Duration::from_millis(5);

/// How the scheduler paces its passes and how late a tick may still fire.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerSettings {
    /// A tick later than this is recorded as skipped, not fired.
    pub misfire_grace: Duration,
    /// With no news of a changed schedule, how often it looks anyway.
    pub poll: std::time::Duration,
    /// The sleep after a failed pass.
    pub retry: std::time::Duration,
    /// The longest one Postgres call of a pass may take before the pass counts as failed.
    pub query_limit: std::time::Duration,
}

impl SchedulerSettings {
    pub(super) fn of(config: &ServeConfig) -> SchedulerSettings {
        let timings = &config.timings;
        let poll = std::time::Duration::from_millis(timings.schedule_poll_ms.max(1));
        SchedulerSettings {
            misfire_grace: Duration::milliseconds(timings.schedule_misfire_grace_ms as i64),
            poll,
            retry: std::time::Duration::from_millis(timings.schedule_retry_ms).min(poll),
            // A pass asks Postgres a few things, each bounded by `store_timeout` when the
            // store answers; one that does not answer at all (its link cut mid-query)
            // would hold the pass forever. Twice the store timeout covers a connection's
            // wait and its query: the limit of each call (`bounded`).
            query_limit: config.store_timeout() * 2,
        }
    }
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerReport {
    /// Ticks that made a task on this node.
    pub fired: usize,
    /// Ticks recorded as skipped by this node.
    pub skipped: u64,
    /// Schedules another node fired (or changed) first.
    pub lost: usize,
}

/// Fires due schedules: each tick makes its task once, as its overlap policy says,
/// whichever node gets to it first.
pub struct Scheduler {
    settings: SchedulerSettings,
    dispatcher: Dispatcher,
    queue_defaults: Arc<QueueDefaultsCache>,
    webhooks: Arc<Webhooks>,
}

impl Scheduler {
    pub(super) fn new(
        settings: SchedulerSettings,
        dispatcher: Dispatcher,
        queue_defaults: Arc<QueueDefaultsCache>,
        webhooks: Arc<Webhooks>,
    ) -> Scheduler {
        Scheduler {
            settings,
            dispatcher,
            queue_defaults,
            webhooks,
        }
    }

    /// A Postgres call of a pass, bounded: one on a link that answers nothing fails as
    /// Postgres away after the query limit. Only the store's calls are bounded here, so
    /// what follows a committed fire (queueing its tasks) is not cut off by a slow query;
    /// only the loop's limit for a stuck pass (minutes) could, and what it would leave
    /// (a task committed but not queued) the repair pass queues.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, ServiceError> {
        let limit = self.settings.query_limit;
        tokio::time::timeout(limit, call)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(format!(
                    "a schedule pass's query had no answer in {} ms",
                    limit.as_millis()
                )))
            })
            .map_err(ServiceError::from)
    }

    /// Until the next tick of any schedule by Postgres's clock, at most the poll interval.
    async fn until_next_tick(&self) -> Result<std::time::Duration, ServiceError> {
        Ok(
            match self
                .bounded(self.dispatcher.store.schedules_next_tick_in())
                .await?
            {
                Some(wait) => wait
                    .to_std()
                    .unwrap_or_default()
                    .clamp(MIN_SLEEP, self.settings.poll),
                None => self.settings.poll,
            },
        )
    }

    /// One pass: every due schedule, fired or found fired by another node.
    pub async fn run_once(&self) -> Result<SchedulerReport, ServiceError> {
        let (now, due) = self
            .bounded(self.dispatcher.store.schedules_due(BATCH))
            .await?;
        let mut report = SchedulerReport::default();
        for record in due {
            self.fire(&record, now, &mut report).await?;
        }
        Ok(report)
    }

    async fn fire(
        &self,
        record: &ScheduleRecord,
        now: DateTime<Utc>,
        report: &mut SchedulerReport,
    ) -> Result<(), ServiceError> {
        let Ok(clock) = clock_of(record) else {
            tracing::warn!(schedule.id = %record.id, "schedule's expression or zone no longer parses; not fired");
            return Ok(());
        };
        let rule = CatchUpRule {
            policy: CatchUp::parse(&record.settings.catch_up).unwrap_or(CatchUp::Skip),
            window: Duration::seconds(record.settings.catch_up_window_s.into()),
            grace: self.settings.misfire_grace,
        };
        let due = match record.settings.next_fire_at {
            Some(next) if next <= now => due_ticks(&clock, next, now, record.settings.end_at, rule),
            next => DueTicks {
                next,
                ..DueTicks::default()
            },
        };
        let overlap = Overlap::parse(&record.settings.overlap).unwrap_or(Overlap::Skip);
        let unfinished = if overlap != Overlap::Allow || record.buffered_for.is_some() {
            self.bounded(self.dispatcher.store.schedule_unfinished_runs(record.id))
                .await?
        } else {
            Vec::new()
        };
        let plan = plan_overlap(
            overlap,
            &due.fire,
            !unfinished.is_empty(),
            record.buffered_for,
        );
        if plan.start.is_empty()
            && plan.skipped.is_empty()
            && due.skipped.is_none()
            && plan.buffered == record.buffered_for
            && due.next == record.settings.next_fire_at
        {
            return Ok(()); // a held tick still waiting: nothing to write
        }
        let mut skips: Vec<ScheduleSkip> = Vec::new();
        let mut tasks: Vec<NewTask> = Vec::new();
        let mut pipelines = Vec::new();
        let queues = if plan.start.is_empty() {
            Default::default()
        } else {
            self.bounded(self.queue_defaults.current(&self.dispatcher.store))
                .await?
        };
        for (tick, _) in &plan.start {
            match tick_work(
                (&self.dispatcher.config, &self.webhooks),
                &queues,
                record,
                *tick,
                tick_key(record.id, *tick),
            ) {
                Ok(TickWork::Task(task)) => tasks.push(*task),
                Ok(TickWork::Pipeline(rows)) => pipelines.push(rows),
                Err(e) => {
                    tracing::warn!(schedule.id = %record.id, error = %e.message, "tick's task refused by today's limits; skipped");
                    skips.push(skip(*tick, *tick, 1, "invalid", now));
                }
            }
        }
        if let Some(missed) = due.skipped {
            skips.push(skip(
                missed.first,
                missed.last,
                missed.count as i64,
                "missed",
                now,
            ));
        }
        skips.extend(plan.skipped.iter().map(|t| skip(*t, *t, 1, "overlap", now)));
        // Overlap `cancel`: the previous runs are cancelled in the fire's own transaction,
        // so no node death between the two leaves both running.
        let mut cancel = Vec::new();
        if plan.cancel_previous {
            for id in &unfinished {
                cancel.push((
                    *id,
                    crate::dispatch::cancel::lease_in_redis(&self.dispatcher, *id).await,
                ));
            }
        }
        let fire = Fire {
            read_next: record.settings.next_fire_at,
            read_buffered: record.buffered_for,
            tasks,
            pipelines,
            skips,
            next_fire_at: due.next,
            buffered_for: plan.buffered,
            cancel,
        };
        let Some(done) = self
            .bounded(self.dispatcher.store.schedule_fire(record.id, &fire, now))
            .await?
        else {
            report.lost += 1;
            return Ok(());
        };
        if !fire.cancel.is_empty() && self.dispatcher.config.fault == Some(Fault::AfterFire) {
            tracing::error!(schedule.id = %record.id, "fault injection: aborting after a fire that cancels, before its follow-up");
            std::process::abort();
        }
        for cancelled in &done.cancelled {
            let lease = fire
                .cancel
                .iter()
                .find(|(id, _)| *id == cancelled.task.id)
                .and_then(|(_, lease)| *lease);
            crate::dispatch::cancel::follow_up(&self.dispatcher, cancelled, lease).await;
            tracing::info!(schedule.id = %record.id, task.id = %cancelled.task.id, "previous run cancelled (overlap cancel)");
        }
        self.fired(record, &fire, &done.made, now, report).await;
        Ok(())
    }

    /// After the commit: queue the tasks made (the repair pass does it if Redis fails
    /// here), count and log.
    async fn fired(
        &self,
        record: &ScheduleRecord,
        fire: &Fire,
        made: &[TaskRecord],
        now: DateTime<Utc>,
        report: &mut SchedulerReport,
    ) {
        let made_refs: Vec<&TaskRecord> = made.iter().collect();
        // Told before they are queued: a task's events follow its transitions.
        for task in made {
            self.dispatcher.events.schedule_fired(record.id, task).await;
        }
        // A pipeline's jobs with needs wait in no queue: their release queues them.
        let runnable: Vec<&TaskRecord> = made_refs
            .iter()
            .filter(|t| matches!(t.status, TaskStatus::Queued | TaskStatus::Scheduled))
            .copied()
            .collect();
        crate::dispatch::submit::enqueue_created(&self.dispatcher, &runnable).await;
        for task in made {
            if let Some(tick) = task.scheduled_for {
                crate::metrics::schedule_fired(now - tick);
                tracing::info!(schedule.id = %record.id, task.id = %task.id, tick = %tick, "schedule fired");
            }
        }
        for s in &fire.skips {
            let reason = match s.reason.as_str() {
                "missed" => "missed",
                "overlap" => "overlap",
                _ => "invalid",
            };
            crate::metrics::schedule_ticks_skipped(reason, s.ticks as u64);
            tracing::info!(schedule.id = %record.id, from = %s.scheduled_for, through = %s.through, ticks = s.ticks, reason, "schedule ticks skipped");
        }
        report.fired += made.len();
        report.skipped += fire.skips.iter().map(|s| s.ticks as u64).sum::<u64>();
    }
}

fn skip(
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    ticks: i64,
    reason: &str,
    now: DateTime<Utc>,
) -> ScheduleSkip {
    ScheduleSkip {
        scheduled_for: first,
        through: last,
        ticks,
        reason: reason.to_string(),
        recorded_at: now,
    }
}

impl Service for Scheduler {
    const NAME: &'static str = "scheduler";
    type Report = SchedulerReport;

    /// By Postgres's clock, not `now`: every node fires by the same one.
    async fn pass(&self, _now: DateTime<Utc>) -> Result<SchedulerReport, ServiceError> {
        self.run_once().await
    }

    fn interval(&self) -> std::time::Duration {
        self.settings.poll
    }

    fn heard(&self, wake: &Wake) -> bool {
        matches!(wake, Wake::Schedules | Wake::All)
    }

    /// At once while ticks fire, else until the next tick (at most the poll); a failed
    /// pass is tried again after `retry`, since nothing wakes the service when a store
    /// comes back.
    async fn pause_after(
        &mut self,
        passed: &Passed<SchedulerReport>,
        _took: std::time::Duration,
    ) -> std::time::Duration {
        match passed {
            Passed::Done(report) if report.fired + report.lost > 0 || report.skipped > 0 => {
                MIN_SLEEP
            }
            Passed::Done(_) => match self.until_next_tick().await {
                Ok(sleep) => sleep,
                Err(e) => {
                    self.tell_failure(&e);
                    self.settings.retry
                }
            },
            _ => self.settings.retry,
        }
    }

    fn tell_failure(&self, error: &ServiceError) {
        tracing::warn!(error = %error, retry_in_ms = self.settings.retry.as_millis() as u64, "schedule pass failed");
    }
}
