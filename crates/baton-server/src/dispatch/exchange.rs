//! One runner exchange, whichever endpoint it came through: start acks, log chunks and
//! run ends, a heartbeat, and a lease of up to `max` more tasks — one Redis script,
//! one group commit, one Redis script after it, whatever the number of items.
//!
//! 1. **Redis, before**: the lease script returns the claim on every task the runner is
//!    starting (or lists in its heartbeat), pops and claims new tasks, and for a resend
//!    returns what the first attempt leased instead (design.md §4.3, §4.7).
//! 2. **Postgres**: starts whose lease matches their claim, log chunks and run ends are
//!    written, and the rows of the new tasks read (or, with `start_leased`, the new
//!    tasks started), in the node's next group commit.
//! 3. **Redis, after**: claims of ended runs go and retries wait in the delayed set;
//!    claims the commit showed to be stale (a task cancelled before its start, say) go
//!    too.
//!
//! Each item gets its own answer; a stale or unknown one never fails the others. The
//! pass runs in a task of its own, so it completes even if the runner hangs up: what it
//! leased is recorded for the runner's resend.

use super::finish::{AfterCommit, finish_item};
use super::lease::{self, Pop};
use super::verdicts::{self, Verdicts};
use crate::auth::Runner;
use crate::error::ApiError;
use crate::queueing::queue_entry;
use crate::state::AppState;
use axum::http::StatusCode;
use baton_client::ErrorCode;
use baton_client::{LeasedTask, RunningLease};
use baton_coord::{Claim, Popped, ReplayKey};
use baton_core::TaskStatus;
use baton_store::{
    Done, Fence, LogAppend, LogWrite, RunEnd, StartRun, Started, StoreError, TaskRecord, Work,
};
use chrono::{DateTime, TimeZone, Utc};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use uuid::Uuid;

/// A lease a runner acknowledges.
#[derive(Debug, Clone)]
pub struct Start {
    pub task: Uuid,
    pub lease_id: Uuid,
    /// The runner's span for it, which the node's `task.start` span continues.
    pub traceparent: Option<String>,
}

/// A run's end as a runner reports it.
#[derive(Debug, Clone)]
pub struct Completion {
    pub task: Uuid,
    pub lease_id: Uuid,
    pub end: RunEnd,
    /// The runner's span for it, which the node's `task.complete` span continues.
    pub traceparent: Option<String>,
}

/// Everything one runner request says and asks.
#[derive(Debug, Clone)]
pub struct RunnerCall {
    pub request_id: Uuid,
    /// A resend of a request that got no answer: replay what it leased.
    pub retry: bool,
    /// The agent process's boot; the single-report endpoints do not say it.
    pub boot_id: Option<Uuid>,
    pub starts: Vec<Start>,
    pub logs: Vec<LogWrite>,
    pub completions: Vec<Completion>,
    /// A heartbeat: the leases the runner holds.
    pub running: Option<Vec<RunningLease>>,
    /// The server time the heartbeat's list is as of (see `Exchange::running_as_of`).
    pub running_as_of: Option<DateTime<Utc>>,
    pub max: u32,
    pub wait: Duration,
    /// Record the start of what is leased with the lease (the exchange's `start_leased`).
    pub start_leased: bool,
    /// The runner takes secrets with its starts' answers, not with unstarted leases.
    pub secrets_at_start: bool,
}

impl RunnerCall {
    fn has_items(&self) -> bool {
        !(self.starts.is_empty() && self.logs.is_empty() && self.completions.is_empty())
    }
}

/// A recorded start, and what only a recorded start gets: the task's secrets, opened.
pub struct StartAnswer {
    pub started: Started,
    pub secret_env: BTreeMap<String, String>,
}

