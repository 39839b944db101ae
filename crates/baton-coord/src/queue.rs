//! Queues and the lease pop. Queues are sorted sets, so a task id is never queued twice.

use crate::{Coord, CoordError};
use baton_core::LabelSet;
use baton_core::queue::{queue_key, score};
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

static LEASE_POP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/lease_pop.lua")));
static CLAIM_REQUEUE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claim_requeue.lua")));
pub(crate) static CLAIM_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claim_release.lua")));

/// A task to put in its queue.
#[derive(Debug, Clone)]
pub struct Enqueue {
    pub task_id: Uuid,
    pub queue: String,
    pub labels: LabelSet,
    pub priority: i32,
    pub enqueued_at_ms: i64,
}

impl Enqueue {
    fn key_rel(&self) -> String {
        queue_key(&self.queue, &self.labels)
    }
}

/// A task the lease script took from a queue and claimed for this node.
#[derive(Debug, Clone, PartialEq)]
pub struct Popped {
    pub task_id: Uuid,
    pub lease_id: Uuid,
    /// Where it came from and with what score, to put it back exactly if Postgres fails.
    pub queue_key: String,
    pub score: f64,
}

impl Coord {
    /// Submit's add (design.md §4.1): after the Postgres insert committed, add the tasks to
    /// their queues and wake parked leases on every node — one MULTI, so the wake-up never
    /// precedes the entry it announces.
    pub async fn enqueue(&self, tasks: &[Enqueue]) -> Result<(), CoordError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut woken = std::collections::BTreeSet::new();
        for task in tasks {
            let rel = task.key_rel();
            let meta = serde_json::json!({ "queue": task.queue, "labels": task.labels });
            pipe.hset(self.keys.queues(), &rel, meta.to_string())
                .ignore();
            pipe.zadd(
                self.keys.queue(&rel),
                task.task_id.to_string(),
                score(task.priority, task.enqueued_at_ms),
            )
            .ignore();
            woken.insert(rel);
        }
        for rel in woken {
            pipe.publish(self.keys.wake(), rel).ignore();
        }
        let mut conn = self.conn().await?;
        pipe.query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Pops up to `lease_ids.len()` tasks this runner may take and claims each for `node`
    /// under the given lease ids, atomically (design.md §4.3, first half).
    pub async fn lease_pop(
        &self,
        node: &str,
        runner_labels: &LabelSet,
        runner_queues: &[String],
        lease_ids: &[Uuid],
        now_ms: i64,
    ) -> Result<Vec<Popped>, CoordError> {
        if lease_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut inv = LEASE_POP.prepare_invoke();
        inv.key(self.keys.queues())
            .key(self.keys.running())
            .key(self.keys.owned(node))
            .arg(self.keys.prefix())
            .arg(node)
            .arg(now_ms)
            .arg(serde_json::to_string(runner_labels.as_slice()).expect("labels serialise"))
            .arg(serde_json::to_string(runner_queues).expect("queues serialise"));
        for lease in lease_ids {
            inv.arg(lease.to_string());
        }
        let mut conn = self.conn().await?;
        let flat: Vec<String> = inv.invoke_async(&mut conn).await?;
        flat.chunks(4)
            .map(|c| match c {
                [task, lease, key, score] => Ok(Popped {
                    task_id: parse_uuid(task)?,
                    lease_id: parse_uuid(lease)?,
                    queue_key: key.clone(),
                    score: score
                        .parse()
                        .map_err(|_| CoordError::Internal(format!("bad score {score:?}")))?,
                }),
                _ => Err(CoordError::Internal(
                    "lease script reply is not in fours".into(),
                )),
            })
            .collect()
    }

    /// Postgres could not record a lease: put the task back exactly where it was and drop
    /// this node's claim, in one script (design.md §4.3). False when the claim is no longer
    /// this lease's.
    pub async fn claim_requeue(&self, node: &str, popped: &Popped) -> Result<bool, CoordError> {
        let mut conn = self.conn().await?;
        let done: i32 = CLAIM_REQUEUE
            .key(self.keys.running())
            .key(self.keys.owned(node))
            .key(self.keys.queue(&popped.queue_key))
            .arg(popped.task_id.to_string())
            .arg(node)
            .arg(popped.lease_id.to_string())
            .arg(popped.score.to_string())
            .arg(self.keys.wake())
            .arg(&popped.queue_key)
            .invoke_async(&mut conn)
            .await?;
        Ok(done == 1)
    }
}

pub(crate) fn parse_uuid(s: &str) -> Result<Uuid, CoordError> {
    Uuid::parse_str(s).map_err(|_| CoordError::Internal(format!("not a uuid: {s:?}")))
}
