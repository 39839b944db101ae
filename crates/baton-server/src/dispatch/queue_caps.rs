//! Caps on what client-chosen queue names and label sets make Redis hold: at most
//! `max_queues` queue keys and `max_label_sets` label sets with work at once (empty ones
//! leave Redis, so these count what is there now), and, so that one tenant cannot take
//! every place and lock the others out, at most `max_queues_per_owner` and
//! `max_label_sets_per_owner` of them with one token's queued work. A submit that would
//! pass any is refused before anything is written (429).
//!
//! The check asks Redis one pipelined question per submit, unless every queue key it
//! names was seen with work on this node within `KNOWN_FOR`: a busy queue costs nothing
//! more. The cap is a bound, not a fence: submits checked at the same moment on several
//! nodes may all pass before any is queued, and a queue emptied meanwhile may come back
//! unchecked for at most `KNOWN_FOR`; either overshoots by what was in flight, never
//! without bound. When Redis cannot answer, the
//! submit goes ahead: the Postgres insert is what accepts a task, and a cap must not turn
//! a Redis outage into refused work.

use super::DispatchError;
use super::Dispatcher;
use baton_core::LabelSet;
use baton_core::queue_order::queue_key;
use baton_store::NewTask;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const KNOWN_FOR: Duration = Duration::from_secs(10);
const KNOWN_MAX: usize = 10_000;

/// Queue keys this node has recently seen with work.
#[derive(Debug, Default)]
pub(crate) struct KnownQueues {
    seen: Mutex<HashMap<String, Instant>>,
}

impl KnownQueues {
    fn all_known(&self, keys: &[(String, String)]) -> bool {
        let seen = self.seen.lock().expect("known queues lock");
        keys.iter()
            .all(|(rel, _)| seen.get(rel).is_some_and(|at| at.elapsed() < KNOWN_FOR))
    }

    fn remember(&self, keys: &[(String, String)]) {
        let mut seen = self.seen.lock().expect("known queues lock");
        if seen.len() + keys.len() > KNOWN_MAX {
            seen.clear();
        }
        let now = Instant::now();
        for (rel, _) in keys {
            seen.insert(rel.clone(), now);
        }
    }
}

/// Refuses `tasks` when queuing them would pass `max_queues` or `max_label_sets`.
pub(crate) async fn check(dispatcher: &Dispatcher, tasks: &[NewTask]) -> Result<(), DispatchError> {
    let mut keys: Vec<(String, String)> = tasks
        .iter()
        .filter_map(|t| {
            let labels = LabelSet::new(t.labels.clone()).ok()?;
            Some((queue_key(&t.queue, &labels), labels.key_part()))
        })
        .collect();
    keys.sort();
    keys.dedup();
    if dispatcher.known_queues.all_known(&keys) {
        return Ok(());
    }
    let room = match dispatcher.coord.queue_room(&keys).await {
        Ok(room) => room,
        Err(e) => {
            tracing::debug!(error = %e, "queue caps not checked: redis did not answer");
            return Ok(());
        }
    };
    let limits = &dispatcher.config.limits;
    let queues = room.queues as usize + room.new_queues.len();
    if !room.new_queues.is_empty() && queues > limits.max_queues {
        return Err(DispatchError::TooManyQueues(format!(
            "{} queues (queue name and label set) have work, the most there may be \
                 (limits.max_queues); this submit would add {}: submit to an existing \
                 queue, or wait for some to empty",
            room.queues,
            room.new_queues.len()
        )));
    }
    let label_sets = room.label_sets as usize + room.new_label_sets.len();
    if !room.new_label_sets.is_empty() && label_sets > limits.max_label_sets {
        return Err(DispatchError::TooManyLabelSets(format!(
            "{} label sets have work, the most there may be (limits.max_label_sets); \
                 this submit would add {}: use an existing label set, or wait for some \
                 queues to empty",
            room.label_sets,
            room.new_label_sets.len()
        )));
    }
    if !room.new_queues.is_empty() || !room.new_label_sets.is_empty() {
        check_owners(dispatcher, tasks, &room.new_queues, &room.new_label_sets).await?;
    }
    dispatcher.known_queues.remember(&keys);
    Ok(())
}

/// How long the count of an owner's queued keys may read Postgres.
const OWNER_COUNT_LIMIT: Duration = Duration::from_secs(2);

/// Beside the global caps, each owner's: the places this submit would add, with the
/// queue keys and label sets its owner already has queued work in, within
/// `max_queues_per_owner` and `max_label_sets_per_owner`. Asked only when a submit adds
/// places, so a queue in use costs nothing; if Postgres does not answer in time the
/// submit goes ahead, as with Redis above.
async fn check_owners(
    dispatcher: &Dispatcher,
    tasks: &[NewTask],
    new_queues: &[String],
    new_label_sets: &[String],
) -> Result<(), DispatchError> {
    let limits = &dispatcher.config.limits;
    let mut owners: Vec<&str> = tasks.iter().map(|t| t.created_by.as_str()).collect();
    owners.sort_unstable();
    owners.dedup();
    for owner in owners {
        // What of the new places this owner's tasks would take.
        let (mut adds_queues, mut adds_sets) = (HashSet::new(), HashSet::new());
        for task in tasks.iter().filter(|t| t.created_by == owner) {
            let Ok(labels) = LabelSet::new(task.labels.clone()) else {
                continue;
            };
            let rel = queue_key(&task.queue, &labels);
            if new_queues.contains(&rel) {
                adds_queues.insert(rel);
            }
            let part = labels.key_part();
            if new_label_sets.contains(&part) {
                adds_sets.insert(part);
            }
        }
        if adds_queues.is_empty() && adds_sets.is_empty() {
            continue;
        }
        let most = limits
            .max_queues_per_owner
            .max(limits.max_label_sets_per_owner) as i64
            + 1;
        let held = match dispatcher
            .store
            .owner_queued_keys(owner, most, OWNER_COUNT_LIMIT)
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::debug!(error = %e, "per-owner caps not checked: postgres did not answer");
                return Ok(());
            }
        };
        let mut queues = HashSet::new();
        let mut sets = HashSet::new();
        for (queue, labels) in held {
            if let Ok(labels) = LabelSet::new(labels) {
                queues.insert(queue_key(&queue, &labels));
                sets.insert(labels.key_part());
            }
        }
        let queues_after = queues.union(&adds_queues).count();
        if !adds_queues.is_empty() && queues_after > limits.max_queues_per_owner {
            return Err(DispatchError::TooManyQueues(format!(
                "this token has queued work in {} queues (queue name and label set), the \
                     most one token may (limits.max_queues_per_owner); this submit would add \
                     {}: submit to one of them, or wait for some to empty",
                queues.len(),
                adds_queues.len()
            )));
        }
        let sets_after = sets.union(&adds_sets).count();
        if !adds_sets.is_empty() && sets_after > limits.max_label_sets_per_owner {
            return Err(DispatchError::TooManyLabelSets(format!(
                "this token has queued work with {} label sets, the most one token may \
                     (limits.max_label_sets_per_owner); this submit would add {}: use one of \
                     them, or wait for some queues to empty",
                sets.len(),
                adds_sets.len()
            )));
        }
    }
    Ok(())
}
