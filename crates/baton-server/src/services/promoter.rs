//! The promoter, on every node: `scheduled` tasks (a future `run_at`, or a retry's
//! backoff) whose time has come move to `queued` — Postgres first, then the Redis add
//! (design.md §4.5). Due ids come from the Redis delayed set, taken atomically so two
//! nodes do not promote the same batch; Postgres is asked only when something is due.

use super::ServiceError;
use super::service::Service;
use crate::events::EventLog;
use crate::queueing::queue_entry;
use baton_coord::Coord;
use baton_core::TaskStatus;
use baton_store::Store;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::time::Duration;
use uuid::Uuid;

/// Most tasks promoted per pass.
const BATCH: usize = 500;

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromoteReport {
    /// Tasks moved from `scheduled` to `queued` (and into their Redis queue).
    pub promoted: usize,
}

/// Queues `scheduled` tasks whose time has come; every node runs one, and the atomic
/// pop from the delayed set keeps two from promoting the same task.
pub struct Promoter {
    interval: Duration,
    store: Store,
    coord: Coord,
    events: Option<EventLog>,
}

impl Promoter {
    /// A promoter passing every `interval` over these stores.
    pub fn new(interval: Duration, store: Store, coord: Coord) -> Self {
        Promoter {
            interval,
            store,
            coord,
            events: None,
        }
    }

    /// Tells the event stream of the tasks it queues.
    pub(crate) fn with_events(self, events: EventLog) -> Self {
        Promoter {
            events: Some(events),
            ..self
        }
    }

    /// One pass as of `now`: up to a batch of due ids, promoted in Postgres, then queued
    /// in Redis. A due id Postgres no longer calls due (its `run_at` moved) goes back to
    /// the delayed set.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<PromoteReport, ServiceError> {
        let due = self
            .coord
            .delayed_pop_due(now.timestamp_millis(), BATCH)
            .await?;
        if due.is_empty() {
            return Ok(PromoteReport::default());
        }
        let promoted = self.store.tasks_promote(&due, now).await?;
        if let Some(events) = &self.events {
            events.tasks(&promoted.iter().collect::<Vec<_>>()).await;
        }
        let entries: Vec<_> = promoted.iter().map(queue_entry).collect();
        self.coord.enqueue_unclaimed(&entries).await?;
        // Those still scheduled but not due (their run_at moved) go back to wait.
        let done: HashSet<Uuid> = promoted.iter().map(|t| t.id).collect();
        let rest: Vec<Uuid> = due.into_iter().filter(|id| !done.contains(id)).collect();
        if !rest.is_empty() {
            let waiting: Vec<(Uuid, i64)> = self
                .store
                .tasks_by_ids(&rest)
                .await?
                .into_iter()
                .filter(|t| t.status == TaskStatus::Scheduled)
                .filter_map(|t| Some((t.id, t.run_at?.timestamp_millis())))
                .collect();
            self.coord.delayed_add(&waiting).await?;
        }
        Ok(PromoteReport {
            promoted: promoted.len(),
        })
    }
}

impl Service for Promoter {
    const NAME: &'static str = "promoter";
    type Report = PromoteReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<PromoteReport, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}
