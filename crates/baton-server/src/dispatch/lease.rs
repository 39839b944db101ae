//! Leasing: the Redis script that pops and claims, the views handed to the runner, and
//! parking a request until work arrives on any node.
//!
//! A lease is written to Redis only: the claim records the lease id, the runner and its
//! boot, and the task stays `queued` in Postgres until the runner's start is recorded
//! under that lease. If the node dies before answering, the runner's resend (same
//! request id, any node) is answered from the replay record; if no resend comes, the
//! reconciler takes the claim back after `ack_timeout` — the task never started, so it
//! is safe to hand out again.
//!
//! A runner that asks `start_leased` has the start recorded with the lease, in the same
//! group commit that reads the rows, checked against the claim the script just made: it
//! gets its tasks `running`, one round trip sooner. Only those whose start won are
//! handed out; a resend is answered with the tasks the first attempt started.

use super::DispatchError;
use super::Dispatcher;
use crate::auth::Runner;
use crate::queueing::queue_entry;
use crate::secrets::OpenError;
use crate::views::leased_view;
use baton_client::{LeasedTask, trace_context};
use baton_coord::{Claim, ClaimAdopt, CoordError, LeaseAsk, Popped, ReplayKey, Wake};
use baton_core::LeaseId;
use baton_core::TaskStatus;
use baton_core::fault::Fault;
use baton_core::labels::runner_can_take;
use baton_core::queue_order::parse_queue_key;
use baton_store::{StartRun, TaskRecord};
use chrono::{DateTime, TimeZone, Utc};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

/// What a pass asks of the lease script.
pub(crate) struct Pop<'a> {
    pub boot_id: Uuid,
    /// How many tasks to take (0: none).
    pub max: u32,
    pub replay: &'a ReplayKey,
    pub retry: bool,
    /// Tasks whose claims to report.
    pub claims_of: &'a [Uuid],
}

/// What the script found.
pub(crate) struct Popping {
    /// The claims of `claims_of` that exist, by task.
    pub claims: HashMap<Uuid, Claim>,
    pub popped: Vec<Popped>,
    /// For a resend: what its first attempt leased, each still under its claim.
    pub replayed: Vec<(Uuid, LeaseId)>,
}

/// Runs the lease script, when there is anything to ask it.
pub(crate) async fn pop(
    dispatcher: &Dispatcher,
    runner: &Runner,
    ask: Pop<'_>,
) -> Result<Popping, CoordError> {
    if ask.max == 0 && ask.claims_of.is_empty() && !ask.retry {
        return Ok(Popping {
            claims: HashMap::new(),
            popped: Vec::new(),
            replayed: Vec::new(),
        });
    }
    let just_looking = ask.claims_of.is_empty() && !ask.retry;
    let news = dispatcher.wake.queue_news();
    // The memory that the queues are empty says nothing of this request: an unmarked
    // resend of one whose first attempt leased and started tasks (its node died after
    // the commit, or its answer was lost, and a load balancer sent it on) must get them
    // back. The memory may have been written after the queueing's wake-up (another look
    // found the queue already emptied by that first attempt), so only the record itself
    // tells: one read, and the script runs only when there is something to replay.
    if just_looking
        && dispatcher.known_empty.holds(runner, news)
        && !dispatcher.coord.replay_recorded(ask.replay).await?
    {
        return Ok(Popping {
            claims: HashMap::new(),
            popped: Vec::new(),
            replayed: Vec::new(),
        });
    }
    let node = dispatcher.node_id();
    let lease_ids: Vec<LeaseId> = (0..ask.max).map(|_| LeaseId::random()).collect();
    let leased = dispatcher
        .coord
        .lease(&LeaseAsk {
            node: &node,
            runner: runner.id,
            boot_id: ask.boot_id,
            labels: &runner.labels,
            queues: &runner.queues,
            lease_ids: &lease_ids,
            replay: ask.replay,
            // Whenever the script runs, it looks the request up: a load balancer resends
            // an exchange whose node died as it was sent, without the runner's `retry`
            // mark, and what the first attempt leased (and started) must come back. It
            // costs a GET inside the script. An idle poll answered from `KnownEmpty`
            // checks for a record first (above).
            retry: true,
            claims_of: ask.claims_of,
            now_ms: dispatcher.clock.now().timestamp_millis(),
        })
        .await?;
    // A replayed request popped nothing because it took nothing new, not because the
    // queues are empty.
    if just_looking && leased.popped.is_empty() && leased.replayed.is_none() {
        dispatcher.known_empty.found_nothing(runner, news);
    }
    if !leased.popped.is_empty() && dispatcher.config.fault == Some(Fault::AfterPop) {
        tracing::error!(node.id = %node, "fault injection: aborting between the Redis pop and the answer");
        std::process::abort();
    }
    let replayed = match leased.replayed {
        // Only those still claimed under the lease the first attempt handed out (not
        // taken back since); whether they are still unstarted, the rows tell.
        Some(pairs) => {
            let ids: Vec<Uuid> = pairs.iter().map(|(task, _)| *task).collect();
            let claims = dispatcher.coord.claims_by_task(&ids).await?;
            pairs
                .into_iter()
                .filter(|(task, lease)| claims.get(task).is_some_and(|c| c.lease_id == *lease))
                .collect()
        }
        None => Vec::new(),
    };
    // The script answers in the order it was asked: each claim goes with its task here.
    let claims = ask
        .claims_of
        .iter()
        .copied()
        .zip(leased.claims)
        .filter_map(|(task, claim)| Some((task, claim?)))
        .collect();
    Ok(Popping {
        claims,
        popped: leased.popped,
        replayed,
    })
}

