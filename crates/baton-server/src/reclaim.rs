//! A dispatched run whose claim Redis lost (a failover) is claimed again under its lease,
//! with its group slot, taking out the copy of its entry the failover left in its queue
//! or its group's waiting line (`claim_if_absent.lua`). The repair pass does this for
//! every unclaimed run; a start Postgres refused does it at once for the runs of the
//! refused task's group: until then the group looks one slot freer in Redis than in
//! Postgres, and the task put back would be popped and refused again.

use crate::queueing::queue_entry;
use crate::services::ServiceError;
use baton_coord::{ClaimedIfAbsent, Coord, DispatchedRow};
use baton_core::LeaseId;
use baton_core::TaskStatus;
use baton_store::{Store, TaskRecord};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Who claims, and where: the node the claims go to, and the stores it reads and writes.
pub(crate) struct Claimer<'a> {
    pub(crate) store: &'a Store,
    pub(crate) coord: &'a Coord,
    pub(crate) node: String,
}

impl Claimer<'_> {
    /// Claims each of `rows` (dispatched rows, as the caller read them) that holds no
    /// claim; how many it claimed.
    pub(crate) async fn claim_unclaimed(
        &self,
        rows: &[TaskRecord],
        now: DateTime<Utc>,
    ) -> Result<usize, ServiceError> {
        let ids: Vec<Uuid> = rows.iter().map(|t| t.id).collect();
        let claims = self.coord.claims_get(&ids).await?;
        let mut claimed = 0;
        for (row, claim) in rows.iter().zip(claims) {
            if claim.is_none() && self.claim_if_absent(row, now).await? {
                claimed += 1;
            }
        }
        Ok(claimed)
    }

    /// The runs of the concurrency groups `keys` that hold no claim, claimed; how many.
    pub(crate) async fn claim_groups(
        &self,
        keys: &[String],
        now: DateTime<Utc>,
    ) -> Result<usize, ServiceError> {
        let rows = self.store.tasks_dispatched_in_groups(keys).await?;
        self.claim_unclaimed(&rows, now).await
    }

    /// Claims the dispatched `task` (as the caller read it) under its lease unless a
    /// claim exists; whether it did.
    pub(crate) async fn claim_if_absent(
        &self,
        task: &TaskRecord,
        now: DateTime<Utc>,
    ) -> Result<bool, ServiceError> {
        let Some(lease) = task.lease_id else {
            return Ok(false);
        };
        let entry = queue_entry(task);
        let row = DispatchedRow {
            entry: &entry,
            lease_id: lease,
            runner: task.runner_id,
            boot: task.boot_id,
            started: task.status != TaskStatus::Leased,
        };
        let claimed = self
            .coord
            .claim_if_absent(&row, &self.node, now.timestamp_millis())
            .await?;
        if claimed == ClaimedIfAbsent::No {
            return Ok(false);
        }
        tracing::info!(task.id = %task.id, status = %task.status, "claimed a dispatched task that had no claim");
        self.undo_if_moved_on(task.id, lease).await?;
        Ok(true)
    }

    /// A claim is for the run the row held when the caller read it. If the run has ended
    /// since (its end's claim release came before this claim), the claim goes: left, it
    /// would keep a retry scheduled since from being queued. If the task was queued
    /// again (a retry with a short backoff), the entry the claim took was the new turn's,
    /// and it comes back.
    async fn undo_if_moved_on(&self, task: Uuid, lease: LeaseId) -> Result<(), ServiceError> {
        let now = self.store.tasks_map(&[task]).await?;
        let still_the_run = now
            .get(&task)
            .is_some_and(|t| t.status.is_dispatched() && t.lease_id == Some(lease));
        if still_the_run {
            return Ok(());
        }
        self.coord.claim_release(task, lease).await?;
        if let Some(row) = now.get(&task).filter(|t| t.status == TaskStatus::Queued) {
            self.coord.enqueue_unclaimed(&[queue_entry(row)]).await?;
        }
        tracing::info!(task.id = %task, "the run had ended: its claim dropped, a new entry put back");
        Ok(())
    }
}
