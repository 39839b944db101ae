//! The verdict: the history checked against the invariants of design.md §3.
//!
//! Postgres is audited by a trigger the drill installs in its own database, recording
//! every write of a terminal status; the tasks record their own executions; the webhook
//! receiver records deliveries; the fault schedule records adoption times.

use super::cluster::ChaosCluster;
use super::faults::{FaultLog, adoption_limit};
use super::load::Accepted;
use super::webhooks::Receiver;
use baton_core::TaskStatus;
use sqlx::{Connection, PgConnection};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use uuid::Uuid;

const TERMINAL: &str = "('succeeded', 'failed', 'cancelled', 'timed_out', 'expired')";

/// Records every terminal write, so "written once" can be counted.
pub async fn install_audit(database_url: &str) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(database_url).await?;
    for statement in [
        "CREATE TABLE chaos_terminal_writes (
             task_id uuid NOT NULL, status text NOT NULL, attempt integer NOT NULL,
             written_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        "CREATE FUNCTION chaos_record_terminal() RETURNS trigger AS $$
         BEGIN
             IF NEW.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired')
                AND NEW.status IS DISTINCT FROM OLD.status THEN
                 INSERT INTO chaos_terminal_writes (task_id, status, attempt)
                 VALUES (NEW.id, NEW.status, NEW.attempt);
             END IF;
             RETURN NEW;
         END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER chaos_terminal AFTER UPDATE ON tasks
         FOR EACH ROW EXECUTE FUNCTION chaos_record_terminal()",
    ] {
        sqlx::query(statement).execute(&mut conn).await?;
    }
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
        let open: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM tasks WHERE id = ANY($1) AND status NOT IN {TERMINAL}"
        )))
        .bind(&ids)
        .fetch_one(&mut conn)
        .await?;
        let undelivered: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox WHERE delivered_at IS NULL")
                .fetch_one(&mut conn)
                .await?;
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

#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub duration: Duration,
    pub accepted: usize,
    pub submit_retries: u64,
    pub by_status: Vec<(String, i64)>,
    pub retried: i64,
    pub runs: usize,
    pub runs_cut_short: usize,
    pub webhooks: (usize, u32, u32),
    pub faults: FaultLog,
    pub settled_after: Option<Duration>,
    pub schedule: super::schedules::ScheduleOutcome,
    pub checks: Vec<(&'static str, bool)>,
    pub violations: Vec<String>,
}

/// One run of a task, from its own record.
#[derive(Debug, Clone, Copy)]
struct Run {
    attempt: i32,
    start: i128,
    end: Option<i128>,
    /// Its exit code, when it ended by itself.
    exit_code: Option<i32>,
    /// The last time the run was seen alive (its start, or its latest tick).
    seen: i128,
}

impl Run {
    /// When it was last known to run: its end, or for a run killed without one, its
    /// last tick.
    fn last(&self) -> i128 {
        self.end.unwrap_or(self.seen)
    }
}

fn runs_from(executions: &Path) -> HashMap<Uuid, Vec<Run>> {
    let mut starts: HashMap<(Uuid, i32, u32), Run> = HashMap::new();
    for line in std::fs::read_to_string(executions)
        .unwrap_or_default()
        .lines()
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (kind, id, attempt, at, execution, rc) = match parts[..] {
            [kind, id, attempt, at, execution] => (kind, id, attempt, at, execution, None),
            [kind, id, attempt, at, execution, rc] => {
                (kind, id, attempt, at, execution, rc.parse::<i32>().ok())
            }
            _ => continue,
        };
        let (Ok(id), Ok(attempt), Ok(at), Ok(execution)) = (
            id.parse::<Uuid>(),
            attempt.parse::<i32>(),
            at.parse::<i128>(),
            execution.parse::<u32>(),
        ) else {
            continue;
        };
        let key = (id, attempt, execution);
        match kind {
            "S" => {
                starts.insert(
                    key,
                    Run {
                        attempt,
                        start: at,
                        end: None,
                        exit_code: None,
                        seen: at,
                    },
                );
            }
            "E" => {
                if let Some(run) = starts.get_mut(&key) {
                    run.end = Some(at);
                    run.exit_code = rc;
                    run.seen = run.seen.max(at);
                }
            }
            "T" => {
                if let Some(run) = starts.get_mut(&key) {
                    run.seen = run.seen.max(at);
                }
            }
            _ => {}
        }
    }
    let mut by_task: HashMap<Uuid, Vec<Run>> = HashMap::new();
    for ((id, _, _), run) in starts {
        by_task.entry(id).or_default().push(run);
    }
    by_task
}