/// The starts that `start_leased` records with the lease: the popped tasks, and for a
/// resend what its first attempt leased (a start already recorded under the same lease
/// counts as done).
pub(crate) fn starts_of(
    runner: &Runner,
    boot_id: Option<Uuid>,
    popped: &[Popped],
    replayed: &[(Uuid, LeaseId)],
    now: DateTime<Utc>,
) -> Vec<StartRun> {
    popped
        .iter()
        .map(|p| (p.task_id, p.lease_id))
        .chain(replayed.iter().copied())
        .map(|(task, lease_id)| StartRun {
            task,
            lease_id,
            runner_id: runner.id,
            boot_id,
            leased_at: now,
        })
        .collect()
}

/// What [`views`] found: what to hand out, and what to do with the popped tasks that
/// cannot be.
#[derive(Debug, Default)]
pub(crate) struct Views {
    /// The tasks to hand out.
    pub tasks: Vec<LeasedTask>,
    /// Popped tasks whose rows moved on meanwhile (cancelled, expired): their claims
    /// must go, under the popped lease.
    pub moved_on: Vec<(TaskRecord, LeaseId)>,
    /// With `started`: popped tasks whose start Postgres refused while they stay
    /// `queued` — this runner may not take them (deleted, paused, a paused queue, or a
    /// queue entry it should never have been offered): back to their queue.
    pub refused: Vec<Popped>,
    /// Popped tasks Postgres has dispatched under another lease: Redis lost their run's
    /// claim (a failover) and queued them again. The claim just made becomes the run's,
    /// and keeps the group slot it took (`Coord::claims_adopt`).
    pub claims_lost: Vec<ClaimAdopt>,
}

