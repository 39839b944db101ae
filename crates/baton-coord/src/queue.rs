//! Queues and the lease pop. Queues are sorted sets, so a task id is never queued twice.

use crate::{Coord, CoordError};
use baton_core::LabelSet;
use baton_core::queue::{queue_key, score};
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

static LEASE_POP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/lease_pop.lua")));
static ENQUEUE_UNCLAIMED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/enqueue_unclaimed.lua")));
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
    pub fn key_rel(&self) -> String {
        queue_key(&self.queue, &self.labels)
    }

    fn meta(&self) -> String {
        serde_json::json!({ "queue": self.queue, "labels": self.labels }).to_string()
    }

    fn score(&self) -> f64 {
        score(self.priority, self.enqueued_at_ms)
    }
}

/// Where a lease request's result is recorded for replay, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayKey {
    pub key: String,
    pub ttl_ms: u64,
}

/// A claimed task and the queue place it came from (or goes back to): what the lease
/// script returns, and what a requeue needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Popped {
    pub task_id: Uuid,
    pub lease_id: Uuid,
    /// Where it came from and with what score, to put it back exactly if Postgres fails.
    pub queue_key: String,
    pub score: f64,
}

impl Popped {
    /// The queue place of a claimed task, rebuilt from its row.
    pub fn of(entry: &Enqueue, lease_id: Uuid) -> Popped {
        Popped {
            task_id: entry.task_id,
            lease_id,
            queue_key: entry.key_rel(),
            score: entry.score(),
        }
    }
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
            pipe.hset(self.keys.queues(), &rel, task.meta()).ignore();
            pipe.zadd(
                self.keys.queue(&rel),
                task.task_id.to_string(),
                task.score(),
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

    /// Every Redis add but submit's: queues those of `tasks` that hold no claim and wakes
    /// parked leases. Returns how many were added.
    pub async fn enqueue_unclaimed(&self, tasks: &[Enqueue]) -> Result<u64, CoordError> {
        if tasks.is_empty() {
            return Ok(0);
        }
        let mut inv = ENQUEUE_UNCLAIMED.prepare_invoke();
        inv.key(self.keys.queues())
            .key(self.keys.running())
            .arg(self.keys.prefix())
            .arg(self.keys.wake());
        for task in tasks {
            inv.arg(task.task_id.to_string())
                .arg(task.key_rel())
                .arg(task.meta())
                .arg(task.score());
        }
        let mut conn = self.conn().await?;
        Ok(inv.invoke_async(&mut conn).await?)
    }

    /// Removes tasks from their queues (they expired or ended elsewhere).
    pub async fn queue_remove(&self, tasks: &[(Uuid, String)]) -> Result<(), CoordError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (id, rel) in tasks {
            pipe.zrem(self.keys.queue(rel), id.to_string()).ignore();
        }
        let mut conn = self.conn().await?;
        pipe.query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Which of `tasks` (id, queue key) are in no queue.
    pub async fn queue_missing(&self, tasks: &[(Uuid, String)]) -> Result<Vec<Uuid>, CoordError> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (id, rel) in tasks {
            pipe.zscore(self.keys.queue(rel), id.to_string());
        }
        let mut conn = self.conn().await?;
        let scores: Vec<Option<f64>> = pipe.query_async(&mut conn).await?;
        Ok(tasks
            .iter()
            .zip(scores)
            .filter(|(_, s)| s.is_none())
            .map(|((id, _), _)| *id)
            .collect())
    }

    /// Every queue key with the ids it holds, for the repair pass.
    pub async fn queue_entries(&self) -> Result<Vec<(String, Vec<Uuid>)>, CoordError> {
        let mut conn = self.conn().await?;
        let keys: Vec<String> = redis::cmd("HKEYS")
            .arg(self.keys.queues())
            .query_async(&mut conn)
            .await?;
        let mut out = Vec::with_capacity(keys.len());
        for rel in keys {
            let ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(self.keys.queue(&rel))
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await?;
            let ids = ids
                .iter()
                .map(|s| parse_uuid(s))
                .collect::<Result<_, _>>()?;
            out.push((rel, ids));
        }
        Ok(out)
    }

    /// How many tasks wait in each queue, summed over its label sets (one ZCARD per
    /// queue key, pipelined), by queue name and sorted by it.
    pub async fn queue_depths(&self) -> Result<Vec<(String, u64)>, CoordError> {
        let mut conn = self.conn().await?;
        let keys: Vec<String> = redis::cmd("HKEYS")
            .arg(self.keys.queues())
            .query_async(&mut conn)
            .await?;
        let mut pipe = redis::pipe();
        for rel in &keys {
            pipe.cmd("ZCARD").arg(self.keys.queue(rel));
        }
        let sizes: Vec<u64> = if keys.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut conn).await?
        };
        let mut depths = std::collections::BTreeMap::<String, u64>::new();
        for (rel, size) in keys.iter().zip(sizes) {
            if let Some((queue, _)) = baton_core::queue::parse_queue_key(rel) {
                *depths.entry(queue).or_default() += size;
            }
        }
        Ok(depths.into_iter().collect())
    }

    /// Pops up to `lease_ids.len()` tasks this runner may take and claims each for `node`
    /// under the given lease ids, atomically (design.md §4.3, first half). What it leased
    /// is recorded under `replay` so a retry of the same request gets it back.
    pub async fn lease_pop(
        &self,
        node: &str,
        runner_labels: &LabelSet,
        runner_queues: &[String],
        lease_ids: &[Uuid],
        replay: &ReplayKey,
        now_ms: i64,
    ) -> Result<Vec<Popped>, CoordError> {
        if lease_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut inv = LEASE_POP.prepare_invoke();
        inv.key(self.keys.queues())
            .key(self.keys.running())
            .key(self.keys.owned(node))
            .key(&replay.key)
            .arg(self.keys.prefix())
            .arg(node)
            .arg(now_ms)
            .arg(serde_json::to_string(runner_labels.as_slice()).expect("labels serialise"))
            .arg(serde_json::to_string(runner_queues).expect("queues serialise"))
            .arg(replay.ttl_ms);
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

    /// Puts a claimed task back in its queue and drops the claim, in one script, only if
    /// the claim is still `node`'s under the same lease: when Postgres could not record a
    /// lease (design.md §4.3), and when the reconciler takes back a task whose runner never
    /// started it. False when the claim is no longer this lease's.
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
