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

mod faults;
mod pass;
mod starts;

pub(crate) use starts::StartAnswer;

use super::DispatchError;
use super::Dispatcher;
use super::lease;
use super::verdicts::{self, Verdicts};
use crate::auth::Runner;
use baton_client::{LeasedTask, RunningLease};
use baton_coord::ReplayKey;
use baton_core::LeaseId;
use baton_store::{LogAppend, LogWrite, RunEnd, TaskRecord};
use chrono::{DateTime, Utc};
use pass::pass;
use std::collections::HashMap;
use std::time::Duration;
use uuid::Uuid;

/// What an item of a runner's call is answered by: its task and the lease the runner
/// holds it under. Items and their answers are matched by it, never by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ItemKey {
    pub task: Uuid,
    pub lease: LeaseId,
}

/// A log chunk's key: its run's, and where the chunk starts in the run's output.
pub(crate) type ChunkKey = (ItemKey, i64);

/// The key of a log chunk a runner sends.
pub(crate) fn chunk_key(chunk: &LogWrite) -> ChunkKey {
    (
        ItemKey {
            task: chunk.task,
            lease: chunk.lease_id,
        },
        chunk.offset,
    )
}

/// A lease a runner acknowledges.
#[derive(Debug, Clone)]
pub(crate) struct Start {
    pub task: Uuid,
    pub lease_id: LeaseId,
    /// The runner's span for it, which the node's `task.start` span continues.
    pub traceparent: Option<String>,
}

/// A run's end as a runner reports it.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    pub task: Uuid,
    pub lease_id: LeaseId,
    pub end: RunEnd,
    /// The runner's span for it, which the node's `task.complete` span continues.
    pub traceparent: Option<String>,
}

/// Everything one runner request says and asks.
#[derive(Debug, Clone)]
pub(crate) struct RunnerCall {
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

impl Start {
    pub(crate) fn key(&self) -> ItemKey {
        ItemKey {
            task: self.task,
            lease: self.lease_id,
        }
    }
}

impl Completion {
    pub(crate) fn key(&self) -> ItemKey {
        ItemKey {
            task: self.task,
            lease: self.lease_id,
        }
    }
}

/// One item of a runner's call.
pub(crate) enum Item {
    Start(Start),
    Log(LogWrite),
    Completion(Completion),
}

impl From<Start> for Item {
    fn from(start: Start) -> Item {
        Item::Start(start)
    }
}

impl From<LogWrite> for Item {
    fn from(chunk: LogWrite) -> Item {
        Item::Log(chunk)
    }
}

impl From<Completion> for Item {
    fn from(completion: Completion) -> Item {
        Item::Completion(completion)
    }
}

impl RunnerCall {
    /// A call with nothing in it, as the single-item endpoints start theirs: they say
    /// nothing of the agent's boot, so they are no heartbeat.
    pub(crate) fn empty() -> RunnerCall {
        RunnerCall {
            request_id: Uuid::new_v4(),
            retry: false,
            boot_id: None,
            starts: Vec::new(),
            logs: Vec::new(),
            completions: Vec::new(),
            running: None,
            running_as_of: None,
            max: 0,
            wait: Duration::ZERO,
            start_leased: false,
            secrets_at_start: true,
        }
    }

    /// A call carrying one item, as the single-item endpoints make it.
    pub(crate) fn one(item: impl Into<Item>) -> RunnerCall {
        let mut call = RunnerCall::empty();
        match item.into() {
            Item::Start(start) => call.starts.push(start),
            Item::Log(chunk) => call.logs.push(chunk),
            Item::Completion(completion) => call.completions.push(completion),
        }
        call
    }

    fn has_items(&self) -> bool {
        !(self.starts.is_empty() && self.logs.is_empty() && self.completions.is_empty())
    }
}

/// Each item's answer, by its key, and the new tasks.
#[derive(Debug, Default)]
pub(crate) struct RunnerAnswer {
    pub starts: HashMap<ItemKey, Result<StartAnswer, DispatchError>>,
    pub logs: HashMap<ChunkKey, Result<LogAppend, DispatchError>>,
    pub completions: HashMap<ItemKey, Result<TaskRecord, DispatchError>>,
    pub tasks: Vec<LeasedTask>,
    pub verdicts: Verdicts,
    /// How long after the request arrived the pass that leased `tasks` began: a parked
    /// request's tasks are started only when work came. The runner counts a started
    /// task's time from its send plus this, never later than the server's clock began.
    pub leased_after: Duration,
}

impl RunnerAnswer {
    /// The answer to the start of `key`.
    pub(crate) fn start(&self, key: ItemKey) -> Result<StartAnswer, DispatchError> {
        answer_of(&self.starts, &key)
    }

    /// The answer to the log chunk of `key`.
    pub(crate) fn log(&self, key: ChunkKey) -> Result<LogAppend, DispatchError> {
        answer_of(&self.logs, &key)
    }