/// The tasks to hand out: popped ones whose rows are still `queued` (with `started`:
/// now `running` under their lease), and replayed ones not yet started (with `started`:
/// started under their lease); and the popped ones that cannot be, sorted by what to do
/// with them ([`Views`]).
pub(crate) async fn views(
    dispatcher: &Dispatcher,
    runner: &Runner,
    (popped, replayed): (&[Popped], &[(Uuid, LeaseId)]),
    rows: &HashMap<Uuid, TaskRecord>,
    handing: Handing,
) -> Views {
    let started = handing.started;
    let ours = |row: &TaskRecord, lease: LeaseId| {
        if started {
            // A replayed start may have been cancelled since: the runner still gets it,
            // and its cancel with it.
            matches!(row.status, TaskStatus::Running | TaskStatus::Cancelling)
                && row.lease_id == Some(lease)
                && row.runner_id == Some(runner.id)
        } else {
            row.status == TaskStatus::Queued
        }
    };
    let node = dispatcher.node_id();
    let now = dispatcher.clock.now();
    let mut tasks = Vec::with_capacity(popped.len() + replayed.len());
    let mut moved_on = Vec::new();
    let mut refused = Vec::new();
    let mut claims_lost = Vec::new();
    for p in popped {
        let Some(row) = rows.get(&p.task_id) else {
            continue;
        };
        if started && row.status == TaskStatus::Queued {
            // Back to the queue its row says, not the one it was popped from (which a
            // forged entry may have put it in).
            refused.push(Popped::of(&queue_entry(row), p.lease_id));
            continue;
        }
        if row.status.is_dispatched()
            && let Some(lease_id) = row.lease_id.filter(|l| *l != p.lease_id)
        {
            claims_lost.push(ClaimAdopt {
                task: row.id,
                from: p.lease_id,
                lease_id,
                runner: row.runner_id,
                boot: row.boot_id,
            });
            continue;
        }
        if !ours(row, p.lease_id) {
            moved_on.push((row.clone(), p.lease_id));
            continue;
        }
        let Some(secret_env) = handing.secrets(dispatcher, row) else {
            continue;
        };
        crate::metrics::task_leased(row, now);
        // The lease joins the task's trace; the runner's spans hang under it.
        let span = tracing::info_span!("task.lease", task.id = %row.id, runner.id = %runner.id, lease.id = %p.lease_id, node.id = %node);
        trace_context::adopt_parent(&span, row.traceparent.as_deref());
        let _entered = span.enter();
        tracing::debug!(task.id = %row.id, runner.id = %runner.id, lease.id = %p.lease_id, "task leased");
        if started {
            // The start was recorded with the lease: the trace shows it there.
            let _start =
                tracing::info_span!("task.start", task.id = %row.id, result = "done").entered();
        }
        let mut view = leased_view(row.clone(), p.lease_id, started, secret_env);
        if let Some(tp) = trace_context::traceparent_of(&span) {
            view.traceparent = Some(tp);
        }
        tasks.push(view);
    }
    for (task, lease) in replayed {
        if let Some(row) = rows.get(task) {
            let unstarted = row.status == TaskStatus::Queued
                || (row.status == TaskStatus::Leased && row.lease_id == Some(*lease));
            if ((started && ours(row, *lease)) || (!started && unstarted))
                && let Some(secrets) = handing.secrets(dispatcher, row)
            {
                tasks.push(leased_view(row.clone(), *lease, started, secrets));
            }
        }
    }
    Views {
        tasks,
        moved_on,
        refused,
        claims_lost,
    }
}

/// How tasks are handed out: started with the lease or not, and whether the runner
/// takes secrets with its start's answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handing {
    pub started: bool,
    pub secrets_at_start: bool,
}

impl Handing {
    /// The secrets a task goes out with: opened when it goes out started, or to a runner
    /// of an earlier release that takes them with the lease; none for one that takes
    /// them with its start. `None`: it must not go out — this node cannot open them (it
    /// lacks the key that sealed them), and a run without them would do something else
    /// than was asked. A started one is then ended as forgotten
    /// (`verdicts::end_forgotten_runs`); an unstarted one goes back at its ack timeout.
    fn secrets(
        self,
        dispatcher: &Dispatcher,
        row: &TaskRecord,
    ) -> Option<BTreeMap<String, String>> {
        if !self.started && self.secrets_at_start {
            return Some(BTreeMap::new());
        }
        match opened_secrets(dispatcher, row) {
            Ok(secrets) => Some(secrets),
            Err(e) => {
                tracing::error!(task.id = %row.id, error = %e, "task not handed out: its secrets do not open on this node");
                None
            }
        }
    }
}

/// The secrets of a task whose start is recorded, opened for the runner that starts it.
pub(crate) fn opened_secrets(
    dispatcher: &Dispatcher,
    row: &TaskRecord,
) -> Result<BTreeMap<String, String>, OpenError> {
    crate::secrets::open(dispatcher.secrets.as_deref(), row.id, &row.secret_env.0)
}

/// Popped tasks whose rows no longer exist.
pub(crate) fn unread<'a>(
    popped: &'a [Popped],
    rows: &'a HashMap<Uuid, TaskRecord>,
) -> impl Iterator<Item = &'a Popped> {
    popped.iter().filter(|p| !rows.contains_key(&p.task_id))
}

