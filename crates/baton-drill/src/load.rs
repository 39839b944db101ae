//! The steady load: a mix of quick, slow, long, failing and retried tasks, some with a
//! completion webhook, some cancelled a moment after their submit, some in a concurrency
//! group or in the queue the drill pauses and resumes, all through the load balancer. Every task records its own execution in a shared file — a start line, a tick
//! while it runs and an end line with its exit code, with nanosecond times — so the checks
//! can see whether one task ever ran twice at once, and whether it ended as it ran.
//!
//! Each submit carries an idempotency key, so one that got no answer (its node died) is
//! simply sent again; a task counts as accepted once some answer was 2xx. Every request
//! the driver sends and the answer it got go to a history file beside the record.

use super::groups::GROUPS;
use super::pauses::PAUSED_QUEUE;
use baton_client::{Client, SubmitTask};
use baton_core::TaskStatus;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A task this drill submitted and the server accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub id: Uuid,
    pub notify: bool,
    /// The status a cancel of it was answered with (`cancelled`, or `cancelling` while it
    /// ran), if the drill cancelled it and a node took the cancel.
    pub cancelled_as: Option<TaskStatus>,
    /// A cancel of it went unanswered (a timeout, a 5xx, a node killed mid-request):
    /// like any write whose answer was lost, it may or may not have taken effect.
    pub cancel_unanswered: bool,
    /// A task of the `cancel` overlap schedule: a later tick of it may cancel it.
    pub cancelled_by_a_tick: bool,
}

/// How the drill's cancel of one task went.
#[derive(Debug, Default)]
struct CancelOutcome {
    answered_as: Option<TaskStatus>,
    unanswered: bool,
}

pub struct Load {
    client: Client,
    executions: PathBuf,
    history: Mutex<std::fs::File>,
    webhook_url: String,
    seed: u64,
    accepted: Mutex<Vec<Accepted>>,
    retries: AtomicU64,
}

/// What to do with a task once it is accepted.
#[derive(Debug, Clone, Copy)]
struct Plan {
    notify: bool,
    /// Cancel it this long after the submit was answered.
    cancel_after: Option<Duration>,
}

/// The work a task does, wrapped so it records — each line naming this execution (the
/// shell's pid), so two executions of one attempt stay apart, and starting with a line
/// break, so a line the ticker left half-written when it was killed ends before the
/// next record — its start, that it is still alive every 200 ms (a run killed — by a fence, a cancel, its agent's death — records no end, and
/// its last tick is when it was last seen running), and its end.
pub(super) fn recorded(executions: &Path, work: &str) -> String {
    let file = executions.display();
    // A runner on a skewed clock passes libfaketime on to its tasks: the record is
    // written on the real clock.
    format!(
        "unset LD_PRELOAD FAKETIME_TIMESTAMP_FILE\n\
         run=$$\n\
         printf '\\nS %s %s %s %s\\n' $BATON_TASK_ID $BATON_ATTEMPT $(date +%s%N) $run >> {file}\n\
         ( while :; do printf '\\nT %s %s %s %s\\n' $BATON_TASK_ID $BATON_ATTEMPT $(date +%s%N) $run >> {file}; sleep 0.2; done ) &\n\
         ticker=$!\n\
         ( {work} )\n\
         rc=$?\n\
         kill $ticker\n\
         printf '\\nE %s %s %s %s %s\\n' $BATON_TASK_ID $BATON_ATTEMPT $(date +%s%N) $run $rc >> {file}\n\
         exit $rc"
    )
}

