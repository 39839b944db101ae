//! Queue defaults (docs/flow-control.md, "Queue defaults"): what a task submitted to a
//! queue takes for the retry policy, attempts and concurrency group it leaves out.
//!
//! They are applied at submit and stored with the task, as the rest of its definition
//! is: a change reaches the tasks submitted after it, never one already accepted, so a
//! task's view always shows what its runs obey. Submits read them from a per-node copy
//! refreshed from Postgres at most once per [`REFRESH`] — one small query a second per
//! node, not one per submit — so a change made on one node reaches submits on every node
//! within that (at once on the node that made it).

use crate::config::Limits;
use baton_client::{QueueDefaults, SubmitTask};
use baton_core::backoff::Backoff;
use baton_core::retry_policy::RetryPolicy;
use baton_core::validate::Invalid;
use baton_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// How old the copy may be before a submit reads Postgres again.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

pub(crate) type DefaultsByQueue = HashMap<String, QueueDefaults>;

/// This node's copy of every queue's defaults.
#[derive(Debug, Default)]
pub(crate) struct QueueDefaultsCache {
    copy: RwLock<Option<(Instant, Arc<DefaultsByQueue>)>>,
    /// One refresh at a time: submits arriving meanwhile wait for its answer.
    refreshing: tokio::sync::Mutex<()>,
}

impl QueueDefaultsCache {
    /// Every queue's defaults, at most [`REFRESH`] old.
    pub(crate) async fn current(&self, store: &Store) -> Result<Arc<DefaultsByQueue>, StoreError> {
        if let Some(fresh) = self.fresh() {
            return Ok(fresh);
        }
        let _one = self.refreshing.lock().await;
        if let Some(fresh) = self.fresh() {
            return Ok(fresh);
        }
        let read = Arc::new(parse(store.queues_defaults().await?));
        *self.copy.write().expect("queue defaults lock") = Some((Instant::now(), read.clone()));
        Ok(read)
    }

    /// Drops the copy: the next submit reads Postgres (after this node changed defaults).
    pub(crate) fn forget(&self) {
        *self.copy.write().expect("queue defaults lock") = None;
    }

    fn fresh(&self) -> Option<Arc<DefaultsByQueue>> {
        match &*self.copy.read().expect("queue defaults lock") {
            Some((at, copy)) if at.elapsed() < REFRESH => Some(copy.clone()),
            _ => None,
        }
    }
}

fn parse(rows: Vec<(String, serde_json::Value)>) -> DefaultsByQueue {
    rows.into_iter()
        .filter_map(|(queue, value)| Some((queue.clone(), read(&queue, value)?)))
        .collect()
}

/// A queue's stored defaults, if this node can read them. Written by a release that knew
/// other fields, they are ignored (and said so): the queue's tasks take the node's
/// defaults rather than every submit to it failing.
pub(crate) fn read(queue: &str, stored: serde_json::Value) -> Option<QueueDefaults> {
    match serde_json::from_value::<QueueDefaults>(stored) {
        Ok(defaults) => Some(defaults).filter(|d| !d.is_empty()),
        Err(error) => {
            tracing::warn!(%queue, %error, "queue defaults this node cannot read are ignored");
            None
        }
    }
}

/// The defaults as they are stored, or which field is wrong. Checked with the same rules
/// as a task's own fields, so that a task taking them passes; a limit without a key is the
/// queue's own group, `queue:<name>`.
pub(crate) fn checked(
    queue: &str,
    defaults: QueueDefaults,
    limits: &Limits,
    node_backoff: &Backoff,
) -> Result<QueueDefaults, Invalid> {
    if let Some(policy) = &defaults.retry {
        policy.clone().resolved(node_backoff)?;
    }
    if let Some(n) = defaults.max_attempts {
        baton_core::validate::check_range("max_attempts", n, 1, limits.max_attempts)?;
    }
    let key = defaults
        .concurrency_key
        .clone()
        .or_else(|| defaults.concurrency_limit.map(|_| format!("queue:{queue}")));
    let group = baton_core::flow::check_group(key.as_deref(), defaults.concurrency_limit)?;
    Ok(QueueDefaults {
        concurrency_key: group.as_ref().map(|g| g.key.clone()),
        concurrency_limit: group.map(|g| i64::from(g.limit)),
        ..defaults
    })
}

