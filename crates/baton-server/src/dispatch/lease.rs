//! Leasing: the Redis script that pops and claims, the views handed to the runner, and
//! parking a request until work arrives on any node.
//!
//! A lease is written to Redis only: the claim records the lease id, the runner and its
//! boot, and the task stays `queued` in Postgres until the runner's start is recorded
//! under that lease. If the node dies before answering, the runner's resend (same
//! request id, any node) is answered from the replay record; if no resend comes, the
//! reconciler takes the claim back after `ack_timeout` — the task never started, so it
//! is safe to hand out again.

use crate::api::views::leased_view;
use crate::auth::Runner;
use crate::error::ApiError;
use crate::state::AppState;
use baton_client::{LeasedTask, trace_context};
use baton_coord::{Claim, CoordError, LeaseAsk, Popped, ReplayKey, Wake};
use baton_core::TaskStatus;
use baton_core::labels::runner_can_take;
use baton_core::queue::parse_queue_key;
use baton_store::TaskRecord;
use chrono::{TimeZone, Utc};
use std::collections::HashMap;
use std::future::Future;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

/// What a pass asks of the lease script.
pub struct Pop<'a> {
    pub boot_id: Uuid,
    /// How many tasks to take (0: none).
    pub max: u32,
    pub replay: &'a ReplayKey,
    pub retry: bool,
    /// Tasks whose claims to report.
    pub claims_of: &'a [Uuid],
}

/// What the script found.
pub struct Popping {
    pub claims: Vec<Option<Claim>>,
    pub popped: Vec<Popped>,
    /// For a resend: what its first attempt leased, each still under its claim.
    pub replayed: Vec<(Uuid, Uuid)>,
}

/// Runs the lease script, when there is anything to ask it.
pub async fn pop(state: &AppState, runner: &Runner, ask: Pop<'_>) -> Result<Popping, CoordError> {
    if ask.max == 0 && ask.claims_of.is_empty() && !ask.retry {
        return Ok(Popping {
            claims: Vec::new(),
            popped: Vec::new(),
            replayed: Vec::new(),
        });
    }
    let just_looking = ask.claims_of.is_empty() && !ask.retry;
    let news = state.wake.queue_news();
    if just_looking && state.known_empty.holds(runner, news) {
        return Ok(Popping {
            claims: Vec::new(),
            popped: Vec::new(),
            replayed: Vec::new(),
        });
    }
    let node = state.node_id();
    let lease_ids: Vec<Uuid> = (0..ask.max).map(|_| Uuid::new_v4()).collect();
    let leased = state
        .coord
        .lease(&LeaseAsk {
            node: &node,
            runner: runner.id,
            boot_id: ask.boot_id,
            labels: &runner.labels,
            queues: &runner.queues,
            lease_ids: &lease_ids,
            replay: ask.replay,
            retry: ask.retry,
            claims_of: ask.claims_of,
            now_ms: Utc::now().timestamp_millis(),
        })
        .await?;
    if just_looking && leased.popped.is_empty() {
        state.known_empty.found_nothing(runner, news);
    }
    if !leased.popped.is_empty() && state.config.fault.as_deref() == Some("after-pop") {
        tracing::error!(node.id = %node, "fault injection: aborting between the Redis pop and the answer");
        std::process::abort();
    }
    let replayed = match leased.replayed {
        // Only those still claimed under the lease the first attempt handed out (not
        // taken back since); whether they are still unstarted, the rows tell.
        Some(pairs) => {
            let ids: Vec<Uuid> = pairs.iter().map(|(task, _)| *task).collect();
            let claims = state.coord.claims_get(&ids).await?;
            pairs
                .into_iter()
                .zip(claims)
                .filter(|((_, lease), claim)| claim.as_ref().is_some_and(|c| c.lease_id == *lease))
                .map(|(pair, _)| pair)
                .collect()
        }
        None => Vec::new(),
    };
    Ok(Popping {
        claims: leased.claims,
        popped: leased.popped,
        replayed,
    })
}

/// The tasks to hand out: popped ones whose rows are still `queued`, and replayed ones
/// not yet started. Also returns the popped tasks whose rows moved on meanwhile
/// (cancelled, expired): their claims must go, and nothing is handed out for them.
pub async fn views(
    state: &AppState,
    runner: &Runner,
    popped: &[Popped],
    replayed: &[(Uuid, Uuid)],
    rows: &HashMap<Uuid, TaskRecord>,
) -> (Vec<LeasedTask>, Vec<(TaskRecord, Uuid)>) {
    let node = state.node_id();
    let now = Utc::now();
    let mut tasks = Vec::with_capacity(popped.len() + replayed.len());
    let mut moved_on = Vec::new();
    for p in popped {
        let Some(row) = rows.get(&p.task_id) else {
            continue;
        };
        if row.status != TaskStatus::Queued {
            moved_on.push((row.clone(), p.lease_id));
            continue;
        }
        crate::metrics::task_leased(row, now);
        // The lease joins the task's trace; the runner's spans hang under it.
        let span = tracing::info_span!("task.lease", task.id = %row.id, runner.id = %runner.id, lease.id = %p.lease_id, node.id = %node);
        trace_context::adopt_parent(&span, row.traceparent.as_deref());
        let _entered = span.enter();
        tracing::debug!(task.id = %row.id, runner.id = %runner.id, lease.id = %p.lease_id, "task leased");
        let mut view = leased_view(row.clone(), p.lease_id);
        if let Some(tp) = trace_context::traceparent_of(&span) {
            view.traceparent = Some(tp);
        }
        tasks.push(view);
    }
    for (task, lease) in replayed {
        if let Some(row) = rows.get(task) {
            let unstarted = row.status == TaskStatus::Queued
                || (row.status == TaskStatus::Leased && row.lease_id == Some(*lease));
            if unstarted {
                tasks.push(leased_view(row.clone(), *lease));
            }
        }
    }
    (tasks, moved_on)
}

/// Popped tasks whose rows no longer exist.
pub fn unread<'a>(
    popped: &'a [Popped],
    rows: &'a HashMap<Uuid, TaskRecord>,
) -> impl Iterator<Item = &'a Popped> {
    popped.iter().filter(|p| !rows.contains_key(&p.task_id))
}

/// Parks until a wake-up that concerns this runner, then tries `lease` again; returns
/// what it leased, or nothing at `deadline` (or when the node drains, or a cancel for one
/// of the runner's tasks wants answering now). A paused runner only waits.
pub async fn park<F, Fut>(
    state: &AppState,
    runner: &Runner,
    wakes: &mut Receiver<Wake>,
    deadline: tokio::time::Instant,
    mut lease: F,
) -> Result<Vec<LeasedTask>, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<LeasedTask>, ApiError>>,
{
    loop {
        let look_again = tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
            _ = state.draining.cancelled() => return Ok(Vec::new()),
            wake = wakes.recv() => match wake {
                // A cancel for one of its tasks, or a resume: answer now, with the news.
                Ok(Wake::Runner(id)) if id == runner.id => return Ok(Vec::new()),
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
pub fn as_leased(mut task: TaskRecord, claim: &Claim) -> TaskRecord {
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
/// a runner of the same labels and queues is told "nothing" without asking Redis — an
/// idle runner's poll then costs Redis nothing, however many runners poll. Every add to
/// a queue publishes its wake-up after the entry exists, so news the look could not see
/// is news the node hears after it; and a parked request wakes on that news itself.
/// An entry is trusted for `KNOWN_EMPTY_FOR` at most, in case news was missed.
#[derive(Debug, Default)]
pub struct KnownEmpty {
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
