//! The janitor: terminal tasks and their logs are deleted `retention` after they
//! finished, a batch at a time so no single statement holds locks for long. A task whose
//! webhook is still undelivered is kept until it is delivered. The presence of deleted
//! runners leaves Redis once their runs can no longer need it (`runner_lost_after`), so
//! the hash every reconcile pass reads holds only runners that exist.

use super::ServiceError;
use super::service::Service;
use crate::config::Timings;
use baton_coord::Coord;
use baton_core::RunnerId;
use baton_store::Store;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;

const BATCH: i64 = 1000;

/// What one pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JanitorReport {
    /// Terminal tasks past retention, with their logs.
    pub tasks_deleted: u64,
    /// Delivered webhooks past retention (at most one batch a pass).
    pub outbox_deleted: u64,
    /// Pipelines whose jobs the retention took, all of them (at most one batch a pass).
    pub pipelines_deleted: u64,
    /// Runners whose presence left Redis.
    pub presence_pruned: usize,
    /// Runner assignments ended before the retention, and their tokens (at most one
    /// batch of each a pass).
    pub assignments_deleted: u64,
}

/// The janitor's settings, from the node's [`Timings`].
#[derive(Debug, Clone)]
pub struct JanitorSettings {
    /// Time between passes.
    pub interval: Duration,
    /// How long terminal tasks are kept.
    pub retention: chrono::Duration,
    /// How long a deleted runner's presence may still matter.
    pub runner_lost_after: chrono::Duration,
    /// Whether the node starts runners on demand, so has their assignments to prune (a
    /// node without provisioners pays no statement for it).
    pub provisions: bool,
}

impl JanitorSettings {
    /// The settings a node with these timings runs its janitor with.
    pub fn of(timings: &Timings) -> Self {
        JanitorSettings {
            interval: Duration::from_millis(timings.janitor_interval_ms),
            retention: chrono::Duration::seconds(timings.retention_s as i64),
            runner_lost_after: chrono::Duration::seconds(timings.runner_lost_after_s as i64),
            provisions: false,
        }
    }
}

/// Deletes what is past retention; every node runs one, and two deleting the same rows
/// at once only find fewer to delete.
pub struct Janitor {
    settings: JanitorSettings,
    store: Store,
    coord: Coord,
}

impl Janitor {
    /// A janitor over these stores; it starts nothing until run.
    pub fn new(settings: JanitorSettings, store: Store, coord: Coord) -> Self {
        Janitor {
            settings,
            store,
            coord,
        }
    }

    /// One pass as of `now`: terminal tasks finished before `now - retention` go a batch
    /// at a time until none is left, then delivered webhooks, then stale presence.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<JanitorReport, ServiceError> {
        // A pass stopped by shutdown is dropped between batches, each one a statement of
        // its own.
        let before = now - self.settings.retention;
        let mut report = JanitorReport::default();
        loop {
            let deleted = self.store.tasks_delete_finished(before, BATCH).await?;
            report.tasks_deleted += deleted;
            if deleted < BATCH as u64 {
                break;
            }
        }
        report.pipelines_deleted = self.store.pipelines_delete_emptied(before, BATCH).await?;
        report.outbox_deleted = self.store.outbox_delete_delivered(before, BATCH).await?;
        report.presence_pruned = self.prune_presence(now).await?;
        if self.settings.provisions {
            report.assignments_deleted = self.store.assignments_delete_ended(before, BATCH).await?;
            report.assignments_deleted +=
                self.store.provisioner_tokens_delete(before, BATCH).await?;
        }
        Ok(report)
    }

    /// Drops the presence of runners deleted longer than `runner_lost_after` ago, or
    /// unknown to Postgres: a deleted runner's running tasks wait that long on its
    /// presence (the reconciler), and a deleted runner's requests are refused, so nothing
    /// writes it again.
    async fn prune_presence(&self, now: DateTime<Utc>) -> Result<usize, ServiceError> {
        let lost_after = self.settings.runner_lost_after;
        let mut pruned = 0;
        for page in self.coord.presence_all().await?.chunks(BATCH as usize) {
            let ids: Vec<RunnerId> = page.iter().map(|(runner, _, _)| *runner).collect();
            let rows: HashMap<RunnerId, Option<DateTime<Utc>>> = self
                .store
                .runners_by_ids(&ids)
                .await?
                .into_iter()
                .map(|r| (r.id, r.deleted_at))
                .collect();
            let gone: Vec<RunnerId> = ids
                .into_iter()
                .filter(|id| match rows.get(id) {
                    None => true,
                    Some(deleted_at) => deleted_at.is_some_and(|at| now - at > lost_after),
                })
                .collect();
            self.coord.presence_remove(&gone).await?;
            pruned += gone.len();
        }
        Ok(pruned)
    }
}

impl Service for Janitor {
    const NAME: &'static str = "janitor";
    type Report = JanitorReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<JanitorReport, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    fn tell(&self, report: &JanitorReport) {
        if report.tasks_deleted > 0 {
            tracing::info!(
                deleted = report.tasks_deleted,
                "retention: old tasks deleted"
            );
        }
    }
}
