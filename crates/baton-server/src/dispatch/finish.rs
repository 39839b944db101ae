//! Ending runs, from a runner's report or a server verdict, in the order design.md §4
//! requires: Postgres first (the terminal compare-and-set with its outbox rows, or
//! `scheduled` for a retry, through the group commit), then Redis (claims dropped,
//! retries to the delayed set, log followers told — one script for the whole batch).
//!
//! A runner's own report takes no lock: its compare-and-set on runner and lease is the
//! fence, and whatever else ends the same run at the same moment simply finds the row
//! moved on. The server's own finalizers (the reconciler, the end of a forgotten run)
//! take the finalize lock (`SET NX PX` with an owner) with no patience: two of them
//! racing on one run — the owner's reconciler and another node's heartbeat, say — do
//! the work once, and the one that finds the lock held leaves the run to the other this
//! round. Correctness never depends on the lock.

use crate::identity::NodeIdentity;
use baton_coord::{Coord, RunEnded, Wake};
use baton_core::LeaseId;
use baton_core::TaskStatus;
use baton_store::{Fence, FinishRun, GroupCommit, RunEnd, StoreError, TaskRecord, Work};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// A run's end, as the group commit takes it.
pub(crate) fn finish_item(task: Uuid, fence: Fence, end: RunEnd) -> FinishRun {
    FinishRun {
        task,
        fence,
        end,
        jitter_unit: rand::random(),
    }
}

/// The Redis half of ended runs, after their commit: claims go (compare-and-delete on the
/// lease), retries wait in the delayed set, log followers of `logs` on every node read
/// to the end, the outbox deliverers hear of new webhooks. Nothing waits for it to be
/// correct — if it fails or the node dies first, the repair pass drops claims of
/// terminal tasks and promotes overdue scheduled ones — so a runner's answer need not
/// wait for it either ([`AfterCommit::spawn`]).
pub(crate) struct AfterCommit {
    runs: Vec<RunEnded>,
    logs: Vec<Uuid>,
    webhooks: bool,
}

impl AfterCommit {
    pub(crate) fn of(ended: &[(&TaskRecord, LeaseId)], logs: &[Uuid]) -> AfterCommit {
        AfterCommit {
            runs: ended
                .iter()
                .map(|(task, lease_id)| RunEnded {
                    task: task.id,
                    lease_id: *lease_id,
                    retry_at_ms: (task.status == TaskStatus::Scheduled)
                        .then(|| task.run_at.map(|at| at.timestamp_millis()))
                        .flatten(),
                })
                .collect(),
            logs: logs.to_vec(),
            webhooks: ended
                .iter()
                .any(|(t, _)| t.status.is_terminal() && t.notify_url.is_some()),
        }
    }

    pub(crate) async fn apply(self, coord: &Coord) {
        if let Err(e) = coord.runs_ended(&self.runs, &self.logs).await {
            tracing::warn!(error = %e, runs = self.runs.len(), "claims of ended runs not dropped; repair will");
        }
        if self.webhooks {
            let _ = coord.publish(&Wake::Outbox).await;
        }
    }

    /// Applies it in the background: the caller answers now.
    pub(crate) fn spawn(self, coord: &Coord) {
        if self.runs.is_empty() && self.logs.is_empty() {
            return;
        }
        let coord = coord.clone();
        tokio::spawn(async move { self.apply(&coord).await });
    }
}

/// Ends runs under the server's own verdict (the reconciler, a forgotten run): the few
/// handles that takes, so a service holds this rather than the whole node.
#[derive(Clone)]
pub struct ServerFinalizer {
    commit: GroupCommit,
    coord: Coord,
    identity: Arc<NodeIdentity>,
    lock_ttl: Duration,
}

impl ServerFinalizer {
    /// A finalizer writing through `commit` as `identity`. `lock_ttl` is how long a
    /// finalize lock lives: a finalizer that dies holding one keeps the others off that
    /// run no longer than this.
    pub fn new(
        commit: GroupCommit,
        coord: Coord,
        identity: Arc<NodeIdentity>,
        lock_ttl: Duration,
    ) -> Self {
        ServerFinalizer {
            commit,
            coord,
            identity,
            lock_ttl,
        }
    }

    /// Ends one run, under the finalize lock. `Ok(None)`: another finalizer holds the
    /// lock, or the run moved on (the runner's report won the race).
    pub async fn end(
        &self,
        task: Uuid,
        lease_id: LeaseId,
        end: RunEnd,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let Some(lock) = self.lock(task).await else {
            return Ok(None);
        };
        let fence = Fence {
            lease_id,
            runner_id: None,
        };
        let work = Work {
            finishes: vec![finish_item(task, fence, end)],
            ..Work::default()
        };
        let ended = self
            .commit
            .write(work)
            .await
            .map(|mut done| done.finishes.pop().expect("one answer"));
        let result = match ended {
            Ok(Ok(row)) => {
                AfterCommit::of(&[(&row, lease_id)], &[row.id])
                    .apply(&self.coord)
                    .await;
                Ok(Some(row))
            }
            Ok(Err(StoreError::Conflict { .. })) => Ok(None),
            Ok(Err(e)) | Err(e) => Err(e),
        };
        if let Err(e) = self.coord.lock_release(&lock).await {
            tracing::debug!(error = %e, task.id = %task, "finalize lock left to expire");
        }
        result
    }

    /// The finalize lock of `task`, if nobody holds it. When Redis cannot be asked, no
    /// lock either: the caller leaves the run for its next pass (a server-side end is
    /// never urgent, and its Redis half could not run anyway).
    async fn lock(&self, task: Uuid) -> Option<baton_coord::Lock> {
        let owner = format!("{}:{}", self.identity.id(), Uuid::new_v4());
        match self
            .coord
            .lock_acquire(&format!("fin:{task}"), &owner, self.lock_ttl)
            .await
        {
            Ok(lock) => lock,
            Err(e) => {
                tracing::debug!(error = %e, task.id = %task, "finalize lock unavailable; leaving the run for the next pass");
                None
            }
        }
    }
}