    /// The answer to the completion of `key`.
    pub(crate) fn completion(&self, key: ItemKey) -> Result<TaskRecord, DispatchError> {
        answer_of(&self.completions, &key)
    }
}

/// An item's answer. Every item of a call is answered; one that were not would be a bug
/// here, and is answered as a retry rather than failing the whole request.
fn answer_of<K: Eq + std::hash::Hash, T: Clone>(
    answers: &HashMap<K, Result<T, DispatchError>>,
    key: &K,
) -> Result<T, DispatchError> {
    answers.get(key).cloned().unwrap_or_else(|| {
        tracing::error!("an item of a runner's call got no answer");
        Err(DispatchError::unavailable(
            "this item got no answer; send it again",
        ))
    })
}

/// Handles one runner request: its items at once, then — if it carried none and there is
/// no work — parks up to `call.wait` for work queued on any node.
pub(crate) async fn handle(
    dispatcher: &Dispatcher,
    runner: &Runner,
    call: RunnerCall,
) -> Result<RunnerAnswer, DispatchError> {
    let now_ms = dispatcher.clock.now().timestamp_millis();
    // Presence: every request that names its boot is a proof of life (written to Redis
    // in batches).
    let heard = call.boot_id.is_some();
    if let Some(boot) = call.boot_id {
        dispatcher.presence.record(runner.id, boot, now_ms);
    }
    faults::refuse_resend(dispatcher, call.retry).map_err(|e| vouched(dispatcher, e, heard))?;
    faults::hold_results(dispatcher, !call.completions.is_empty()).await;
    faults::hold_logs(dispatcher, !call.logs.is_empty()).await;
    // Only the arrival proves the runner alive: a parked request's answer may go to a
    // runner that died or was cut off meanwhile.
    let answered = answer(dispatcher, runner, call)
        .await
        .map_err(|e| vouched(dispatcher, e, heard))?;
    faults::hold_answer(dispatcher, &answered.tasks).await;
    Ok(answered)
}

/// Whether presence this node hears now reaches every node: its liveness holds and its
/// last presence write landed. Said in every exchange answer and outage refusal.
pub(crate) fn vouches(dispatcher: &Dispatcher) -> bool {
    dispatcher.identity.is_live() && dispatcher.presence.reaching_redis()
}

/// A refusal over an outage says whether this request still counts as the runner's proof
/// of life on every node: only if it was heard and this node [`vouches`].
fn vouched(dispatcher: &Dispatcher, mut e: DispatchError, heard: bool) -> DispatchError {
    if let DispatchError::Unavailable {
        presence_recorded, ..
    } = &mut e
    {
        *presence_recorded = Some(heard && vouches(dispatcher));
    }
    e
}

async fn answer(
    dispatcher: &Dispatcher,
    runner: &Runner,
    call: RunnerCall,
) -> Result<RunnerAnswer, DispatchError> {
    let received = tokio::time::Instant::now();
    let draining = dispatcher.draining.is_cancelled();
    let has_items = call.has_items();
    if draining && !has_items {
        // Nothing new is claimed by a node about to leave. A 503: a load balancer sends
        // the request to another node (it is replayable by its request id), a runner
        // talking to this node directly backs off and asks again.
        return Err(DispatchError::unavailable(
            "node is draining; ask another node",
        ));
    }
    let mut max = if runner.paused || draining {
        0
    } else {
        call.max
    };
    if max > 0 && !dispatcher.identity.is_live() {
        // Our liveness lapsed: claims taken now could be adopted from under us.
        if !has_items {
            return Err(DispatchError::unavailable(
                "this node is rejoining the cluster",
            ));
        }
        max = 0;
    }
    let replay = dispatcher.coord.replay_key(
        runner.id,
        call.request_id,
        dispatcher.config.replay_ttl().as_millis() as u64,
    );
    let may_park = !has_items && !call.wait.is_zero();
    // Subscribe before the first look: a task queued between the look and the park
    // leaves its wake-up in this receiver.
    let parked = if may_park {
        let limit = dispatcher.config.limits.max_parked_per_runner;
        // Each parked request holds a receiver: one runner opening them without end
        // would hold the node's memory.
        let place = dispatcher.parks.take(runner.id, limit).ok_or_else(|| {
            DispatchError::TooManyParked(format!(
                "this runner already has {limit} lease requests waiting on this node \
                 (max_parked_per_runner); wait for an answer before asking again"
            ))
        })?;
        Some((dispatcher.wake.park(), place))
    } else {
        None
    };
    let first = spawn_pass(dispatcher, runner, &call, max, &replay).await?;
    if !first.tasks.is_empty() || !may_park {
        return Ok(first);
    }
    let (mut parked, _place) = parked.expect("subscribed when it may park");
    let deadline = tokio::time::Instant::now() + call.wait;
    // When the latest look began, in µs after the request arrived.
    let looked = std::sync::atomic::AtomicU64::new(0);
    let tasks = lease::park(dispatcher, runner, &mut parked.wakes, deadline, || {
        let since_received = received.elapsed().as_micros() as u64;
        looked.store(since_received, std::sync::atomic::Ordering::Relaxed);
        async {
            let lease_only = RunnerCall {
                starts: Vec::new(),
                logs: Vec::new(),
                completions: Vec::new(),
                running: None,
                retry: false,
                ..call.clone()
            };
            spawn_pass(dispatcher, runner, &lease_only, max, &replay)
                .await
                .map(|a| a.tasks)
        }
    })
    .await?;
    // The verdicts answer as of now, not as of before the park.
    let verdicts = match &call.running {
        Some(running) => verdicts::now(dispatcher, runner, running).await?,
        None => Verdicts::default(),
    };
    Ok(RunnerAnswer {
        tasks,
        verdicts,
        leased_after: Duration::from_micros(looked.into_inner()),
        ..first
    })
}

async fn spawn_pass(
    dispatcher: &Dispatcher,
    runner: &Runner,
    call: &RunnerCall,
    max: u32,
    replay: &ReplayKey,
) -> Result<RunnerAnswer, DispatchError> {
    let (dispatcher, runner, call, replay) = (
        dispatcher.clone(),
        runner.clone(),
        call.clone(),
        replay.clone(),
    );
    tokio::spawn(async move { pass(&dispatcher, &runner, &call, max, &replay).await })
        .await
        .map_err(|e| DispatchError::unavailable(format!("runner request aborted: {e}")))?
}
