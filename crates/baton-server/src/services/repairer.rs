//! Repair, both ways (design.md §4.6), periodically on whichever node takes the lock.
//! Redis is derived state; Postgres says what it should hold:
//!
//! - queued tasks nobody took within their queue timeout expire;
//! - overdue `scheduled` tasks are promoted (the delayed set may have lost them);
//! - `queued` rows no Redis queue holds are queued again;
//! - the paused queues and the concurrency groups are recounted (`flow_repair`);
//! - `leased`, `running` and `cancelling` rows with no claim are claimed by this node
//!   (a `queued` row is never claimed here: a lease in flight has its claim, and one
//!   Redis lost is just work to queue again);
//! - claims and queue entries whose task has moved on (terminal, deleted, scheduled)
//!   are dropped; an entry of a started run with no claim (a failover mid-pass) is
//!   claimed as above instead.
//!
//! The same walk, without grace periods and rebuilding the delayed set, is the full
//! rebuild after Redis lost its data (see `rebuilder`).

use super::ServiceError;
use super::service::Service;
use crate::config::Timings;
use crate::events::EventLog;
use crate::identity::NodeIdentity;
use crate::queueing::{queue_entry, queue_entry_of};
use crate::reclaim::Claimer;
use baton_coord::{Coord, Enqueue};
use baton_core::TaskStatus;
use baton_store::{Store, TaskRecord};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const PAGE: i64 = 1000;

/// What one pass mended, step by step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Queued tasks nobody took within their queue timeout, now `expired`.
    pub expired: usize,
    /// Overdue `scheduled` tasks queued (the delayed set may have lost them).
    pub promoted: usize,
    /// `queued` rows no Redis queue held, queued again.
    pub requeued: usize,
    /// Leased, running or cancelling rows with no claim, claimed by this node.
    pub claimed: usize,
    /// Claims on tasks that had moved on (terminal, deleted, scheduled), dropped.
    pub claims_dropped: usize,
    /// Queue entries whose task is no longer `queued`, dropped.
    pub entries_dropped: usize,
    /// Queue index entries that did not match their queues (`Coord::queue_index_repair`).
    pub index_fixed: u64,
    /// In a rebuild: `scheduled` tasks put back in the delayed set.
    pub delayed: usize,
    /// Paused queues and concurrency groups mended from Postgres (`flow_repair`).
    pub flow: super::flow_repair::FlowRepair,
    /// Another node held the repair lock.
    pub skipped: bool,
}

/// How thorough a pass is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Leave recent changes alone: a submit or requeue may be between its Postgres write
    /// and its Redis add.
    Periodic {
        /// How recent a change is left alone (`RepairerSettings::grace`).
        grace: Duration,
    },
    /// Redis lost its data: rebuild everything from Postgres.
    Rebuild,
}

/// The repairer's settings, from the node's [`Timings`].
#[derive(Debug, Clone)]
pub struct RepairerSettings {
    /// One periodic pass per interval, for the whole cluster.
    pub interval: Duration,
    /// How recent a change the periodic pass leaves alone: a submit or a promotion may be
    /// between its Postgres write and its Redis add.
    pub grace: Duration,
}

impl RepairerSettings {
    /// The settings a node with these timings repairs with. The grace spans a few
    /// promoter passes, so a promotion under way is never taken for a lost one.
    pub fn of(timings: &Timings) -> Self {
        let promote = Duration::from_millis(timings.promote_interval_ms);
        RepairerSettings {
            interval: Duration::from_millis(timings.repair_interval_ms),
            grace: (promote * 3).max(Duration::from_secs(5)),
        }
    }
}

/// Mends Redis from Postgres: periodically on whichever node holds the repair lock, and
/// as the walk of a full rebuild (see `rebuilder`).
pub struct Repairer {
    settings: RepairerSettings,
    identity: Arc<NodeIdentity>,
    store: Store,
    coord: Coord,
    events: Option<EventLog>,
}

impl Repairer {
    /// A repairer acting as `identity`: the claims it takes are that node's.
    pub fn new(
        settings: RepairerSettings,
        identity: Arc<NodeIdentity>,
        store: Store,
        coord: Coord,
    ) -> Self {
        Repairer {
            settings,
            identity,
            store,
            coord,
            events: None,
        }
    }

    /// Tells the event stream of the tasks it expires or queues.
    pub(crate) fn with_events(self, events: EventLog) -> Self {
        Repairer {
            events: Some(events),
            ..self
        }
    }

    async fn tell(&self, rows: &[TaskRecord]) {
        if let Some(events) = &self.events {
            events.tasks(&rows.iter().collect::<Vec<_>>()).await;
        }
    }