/// What runners were told of their results: every `task reported` line of their logs
/// whose status is final, as (task, status).
fn acknowledged(logs: &Path) -> Vec<(Uuid, String)> {
    let mut told = Vec::new();
    let Ok(entries) = std::fs::read_dir(logs) else {
        return told;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("runner-") {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())
            .unwrap_or_default()
            .lines()
        {
            let Some(rest) = line.split("task reported task.id=").nth(1) else {
                continue;
            };
            let id = rest
                .split_whitespace()
                .next()
                .and_then(|i| i.parse::<Uuid>().ok());
            let status = rest
                .split("status=Some(")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .and_then(|s| match s {
                    "Succeeded" => Some("succeeded"),
                    "Failed" => Some("failed"),
                    "Cancelled" => Some("cancelled"),
                    "TimedOut" => Some("timed_out"),
                    _ => None, // not final (a retry)
                });
            if let (Some(id), Some(status)) = (id, status) {
                told.push((id, status.to_string()));
            }
        }
    }
    told
}

pub async fn check(
    cluster: &ChaosCluster,
    accepted: &[Accepted],
    executions: &Path,
    hooks: &Receiver,
    faults: &FaultLog,
) -> anyhow::Result<Report> {
    let mut report = Report {
        accepted: accepted.len(),
        faults: faults.clone(),
        webhooks: hooks.counts(),
        ..Default::default()
    };
    let mut conn = PgConnection::connect(&cluster.postgres.url_now().await?).await?;
    let ids: Vec<Uuid> = accepted.iter().map(|a| a.id).collect();
    let rows: Vec<(Uuid, String, i32, Option<String>)> =
        sqlx::query_as("SELECT id, status, attempt, error FROM tasks WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut conn)
            .await?;
    let errors: HashMap<Uuid, Option<String>> =
        rows.iter().map(|(id, _, _, e)| (*id, e.clone())).collect();
    let tasks: HashMap<Uuid, (String, i32)> =
        rows.into_iter().map(|(id, s, a, _)| (id, (s, a))).collect();
    let writes: Vec<(Uuid, String, i32, f64)> = sqlx::query_as(
        "SELECT task_id, status, attempt, EXTRACT(EPOCH FROM written_at)::float8 FROM chaos_terminal_writes",
    )
    .fetch_all(&mut conn)
    .await?;
    let mut writes_of: HashMap<Uuid, Vec<(String, i32, f64)>> = HashMap::new();
    for (id, status, attempt, at) in writes {
        writes_of.entry(id).or_default().push((status, attempt, at));
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
    let terminal = |s: &str| TERMINAL.contains(&format!("'{s}'"));

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
            ("cancelled", None) if !accepted.cancel_unanswered => {
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

    // 7. The drill itself could do what it meant to.
    for e in &faults.errors {
        violations.push(format!("fault injection failed: {e}"));
    }
    report.violations = violations;
    Ok(report)
}

impl Report {
    pub fn print(&self) {
        let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
        println!("\nbaton chaos report");
        println!(
            "  duration     {} of faults, seed {}",
            secs(self.duration),
            self.seed
        );
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        println!(
            "  tasks        {} accepted ({} submits retried): {}",
            self.accepted,
            self.submit_retries,
            statuses.join(", ")
        );
        println!("  retries      {} tasks ran more than once", self.retried);
        println!(
            "  runs         {} recorded, {} cut short by a kill",
            self.runs, self.runs_cut_short
        );
        let f = &self.faults;
        println!(
            "  faults       {} node kills, {} runner kills, {} redis restarts ({} losing data), {} node pauses, {} link faults, {} clock steps",
            f.node_kills,
            f.runner_kills,
            f.redis_restarts,
            f.redis_restarts_losing_data,
            f.node_pauses,
            f.link_faults,
            f.clock_steps
        );
        for (at, what) in &f.events {
            println!("    {:>7}  {what}", secs(*at));
        }
        if !f.store_failovers.is_empty() {
            let slowest = f
                .store_failovers
                .iter()
                .map(|(_, t)| *t)
                .max()
                .unwrap_or_default();
            println!(
                "  failovers    {} of the stores, slowest writable again after {}",
                f.store_failovers.len(),
                secs(slowest)
            );
        }
        let max_adoption = f.adoptions.iter().max().copied().unwrap_or_default();
        println!(
            "  adoptions    {} orphaned claim sets adopted, slowest {} (limit {})",
            f.adoptions.len(),
            secs(max_adoption),
            secs(adoption_limit())
        );
        let (keys, deliveries, refused) = self.webhooks;
        println!(
            "  webhooks     {keys} delivered ({deliveries} deliveries, {refused} refused on purpose and retried)"
        );
        let s = &self.schedule;
        println!(
            "  schedule     {} ticks fired, {} made twice, {} missing, {} skipped",
            s.ticks, s.doubled, s.missing, s.skipped
        );
        match self.settled_after {
            Some(d) => println!("  recovery     settled {} after the last fault", secs(d)),
            None => println!("  recovery     did not settle"),
        }
        println!("  checks");
        for (name, ok) in &self.checks {
            println!("    {name:<36} {}", if *ok { "ok" } else { "VIOLATED" });
        }
        println!("  violations   {}", self.violations.len());
        for v in self.violations.iter().take(50) {
            println!("    - {v}");
        }
    }
}
