//! Queues and the lease. Queues are sorted sets, so a task id is never queued twice.

use crate::replay::ReplayKey;
use crate::{Claim, Coord, CoordError};
use baton_core::LabelSet;
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::flow::Group;
use baton_core::queue_order::{
    AGE_EPOCH_MS, FAIR_SPACING_MS, PRIORITY_STEP, parse_queue_key, queue_key, score,
};
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

/// A script that adds to or takes from queues, with the queue index's functions before it
/// (`lua/queue_index.lua`), so every script follows the index the same way, and the
/// concurrency groups' (`lua/groups.lua`), which put tasks back in their queues.
pub(crate) fn indexing(body: &str) -> Script {
    Script::new(&format!(
        "{}\n{}\n{body}",
        include_str!("lua/queue_index.lua"),
        include_str!("lua/groups.lua")
    ))
}

static ENQUEUE: LazyLock<Script> = LazyLock::new(|| indexing(include_str!("lua/enqueue.lua")));
static LEASE: LazyLock<Script> = LazyLock::new(|| indexing(include_str!("lua/lease.lua")));
static ENQUEUE_UNCLAIMED: LazyLock<Script> =
    LazyLock::new(|| indexing(include_str!("lua/enqueue_unclaimed.lua")));
static CLAIM_REQUEUE: LazyLock<Script> =
    LazyLock::new(|| indexing(include_str!("lua/claim_requeue.lua")));
static QUEUE_REMOVE: LazyLock<Script> =
    LazyLock::new(|| indexing(include_str!("lua/queue_remove.lua")));
static QUEUE_INDEX_REPAIR: LazyLock<Script> =
    LazyLock::new(|| indexing(include_str!("lua/queue_index_repair.lua")));

/// A task to put in its queue.
#[derive(Debug, Clone)]
pub struct Enqueue {
    /// The task to queue.
    pub task_id: Uuid,
    /// Its queue's name.
    pub queue: String,
    /// The labels a runner must have to take it.
    pub labels: LabelSet,
    /// Higher pops first.
    pub priority: i32,
    /// When it was queued, in ms: within a priority, older pops first.
    pub enqueued_at_ms: i64,
    /// Its concurrency group, if any (`lua/groups.lua`).
    pub group: Option<Group>,
    /// Who submitted it (the token's id): submit's add orders owners fairly
    /// (`lua/enqueue.lua`).
    pub owner: String,
}

impl Enqueue {
    /// Its queue's key, relative to the prefix (`q:<queue>:<labels>`).
    pub fn key_rel(&self) -> String {
        queue_key(&self.queue, &self.labels)
    }

    fn meta(&self) -> String {
        queue_meta(&self.queue, self.labels.as_slice())
    }

    fn score(&self) -> f64 {
        score(self.priority, self.enqueued_at_ms)
    }

    /// Its `grp` hash entry: the group, and where a parked task goes back to.
    pub(crate) fn group_entry(&self) -> Option<String> {
        let group = self.group.as_ref()?;
        Some(
            serde_json::json!({
                "key": group.key,
                "limit": group.limit,
                "rel": self.key_rel(),
                "meta": self.meta(),
            })
            .to_string(),
        )
    }
}

/// The `queues` hash's value for a queue key: what the lease script matches runners on.
fn queue_meta(queue: &str, labels: &[String]) -> String {
    serde_json::json!({ "queue": queue, "labels": labels }).to_string()
}

/// What a submit would add to the queues with work: see [`Coord::queue_room`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueRoom {
    /// Queue keys (queue and label set) with work now.
    pub queues: u64,
    /// Label sets with work now.
    pub label_sets: u64,
    /// Of the keys asked about, those not among them.
    pub new_queues: Vec<String>,
    /// Of the label sets asked about, those not among them.
    pub new_label_sets: Vec<String>,
}

/// A claimed task and the queue place it came from (or goes back to): what the lease
/// script returns, and what a requeue needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Popped {
    /// The claimed task.
    pub task_id: Uuid,
    /// The lease it was claimed under.
    pub lease_id: LeaseId,
    /// Where it came from and with what score, to put it back exactly if Postgres fails.
    pub queue_key: String,
    /// Its score in that queue.
    pub score: f64,
}

impl Popped {
    /// The queue place of a claimed task, rebuilt from its row.
    pub fn of(entry: &Enqueue, lease_id: LeaseId) -> Popped {
        Popped {
            task_id: entry.task_id,
            lease_id,
            queue_key: entry.key_rel(),
            score: entry.score(),
        }
    }
}