    /// One periodic pass, if no other node ran one this interval.
    pub(crate) async fn run_locked(
        &self,
        now: DateTime<Utc>,
    ) -> Result<RepairReport, ServiceError> {
        if !self.identity.is_live() {
            return Ok(RepairReport {
                skipped: true,
                ..Default::default()
            });
        }
        let owner = format!("{}:{}", self.identity.id(), Uuid::new_v4());
        // The lock outlives the pass: one pass per interval for the whole cluster, not
        // one per node. It lapses a little before this node's next tick, so the node
        // that took it keeps the turn while it lives.
        let ttl = self.settings.interval.mul_f64(0.9);
        let Some(lock) = self.coord.lock_acquire("repair", &owner, ttl).await? else {
            return Ok(RepairReport {
                skipped: true,
                ..Default::default()
            });
        };
        let result = self
            .run_once(
                now,
                Mode::Periodic {
                    grace: self.settings.grace,
                },
            )
            .await;
        if result.is_err() {
            // Another node may try sooner than the next interval.
            let _ = self.coord.lock_release(&lock).await;
        }
        result
    }

    /// One pass as of `now`, whatever other nodes do (the periodic caller holds the lock
    /// first). Claims come before queues: after a data loss nothing is queued again
    /// before Redis knows which queues are paused and how full each group is.
    pub async fn run_once(
        &self,
        now: DateTime<Utc>,
        mode: Mode,
    ) -> Result<RepairReport, ServiceError> {
        let mut report = RepairReport::default();
        let settled_before = match mode {
            Mode::Periodic { grace } => now - chrono::Duration::from_std(grace).unwrap_or_default(),
            Mode::Rebuild => now,
        };
        self.expire(now, &mut report).await?;
        // Claims, then the paused set and the groups (a slot is held by a claim), then
        // the queues: after a data loss, nothing is queued again before Redis knows
        // which queues are paused and how full each group is.
        self.claim_unclaimed(now, &mut report).await?;
        report.flow = super::flow_repair::repair(&self.store, &self.coord).await?;
        self.promote_overdue(now, settled_before, &mut report)
            .await?;
        // The queues' entries, read once for both checks: each `queued` row against
        // them, then each of them against its row. (Read per row, the backlog cost
        // Redis a command per task, every pass, beside the exchanges that wait on it.)
        let entries = self.coord.queue_entries().await?;
        self.requeue_missing(settled_before, &entries, &mut report)
            .await?;
        if mode == Mode::Rebuild {
            self.rebuild_delayed(&mut report).await?;
        } else {
            self.drop_stale_claims(&mut report).await?;
            self.drop_stale_entries(now, entries, &mut report).await?;
        }
        report.index_fixed = self.coord.queue_index_repair().await?;
        if report.index_fixed > 0 {
            tracing::warn!(
                entries = report.index_fixed,
                "queue index did not match the queues; mended"
            );
        }
        Ok(report)
    }

