//! The event stream (docs/events.md): what happened in the cluster — task status
//! changes, runners and nodes joining and leaving, schedules firing — as one history in
//! Redis every node appends to and serves from.
//!
//! Nothing here writes to Postgres: a status change becomes an event in the same breath
//! as its commit (the group commit tells [`EventLog::committed`] before it answers
//! anyone), so a task's events are appended in the order of its transitions — the next
//! one can only start once the caller of the last has its answer. An append that fails
//! (Redis away) loses those events; the next append that succeeds carries a `resync`
//! event first, so a subscriber knows to read the state again rather than trust a
//! history with a hole in it.

pub(crate) mod catch_ups;
pub(crate) mod subscription;
mod tail;

pub(crate) use tail::{Batch, Tail};

use baton_coord::{ClusterClock, Coord, EntryId};
use baton_core::RunnerId;
use baton_core::TaskStatus;
use baton_store::{TaskRecord, Transition};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;
use uuid::Uuid;

/// One thing that happened, as a subscriber receives it (the SSE `data`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Event {
    /// A task's status changed.
    Task {
        task_id: Uuid,
        queue: String,
        status: TaskStatus,
        attempt: i32,
        /// Where this status stands in the task's life: a later state has a larger
        /// step. The history holds a task's events in the order of its transitions,
        /// except when two nodes change one task at the same moment (a cancel racing its
        /// runner's report): a client keeps the event with the largest step.
        step: i64,
        runner_id: Option<RunnerId>,
        /// The node that made the change.
        node_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schedule_id: Option<Uuid>,
        /// The pipeline it is a job of, and the job (docs/pipelines.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pipeline_id: Option<Uuid>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<String>,
        at: DateTime<Utc>,
    },
    /// A runner joined, was lost, paused, resumed or deleted.
    Runner {
        event: RunnerChange,
        runner_id: RunnerId,
        node_id: String,
        /// For a runner started on demand, as it joins and leaves (is deleted): the
        /// provisioner that started it and its backend (docs/dynamic-runners.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provisioner: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backend: Option<String>,
        at: DateTime<Utc>,
    },
    /// A node joined, left (drained), or was found lost by the node that adopted its
    /// claims.
    Node {
        event: NodeChange,
        node_id: String,
        /// For `lost`: the node that took its claims over.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        adopted_by: Option<String>,
        /// For `lost`: how many claims moved.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claims: Option<usize>,
        at: DateTime<Utc>,
    },
    /// A schedule fired, making a task.
    Schedule {
        schedule_id: Uuid,
        task_id: Uuid,
        queue: String,
        at: DateTime<Utc>,
    },
    /// The history has a hole here (or the position asked for is no longer held): read
    /// the state again from the API rather than trusting what was received.
    Resync { reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunnerChange {
    Joined,
    /// Its tasks were taken from it because nobody heard from it (told once per runner
    /// within [`RUNNER_LOST_TOLD_FOR`], by the node whose reconciler acted first).
    Lost,
    Paused,
    Resumed,
    Deleted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NodeChange {
    Joined,
    Left,
    Lost,
}

/// The kinds a subscriber may filter on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Task,
    Runner,
    Node,
    Schedule,
}

impl Kind {
    pub(crate) const NAMES: [&'static str; 4] = ["task", "runner", "node", "schedule"];

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        match s {
            "task" => Some(Kind::Task),
            "runner" => Some(Kind::Runner),
            "node" => Some(Kind::Node),
            "schedule" => Some(Kind::Schedule),
            _ => None,
        }
    }
}

impl Event {
    /// The SSE `event` name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Event::Task { .. } => "task",
            Event::Runner { .. } => "runner",
            Event::Node { .. } => "node",
            Event::Schedule { .. } => "schedule",
            Event::Resync { .. } => "resync",
        }
    }

    /// `None` for `resync`, which every subscriber gets.
    pub(crate) fn kind(&self) -> Option<Kind> {
        match self {
            Event::Task { .. } => Some(Kind::Task),
            Event::Runner { .. } => Some(Kind::Runner),
            Event::Node { .. } => Some(Kind::Node),
            Event::Schedule { .. } => Some(Kind::Schedule),
            Event::Resync { .. } => None,
        }
    }
}

/// An event as the history holds it: with the token that submitted its task, which
/// decides who may see it and is never sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stored {
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(flatten)]
    pub event: Event,
}

impl Stored {
    fn public(event: Event) -> Stored {
        Stored { owner: None, event }
    }
}

/// A runner found lost is told so once in this long, however many of its tasks the
/// nodes' reconcilers take back.
pub(crate) const RUNNER_LOST_TOLD_FOR: Duration = Duration::from_secs(600);

/// After an append failed, appends are not tried again for this long: a Redis that is
/// away would otherwise hold up every commit for a timeout.
const BACKOFF_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// One append may take this long before its events are given up (and a `resync` owed).
const APPEND_TIMEOUT: Duration = Duration::from_millis(500);

/// The node's writer and reader of the history. Cheap to clone.
#[derive(Clone)]
pub(crate) struct EventLog {
    inner: Arc<Inner>,
}