/// What a lease request (or a runner exchange) asks of Redis: see [`Coord::lease`].
#[derive(Debug, Clone, Copy)]
pub struct LeaseAsk<'a> {
    /// The node that makes the lease: its claims name it.
    pub node: &'a str,
    /// The runner asking.
    pub runner: RunnerId,
    /// The runner's boot, recorded in each claim.
    pub boot_id: Uuid,
    /// The runner's labels: it takes only tasks that need a subset of them.
    pub labels: &'a LabelSet,
    /// The queues it serves (empty: every queue).
    pub queues: &'a [String],
    /// One fresh lease id per task wanted; none to lease nothing.
    pub lease_ids: &'a [LeaseId],
    /// Where this request's result is recorded for a resend.
    pub replay: &'a ReplayKey,
    /// Look the request's replay record up first: if an attempt of it leased before (a
    /// resend, by the runner or a load balancer), that is handed back and nothing new
    /// popped.
    pub retry: bool,
    /// Tasks whose claims to report (the ones the runner is starting).
    pub claims_of: &'a [Uuid],
    /// The time of the request, in ms since the Unix epoch.
    pub now_ms: i64,
}

/// What [`Coord::lease`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Leased {
    /// A retry whose first attempt leased these (task, lease) pairs.
    pub replayed: Option<Vec<(Uuid, LeaseId)>>,
    /// The claim on each task of `claims_of`, in order.
    pub claims: Vec<Option<Claim>>,
    /// The tasks newly claimed, with their queue places.
    pub popped: Vec<Popped>,
}

impl Coord {
    /// Submit's add (design.md §4.1): after the Postgres insert committed, add the tasks to
    /// their queues, each at its owner's fair place (`lua/enqueue.lua`), and wake parked
    /// leases on every node — one script, so the wake-up never precedes the entry it
    /// announces.
    pub async fn enqueue(&self, tasks: &[Enqueue]) -> Result<(), CoordError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut inv = ENQUEUE.prepare_invoke();
        inv.arg(self.keys.prefix())
            .arg(self.keys.wake())
            .arg(PRIORITY_STEP)
            .arg(FAIR_SPACING_MS)
            .arg(AGE_EPOCH_MS);
        for task in tasks {
            inv.arg(task.task_id.to_string())
                .arg(task.key_rel())
                .arg(task.meta())
                .arg(task.score())
                .arg(&task.owner)
                .arg(task.group_entry().unwrap_or_default());
        }
        let mut conn = self.conn().await?;
        inv.invoke_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Every Redis add but submit's: queues those of `tasks` that hold no claim and wakes
    /// parked leases. Returns how many were added.
    pub async fn enqueue_unclaimed(&self, tasks: &[Enqueue]) -> Result<u64, CoordError> {
        if tasks.is_empty() {
            return Ok(0);
        }
        let mut inv = ENQUEUE_UNCLAIMED.prepare_invoke();
        inv.key(self.keys.running())
            .arg(self.keys.prefix())
            .arg(self.keys.wake());
        for task in tasks {
            inv.arg(task.task_id.to_string())
                .arg(task.key_rel())
                .arg(task.meta())
                .arg(task.score())
                .arg(task.group_entry().unwrap_or_default());
        }
        let mut conn = self.conn().await?;
        Ok(inv.invoke_async(&mut conn).await?)
    }

    /// Removes tasks from their queues (they expired or ended elsewhere).
    pub async fn queue_remove(&self, tasks: &[(Uuid, String)]) -> Result<(), CoordError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut inv = QUEUE_REMOVE.prepare_invoke();
        inv.arg(self.keys.prefix());
        for (id, rel) in tasks {
            inv.arg(id.to_string()).arg(rel);
        }
        let mut conn = self.conn().await?;
        inv.invoke_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// The repair pass's check of the queue index against the queues: returns how many
    /// index entries were wrong (and are right now).
    pub async fn queue_index_repair(&self) -> Result<u64, CoordError> {
        let mut conn = self.conn().await?;
        Ok(QUEUE_INDEX_REPAIR
            .arg(self.keys.prefix())
            .invoke_async(&mut conn)
            .await?)
    }

