//! The verdict: the history checked against the invariants of design.md §3.
//!
//! Postgres is audited by a trigger the drill installs in its own database
//! (`baton_store::audit`), recording every write of a terminal status, every start and
//! every end of a run; the tasks record their own executions; the webhook
//! receiver records deliveries; the fault schedule records adoption times.

use super::causes::unexplained_ends;
use super::cluster::ChaosCluster;
use super::faults::{FaultLog, adoption_limit};
use super::groups::over_their_limits;
use super::load::Accepted;
use super::overlaps::forbidden_overlaps;
use super::pauses::{Pauses, starts_while_paused};
use super::records::{acknowledged, runs_from};
use super::report::Report;
use super::webhooks::Receiver;
use baton_core::TaskStatus;
use baton_store::audit;
use sqlx::{Connection, PgConnection};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;
use uuid::Uuid;

/// Installs the store's audit (`baton_store::audit`) in the drill's database.
pub async fn install_audit(database_url: &str) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(database_url).await?;
    audit::install(&mut conn).await?;
    Ok(())
}

/// Waits until every accepted task is terminal, every webhook delivered and no claim is
/// left in Redis.
pub async fn wait_quiescent(
    cluster: &ChaosCluster,
    accepted: &[Accepted],
    within: Duration,
) -> anyhow::Result<()> {
    let ids: Vec<Uuid> = accepted.iter().map(|a| a.id).collect();
    let deadline = tokio::time::Instant::now() + within;
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        // Between a Postgres failover and the standby's promotion no server takes writes:
        // look again.
        let conn = match cluster.postgres.url_now().await {
            Ok(url) => PgConnection::connect(&url).await.ok(),
            Err(_) => None,
        };
        let Some(mut conn) = conn else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let (open, undelivered) = audit::still_open(&mut conn, &ids).await?;
        let claims = cluster
            .coord
            .claims_all()
            .await
            .map(|c| c.len())
            .unwrap_or(usize::MAX);
        if open == 0 && undelivered == 0 && claims == 0 {
            return Ok(());
        }
        last = format!(
            "{open} tasks not terminal, {undelivered} webhooks undelivered, {claims} claims left"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!("after {within:?}: {last}")
}

/// What the drill did beside the load and the faults, for the checks.
pub struct Flow<'a> {
    pub pauses: &'a Pauses,
    /// The overlap schedules' tasks, with their policies.
    pub overlap_tasks: &'a [(&'static str, Uuid)],
}

