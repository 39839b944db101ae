//! Schedules under every overlap policy beside the drill's `allow` one (`schedules.rs`):
//! `skip` and `queue`, whose runs must never overlap, and `cancel`, whose run a later
//! tick cancels — in the fire's own transaction, so the cancelled run stops soon after
//! the next one starts, whatever node dies when. Their tasks are served by the drill's
//! runners and recorded like the load's, so every other check judges them too.

use super::asking::until_answered;
use super::causes::{Cause, FaultWindow};
use super::records::Run;
use baton_client::{Client, CreateSchedule, SubmitTask};
use sqlx::PgConnection;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use uuid::Uuid;

/// How long a cancelled run may go on after the run that cancelled it started: its
/// runner hears the cancel at its next answer, or fences itself off without one
/// (`RUNNER_FENCE_AFTER_S`), then kills the process; plus a second for the kill.
const CANCEL_HEARD_S: f64 = super::RUNNER_FENCE_AFTER_S as f64 + 2.0;

/// Each policy's schedule: its cron and how long its task runs (longer than its ticks
/// are apart, so ticks come while it runs).
const POLICIES: [(&str, &str, f64); 3] = [
    ("skip", "*/2 * * * * *", 3.0),
    ("queue", "*/2 * * * * *", 3.0),
    ("cancel", "*/4 * * * * *", 20.0),
];

pub struct OverlapSchedules {
    client: Client,
    /// Policy and schedule id.
    made: Vec<(&'static str, Uuid)>,
}

impl OverlapSchedules {
    pub async fn start(client: Client, executions: &Path) -> anyhow::Result<OverlapSchedules> {
        let mut made = Vec::new();
        for (policy, cron, run_s) in POLICIES {
            let request = CreateSchedule {
                name: format!("chaos-overlap-{policy}"),
                cron: cron.into(),
                task: SubmitTask {
                    script: Some(super::load::recorded(executions, &format!("sleep {run_s}"))),
                    labels: vec!["chaos".into()],
                    timeout_s: Some(60),
                    ..SubmitTask::default()
                },
                overlap: Some(policy.into()),
                ..CreateSchedule::default()
            };
            let schedule =
                until_answered(Duration::from_secs(30), || client.schedule_create(&request))
                    .await
                    .map_err(|e| anyhow::anyhow!("could not create the {policy} schedule: {e}"))?;
            made.push((policy, schedule.id));
        }
        Ok(OverlapSchedules { client, made })
    }

    /// Pauses every schedule (no tick after the faults) and names the tasks they made; a
    /// pause no node took within `within` goes into `problems` (the cluster could not
    /// take a write), and the tasks are judged all the same.
    pub async fn stop(
        &self,
        conn: &mut PgConnection,
        within: Duration,
        problems: &mut Vec<String>,
    ) -> anyhow::Result<Vec<(&'static str, Uuid)>> {
        for (policy, id) in &self.made {
            if let Err(e) =
                until_answered(within, || self.client.schedule_action(*id, "pause")).await
            {
                problems.push(format!("could not pause the {policy} schedule: {e}"));
            }
        }
        let mut tasks = Vec::new();
        for (policy, id) in &self.made {
            let ids = baton_store::audit::tasks_of_schedule(&mut *conn, *id).await?;
            tasks.extend(ids.into_iter().map(|task| (*policy, task)));
        }
        Ok(tasks)
    }
}

/// Every overlap a policy forbids, judged from the runs' own records: under `skip` and
/// `queue` no two runs of a schedule at once; under `cancel` a run going on longer than
/// [`CANCEL_HEARD_S`] after the next began, unless every store was away meanwhile (a
/// cancel waits in Postgres for its runner to be answered).
pub fn forbidden_overlaps(
    tasks: &[(&'static str, Uuid)],
    runs: &HashMap<Uuid, Vec<Run>>,
    windows: &[FaultWindow],
) -> Vec<String> {
    let mut violations = Vec::new();
    for (policy, ..) in POLICIES {
        let mut of_policy: Vec<(Uuid, Run)> = tasks
            .iter()
            .filter(|(p, _)| *p == policy)
            .flat_map(|(_, id)| runs.get(id).into_iter().flatten().map(|r| (*id, *r)))
            .collect();
        of_policy.sort_by_key(|(_, r)| r.start);
        for (i, (earlier_id, earlier)) in of_policy.iter().enumerate() {
            for (later_id, later) in &of_policy[i + 1..] {
                let overlap_s = (earlier.last() - later.start) as f64 / 1e9;
                if overlap_s <= 0.0 {
                    break;
                }
                let allowed = match policy {
                    "cancel" => {
                        let (from, to) = (later.start as f64 / 1e9, earlier.last() as f64 / 1e9);
                        overlap_s <= CANCEL_HEARD_S
                            || windows
                                .iter()
                                .any(|w| w.cause == Cause::Stores && w.from <= to && w.to >= from)
                    }
                    _ => false,
                };
                if !allowed {
                    violations.push(format!(
                        "overlap {policy}: task {earlier_id} ran {overlap_s:.1} s into task \
                         {later_id}'s run"
                    ));
                }
            }
        }
    }
    violations
}
