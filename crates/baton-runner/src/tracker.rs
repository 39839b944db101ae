//! The tasks this agent runs, and how recently the server acknowledged it.
//!
//! Every answer from the server (lease or heartbeat) is a proof that it still counts this
//! runner alive. One that has had none for `fence_after` kills its tasks: the server is
//! about to declare it lost and give them to someone else (design.md §4.9), and two runs
//! of one task at once is what we must never allow.

use baton_client::{HeartbeatResponse, RunningLease};
use baton_core::LeaseId;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How the agent tells one executor to stop.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskControl {
    /// A cancel was requested: stop the process and report `cancelled`.
    pub cancel: CancellationToken,
    /// The lease is no longer ours: stop the process and report nothing.
    pub gone: CancellationToken,
    /// Self-fencing: kill at once, no grace — the server is about to give it away.
    pub kill_now: CancellationToken,
    /// The run's end is decided here (its process exited, or this agent's timeout or a
    /// cancel is stopping it): what remains is its report, which heartbeats say is on its
    /// way, so the server waits for it rather than judge the run itself.
    ending: Arc<AtomicBool>,
}

impl TaskControl {
    /// The run's end is decided; its report follows.
    pub(crate) fn report_on_its_way(&self) {
        self.ending.store(true, Ordering::Relaxed);
    }

    fn reporting(&self) -> bool {
        self.ending.load(Ordering::Relaxed)
    }
}

/// The runs this agent holds, by task: a task taken back and handed to this runner again
/// runs under a new lease while its previous attempt may still be dying, and both must
/// stay within reach of a fence or a cancel. Each task's runs are in the order they were
/// leased, the newest last.
type Runs = HashMap<Uuid, Vec<(LeaseId, TaskControl)>>;

#[derive(Debug)]
pub(crate) struct Tracker {
    runs: Mutex<Runs>,
    last_contact: Mutex<Instant>,
    /// When this agent last dropped runs the server may still count as running: killed
    /// at its fence, handed out in an answer that came too late to start them or in one
    /// it will not ask for again, or ended here without their result taken.
    dropped_at: Mutex<Option<Instant>>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            runs: Mutex::new(Runs::new()),
            last_contact: Mutex::new(Instant::now()),
            dropped_at: Mutex::new(None),
        }
    }
}

impl Tracker {
    fn runs(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.runs.lock().expect("tracker lock")
    }

    pub(crate) fn insert(&self, task: Uuid, lease: LeaseId) -> TaskControl {
        let control = TaskControl::default();
        self.runs()
            .entry(task)
            .or_default()
            .push((lease, control.clone()));
        control
    }