struct Inner {
    coord: Coord,
    clock: Arc<ClusterClock>,
    node_id: String,
    retention: Duration,
    /// Events were lost since the last append that worked: the next carries `resync`.
    lost: AtomicBool,
    /// A task is appending the owed `resync` on its own, for a node that goes quiet.
    repairing: AtomicBool,
    failed_at_ms: AtomicI64,
    tail: Tail,
}

impl EventLog {
    pub(crate) fn new(
        coord: Coord,
        clock: Arc<ClusterClock>,
        node_id: String,
        retention: Duration,
    ) -> EventLog {
        EventLog {
            inner: Arc::new(Inner {
                tail: Tail::new(coord.clone()),
                coord,
                clock,
                node_id,
                retention,
                lost: AtomicBool::new(false),
                repairing: AtomicBool::new(false),
                failed_at_ms: AtomicI64::new(0),
            }),
        }
    }

    pub(crate) fn coord(&self) -> &Coord {
        &self.inner.coord
    }

    pub(crate) fn tail(&self) -> &Tail {
        &self.inner.tail
    }

    /// How long the history is held.
    pub(crate) fn retention(&self) -> Duration {
        self.inner.retention
    }

    fn now(&self) -> DateTime<Utc> {
        self.inner.clock.now()
    }

    /// The event of each transition, as made by this node now.
    pub(crate) fn of_transitions(&self, transitions: &[Transition]) -> Vec<Stored> {
        let at = self.now();
        transitions
            .iter()
            .map(|t| Stored {
                owner: Some(t.created_by.clone()),
                event: Event::Task {
                    task_id: t.task,
                    queue: t.queue.clone(),
                    status: t.status,
                    attempt: t.attempt,
                    step: step(t.status, t.attempt),
                    runner_id: t.runner_id,
                    node_id: self.inner.node_id.clone(),
                    schedule_id: t.schedule_id,
                    pipeline_id: t.pipeline_id,
                    job: t.job.clone(),
                    at,
                },
            })
            .collect()
    }

    /// Appends the changes that left `rows` as they are.
    pub(crate) async fn tasks(&self, rows: &[&TaskRecord]) {
        let transitions: Vec<Transition> = rows.iter().map(|r| Transition::of(r)).collect();
        self.append(self.of_transitions(&transitions)).await;
    }

    /// For the group commit: appends a committed batch's changes.
    pub(crate) async fn committed(&self, transitions: Vec<Transition>) {
        self.append(self.of_transitions(&transitions)).await;
    }

    pub(crate) async fn runner(&self, change: RunnerChange, runner_id: RunnerId) {
        self.runner_provisioned(change, runner_id, None).await;
    }

    /// A runner's change, with the provisioner (and its backend) that started it.
    pub(crate) async fn runner_provisioned(
        &self,
        change: RunnerChange,
        runner_id: RunnerId,
        by: Option<(String, String)>,
    ) {
        let (provisioner, backend) = by.unzip();
        let event = Event::Runner {
            event: change,
            runner_id,
            node_id: self.inner.node_id.clone(),
            provisioner,
            backend,
            at: self.now(),
        };
        self.append(vec![Stored::public(event)]).await;
    }

    pub(crate) async fn node(
        &self,
        change: NodeChange,
        node_id: &str,
        adopted: Option<(String, usize)>,
    ) {
        let (adopted_by, claims) = adopted.unzip();
        let event = Event::Node {
            event: change,
            node_id: node_id.to_string(),
            adopted_by,
            claims,
            at: self.now(),
        };
        self.append(vec![Stored::public(event)]).await;
    }

    /// A schedule's fire and the task it made, as one entry (the fire first).
    pub(crate) async fn schedule_fired(&self, schedule_id: Uuid, task: &TaskRecord) {
        let fired = Stored {
            owner: Some(task.created_by.clone()),
            event: Event::Schedule {
                schedule_id,
                task_id: task.id,
                queue: task.queue.clone(),
                at: self.now(),
            },
        };
        let mut events = vec![fired];
        events.extend(self.of_transitions(&[Transition::of(task)]));
        self.append(events).await;
    }

    /// Appends `events` as one entry. Never fails the caller: the change it reports has
    /// happened; a lost append is owed as a `resync` in the next one.
    pub(crate) async fn append(&self, mut events: Vec<Stored>) {
        let inner = &self.inner;
        if events.is_empty() && !inner.lost.load(Ordering::Acquire) {
            return;
        }
        let now_ms = inner.clock.now_ms();
        if inner.lost.load(Ordering::Acquire)
            && now_ms - inner.failed_at_ms.load(Ordering::Relaxed)
                < BACKOFF_AFTER_FAILURE.as_millis() as i64
        {
            return;
        }
        let owed = inner.lost.swap(false, Ordering::AcqRel);
        if owed {
            events.insert(
                0,
                Stored::public(Event::Resync {
                    reason: "events were lost while Redis could not be written".into(),
                }),
            );
        }
        let json = serde_json::to_string(&events).expect("events serialize");
        let appended = tokio::time::timeout(
            APPEND_TIMEOUT,
            inner
                .coord
                .history_append(&json, inner.retention, now_ms.max(0) as u64),
        )
        .await;
        let error = match appended {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_string(),
        };
        tracing::warn!(
            error,
            events = events.len(),
            "events not appended to the history; subscribers will be told to resync"
        );
        inner.failed_at_ms.store(now_ms, Ordering::Relaxed);
        inner.lost.store(true, Ordering::Release);
        self.repair_later();
    }