/// Parks until a wake-up that concerns this runner, then tries `lease` again; returns
/// what it leased, or nothing at `deadline` (or when the node drains, or a cancel for one
/// of the runner's tasks wants answering now). A paused runner only waits.
pub(crate) async fn park<F, Fut>(
    dispatcher: &Dispatcher,
    runner: &Runner,
    wakes: &mut Receiver<Wake>,
    deadline: tokio::time::Instant,
    mut lease: F,
) -> Result<Vec<LeasedTask>, DispatchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<LeasedTask>, DispatchError>>,
{
    loop {
        let look_again = tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
            _ = dispatcher.draining.cancelled() => return Ok(Vec::new()),
            wake = wakes.recv() => match wake {
                // A cancel for one of its tasks, or a resume: answer now, with the news.
                Ok(Wake::Runner(id)) if id == runner.id => return Ok(Vec::new()),
                // Deleted, paused or resumed on some node: a deleted runner is told at
                // once, not at the end of its park; the others ask again as they are now.
                Ok(Wake::Revoke(id)) if id == runner.id => {
                    return match dispatcher.store.runners_by_ids(&[id]).await {
                        Ok(rows) if rows.first().is_none_or(|r| r.deleted_at.is_some()) => {
                            Err(DispatchError::RunnerDeleted)
                        }
                        _ => Ok(Vec::new()),
                    };
                }
                Err(RecvError::Closed) => return Ok(Vec::new()),
                _ if runner.paused => false,
                Ok(Wake::Queue(key)) => concerns(runner, &key),
                Ok(Wake::All) | Err(RecvError::Lagged(_)) => true,
                Ok(_) => false,
            },
        };
        if look_again {
            let tasks = lease().await?;
            if !tasks.is_empty() {
                return Ok(tasks);
            }
        }
    }
}

/// Whether work queued under `key` is something this runner could take.
fn concerns(runner: &Runner, key: &str) -> bool {
    match parse_queue_key(key) {
        Some((queue, labels)) => runner_can_take(&runner.labels, &runner.queues, &queue, &labels),
        None => true,
    }
}

/// A task Postgres calls `queued` but a runner holds the lease of, as users see it:
/// `leased` to that runner since the claim was made.
pub(crate) fn as_leased(mut task: TaskRecord, claim: &Claim) -> TaskRecord {
    if task.status == TaskStatus::Queued
        && let Some(runner) = claim.runner
    {
        task.status = TaskStatus::Leased;
        task.runner_id = Some(runner);
        task.leased_at = Utc.timestamp_millis_opt(claim.claimed_at_ms).single();
    }
    task
}

/// What the lease script last found nothing for: a runner's labels and queues, with the
/// news of queued work this node had heard before it looked. Until more news arrives,
/// a runner of the same labels and queues is told "nothing" without running the lease
/// script — an idle runner's poll then costs Redis one read (is this request a resend of
/// one that leased?), however many runners poll. Every add to
/// a queue publishes its wake-up after the entry exists, so news the look could not see
/// is news the node hears after it; and a parked request wakes on that news itself.
/// An entry is trusted for `KNOWN_EMPTY_FOR` at most, in case news was missed.
#[derive(Debug, Default)]
pub(crate) struct KnownEmpty {
    looks: std::sync::Mutex<HashMap<String, (u64, std::time::Instant)>>,
}

const KNOWN_EMPTY_FOR: std::time::Duration = std::time::Duration::from_secs(10);
const KNOWN_EMPTY_MAX: usize = 10_000;

impl KnownEmpty {
    fn key(runner: &Runner) -> String {
        format!(
            "{}|{}",
            runner.labels.as_slice().join(","),
            runner.queues.join(",")
        )
    }

    /// Whether a look for `runner` would find nothing, as of `news`.
    fn holds(&self, runner: &Runner, news: u64) -> bool {
        let looks = self.looks.lock().expect("known-empty lock");
        looks
            .get(&Self::key(runner))
            .is_some_and(|(at, when)| *at == news && when.elapsed() < KNOWN_EMPTY_FOR)
    }

    /// A look that began when the node had heard `news` found nothing for `runner`.
    fn found_nothing(&self, runner: &Runner, news: u64) {
        let mut looks = self.looks.lock().expect("known-empty lock");
        if looks.len() >= KNOWN_EMPTY_MAX {
            looks.clear();
        }
        looks.insert(Self::key(runner), (news, std::time::Instant::now()));
    }
}
