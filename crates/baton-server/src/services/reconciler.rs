//! The reconciler: every `reconcile_interval`, this node looks at the tasks it owns — its
//! claims, and only its claims — and applies the pure decision of
//! `baton_core::reconcile::decide` to each (design.md §5).
//!
//! Actions follow design.md §4: Postgres first (a compare-and-set fenced by the lease),
//! then Redis. A requeue puts the task back in its queue and drops the claim in one
//! script; an ended run goes through the finalizer (outbox, retry, claim release).
//!
//! A task leased but not yet started is `queued` in Postgres: its claim is the lease
//! (it names the runner, its boot and when), and the decision treats it as `leased`
//! since the claim was made. Taking it back voids the lease in Postgres first (so a start
//! still on its way can never land), then swaps the claim for the queue entry in one
//! Redis script.

use super::ServiceError;
use super::service::Service;
use crate::config::Timings;
use crate::dispatch::finish::ServerFinalizer;
use crate::events::EventLog;
use crate::identity::NodeIdentity;
use crate::queueing::queue_entry;
use crate::state::StalenessClocks;
use baton_client::trace_context;
use baton_coord::{Claim, Coord, Popped};
use baton_core::RunnerId;
use baton_core::TaskStatus;
use baton_core::reconcile::{Decision, Inputs, Reason, RunnerFacts, TaskFacts, Thresholds, decide};
use baton_store::{RunEnd, RunnerRecord, Store, TaskRecord};
use chrono::{DateTime, TimeZone, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The reconciler's settings, from the node's [`Timings`].
#[derive(Debug, Clone)]
pub struct ReconcilerSettings {
    /// Time between passes.
    pub interval: Duration,
    /// What the pure decision counts as too long: runner silence, a lease unstarted, a
    /// run past its timeout.
    pub thresholds: Thresholds,
}

impl ReconcilerSettings {
    /// The settings a node with these timings reconciles with.
    pub fn of(timings: &Timings) -> Self {
        ReconcilerSettings {
            interval: Duration::from_millis(timings.reconcile_interval_ms),
            thresholds: timings.thresholds(),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Claims of this node looked at.
    pub examined: usize,
    /// Tasks taken back from their runner and queued again.
    pub requeued: usize,
    /// Runs ended without a report: failed, timed out or retried.
    pub ended: usize,
    /// Of those ended, the ones with an attempt left: `scheduled` for a retry.
    pub retried: usize,
    /// `cancelling` tasks ended as `cancelled` without their runner's report: their
    /// runner was lost, deleted or restarted, or the run passed its timeout.
    pub cancelled: usize,
    /// Claims with nothing left to own (the task deleted).
    pub claims_dropped: usize,
    /// Claims under another lease than their task's run, handed to the run.
    pub claims_adopted: usize,
    /// This node's liveness had lapsed: it did not act.
    pub fenced: bool,
}

/// Applies the pure reconcile decision to this node's claims. Each node reconciles only
/// what it claims, so no two nodes act on one task.
pub struct Reconciler {
    settings: ReconcilerSettings,
    identity: Arc<NodeIdentity>,
    store: Store,
    coord: Coord,
    clocks: Arc<StalenessClocks>,
    finalizer: ServerFinalizer,
    events: Option<EventLog>,
}

fn ms(t: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(t).single().unwrap_or_default()
}

impl Reconciler {
    /// A reconciler acting as `identity`, ending runs through `finalizer`. `clocks` says
    /// from when runner silence may be counted.
    pub fn new(
        settings: ReconcilerSettings,
        identity: Arc<NodeIdentity>,
        store: Store,
        coord: Coord,
        clocks: Arc<StalenessClocks>,
        finalizer: ServerFinalizer,
    ) -> Self {
        Reconciler {
            settings,
            identity,
            store,
            coord,
            clocks,
            finalizer,
            events: None,
        }
    }

    /// A task taken from a runner nobody hears from: the event stream is told the runner
    /// is lost, once (a marker in Redis says it was, for every node's reconciler).
    async fn tell_if_runner_lost(&self, task: &TaskRecord, claim: &Claim, decision: &Decision) {
        let reason = match decision {
            Decision::Requeue(r) | Decision::Cancel(r) => *r,
            Decision::EndRun { reason, .. } => *reason,
            _ => return,
        };
        let (Some(events), Some(runner)) = (&self.events, task.runner_id.or(claim.runner)) else {
            return;
        };
        if !matches!(reason, Reason::RunnerLost | Reason::RunnerOffline) {
            return;
        }
        let first = self
            .coord
            .lock_acquire(
                &format!("told-lost:{runner}"),
                &self.identity.id(),
                crate::events::RUNNER_LOST_TOLD_FOR,
            )
            .await;
        if let Ok(Some(_)) = first {
            events
                .runner(crate::events::RunnerChange::Lost, runner)
                .await;
        }
    }

    /// Tells the event stream of the tasks it requeues.
    pub(crate) fn with_events(self, events: EventLog) -> Self {
        Reconciler {
            events: Some(events),
            ..self
        }
    }

    /// One pass over this node's claims.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<ReconcileReport, ServiceError> {
        let mut report = ReconcileReport::default();
        let node = self.identity.current();
        if !self.identity.is_live() {
            report.fenced = true;
            return Ok(report);
        }
        let ids = self.coord.claims_of(&node.id).await?;
        if ids.is_empty() {
            return Ok(report);
        }
        let claims = self.coord.claims_get(&ids).await?;
        let tasks = self.store.tasks_map(&ids).await?;
        let holders = ids
            .iter()
            .zip(&claims)
            .filter_map(|(id, claim)| holder(tasks.get(id)?, claim.as_ref()?));
        let runners = self.runners_of(holders).await?;
        let clocks_since = self.clocks_since(now).await;
        let thresholds = &self.settings.thresholds;

        for (id, claim) in ids.iter().zip(claims) {
            let Some(claim) = claim.filter(|c| c.node == node.id) else {
                continue; // released or adopted meanwhile
            };
            report.examined += 1;
            let Some(task) = tasks.get(id) else {
                // The task is gone (deleted by retention): nothing to own.
                self.coord.claim_release(*id, claim.lease_id).await?;
                report.claims_dropped += 1;
                crate::metrics::reconciler_action("drop_claim");
                continue;
            };
            if task.status.is_dispatched()
                && let Some(lease_id) = task.lease_id.filter(|l| *l != claim.lease_id)
            {
                // The claim is under another lease than the task's run: a lease popped it
                // again after Redis lost the run's claim (a failover), and the pass that
                // should have handed the claim to the run did not. A task has one claim,
                // so the run has none: this one becomes the run's, keeping the group
                // slot it holds — released, it would let another task of the group run
                // beside this one (design.md §4.13).
                let adopt = baton_coord::ClaimAdopt {
                    task: *id,
                    from: claim.lease_id,
                    lease_id,
                    runner: task.runner_id,
                    boot: task.boot_id,
                };
                report.claims_adopted += self
                    .coord
                    .claims_adopt(now.timestamp_millis(), &[adopt])
                    .await?;
                crate::metrics::reconciler_action("adopt_claim");
                continue;
            }
            let inputs = Inputs {
                task: facts(task, &claim),
                runner: holder(task, &claim)
                    .map(|r| runners.get(&r).copied().unwrap_or(RunnerFacts::Gone))
                    .unwrap_or(RunnerFacts::Gone),
                claimed_at: ms(claim.claimed_at_ms),
                now,
                clocks_since,
            };
            let decision = decide(&inputs, thresholds);
            if decision == Decision::Keep {
                self.act(task, &claim, decision, now, &mut report).await?;
                continue;
            }
            // An action on a task joins the task's trace, on whichever node owns it now.
            let span = tracing::info_span!("task.reconcile", task.id = %id, node.id = %node.id, decision = ?decision);
            trace_context::adopt_parent(&span, task.traceparent.as_deref());
            async {
                tracing::info!(task.id = %id, status = %task.status, ?decision, "reconciling");
                self.act(task, &claim, decision, now, &mut report).await
            }
            .instrument(span)
            .await?;
        }
        Ok(report)
    }

    /// Staleness clocks start no earlier than this node's start or last outage (and not
    /// at all during one), nor than the last rebuild of Redis (presence was lost with
    /// the data).
    async fn clocks_since(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let now_ms = now.timestamp_millis();
        let node = self.clocks.measured_from_ms(now_ms);
        let epoch = match self.coord.epoch_get().await {
            Ok(Some(epoch)) => epoch.since_ms,
            _ => now_ms,
        };
        ms(node.max(epoch))
    }

    /// What is known of each task's runner: presence from Redis, the row from Postgres
    /// (deleted runners, last-seen flushed there, and when it registered).
    async fn runners_of(
        &self,
        holders: impl Iterator<Item = RunnerId>,
    ) -> Result<HashMap<RunnerId, RunnerFacts>, ServiceError> {
        let mut ids: Vec<RunnerId> = holders.collect();
        ids.sort();
        ids.dedup();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let presence = self.coord.presence_get(&ids).await?;
        let rows: HashMap<RunnerId, RunnerRecord> = self
            .store
            .runners_by_ids(&ids)
            .await?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        Ok(ids
            .iter()
            .zip(presence)
            .filter_map(|(id, seen)| {
                let row = rows.get(id)?;
                // Its registration is contact too: a runner registered a moment ago has
                // had no time for its presence to reach Redis (written once per
                // `presence_write_ms`) or Postgres, and must not be judged as never heard
                // since the clocks started.
                let last_seen = seen
                    .map(|(at, _)| ms(at))
                    .max(row.last_seen)
                    .max(Some(row.created_at));
                if row.deleted_at.is_some() {
                    return Some((*id, RunnerFacts::Deleted { last_seen }));
                }
                let boot_id = seen.map(|(_, boot)| boot).or(row.boot_id);
                Some((*id, RunnerFacts::Known { last_seen, boot_id }))
            })
            .collect())
    }

    async fn act(
        &self,
        task: &TaskRecord,
        claim: &Claim,
        decision: Decision,
        now: DateTime<Utc>,
        report: &mut ReconcileReport,
    ) -> Result<(), ServiceError> {
        let node = self.identity.id();
        self.tell_if_runner_lost(task, claim, &decision).await;
        match decision {
            Decision::Keep => {}
            Decision::Requeue(reason) if task.status == TaskStatus::Queued => {
                // Leased in Redis only: the claim goes back to being a queue entry, once
                // Postgres has voided the lease, so a start still on its way (its check
                // against the claim passed before this pass read the row) cannot land
                // after the task was handed to someone else.
                let voided = self
                    .store
                    .tasks_void_leases(&[(task.id, claim.lease_id)], now)
                    .await?;
                let place = Popped::of(&queue_entry(task), claim.lease_id);
                if !voided.is_empty() && self.coord.claim_requeue(&node, &place).await? {
                    tracing::info!(task.id = %task.id, %reason, "requeued");
                    report.requeued += 1;
                    crate::metrics::reconciler_action("requeue");
                }
            }
            Decision::Requeue(reason) => {
                let lease_id = claim.lease_id;
                if let Some(requeued) = self.store.task_requeue(task.id, lease_id, now).await? {
                    if let Some(events) = &self.events {
                        events.tasks(&[&requeued]).await;
                    }
                    let place = Popped::of(&queue_entry(&requeued), lease_id);
                    if !self.coord.claim_requeue(&node, &place).await? {
                        self.coord
                            .enqueue_unclaimed(&[queue_entry(&requeued)])
                            .await?;
                    }
                    tracing::info!(task.id = %task.id, %reason, "requeued");
                    report.requeued += 1;
                    crate::metrics::reconciler_action("requeue");
                }
            }
            Decision::EndRun { reason, .. } => {
                if let Some(ended) = self.end(task, claim, TaskStatus::Failed, reason).await? {
                    report.ended += 1;
                    crate::metrics::reconciler_ended(ended.status);
                    if ended.status == TaskStatus::Scheduled {
                        report.retried += 1;
                    }
                }
            }
            Decision::Cancel(reason) => {
                if self
                    .end(task, claim, TaskStatus::Cancelled, reason)
                    .await?
                    .is_some()
                {
                    report.cancelled += 1;
                    crate::metrics::reconciler_action("cancel");
                }
            }
            Decision::DropClaim => {
                self.coord.claim_release(task.id, claim.lease_id).await?;
                if task.status == TaskStatus::Scheduled
                    && let Some(run_at) = task.run_at
                {
                    self.coord
                        .delayed_add(&[(task.id, run_at.timestamp_millis())])
                        .await?;
                }
                report.claims_dropped += 1;
                crate::metrics::reconciler_action("drop_claim");
            }
        }
        Ok(())
    }

    /// Ends a run the runner will not report, under the finalize lock: if someone else
    /// is finalizing it, leave it to them this round.
    async fn end(
        &self,
        task: &TaskRecord,
        claim: &Claim,
        outcome: TaskStatus,
        reason: Reason,
    ) -> Result<Option<TaskRecord>, ServiceError> {
        let end = RunEnd::by_server(outcome, reason.as_str());
        let ended = self.finalizer.end(task.id, claim.lease_id, end).await?;
        if let Some(task) = &ended {
            tracing::info!(task.id = %task.id, status = %task.status, %reason, "run ended by the reconciler");
        }
        Ok(ended)
    }
}

/// The runner holding a claimed task: the row's, or — for a lease not yet started, which
/// lives in its claim only — the claim's.
fn holder(task: &TaskRecord, claim: &Claim) -> Option<RunnerId> {
    match task.status {
        TaskStatus::Queued => claim.runner,
        _ => task.runner_id,
    }
}

/// The task as the decision sees it. A `queued` task whose claim names a runner is leased
/// to it in Redis since the claim's time; one whose claim names none was claimed by a
/// node that died before the lease was answered.
fn facts(task: &TaskRecord, claim: &Claim) -> TaskFacts {
    let leased_in_redis = task.status == TaskStatus::Queued && claim.runner.is_some();
    if leased_in_redis {
        return TaskFacts {
            status: TaskStatus::Leased,
            leased_at: Some(ms(claim.claimed_at_ms)),
            started_at: None,
            timeout_s: task.timeout_s.into(),
            attempt: task.attempt,
            max_attempts: task.max_attempts,
            boot_id: claim.boot,
        };
    }
    row_facts(task)
}

fn row_facts(task: &TaskRecord) -> TaskFacts {
    TaskFacts {
        status: task.status,
        leased_at: task.leased_at,
        started_at: task.started_at,
        timeout_s: task.timeout_s.into(),
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        boot_id: task.boot_id,
    }
}

impl Service for Reconciler {
    const NAME: &'static str = "reconciler";
    type Report = ReconcileReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<ReconcileReport, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }
}