    async fn expire(
        &self,
        now: DateTime<Utc>,
        report: &mut RepairReport,
    ) -> Result<(), ServiceError> {
        loop {
            let expired = self.store.tasks_expire_due(now, PAGE).await?;
            self.tell(&expired).await;
            if let Some(events) = &self.events {
                let ended = crate::dispatch::releases::rows_ended_with_dependents(&expired);
                crate::dispatch::releases::follow(&self.store, &self.coord, events, &ended).await;
            }
            let places: Vec<(Uuid, String)> = expired
                .iter()
                .map(|t| (t.id, queue_entry(t).key_rel()))
                .collect();
            self.coord.queue_remove(&places).await?;
            if expired.iter().any(|t| t.notify_url.is_some()) {
                self.coord.publish(&baton_coord::Wake::Outbox).await?;
            }
            report.expired += expired.len();
            if (expired.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }

    async fn promote_overdue(
        &self,
        now: DateTime<Utc>,
        due_before: DateTime<Utc>,
        report: &mut RepairReport,
    ) -> Result<(), ServiceError> {
        loop {
            let promoted = self
                .store
                .tasks_promote_overdue(due_before, now, PAGE)
                .await?;
            self.tell(&promoted).await;
            let entries: Vec<Enqueue> = promoted.iter().map(queue_entry).collect();
            self.coord.enqueue_unclaimed(&entries).await?;
            report.promoted += promoted.len();
            if (promoted.len() as i64) < PAGE {
                return Ok(());
            }
        }
    }

    /// Queues the settled `queued` rows that no queue held in `entries` (read just
    /// before; one leased since, or put back, is left to the unclaimed add, which skips a
    /// task with a claim and adds a task once to its one queue). Reads only what an entry
    /// is made of (`tasks_queued_page`): the whole backlog is walked every pass.
    async fn requeue_missing(
        &self,
        settled_before: DateTime<Utc>,
        entries: &[(String, Vec<Uuid>)],
        report: &mut RepairReport,
    ) -> Result<(), ServiceError> {
        let held: HashSet<Uuid> = entries.iter().flat_map(|(_, ids)| ids).copied().collect();
        let mut after = None;
        loop {
            let page = self.store.tasks_queued_page(after, PAGE).await?;
            let last = (page.len() as i64) < PAGE;
            after = page.last().map(|t| t.id);
            let lost: Vec<Enqueue> = page
                .into_iter()
                .filter(|t| t.updated_at < settled_before && !held.contains(&t.id))
                .map(queue_entry_of)
                .collect();
            if !lost.is_empty() {
                report.requeued += self.coord.enqueue_unclaimed(&lost).await? as usize;
            }
            if last {
                return Ok(());
            }
        }
    }

    async fn claim_unclaimed(
        &self,
        now: DateTime<Utc>,
        report: &mut RepairReport,
    ) -> Result<(), ServiceError> {
        let mut pages = Pages::new(&[
            TaskStatus::Leased,
            TaskStatus::Running,
            TaskStatus::Cancelling,
        ]);
        while let Some(page) = pages.next(&self.store).await? {
            report.claimed += self.claimer().claim_unclaimed(&page, now).await?;
        }
        Ok(())
    }

    /// Claims for this node, as the node's hot path does after a start refused for its
    /// group (`reclaim`).
    fn claimer(&self) -> Claimer<'_> {
        Claimer {
            store: &self.store,
            coord: &self.coord,
            node: self.identity.id(),
        }
    }

    async fn rebuild_delayed(&self, report: &mut RepairReport) -> Result<(), ServiceError> {
        let mut pages = Pages::new(&[TaskStatus::Scheduled]);
        while let Some(page) = pages.next(&self.store).await? {
            let due: Vec<(Uuid, i64)> = page
                .iter()
                .filter_map(|t| Some((t.id, t.run_at?.timestamp_millis())))
                .collect();
            self.coord.delayed_add(&due).await?;
            report.delayed += due.len();
        }
        Ok(())
    }

    /// Statuses of `ids` as Postgres has them (absent: the task was deleted).
    async fn statuses(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, TaskRecord>, ServiceError> {
        let mut out = HashMap::new();
        for chunk in ids.chunks(PAGE as usize) {
            out.extend(self.store.tasks_map(chunk).await?);
        }
        Ok(out)
    }

    async fn drop_stale_claims(&self, report: &mut RepairReport) -> Result<(), ServiceError> {
        let claims = self.coord.claims_all().await?;
        let ids: Vec<Uuid> = claims.iter().map(|(id, _)| *id).collect();
        let tasks = self.statuses(&ids).await?;
        for (id, claim) in claims {
            let moved_on = match tasks.get(&id) {
                None => true,
                Some(t) => t.status.is_terminal() || t.status == TaskStatus::Scheduled,
            };
            if moved_on && self.coord.claim_release(id, claim.lease_id).await? {
                report.claims_dropped += 1;
            }
        }
        Ok(())
    }

    /// Drops entries whose task is no longer `queued`. An entry of a started run is
    /// first offered to `claim_if_absent`: a Redis failover after this pass's claim step
    /// can have taken the run's claim and put its entry back, and dropped as stale the
    /// entry would take the unclaimed run's group slot with it. Statuses are read alone
    /// (the backlog is walked every pass); the rare started run's row, whole.
    async fn drop_stale_entries(
        &self,
        now: DateTime<Utc>,
        entries: Vec<(String, Vec<Uuid>)>,
        report: &mut RepairReport,
    ) -> Result<(), ServiceError> {
        for (queue_key, ids) in entries {
            let mut statuses = HashMap::new();
            for chunk in ids.chunks(PAGE as usize) {
                statuses.extend(self.store.tasks_statuses(chunk).await?);
            }
            let started: Vec<Uuid> = ids
                .iter()
                .filter(|id| {
                    matches!(
                        statuses.get(id),
                        Some(TaskStatus::Running | TaskStatus::Cancelling)
                    )
                })
                .copied()
                .collect();
            let runs = self.statuses(&started).await?;
            let mut stale = Vec::new();
            for id in ids {
                if statuses.get(&id) == Some(&TaskStatus::Queued) {
                    continue;
                }
                if let Some(run) = runs.get(&id)
                    && matches!(run.status, TaskStatus::Running | TaskStatus::Cancelling)
                    && self.claimer().claim_if_absent(run, now).await?
                {
                    report.claimed += 1;
                    continue;
                }
                stale.push((id, queue_key.clone()));
            }
            report.entries_dropped += stale.len();
            self.coord.queue_remove(&stale).await?;
        }
        Ok(())
    }
}

/// Walks the task rows in some statuses, a page at a time, in id order.
struct Pages {
    statuses: Vec<TaskStatus>,
    after: Option<Uuid>,
    done: bool,
}

impl Pages {
    fn new(statuses: &[TaskStatus]) -> Self {
        Pages {
            statuses: statuses.to_vec(),
            after: None,
            done: false,
        }
    }

    async fn next(
        &mut self,
        store: &baton_store::Store,
    ) -> Result<Option<Vec<TaskRecord>>, ServiceError> {
        if self.done {
            return Ok(None);
        }
        let page = store.tasks_page(&self.statuses, self.after, PAGE).await?;
        self.done = (page.len() as i64) < PAGE;
        self.after = page.last().map(|t| t.id);
        Ok(Some(page))
    }
}

impl Service for Repairer {
    const NAME: &'static str = "repairer";
    type Report = RepairReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<RepairReport, ServiceError> {
        self.run_locked(now).await
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    fn tell(&self, report: &RepairReport) {
        if *report != RepairReport::default() && !report.skipped {
            tracing::info!(?report, "repair pass changed things");
        }
    }
}
