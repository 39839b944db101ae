//! The tasks this agent runs, and how recently the server acknowledged it.
//!
//! Every answer from the server (lease or heartbeat) is a proof that it still counts this
//! runner alive. One that has had none for `fence_after` kills its tasks: the server is
//! about to declare it lost and give them to someone else (design.md §4.9), and two runs
//! of one task at once is what we must never allow.

use baton_client::{HeartbeatResponse, RunningLease};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How the agent tells one executor to stop.
#[derive(Debug, Clone, Default)]
pub struct TaskControl {
    /// A cancel was requested: stop the process and report `cancelled`.
    pub cancel: CancellationToken,
    /// The lease is no longer ours: stop the process and report nothing.
    pub gone: CancellationToken,
    /// Self-fencing: kill at once, no grace — the server is about to give it away.
    pub kill_now: CancellationToken,
}

#[derive(Debug)]
pub struct Tracker {
    tasks: Mutex<HashMap<Uuid, (Uuid, TaskControl)>>,
    last_contact: Mutex<Instant>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            tasks: Mutex::new(HashMap::new()),
            last_contact: Mutex::new(Instant::now()),
        }
    }
}

impl Tracker {
    pub fn insert(&self, task: Uuid, lease: Uuid) -> TaskControl {
        let control = TaskControl::default();
        self.tasks
            .lock()
            .expect("tracker lock")
            .insert(task, (lease, control.clone()));
        control
    }

    /// Forgets `task` if it is still tracked under `lease`: a newer lease of the same task
    /// (it was taken back and handed to us again) stays.
    pub fn remove(&self, task: Uuid, lease: Uuid) {
        let mut tasks = self.tasks.lock().expect("tracker lock");
        if tasks.get(&task).is_some_and(|(l, _)| *l == lease) {
            tasks.remove(&task);
        }
    }

    pub fn len(&self) -> usize {
        self.tasks.lock().expect("tracker lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.lock().expect("tracker lock").is_empty()
    }

    pub fn leases(&self) -> Vec<RunningLease> {
        self.tasks
            .lock()
            .expect("tracker lock")
            .iter()
            .map(|(&task_id, (lease_id, _))| RunningLease {
                task_id,
                lease_id: *lease_id,
            })
            .collect()
    }

    /// The server answered: it still knows us.
    pub fn contact(&self) {
        *self.last_contact.lock().expect("tracker lock") = Instant::now();
    }

    pub fn silent_for(&self) -> Duration {
        self.last_contact.lock().expect("tracker lock").elapsed()
    }

    /// Passes the server's verdicts to the executors concerned.
    pub fn apply(&self, verdict: &HeartbeatResponse) {
        let tasks = self.tasks.lock().expect("tracker lock");
        for id in &verdict.cancel {
            if let Some((_, control)) = tasks.get(id) {
                tracing::info!(task.id = %id, "cancel requested");
                control.cancel.cancel();
            }
        }
        for id in &verdict.gone {
            if let Some((_, control)) = tasks.get(id) {
                tracing::warn!(task.id = %id, "lease gone: stopping the task");
                control.gone.cancel();
            }
        }
    }

    /// Kills every task at once without reporting: used when this runner fences itself.
    pub fn abandon_all(&self) {
        for (id, (_, control)) in self.tasks.lock().expect("tracker lock").iter() {
            tracing::warn!(task.id = %id, "no word from the server: killing the task before it is given away");
            control.kill_now.cancel();
            control.gone.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_reach_their_tasks() {
        let tracker = Tracker::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let ca = tracker.insert(a, Uuid::new_v4());
        let cb = tracker.insert(b, Uuid::new_v4());
        tracker.apply(&HeartbeatResponse {
            cancel: vec![a],
            gone: vec![b, Uuid::new_v4()],
        });
        assert!(ca.cancel.is_cancelled() && !ca.gone.is_cancelled());
        assert!(cb.gone.is_cancelled() && !cb.cancel.is_cancelled());
        assert_eq!(tracker.leases().len(), 2);
        tracker.remove(a, Uuid::new_v4());
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
}