    /// How many queue keys and label sets have work now, and which of `keys` (queue key,
    /// label-set part) are not among them: what a submit would add. One round trip.
    pub async fn queue_room(&self, keys: &[(String, String)]) -> Result<QueueRoom, CoordError> {
        let mut pipe = redis::pipe();
        pipe.hlen(self.keys.queues()).hlen(self.keys.labelsets());
        for (rel, part) in keys {
            pipe.hexists(self.keys.queues(), rel)
                .hexists(self.keys.labelsets(), part);
        }
        let mut conn = self.conn().await?;
        let answers: Vec<u64> = pipe.query_async(&mut conn).await?;
        let (counts, known) = answers.split_at(2.min(answers.len()));
        let mut room = QueueRoom {
            queues: counts.first().copied().unwrap_or_default(),
            label_sets: counts.get(1).copied().unwrap_or_default(),
            new_queues: Vec::new(),
            new_label_sets: Vec::new(),
        };
        for ((rel, part), known) in keys.iter().zip(known.chunks(2)) {
            if known.first() == Some(&0) {
                room.new_queues.push(rel.clone());
            }
            if known.get(1) == Some(&0) {
                room.new_label_sets.push(part.clone());
            }
        }
        room.new_queues.sort();
        room.new_queues.dedup();
        room.new_label_sets.sort();
        room.new_label_sets.dedup();
        Ok(room)
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

    /// How many tasks wait in each queue key (one ZCARD per key, pipelined), with the
    /// key's queue and label set.
    pub async fn queue_key_depths(&self) -> Result<Vec<(String, LabelSet, u64)>, CoordError> {
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
        Ok(keys
            .iter()
            .zip(sizes)
            .filter_map(|(rel, size)| {
                let (queue, labels) = baton_core::queue_order::parse_queue_key(rel)?;
                Some((queue, labels, size))
            })
            .collect())
    }

    /// How many tasks wait in each queue, summed over its label sets, by queue name and
    /// sorted by it.
    pub async fn queue_depths(&self) -> Result<Vec<(String, u64)>, CoordError> {
        let mut depths = std::collections::BTreeMap::<String, u64>::new();
        for (queue, _, size) in self.queue_key_depths().await? {
            *depths.entry(queue).or_default() += size;
        }
        Ok(depths.into_iter().collect())
    }

    /// The Redis half of a lease request or a runner exchange, in one script: a retry's
    /// replay, the claims on the tasks it is about to start, and up to
    /// `ask.lease_ids.len()` tasks this runner may take, popped and claimed for the node
    /// atomically (design.md §4.3, first half). What it leased is recorded under the
    /// replay key, so a resend of the same request gets it back.
    pub async fn lease(&self, ask: &LeaseAsk<'_>) -> Result<Leased, CoordError> {
        let mut inv = LEASE.prepare_invoke();
        inv.key(self.keys.running())
            .key(self.keys.owned(ask.node))
            .key(&ask.replay.key)
            .arg(self.keys.prefix())
            .arg(ask.node)
            .arg(ask.now_ms)
            .arg(ask.runner.to_string())
            .arg(ask.boot_id.to_string())
            .arg(serde_json::to_string(ask.labels.as_slice()).expect("labels serialise"))
            .arg(serde_json::to_string(ask.queues).expect("queues serialise"))
            .arg(ask.replay.ttl_ms)
            .arg(if ask.retry { "1" } else { "0" })
            .arg(ask.claims_of.len());
        for task in ask.claims_of {
            inv.arg(task.to_string());
        }
        for lease in ask.lease_ids {
            inv.arg(lease.to_string());
        }
        let mut conn = self.conn().await?;
        let flat: Vec<String> = inv.invoke_async(&mut conn).await?;
        let (record, rest) = flat
            .split_first()
            .ok_or_else(|| CoordError::Internal("empty lease script reply".into()))?;
        if rest.len() < ask.claims_of.len() {
            return Err(CoordError::Internal("short lease script reply".into()));
        }
        let (claims, popped) = rest.split_at(ask.claims_of.len());
        let claims = claims
            .iter()
            .map(|c| (!c.is_empty()).then(|| Claim::parse(c)).transpose())
            .collect::<Result<_, _>>()?;
        let replayed = (!record.is_empty())
            .then(|| crate::replay::parse_record(record))
            .transpose()?;
        let popped = popped
            .chunks(4)
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
            .collect::<Result<_, _>>()?;
        Ok(Leased {
            replayed,
            claims,
            popped,
        })
    }

    /// Puts a claimed task back in its queue and drops the claim, in one script, only if
    /// the claim is still `node`'s under the same lease: when a lease pass's group commit
    /// failed (its leases voided in Postgres first, design.md §4.3), and when the
    /// reconciler takes back a task whose runner never started it. False when the claim is
    /// no longer this lease's.
    pub async fn claim_requeue(&self, node: &str, popped: &Popped) -> Result<bool, CoordError> {
        let (queue, labels) = parse_queue_key(&popped.queue_key).ok_or_else(|| {
            CoordError::Internal(format!("not a queue key: {:?}", popped.queue_key))
        })?;
        let labels: Vec<String> = labels.into();
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
            .arg(queue_meta(&queue, &labels))
            .arg(self.keys.prefix())
            .invoke_async(&mut conn)
            .await?;
        Ok(done == 1)
    }
}

pub(crate) fn parse_uuid<Id: From<Uuid>>(s: &str) -> Result<Id, CoordError> {
    Uuid::parse_str(s)
        .map(Id::from)
        .map_err(|_| CoordError::Internal(format!("not a uuid: {s:?}")))
}