/// The secrets' names only: an answer logged whole must not carry their values.
impl std::fmt::Debug for StartAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartAnswer")
            .field("started", &self.started)
            .field("secret_env", &self.secret_env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Each item's answer, and the new tasks.
#[derive(Debug, Default)]
pub struct RunnerAnswer {
    pub starts: Vec<Result<StartAnswer, ApiError>>,
    pub logs: Vec<Result<LogAppend, ApiError>>,
    pub completions: Vec<Result<TaskRecord, ApiError>>,
    pub tasks: Vec<LeasedTask>,
    pub verdicts: Verdicts,
}

/// Handles one runner request: its items at once, then — if it carried none and there is
/// no work — parks up to `call.wait` for work queued on any node.
pub async fn handle(
    state: &AppState,
    runner: &Runner,
    call: RunnerCall,
) -> Result<RunnerAnswer, ApiError> {
    let now_ms = state.clock.now().timestamp_millis();
    // Presence: every request that names its boot is a proof of life (written to Redis
    // in batches).
    let heard = call.boot_id.is_some();
    if let Some(boot) = call.boot_id {
        state.presence.record(runner.id, boot, now_ms);
    }
    // Only the arrival proves the runner alive: a parked request's answer may go to a
    // runner that died or was cut off meanwhile.
    answer(state, runner, call)
        .await
        .map_err(|e| vouched(state, e, heard))
}

/// Whether presence this node hears now reaches every node: its liveness holds and its
/// last presence write landed. Said in every exchange answer and outage refusal.
pub fn vouches(state: &AppState) -> bool {
    state.identity.is_live() && state.presence.reaching_redis()
}

/// A refusal over an outage says whether this request still counts as the runner's proof
/// of life on every node: only if it was heard and this node [`vouches`].
fn vouched(state: &AppState, mut e: ApiError, heard: bool) -> ApiError {
    if e.status == StatusCode::SERVICE_UNAVAILABLE {
        e.presence_recorded = Some(heard && vouches(state));
    }
    e
}

async fn answer(
    state: &AppState,
    runner: &Runner,
    call: RunnerCall,
) -> Result<RunnerAnswer, ApiError> {
    let draining = state.draining.is_cancelled();
    let has_items = call.has_items();
    if draining && !has_items {
        // Nothing new is claimed by a node about to leave. A 503: a load balancer sends
        // the request to another node (it is replayable by its request id), a runner
        // talking to this node directly backs off and asks again.
        return Err(ApiError::unavailable("node is draining; ask another node"));
    }
    let mut max = if runner.paused || draining {
        0
    } else {
        call.max
    };
    if max > 0 && !state.identity.is_live() {
        // Our liveness lapsed: claims taken now could be adopted from under us.
        if !has_items {
            return Err(ApiError::unavailable("this node is rejoining the cluster"));
        }
        max = 0;
    }
    let replay = state.coord.replay_key(
        runner.id,
        call.request_id,
        state.config.replay_ttl().as_millis() as u64,
    );
    let may_park = !has_items && !call.wait.is_zero();
    // Subscribe before the first look: a task queued between the look and the park
    // leaves its wake-up in this receiver.
    let parked = if may_park {
        let limit = state.config.limits.max_parked_per_runner;
        // Each parked request holds a receiver: one runner opening them without end
        // would hold the node's memory.
        let place = state.parks.take(runner.id, limit).ok_or_else(|| {
            ApiError::too_many(format!(
                "this runner already has {limit} lease requests waiting on this node \
                 (max_parked_per_runner); wait for an answer before asking again"
            ))
        })?;
        Some((state.wake.park(), place))
    } else {
        None
    };
    let first = spawn_pass(state, runner, &call, max, &replay).await?;
    if !first.tasks.is_empty() || !may_park {
        return Ok(first);
    }
    let (mut parked, _place) = parked.expect("subscribed when it may park");
    let deadline = tokio::time::Instant::now() + call.wait;
    let tasks = lease::park(state, runner, &mut parked.wakes, deadline, || async {
        let lease_only = RunnerCall {
            starts: Vec::new(),
            logs: Vec::new(),
            completions: Vec::new(),
            running: None,
            retry: false,
            ..call.clone()
        };
        spawn_pass(state, runner, &lease_only, max, &replay)
            .await
            .map(|a| a.tasks)
    })
    .await?;
    // The verdicts answer as of now, not as of before the park.
    let verdicts = match &call.running {
        Some(running) => verdicts::now(state, runner, running).await?,
        None => Verdicts::default(),
    };
    Ok(RunnerAnswer {
        tasks,
        verdicts,
        ..first
    })
}

async fn spawn_pass(
    state: &AppState,
    runner: &Runner,
    call: &RunnerCall,
    max: u32,
    replay: &ReplayKey,
) -> Result<RunnerAnswer, ApiError> {
    let (state, runner, call, replay) =
        (state.clone(), runner.clone(), call.clone(), replay.clone());
    tokio::spawn(async move { pass(&state, &runner, &call, max, &replay).await })
        .await
        .map_err(|e| ApiError::unavailable(format!("runner request aborted: {e}")))?
}

/// How a start is decided before Postgres is asked.
enum StartCheck {
    /// Its lease matches the task's claim: Postgres records it.
    Record(StartRun),
    /// No claim: only the row can tell (a repeat whose claim Redis lost, or a lease
    /// taken back).
    AskRow,
    Refused(ApiError),
}

fn check_start(
    runner: &Runner,
    boot_id: Option<Uuid>,
    task: Uuid,
    lease_id: Uuid,
    claim: Option<&Claim>,
) -> StartCheck {
    let Some(claim) = claim else {
        return StartCheck::AskRow;
    };
    // Claims written before they carried their runner name none; the Postgres
    // compare-and-set still checks the lease.
    let ours = claim.runner.is_none_or(|r| r == runner.id);
    if !ours {
        return StartCheck::Refused(StoreError::NotFound.into());
    }
    if claim.lease_id != lease_id {
        return StartCheck::Refused(stale());
    }
    StartCheck::Record(StartRun {
        task,
        lease_id,
        runner_id: runner.id,
        boot_id: claim.boot.or(boot_id),
        leased_at: at_ms(claim.claimed_at_ms),
    })
}

fn stale() -> ApiError {
    StoreError::Conflict {
        status: baton_core::TaskStatus::Queued,
        reason: "stale lease: the task was leased again",
    }
    .into()
}

fn at_ms(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// One pass: Redis, the group commit, Redis.
async fn pass(
    state: &AppState,
    runner: &Runner,
    call: &RunnerCall,
    max: u32,
    replay: &ReplayKey,
) -> Result<RunnerAnswer, ApiError> {
    let running: &[RunningLease] = call.running.as_deref().unwrap_or_default();
    let mut claims_of: Vec<Uuid> = call.starts.iter().map(|s| s.task).collect();
    claims_of.extend(running.iter().map(|r| r.task_id));
    let pop = lease::pop(
        state,
        runner,
        Pop {
            boot_id: call.boot_id.unwrap_or_default(),
            max,
            replay,
            retry: call.retry,
            claims_of: &claims_of,
        },
    )
    .await;
    let (claims, popped, replayed, redis_error) = match pop {
        Ok(p) => (p.claims, p.popped, p.replayed, None),
        Err(e) => (vec![None; claims_of.len()], Vec::new(), Vec::new(), Some(e)),
    };
    if let Some(e) = redis_error
        .as_ref()
        .filter(|_| !call.has_items() && call.running.is_none())
    {
        return Err(e.clone().into());
    }
    let (start_claims, running_claims) = claims.split_at(call.starts.len());

    let checks: Vec<StartCheck> = call
        .starts
        .iter()
        .zip(start_claims)
        .map(|(start, claim)| match &redis_error {
            Some(e) => StartCheck::Refused(e.clone().into()),
            None => check_start(
                runner,
                call.boot_id,
                start.task,
                start.lease_id,
                claim.as_ref(),
            ),
        })
        .collect();
    let mut work = Work {
        starts: checks
            .iter()
            .filter_map(|c| match c {
                StartCheck::Record(s) => Some(*s),
                _ => None,
            })
            .collect(),
        ..ends_of(runner, call)
    };
    let checked_starts = work.starts.len();
    if call.start_leased {
        // Checked by construction: the script has just claimed each under its lease
        // (or, for a resend, found it still claimed so).
        work.starts.extend(lease::starts_of(
            runner,
            call.boot_id,
            &popped,
            &replayed,
            state.clock.now(),
        ));
    }
    work.reads.extend(popped.iter().map(|p| p.task_id));
    work.reads.extend(replayed.iter().map(|(task, _)| *task));
    // A start's answer carries its task's secrets, from the row it recorded.
    work.reads.extend(
        call.starts
            .iter()
            .zip(&checks)
            .filter_map(|(s, check)| (!matches!(check, StartCheck::Refused(_))).then_some(s.task)),
    );
    work.reads.extend(running.iter().map(|r| r.task_id));
    // Each item joins its own task's trace, where the runner's span for it is.
    let spans: Vec<tracing::Span> = call
        .starts
        .iter()
        .map(|s| item_span("task.start", s.task, s.traceparent.as_deref()))
        .chain(
            call.completions
                .iter()
                .map(|c| item_span("task.complete", c.task, c.traceparent.as_deref())),
        )
        .collect();

    let done = match state.commit.write(work).await {
        Ok(done) => done,
        Err(e) if !call.has_items() => {
            requeue(state, &popped).await;
            return Err(e.into());
        }
        Err(e) => {
            requeue(state, &popped).await;
            return Ok(failed(call, checks, e));
        }
    };
    let Done {
        starts: mut recorded,
        logs,
        finishes,
        reads,
        ..
    } = done;
    // The starts recorded with the lease answer through the rows (`lease::views`).
    recorded.truncate(checked_starts);
    let rows: HashMap<Uuid, TaskRecord> = reads.into_iter().map(|t| (t.id, t)).collect();

    // Claims the commit showed to be stale, and runs that ended: one Redis script.
    let mut dropped: Vec<(TaskRecord, Uuid)> = Vec::new();
    // Starts Postgres refused while the task stays queued: this runner may not take it.
    let mut refused: Vec<Popped> = Vec::new();
    let mut recorded = recorded.into_iter();
    let starts: Vec<Result<StartAnswer, ApiError>> = call
        .starts
        .iter()
        .zip(checks)
        .map(|(start, check)| (start.task, start.lease_id, check))
        .map(|(task, lease_id, check)| match check {
            StartCheck::Record(_) => {
                let answer = recorded.next().expect("one answer per recorded start");
                if answer.is_err()
                    && let Some(row) = rows.get(&task)
                {
                    if row.status == TaskStatus::Queued {
                        refused.push(Popped::of(&queue_entry(row), lease_id));
                    } else {
                        // Cancelled or expired before its start: this lease's claim goes.
                        dropped.push((row.clone(), lease_id));
                    }
                }
                answer.map_err(ApiError::from)
            }
            StartCheck::AskRow => start_from_row(rows.get(&task), runner.id, lease_id),
            StartCheck::Refused(e) => Err(e),
        })
        .zip(&call.starts)
        .map(|(answer, start)| with_secrets(state, answer?, rows.get(&start.task)))
        .collect();
    let (tasks, not_leasable, not_for_this_runner) = lease::views(
        state,
        runner,
        (&popped, &replayed),
        &rows,
        lease::Handing {
            started: call.start_leased,
            secrets_at_start: call.secrets_at_start,
        },
    )
    .await;
    let completions: Vec<Result<TaskRecord, StoreError>> = finishes;
    let mut ended: Vec<(&TaskRecord, Uuid)> = call
        .completions
        .iter()
        .zip(&completions)
        .filter_map(|(c, r)| Some((r.as_ref().ok()?, c.lease_id)))
        .collect();
    let completions: Vec<Result<TaskRecord, StoreError>> = completions.clone();
    ended.extend(dropped.iter().map(|(row, lease)| (row, *lease)));
    ended.extend(not_leasable.iter().map(|(row, lease)| (row, *lease)));
    let mut log_news: Vec<Uuid> = call
        .logs
        .iter()
        .zip(&logs)
        .filter(|(_, r)| r.is_ok())
        .map(|(w, _)| w.task)
        .collect();
    log_news.extend(ended.iter().map(|(row, _)| row.id));
    log_news.sort();
    log_news.dedup();
    AfterCommit::of(&ended, &log_news).spawn(&state.coord);
    refused.extend(not_for_this_runner);
    if !refused.is_empty() {
        tracing::warn!(runner.id = %runner.id, tasks = refused.len(), "postgres refused starts for this runner (deleted, paused, or not matching): back to their queues");
        requeue(state, &refused).await;
    }
    for popped in lease::unread(&popped, &rows) {
        // Its row is gone (deleted): nothing to hand out, and nothing to keep a claim for.
        if let Err(e) = state
            .coord
            .claim_release(popped.task_id, popped.lease_id)
            .await
        {
            tracing::warn!(error = %e, task.id = %popped.task_id, "could not drop a claim on a deleted task; repair will");
        }
    }

    let (logs, completions) = before_start(state, runner, call, logs, completions).await;
    let results = starts
        .iter()
        .map(|r| r.as_ref().map(|_| ()).map_err(|e| e.code.as_str()))
        .chain(
            completions
                .iter()
                .map(|r| r.as_ref().map(|_| ()).map_err(|e| e.code.as_str())),
        );
    for (span, result) in spans.iter().zip(results) {
        span.record("result", result.err().unwrap_or("done"));
    }
    drop(spans);
    let verdicts = if call.running.is_some() && redis_error.is_none() {
        let mut verdicts = verdicts::of(runner, running, &rows, running_claims);
        // A run whose completion this same exchange carries is over, and the runner hears
        // how from the completion's answer: calling its lease gone as well would only tell
        // the runner to stop a task that has stopped.
        verdicts
            .gone
            .retain(|task| !call.completions.iter().any(|c| c.task == *task));
        verdicts
    } else {
        Verdicts::default()
    };
    if let (Some(_), Some(boot)) = (&call.running, call.boot_id) {
        verdicts::end_forgotten_runs(state, runner, boot, running, call.running_as_of).await;
    }
    Ok(RunnerAnswer {
        starts,
        logs,
        completions,
        tasks,
        verdicts,
    })
}

/// Reports of a lease the runner holds but has not started: Postgres does not know the
/// lease yet (the row says `queued`, with no runner) and finds no such task of this
/// runner's; the claim tells it is a report out of order, a conflict like any other.
async fn before_start(
    state: &AppState,
    runner: &Runner,
    call: &RunnerCall,
    logs: Vec<Result<LogAppend, StoreError>>,
    completions: Vec<Result<TaskRecord, StoreError>>,
) -> (
    Vec<Result<LogAppend, ApiError>>,
    Vec<Result<TaskRecord, ApiError>>,
) {
    let unknown: Vec<(Uuid, Uuid)> = call
        .logs
        .iter()
        .zip(&logs)
        .filter(|(_, r)| matches!(r, Err(StoreError::NotFound)))
        .map(|(w, _)| (w.task, w.lease_id))
        .chain(
            call.completions
                .iter()
                .zip(&completions)
                .filter(|(_, r)| matches!(r, Err(StoreError::NotFound)))
                .map(|(c, _)| (c.task, c.lease_id)),
        )
        .collect();
    let mut unstarted: Vec<(Uuid, Uuid)> = Vec::new();
    if !unknown.is_empty() {
        let ids: Vec<Uuid> = unknown.iter().map(|(task, _)| *task).collect();
        if let Ok(claims) = state.coord.claims_get(&ids).await {
            unstarted = unknown
                .into_iter()
                .zip(claims)
                .filter(|((_, lease), claim)| {
                    claim
                        .as_ref()
                        .is_some_and(|c| c.lease_id == *lease && c.runner == Some(runner.id))
                })
                .map(|(pair, _)| pair)
                .collect();
        }
    }
    let out_of_order = |task: Uuid, lease: Uuid, reason: &'static str| {
        unstarted.contains(&(task, lease)).then(|| {
            ApiError::from(StoreError::Conflict {
                status: baton_core::TaskStatus::Leased,
                reason,
            })
        })
    };
    let logs = call
        .logs
        .iter()
        .zip(logs)
        .map(|(w, r)| {
            r.map_err(|e| {
                out_of_order(
                    w.task,
                    w.lease_id,
                    "logs are accepted only while the task runs",
                )
                .unwrap_or_else(|| e.into())
            })
        })
        .collect();
    let completions = call
        .completions
        .iter()
        .zip(completions)
        .map(|(c, r)| {
            r.map_err(|e| {
                out_of_order(c.task, c.lease_id, "the task is not running")
                    .unwrap_or_else(|| e.into())
            })
        })
        .collect();
    (logs, completions)
}

/// The span of one item: under the runner's span for it when it sent one, else under the
/// request's.
fn item_span(name: &'static str, task: Uuid, traceparent: Option<&str>) -> tracing::Span {
    let span = match name {
        "task.start" => {
            tracing::info_span!("task.start", task.id = %task, result = tracing::field::Empty)
        }
        _ => tracing::info_span!("task.complete", task.id = %task, result = tracing::field::Empty),
    };
    baton_client::trace_context::adopt_parent(&span, traceparent);
    span
}

/// A start with no claim to check: the row decides. The same start again under the same
/// lease (Redis lost the claim) took effect; anything else is not the runner's to run.
fn start_from_row(
    row: Option<&TaskRecord>,
    runner: Uuid,
    lease_id: Uuid,
) -> Result<Started, ApiError> {
    let row = row
        .filter(|t| t.runner_id == Some(runner))
        .ok_or(StoreError::NotFound)?;
    if row.lease_id != Some(lease_id) {
        return Err(stale());
    }
    if matches!(
        row.status,
        baton_core::TaskStatus::Running | baton_core::TaskStatus::Cancelling
    ) {
        return Ok(Started {
            status: row.status,
            attempt: row.attempt,
        });
    }
    Err(StoreError::Conflict {
        status: row.status,
        reason: "the task is not in a state that accepts this report",
    }
    .into())
}

/// A recorded start with its task's secrets. One whose secrets this node cannot open
/// (it lacks the key that sealed them) is answered as not the runner's to run: run
/// without them it would do something else than was asked. Its runner drops it unrun,
/// and the run is ended as forgotten (`verdicts::end_forgotten_runs`).
fn with_secrets(
    state: &AppState,
    started: Started,
    row: Option<&TaskRecord>,
) -> Result<StartAnswer, ApiError> {
    let secret_env = match row {
        Some(row) => lease::opened_secrets(state, row).map_err(|e| {
            tracing::error!(task.id = %row.id, error = %e, "start recorded, but its secrets do not open on this node");
            ApiError::new(StatusCode::FORBIDDEN, ErrorCode::SecretsUnavailable, e.to_string())
        })?,
        // Deleted as it started: nothing to run, and nothing to hand over.
        None => BTreeMap::new(),
    };
    Ok(StartAnswer {
        started,
        secret_env,
    })
}

/// Postgres could not take the pass: what was popped goes back to its queue, claim
/// dropped, in one script each (design.md §4.3) — but only what Postgres confirms did not
/// start. An error can come after the commit took effect (the connection lost while the
/// answer was on its way), and a task started under its lease and queued again would run
/// twice. When Postgres cannot even say, the claims stay and the reconciler requeues them
/// at the ack timeout, by the same fenced path.
async fn requeue(state: &AppState, popped: &[Popped]) {
    if popped.is_empty() {
        return;
    }
    let leases: Vec<(Uuid, Uuid)> = popped.iter().map(|p| (p.task_id, p.lease_id)).collect();
    let unstarted = match state
        .store
        .tasks_void_leases(&leases, state.clock.now())
        .await
    {
        Ok(voided) => voided,
        Err(e) => {
            tracing::warn!(error = %e, "could not void leases Postgres may not have recorded; the reconciler will requeue them");
            return;
        }
    };
    let node = state.node_id();
    for p in popped.iter().filter(|p| unstarted.contains(&p.task_id)) {
        if let Err(e) = state.coord.claim_requeue(&node, p).await {
            tracing::warn!(error = %e, task.id = %p.task_id, "could not put a task back; the reconciler will");
        }
    }
}

/// The log chunks and run ends of `call`, as the store writes them.
fn ends_of(runner: &Runner, call: &RunnerCall) -> Work {
    Work {
        logs: call.logs.clone(),
        finishes: call
            .completions
            .iter()
            .map(|c| {
                let fence = Fence {
                    lease_id: c.lease_id,
                    runner_id: Some(runner.id),
                };
                finish_item(c.task, fence, c.end.clone())
            })
            .collect(),
        ..Work::default()
    }
}

/// Postgres could not take the pass: every item is answered with the (retryable) error.
fn failed(call: &RunnerCall, checks: Vec<StartCheck>, error: StoreError) -> RunnerAnswer {
    let error = ApiError::from(error);
    let logs = call.logs.iter().map(|_| Err(error.clone())).collect();
    let completions = call
        .completions
        .iter()
        .map(|_| Err(error.clone()))
        .collect();
    RunnerAnswer {
        starts: checks
            .into_iter()
            .map(|c| match c {
                StartCheck::Refused(e) => Err(e),
                _ => Err(error.clone()),
            })
            .collect(),
        logs,
        completions,
        tasks: Vec::new(),
        verdicts: Verdicts::default(),
    }
}