impl Load {
    pub fn new(
        lb_url: &str,
        executions: &Path,
        history: &Path,
        webhook_url: &str,
        seed: u64,
    ) -> anyhow::Result<Load> {
        Ok(Load {
            client: Client::new(lb_url, Some(super::cluster::API_TOKEN.into()))?,
            executions: executions.to_path_buf(),
            history: Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(history)?,
            ),
            webhook_url: webhook_url.to_string(),
            seed,
            accepted: Mutex::new(Vec::new()),
            retries: AtomicU64::new(0),
        })
    }

    pub fn accepted(&self) -> Vec<Accepted> {
        self.accepted.lock().expect("accepted lock").clone()
    }

    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// One line of the driver's history: what it asked and what it was answered.
    fn note(&self, line: std::fmt::Arguments) {
        use std::io::Write;
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut file = self.history.lock().expect("history lock");
        let _ = writeln!(file, "{at} {line}");
    }

    fn task(&self, rng: &mut StdRng, n: u64) -> (SubmitTask, Plan) {
        let (work, max_attempts) = match rng.random_range(0..25) {
            0..=9 => (":".to_string(), 1),
            10..=14 => (format!("sleep {}", rng.random_range(1..=3)), 1),
            15..=16 => ("echo failing >&2; exit 3".to_string(), 1),
            // Fails its first attempt, succeeds on a retry.
            17..=20 => ("[ \"$BATON_ATTEMPT\" -ge 2 ] || exit 1".to_string(), 3),
            // Outlasts a Postgres outage longer than `runner_lost_after`.
            21 => (format!("sleep {}", rng.random_range(16..=22)), 2),
            _ => (
                format!("sleep {}; echo slow and retried", rng.random_range(1..=2)),
                2,
            ),
        };
        // Where it goes: one of the concurrency groups (short work, so a group of one
        // keeps up), the queue the drill pauses and resumes, or the plain queue.
        let (queue, group, work, max_attempts) = match rng.random_range(0..16) {
            0..=3 => {
                let (key, limit) = GROUPS[rng.random_range(0..GROUPS.len())];
                let work = format!("sleep 0.{}", rng.random_range(2..=9));
                (None, Some((key, limit)), work, rng.random_range(1..=2))
            }
            4..=5 => (Some(PAUSED_QUEUE.to_string()), None, work, max_attempts),
            _ => (None, None, work, max_attempts),
        };
        let notify = rng.random_range(0..5) == 0;
        // Some are cancelled while they wait or run: they must end `cancelled`.
        let cancel_after = (rng.random_range(0..12) == 0)
            .then(|| Duration::from_millis(rng.random_range(100..4000)));
        // One in eight waits for a runner started on demand, in the plain queue.
        let label = if queue.is_none() && group.is_none() && rng.random_range(0..8) == 0 {
            super::cluster::EPHEMERAL
        } else {
            "chaos"
        };
        let task = SubmitTask {
            script: Some(recorded(&self.executions, &work)),
            labels: vec![label.into()],
            queue,
            concurrency_key: group.map(|(key, _)| key.to_string()),
            concurrency_limit: group.map(|(_, limit)| limit),
            max_attempts: Some(max_attempts),
            timeout_s: Some(30),
            idempotency_key: Some(format!("chaos-{}-{n}", self.seed)),
            notify_url: notify.then(|| self.webhook_url.clone()),
            ..Default::default()
        };
        (
            task,
            Plan {
                notify,
                cancel_after,
            },
        )
    }

    /// Submits at `rate` tasks per second until `stop`. Returns problems worth a
    /// violation (a submit the server refused as invalid).
    pub async fn run(
        self: std::sync::Arc<Self>,
        rate: f64,
        stop: CancellationToken,
    ) -> Vec<String> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5eed);
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.01)));
        let mut inflight = tokio::task::JoinSet::new();
        let mut n = 0u64;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            n += 1;
            let (task, plan) = self.task(&mut rng, n);
            let load = self.clone();
            inflight.spawn(async move { load.submit(task, plan).await });
        }
        let mut problems = Vec::new();
        while let Some(done) = inflight.join_next().await {
            if let Ok(Err(problem)) = done {
                problems.push(problem);
            }
        }
        problems
    }

    /// Submits until some node accepts it, or gives up after a minute of failures (the
    /// task then was never accepted, which is no violation); then cancels it if planned.
    async fn submit(&self, task: SubmitTask, plan: Plan) -> Result<(), String> {
        let key = task.idempotency_key.clone().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let id = loop {
            match self.client.submit(&task).await {
                Ok((t, created)) => {
                    self.note(format_args!(
                        "submit {key} -> {} {}",
                        t.id,
                        if created { 201 } else { 200 }
                    ));
                    break t.id;
                }
                Err(e)
                    if e.status()
                        .is_some_and(|s| s.is_client_error() && s.as_u16() != 429) =>
                {
                    self.note(format_args!("submit {key} -> refused: {e}"));
                    return Err(format!("a valid submit was refused: {e}"));
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    self.note(format_args!("submit {key} -> failed: {e}"));
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    self.note(format_args!("submit {key} -> gave up: {e}"));
                    return Ok(());
                }
            }
        };
        let cancel = match plan.cancel_after {
            Some(after) => {
                tokio::time::sleep(after).await;
                self.cancel(id).await
            }
            None => CancelOutcome::default(),
        };
        self.accepted.lock().expect("accepted lock").push(Accepted {
            id,
            notify: plan.notify,
            cancelled_as: cancel.answered_as,
            cancel_unanswered: cancel.unanswered,
            cancelled_by_a_tick: false,
        });
        Ok(())
    }

    /// Cancels until a node answers (for a while): the status it answered with, none if
    /// the task had finished first (409) or no node answered, and whether some try went
    /// unanswered — that try may have cancelled it, and a later one then hears 409.
    async fn cancel(&self, id: Uuid) -> CancelOutcome {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut outcome = CancelOutcome::default();
        loop {
            match self.client.task_cancel(id).await {
                Ok(t) => {
                    self.note(format_args!("cancel {id} -> {}", t.status));
                    outcome.answered_as = Some(t.status);
                    return outcome;
                }
                Err(e) if e.status().is_some_and(|s| s.is_client_error()) => {
                    // 409: it finished before this cancel (or an unanswered one did it).
                    self.note(format_args!("cancel {id} -> refused: {e}"));
                    return outcome;
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    self.note(format_args!("cancel {id} -> failed: {e}"));
                    outcome.unanswered = true;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    self.note(format_args!("cancel {id} -> gave up: {e}"));
                    outcome.unanswered = true;
                    return outcome;
                }
            }
        }
    }
}