    /// Forgets the run of `task` under `lease`; another lease of the same task stays.
    pub(crate) fn remove(&self, task: Uuid, lease: LeaseId) {
        let mut runs = self.runs();
        if let Some(of_task) = runs.get_mut(&task) {
            of_task.retain(|(l, _)| *l != lease);
            if of_task.is_empty() {
                runs.remove(&task);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.runs().values().map(Vec::len).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.runs().is_empty()
    }

    /// What the heartbeat lists: each task under its newest lease (an older one is
    /// superseded — its process is being stopped — and the server knows only the newest).
    pub(crate) fn leases(&self) -> Vec<RunningLease> {
        self.runs()
            .iter()
            .filter_map(|(&task_id, of_task)| {
                let (lease_id, control) = of_task.last()?;
                Some(RunningLease {
                    task_id,
                    lease_id: *lease_id,
                    reporting: control.reporting(),
                })
            })
            .collect()
    }

    /// Idle, with nothing to fence: the clock of contact simply starts over.
    pub(crate) fn contact(&self) {
        self.contact_at(Instant::now());
    }

    /// The server answered a request sent at `sent`: it heard from us no earlier than
    /// that. Counting from the send, not from the answer, keeps this clock behind the
    /// server's presence stamp however long the request was parked, so the runner fences
    /// itself before any node may call it lost. Contact only moves forward.
    pub(crate) fn contact_at(&self, sent: Instant) {
        let mut last = self.last_contact.lock().expect("tracker lock");
        *last = (*last).max(sent);
    }

    pub(crate) fn silent_for(&self) -> Duration {
        self.last_contact.lock().expect("tracker lock").elapsed()
    }

    /// Passes the server's verdicts to the executors concerned: every run of the task
    /// named (a verdict on its newest lease holds for the older ones too).
    pub(crate) fn apply(&self, verdict: &HeartbeatResponse) {
        let runs = self.runs();
        let of = |id: &Uuid| runs.get(id).into_iter().flatten().map(|(_, c)| c);
        for id in &verdict.cancel {
            for control in of(id) {
                tracing::info!(task.id = %id, "cancel requested");
                control.cancel.cancel();
            }
        }
        for id in &verdict.gone {
            for control in of(id) {
                tracing::warn!(task.id = %id, "lease gone: killing the task");
                control.gone.cancel();
            }
        }
    }

    /// Runs the server counts as this runner's were dropped without a report: until the
    /// server has surely ended them as forgotten, the agent lists its runs even while
    /// idle ([`lists_while_idle`](Self::lists_while_idle)).
    pub(crate) fn dropped_runs(&self) {
        *self.dropped_at.lock().expect("tracker lock") = Some(Instant::now());
    }

    /// Whether an idle agent's poll should carry its (empty) list: only within `window`
    /// of a drop, so idle polls otherwise cost the server no Postgres query.
    pub(crate) fn lists_while_idle(&self, window: Duration) -> bool {
        self.dropped_at
            .lock()
            .expect("tracker lock")
            .is_some_and(|at| at.elapsed() <= window)
    }

    /// Kills every run at once without reporting: used when this runner fences itself.
    pub(crate) fn abandon_all(&self) {
        self.dropped_runs();
        for (task, of_task) in self.runs().iter() {
            for (_, control) in of_task {
                tracing::warn!(task.id = %task, "no word from the server: killing the task before it is given away");
                control.kill_now.cancel();
                control.gone.cancel();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contact_counts_from_the_send_and_never_moves_back() {
        let tracker = Tracker::default();
        let parked_since = Instant::now() - Duration::from_secs(30);
        // A poll parked for 30 s comes back: the server heard us 30 s ago, not now.
        *tracker.last_contact.lock().unwrap() = parked_since - Duration::from_secs(5);
        tracker.contact_at(parked_since);
        assert!(tracker.silent_for() >= Duration::from_secs(30));
        // A report sent and answered since; then the old poll's answer lands late.
        tracker.contact();
        tracker.contact_at(parked_since);
        assert!(tracker.silent_for() < Duration::from_secs(30));
    }

    #[test]
    fn verdicts_reach_their_tasks() {
        let tracker = Tracker::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ca = tracker.insert(a, LeaseId::random());
        let cb = tracker.insert(b, LeaseId::random());
        tracker.apply(&HeartbeatResponse {
            cancel: vec![a],
            gone: vec![b, Uuid::new_v4()],
        });
        assert!(ca.cancel.is_cancelled() && !ca.gone.is_cancelled());
        assert!(cb.gone.is_cancelled() && !cb.cancel.is_cancelled());
        assert_eq!(tracker.leases().len(), 2);
        tracker.remove(a, LeaseId::random());
        assert_eq!(
            tracker.leases().len(),
            2,
            "another lease of the task is not removed"
        );
        let lease_a = tracker
            .leases()
            .into_iter()
            .find(|l| l.task_id == a)
            .unwrap()
            .lease_id;
        tracker.remove(a, lease_a);
        assert_eq!(tracker.leases().len(), 1);
        tracker.abandon_all();
        assert!(!ca.gone.is_cancelled(), "a was no longer tracked");
        assert!(cb.gone.is_cancelled());
    }

    #[test]
    fn a_task_leased_again_keeps_its_dying_attempt_within_reach() {
        let tracker = Tracker::default();
        let task = Uuid::new_v4();
        let (old, new) = (LeaseId::random(), LeaseId::random());
        let dying = tracker.insert(task, old);
        let running = tracker.insert(task, new);
        assert_eq!(tracker.len(), 2, "both processes hold a slot");
        assert_eq!(
            tracker.leases(),
            vec![RunningLease {
                task_id: task,
                lease_id: new,
                reporting: false,
            }],
            "the heartbeat names the newest lease"
        );
        tracker.abandon_all();
        assert!(
            dying.kill_now.is_cancelled(),
            "the older attempt is fenced too"
        );
        assert!(running.kill_now.is_cancelled());
        tracker.remove(task, old);
        assert_eq!(tracker.leases()[0].lease_id, new);
    }

    #[test]
    fn an_idle_agent_lists_its_runs_only_for_a_while_after_dropping_some() {
        let tracker = Tracker::default();
        let window = Duration::from_secs(60);
        assert!(!tracker.lists_while_idle(window), "nothing dropped");
        tracker.insert(Uuid::new_v4(), LeaseId::random());
        tracker.abandon_all();
        assert!(
            tracker.lists_while_idle(window),
            "fenced: its runs were dropped"
        );
        *tracker.dropped_at.lock().unwrap() = Some(Instant::now() - 2 * window);
        assert!(!tracker.lists_while_idle(window), "long since");
    }

    #[test]
    fn a_run_whose_end_is_decided_is_listed_as_reporting() {
        let tracker = Tracker::default();
        let control = tracker.insert(Uuid::new_v4(), LeaseId::random());
        assert!(!tracker.leases()[0].reporting, "still running");
        control.report_on_its_way();
        assert!(tracker.leases()[0].reporting);
    }
}
