//! A runner's heartbeat: of the leases it says it holds, which to cancel and which are
//! gone; the runs it lists as still running past their timeout, which it failed to stop;
//! and the runs it holds but no longer lists, which nothing executes any more. These are
//! the server's only verdicts on a run whose runner is heard: what the runner lists is
//! what it runs, where hearing from it alone says nothing of a result on its way or of a
//! start that never reached it (reconcile.rs).

use super::DispatchError;
use super::Dispatcher;
use crate::auth::Runner;
use baton_client::RunningLease;
use baton_coord::Claim;
use baton_core::TaskStatus;
use baton_core::after_run::{FORGOTTEN_ERROR, SERVER_TIMEOUT_ERROR};
use baton_core::reconcile::overdue;
use baton_store::{RunEnd, TaskRecord, Work};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Verdicts {
    /// Tasks the runner must stop and report `cancelled`.
    pub cancel: Vec<Uuid>,
    /// Leases that are no longer the runner's: stop, report nothing.
    pub gone: Vec<Uuid>,
}

/// The verdicts on `running` from the tasks' rows and their claims (by task). A lease
/// not started yet lives only in its claim; with no claims to look at (Redis
/// unreachable) such a lease is not called gone.
pub(crate) fn of(
    runner: &Runner,
    running: &[RunningLease],
    rows: &HashMap<Uuid, TaskRecord>,
    claims: &HashMap<Uuid, Claim>,
) -> Verdicts {
    let mut verdicts = Verdicts::default();
    for lease in running {
        let claim = claims.get(&lease.task_id);
        match rows.get(&lease.task_id) {
            Some(t)
                if t.runner_id == Some(runner.id)
                    && t.lease_id == Some(lease.lease_id)
                    && t.status.is_dispatched() =>
            {
                if t.status == TaskStatus::Cancelling {
                    verdicts.cancel.push(t.id);
                }
            }
            Some(t)
                if t.status == TaskStatus::Queued
                    && claim.is_some_and(|c| {
                        c.lease_id == lease.lease_id && c.runner.is_none_or(|r| r == runner.id)
                    }) => {}
            _ => verdicts.gone.push(lease.task_id),
        }
    }
    verdicts
}

/// The verdicts as things stand now: the rows (through the group commit) and the claims.
pub(crate) async fn now(
    dispatcher: &Dispatcher,
    runner: &Runner,
    running: &[RunningLease],
) -> Result<Verdicts, DispatchError> {
    if running.is_empty() {
        return Ok(Verdicts::default());
    }
    let ids: Vec<Uuid> = running.iter().map(|r| r.task_id).collect();
    let claims = dispatcher.coord.claims_by_task(&ids).await?;
    let rows = dispatcher
        .commit
        .write(Work {
            reads: ids,
            ..Work::default()
        })
        .await?
        .reads
        .into_iter()
        .map(|t| (t.id, t))
        .collect();
    Ok(of(runner, running, &rows, &claims))
}

/// The time a heartbeat's list is as of: what the runner says (`running_as_of`, this
/// cluster's clock), never later than now; a list that says nothing is as of now.
fn listed_at(dispatcher: &Dispatcher, as_of: Option<DateTime<Utc>>) -> DateTime<Utc> {
    let now = dispatcher.clock.now();
    as_of.map_or(now, |at| at.min(now))
}

/// Runs the runner lists as running — not reporting — past their timeout and grace as
/// of its list (`reconcile::overdue`): it let its own timeout pass, so the server ends
/// them `timed_out` (a `cancelling` one `cancelled`). Returns the tasks ended: their
/// leases are gone, and the runner is told so in this answer. A failure here waits for
/// the next heartbeat.
pub(crate) async fn end_overdue_runs(
    dispatcher: &Dispatcher,
    runner: &Runner,
    running: &[RunningLease],
    rows: &HashMap<Uuid, TaskRecord>,
    as_of: Option<DateTime<Utc>>,
) -> Vec<Uuid> {
    let listed_at = listed_at(dispatcher, as_of);
    let thresholds = dispatcher.config.timings.thresholds();
    let overdue = running
        .iter()
        .filter(|lease| !lease.reporting)
        .filter_map(|lease| {
            let t = rows.get(&lease.task_id)?;
            let current = t.runner_id == Some(runner.id)
                && t.lease_id == Some(lease.lease_id)
                && matches!(t.status, TaskStatus::Running | TaskStatus::Cancelling);
            let started = t.started_at.filter(|_| current)?;
            overdue(started, t.timeout_s.into(), &thresholds, listed_at).then_some(t)
        });
    let mut ended = Vec::new();
    for task in overdue {
        let Some(lease_id) = task.lease_id else {
            continue;
        };
        let status = if task.status == TaskStatus::Cancelling {
            TaskStatus::Cancelled
        } else {
            TaskStatus::TimedOut
        };
        let end = RunEnd::by_server(status, SERVER_TIMEOUT_ERROR);
        match dispatcher.finalizer().end(task.id, lease_id, end).await {
            Ok(Some(row)) => {
                tracing::warn!(task.id = %task.id, runner.id = %runner.id, status = %row.status, "a run its runner let outlive its timeout ended");
                ended.push(task.id);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, task.id = %task.id, "overdue run not ended this beat")
            }
        }
    }
    ended
}

/// Runs this runner holds (same boot, started longer than a heartbeat can be in flight
/// before the list was made) but no longer lists: it gave up on them — it could not
/// report, or it fenced itself while cut off. Nothing executes them, so they end now (or
/// retry) instead of waiting for their timeout. A failure here waits for the next
/// heartbeat. The list is as old as the runner says (`as_of`, this cluster's clock, never
/// later than now): runs started after it was made are not in it, and are not forgotten.
pub(crate) async fn end_forgotten_runs(
    dispatcher: &Dispatcher,
    runner: &Runner,
    boot_id: Uuid,
    running: &[RunningLease],
    as_of: Option<DateTime<Utc>>,
) {
    let forgotten_after =
        chrono::Duration::seconds(dispatcher.config.timings.forgotten_run_after_s as i64);
    let started_before = listed_at(dispatcher, as_of) - forgotten_after;
    if let Err(e) = end_runs_left_out(dispatcher, runner, boot_id, running, started_before).await {
        tracing::debug!(error = %e, runner.id = %runner.id, "forgotten runs not all ended this beat");
    }
}

/// Ends, as forgotten, the runs of this runner's boot started before `started_before`
/// that `running` leaves out. An error: some may not be ended yet (the rest are).
pub(crate) async fn end_runs_left_out(
    dispatcher: &Dispatcher,
    runner: &Runner,
    boot_id: Uuid,
    running: &[RunningLease],
    started_before: DateTime<Utc>,
) -> Result<(), DispatchError> {
    let held = dispatcher
        .store
        .runs_of_boot(runner.id, boot_id, started_before)
        .await?;
    let listed: HashSet<Uuid> = running.iter().map(|r| r.task_id).collect();
    let mut failed = None;
    for task in held.into_iter().filter(|t| !listed.contains(&t.id)) {
        let Some(lease_id) = task.lease_id else {
            continue;
        };
        let end = RunEnd::by_server(TaskStatus::Failed, FORGOTTEN_ERROR);
        match dispatcher.finalizer().end(task.id, lease_id, end).await {
            Ok(Some(ended)) => {
                tracing::warn!(task.id = %task.id, runner.id = %runner.id, status = %ended.status, "run forgotten by its runner ended")
            }
            Ok(None) => {}
            Err(e) => failed = Some(e),
        }
    }
    failed.map_or(Ok(()), |e| Err(e.into()))
}