/// `task` with what it leaves out taken from its queue's `defaults`. A task naming a
/// concurrency key or limit keeps its own group (or its own mistake); its retry policy's
/// fields win one by one, except the exit code lists, which go together (a task saying
/// "retry only on 3" is not also told "never on 1").
pub(crate) fn fill(task: &mut SubmitTask, defaults: &QueueDefaults) {
    task.max_attempts = task.max_attempts.or(defaults.max_attempts);
    if task.concurrency_key.is_none() && task.concurrency_limit.is_none() {
        task.concurrency_key = defaults.concurrency_key.clone();
        task.concurrency_limit = defaults.concurrency_limit;
    }
    task.retry = match (task.retry.take(), &defaults.retry) {
        (own, None) => own,
        (None, Some(queue)) => Some(queue.clone()),
        (Some(own), Some(queue)) => Some(over(own, queue)),
    };
}

fn over(own: RetryPolicy, queue: &RetryPolicy) -> RetryPolicy {
    let own_codes = own.on_exit_codes.is_some() || own.never_on_exit_codes.is_some();
    let (on_exit_codes, never_on_exit_codes) = if own_codes {
        (own.on_exit_codes, own.never_on_exit_codes)
    } else {
        (
            queue.on_exit_codes.clone(),
            queue.never_on_exit_codes.clone(),
        )
    };
    RetryPolicy {
        backoff_base_s: own.backoff_base_s.or(queue.backoff_base_s),
        backoff_factor: own.backoff_factor.or(queue.backoff_factor),
        backoff_cap_s: own.backoff_cap_s.or(queue.backoff_cap_s),
        jitter: own.jitter.or(queue.jitter),
        on_exit_codes,
        never_on_exit_codes,
        on_timeout: own.on_timeout.or(queue.on_timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    fn backoff() -> Backoff {
        baton_core::after_run::TASK_RETRY
    }

    fn queue_defaults() -> QueueDefaults {
        QueueDefaults {
            retry: Some(RetryPolicy {
                backoff_base_s: Some(5.0),
                never_on_exit_codes: Some(vec![2]),
                on_timeout: Some(false),
                ..Default::default()
            }),
            max_attempts: Some(4),
            concurrency_key: Some("db".into()),
            concurrency_limit: Some(3),
        }
    }

    #[test]
    fn a_task_that_says_nothing_takes_everything() {
        let mut task = SubmitTask::default();
        fill(&mut task, &queue_defaults());
        assert_eq!(task.max_attempts, Some(4));
        assert_eq!(task.concurrency_key.as_deref(), Some("db"));
        assert_eq!(task.concurrency_limit, Some(3));
        assert_eq!(task.retry, queue_defaults().retry);
    }

    #[test]
    fn a_task_keeps_what_it_gives() {
        let mut task = SubmitTask {
            max_attempts: Some(1),
            concurrency_key: Some("mine".into()),
            retry: Some(RetryPolicy {
                backoff_base_s: Some(1.0),
                on_exit_codes: Some(vec![3]),
                ..Default::default()
            }),
            ..Default::default()
        };
        fill(&mut task, &queue_defaults());
        assert_eq!(task.max_attempts, Some(1));
        // Its own group, with its own (default) limit: not the queue's limit of 3.
        assert_eq!(task.concurrency_key.as_deref(), Some("mine"));
        assert_eq!(task.concurrency_limit, None);
        let retry = task.retry.unwrap();
        assert_eq!(retry.backoff_base_s, Some(1.0));
        assert_eq!(retry.on_exit_codes, Some(vec![3]));
        assert_eq!(
            retry.never_on_exit_codes, None,
            "exit code lists go together"
        );
        assert_eq!(
            retry.on_timeout,
            Some(false),
            "unnamed fields come from the queue"
        );
    }

    #[test]
    fn a_limit_alone_is_the_queues_own_group() {
        let d = QueueDefaults {
            concurrency_limit: Some(2),
            ..Default::default()
        };
        let d = checked("builds", d, &limits(), &backoff()).unwrap();
        assert_eq!(d.concurrency_key.as_deref(), Some("queue:builds"));
        assert_eq!(d.concurrency_limit, Some(2));
    }

    #[test]
    fn bad_defaults_name_their_field() {
        let field = |d: QueueDefaults| checked("q", d, &limits(), &backoff()).unwrap_err().field;
        assert_eq!(
            field(QueueDefaults {
                max_attempts: Some(0),
                ..Default::default()
            }),
            "max_attempts"
        );
        assert_eq!(
            field(QueueDefaults {
                concurrency_limit: Some(0),
                ..Default::default()
            }),
            "concurrency_limit"
        );
        assert_eq!(
            field(QueueDefaults {
                retry: Some(RetryPolicy {
                    jitter: Some(2.0),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            "retry.jitter"
        );
    }
}