    /// Appends the owed `resync` once Redis takes it, even if this node has nothing
    /// else to append by then.
    fn repair_later(&self) {
        if self.inner.repairing.swap(true, Ordering::AcqRel) {
            return;
        }
        let log = self.clone();
        tokio::spawn(async move {
            while log.inner.lost.load(Ordering::Acquire) {
                tokio::time::sleep(BACKOFF_AFTER_FAILURE).await;
                log.append(Vec::new()).await;
            }
            log.inner.repairing.store(false, Ordering::Release);
        });
    }
}

/// A task's states in the order its life passes through them. Waiting (`scheduled`,
/// `queued`, `leased`) belongs to the attempt to come — the row's `attempt` counts starts
/// — running and cancelling to the attempt under way, and an end comes after all of it.
pub(crate) fn step(status: TaskStatus, attempt: i32) -> i64 {
    let attempt = i64::from(attempt.max(0));
    let (phase, rank) = match status {
        TaskStatus::Waiting | TaskStatus::Scheduled => (attempt + 1, 0),
        TaskStatus::Queued => (attempt + 1, 1),
        TaskStatus::Leased => (attempt + 1, 2),
        TaskStatus::Running => (attempt, 3),
        TaskStatus::Cancelling => (attempt, 4),
        _ => (attempt + 1, 5),
    };
    phase * 8 + rank
}

/// Where a subscriber stands: after event `index` of entry `entry` (`index: None`:
/// after the whole entry). The SSE id is `<entry>:<index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    pub entry: EntryId,
    pub index: Option<usize>,
}

impl Position {
    pub(crate) fn after_entry(entry: EntryId) -> Position {
        Position { entry, index: None }
    }

    pub(crate) fn id(entry: EntryId, index: usize) -> String {
        format!("{entry}:{index}")
    }

    /// This position as an SSE id: `<entry>:<index>`, or `<entry>` after a whole entry.
    pub(crate) fn to_id(self) -> String {
        match self.index {
            Some(index) => Position::id(self.entry, index),
            None => self.entry.to_string(),
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Position> {
        let s = s.trim();
        match s.split_once(':') {
            Some((entry, index)) => Some(Position {
                entry: entry.parse().ok()?,
                index: Some(index.parse().ok()?),
            }),
            None => Some(Position::after_entry(s.parse().ok()?)),
        }
    }

    /// Whether event `index` of `entry` comes after this position.
    pub(crate) fn before(&self, entry: EntryId, index: usize) -> bool {
        entry > self.entry || (entry == self.entry && self.index.is_some_and(|i| index > i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_events_keep_the_owner_apart_from_what_is_sent() {
        let stored = Stored {
            owner: Some("tok".into()),
            event: Event::Resync { reason: "x".into() },
        };
        let json = serde_json::to_string(&stored).unwrap();
        assert_eq!(json, r#"{"o":"tok","kind":"resync","reason":"x"}"#);
        let back: Stored = serde_json::from_str(&json).unwrap();
        assert_eq!(back, stored);
        assert_eq!(
            serde_json::to_string(&back.event).unwrap(),
            r#"{"kind":"resync","reason":"x"}"#
        );
    }

    #[test]
    fn steps_follow_a_task_through_retries_and_cancels() {
        use TaskStatus::*;
        // queued, run 1 fails and retries, run 2 is cancelled.
        let life = [
            (Queued, 0),
            (Running, 1),
            (Scheduled, 1),
            (Queued, 1),
            (Running, 2),
            (Cancelling, 2),
            (Cancelled, 2),
        ];
        let steps: Vec<i64> = life.iter().map(|&(s, a)| step(s, a)).collect();
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
        // Ended before it ever started: still after its waiting.
        assert!(step(Expired, 0) > step(Queued, 0));
        assert!(step(Cancelled, 0) > step(Scheduled, 0));
        assert!(step(Succeeded, 1) > step(Running, 1));
    }

    #[test]
    fn positions_round_trip_and_order() {
        let p = Position::parse("17-2:3").unwrap();
        let e: EntryId = "17-2".parse().unwrap();
        assert_eq!(Position::id(e, 3), "17-2:3");
        assert!(!p.before(e, 3));
        assert!(p.before(e, 4));
        assert!(p.before("17-3".parse().unwrap(), 0));
        assert!(!p.before("17-1".parse().unwrap(), 9));
        assert!(!Position::after_entry(e).before(e, 9));
        assert_eq!(Position::parse("17-2"), Some(Position::after_entry(e)));
        assert_eq!(Position::after_entry(e).to_id(), "17-2");
        assert_eq!(p.to_id(), "17-2:3");
        assert!(Position::parse("x:1").is_none());
        assert!(Position::parse("17-2:x").is_none());
    }
}