pub async fn check(
    cluster: &ChaosCluster,
    accepted: &[Accepted],
    executions: &Path,
    hooks: &Receiver,
    faults: &FaultLog,
    flow: &Flow<'_>,
) -> anyhow::Result<Report> {
    let mut report = Report {
        accepted: accepted.len(),
        faults: faults.clone(),
        webhooks: hooks.counts(),
        ..Default::default()
    };
    let mut conn = PgConnection::connect(&cluster.postgres.url_now().await?).await?;
    let ids: Vec<Uuid> = accepted.iter().map(|a| a.id).collect();
    let rows = audit::outcomes(&mut conn, &ids).await?;
    let errors: HashMap<Uuid, Option<String>> =
        rows.iter().map(|o| (o.id, o.error.clone())).collect();
    let tasks: HashMap<Uuid, (String, i32)> = rows
        .into_iter()
        .map(|o| (o.id, (o.status, o.attempt)))
        .collect();
    let mut writes_of: HashMap<Uuid, Vec<(String, i32, f64)>> = HashMap::new();
    for w in audit::terminal_writes(&mut conn).await? {
        writes_of
            .entry(w.task_id)
            .or_default()
            .push((w.status, w.attempt, w.at));
    }
    let mut by_status: HashMap<String, i64> = HashMap::new();
    for (status, attempt) in tasks.values() {
        *by_status.entry(status.clone()).or_default() += 1;
        if *attempt > 1 {
            report.retried += 1;
        }
    }
    report.by_status = by_status.into_iter().collect();
    report.by_status.sort();
    let runs = runs_from(executions);
    report.runs = runs.values().map(Vec::len).sum();
    report.runs_cut_short = runs.values().flatten().filter(|r| r.end.is_none()).count();

    let mut violations = Vec::new();
    let terminal = |s: &str| s.parse::<TaskStatus>().is_ok_and(TaskStatus::is_terminal);

    // 1. Nothing accepted is lost.
    let lost: Vec<&Uuid> = ids
        .iter()
        .filter(|id| !tasks.get(id).is_some_and(|(s, _)| terminal(s)))
        .collect();
    for id in &lost {
        violations.push(format!(
            "task {id} accepted but not terminal ({:?})",
            tasks.get(id)
        ));
    }
    report
        .checks
        .push(("every accepted task terminal", lost.is_empty()));

    // 2. One terminal state, written once.
    let before = violations.len();
    for id in &ids {
        let n = writes_of.get(id).map_or(0, Vec::len);
        if n != 1 {
            violations.push(format!("task {id}: {n} terminal writes"));
        }
    }
    report
        .checks
        .push(("one terminal write per task", violations.len() == before));

    // 3. One lease at a time: no two runs of a task overlap.
    let before = violations.len();
    for (id, task_runs) in &runs {
        let mut sorted = task_runs.clone();
        sorted.sort_by_key(|r| r.start);
        for pair in sorted.windows(2) {
            if pair[1].start < pair[0].last() {
                violations.push(format!(
                    "task {id}: attempt {} started while attempt {} was still running",
                    pair[1].attempt, pair[0].attempt
                ));
            }
        }
    }
    report
        .checks
        .push(("no task run twice at once", violations.len() == before));

    // 3b. Each task ended as it ran: a success only after a run of its last attempt
    //     exited 0, a runner's failure with the code a run of that attempt exited with, a
    //     cancel only when the drill cancelled it — and then `cancelled`, unless it was
    //     already running and its runner reported how it ended first; a timeout only
    //     when no run of its last attempt ended by itself (its runner killed them all).
    let before = violations.len();
    for accepted in accepted {
        let id = &accepted.id;
        let Some((status, attempt)) = tasks.get(id) else {
            continue;
        };
        let error = errors.get(id).cloned().flatten();
        let exited = |code: i32| {
            runs.get(id)
                .into_iter()
                .flatten()
                .any(|r| r.attempt == *attempt && r.exit_code == Some(code))
        };
        let ended_by_itself = || {
            runs.get(id)
                .into_iter()
                .flatten()
                .any(|r| r.attempt == *attempt && r.exit_code.is_some())
        };
        let reported_code = error
            .as_deref()
            .and_then(|e| e.strip_prefix("exited with status "))
            .and_then(|c| c.parse::<i32>().ok());
        let wrong = match (status.as_str(), accepted.cancelled_as) {
            ("cancelled", None) if !accepted.cancel_unanswered && !accepted.cancelled_by_a_tick => {
                Some("cancelled, though nobody cancelled it".to_string())
            }
            ("cancelled", _) => None,
            (other, Some(TaskStatus::Cancelled)) => Some(format!(
                "the cancel was answered `cancelled`, yet the task ended {other}"
            )),
            ("succeeded", _) if !exited(0) => Some(format!(
                "succeeded, but no run of attempt {attempt} exited 0"
            )),
            ("failed", _) if reported_code.is_some_and(|c| !exited(c)) => Some(format!(
                "failed with {error:?}, but no run of attempt {attempt} exited so"
            )),
            ("failed", Some(TaskStatus::Cancelling)) if reported_code.is_none() => Some(format!(
                "cancelled while it ran, yet ended failed by the server ({error:?})"
            )),
            // A run its runner killed (fenced off, or killed with its runner) leaves no
            // result: the deadline passing with none is a true timeout. One that ended
            // by itself in time had a result, and a timeout then overrode it.
            ("timed_out", _) if !ended_by_itself() => None,
            ("timed_out" | "expired", _) => Some(format!(
                "ended {status} ({error:?}): no task of this load outlives its timeout or its queue timeout"
            )),
            _ => None,
        };
        if let Some(wrong) = wrong {
            violations.push(format!("task {id}: {wrong}"));
        }
    }
    report
        .checks
        .push(("each task ended as it ran", violations.len() == before));

    // 3c. No acknowledged result lost: a run end a node answered `done` for, with the
    //     task's final status, is the status the task has.
    let before = violations.len();
    for (id, told) in acknowledged(&cluster.work().logs()) {
        let Some((status, _)) = tasks.get(&id) else {
            continue;
        };
        if status != &told {
            violations.push(format!(
                "task {id}: its runner was told it ended {told}, but it is {status}"
            ));
        }
    }
    report
        .checks
        .push(("no acknowledged result lost", violations.len() == before));

    // 4. No stale report accepted: a report under an old lease would end the task while
    //    its current run goes on, so no run may start or end after the terminal write.
    let before = violations.len();
    for (id, task_runs) in &runs {
        let Some((_, _, written)) = writes_of.get(id).and_then(|w| w.first()) else {
            continue;
        };
        let written_ns = (written * 1e9) as i128;
        // Allow for the report itself: the runner records its end just before reporting.
        let slack = 1_000_000_000;
        for run in task_runs {
            let last = run.last();
            if last > written_ns + slack {
                violations.push(format!(
                    "task {id}: attempt {} ran on after the task ended",
                    run.attempt
                ));
            }
        }
    }
    report
        .checks
        .push(("no run outlived its task's end", violations.len() == before));

    // 5. Every webhook delivered, with the final status.
    let before = violations.len();
    for a in accepted.iter().filter(|a| a.notify) {
        let Some((status, _)) = tasks.get(&a.id) else {
            continue;
        };
        match hooks.delivered(&format!("{}:{status}", a.id)) {
            Some(body) if &body == status => {}
            Some(body) => violations.push(format!(
                "task {}: webhook said {body}, task is {status}",
                a.id
            )),
            None => violations.push(format!(
                "task {}: webhook for {status} never delivered",
                a.id
            )),
        }
    }
    report
        .checks
        .push(("every webhook delivered", violations.len() == before));

    // 6. Orphans adopted in time.
    let before = violations.len();
    for took in &faults.adoptions {
        if *took > adoption_limit() {
            violations.push(format!(
                "orphaned claims adopted after {took:?} (limit {:?})",
                adoption_limit()
            ));
        }
    }
    report
        .checks
        .push(("orphans adopted in time", violations.len() == before));

    // 8. No run ended without a cause: every end that was not its runner's word on an
    //    exit is matched to a fault that could bring it about, or to its timeout.
    let cancelled: HashSet<Uuid> = accepted
        .iter()
        .filter(|a| a.cancelled_as.is_some() || a.cancel_unanswered || a.cancelled_by_a_tick)
        .map(|a| a.id)
        .collect();
    let unexplained = unexplained_ends(&mut conn, &ids, &faults.windows, &cancelled).await?;
    report
        .checks
        .push(("every run's end has a cause", unexplained.is_empty()));
    violations.extend(unexplained);

    // 9. No group over its limit, from the runs' own records.
    let over = over_their_limits(&mut conn, &ids, &runs).await?;
    report
        .checks
        .push(("no group ran over its limit", over.is_empty()));
    violations.extend(over);

    // 10. Nothing of a paused queue started while it was paused.
    let paused = starts_while_paused(&mut conn, flow.pauses).await?;
    report
        .checks
        .push(("no start in a paused queue", paused.is_empty()));
    violations.extend(paused);

    // 11. Each overlap policy kept.
    let overlaps = forbidden_overlaps(flow.overlap_tasks, &runs, &faults.windows);
    report
        .checks
        .push(("every overlap policy kept", overlaps.is_empty()));
    violations.extend(overlaps);

    // 7. The drill itself could do what it meant to.
    for e in &faults.errors {
        violations.push(format!("fault injection failed: {e}"));
    }
    report.violations = violations;
    Ok(report)
}
