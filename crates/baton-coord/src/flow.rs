//! Flow control in Redis (docs/flow-control.md): the mirror of the paused queues that the
//! lease script reads, and the repair of concurrency groups from Postgres. The groups
//! themselves are taken and freed inside the lease and claim scripts (`lua/groups.lua`).

use crate::queue::{indexing, parse_uuid};
use crate::{Coord, CoordError, Enqueue, Wake};
use redis::Script;
use std::collections::BTreeMap;
use std::sync::LazyLock;
use uuid::Uuid;

static PAUSED_MIRROR: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/paused_mirror.lua")));
static GROUPS_REPAIR: LazyLock<Script> =
    LazyLock::new(|| indexing(include_str!("lua/groups_repair.lua")));

/// Each queue's last pause or resume, as one reading saw them ([`Coord::paused_marks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedMarks(BTreeMap<String, String>);

/// What a group's recount changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupRepair {
    /// Claimed tasks that were missing from the group's set (after a data loss).
    pub slots_taken: u64,
    /// Slots held by tasks with no claim.
    pub slots_freed: u64,
    /// Waiting tasks let back into their queues.
    pub promoted: u64,
}

impl Coord {
    /// Pauses or resumes `queue` in Redis, after Postgres recorded it, and gives the queue
    /// a new mark, so a mirror read from Postgres before does not write over it. A
    /// resume wakes every parked lease (and ends every node's memory of finding
    /// nothing), so the queue's tasks go out at once.
    pub async fn queue_paused_set(&self, queue: &str, paused: bool) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        // A fresh token, not a count: after Redis lost its data a count would start over
        // and could match a mark read before.
        pipe.atomic()
            .hset(self.keys.paused_marks(), queue, Uuid::new_v4().to_string())
            .ignore();
        if paused {
            pipe.sadd(self.keys.paused(), queue).ignore();
        } else {
            pipe.srem(self.keys.paused(), queue).ignore();
            pipe.publish(self.keys.wake(), Wake::All.payload()).ignore();
        }
        pipe.query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// The paused queues, as the lease script sees them.
    pub async fn queues_paused(&self) -> Result<Vec<String>, CoordError> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("SMEMBERS")
            .arg(self.keys.paused())
            .query_async(&mut conn)
            .await?)
    }

    /// Each queue's last pause or resume written, as a token: taken before Postgres's
    /// paused queues are read for [`Coord::paused_mirror`].
    pub async fn paused_marks(&self) -> Result<PausedMarks, CoordError> {
        let mut conn = self.conn().await?;
        Ok(PausedMarks(
            redis::cmd("HGETALL")
                .arg(self.keys.paused_marks())
                .query_async(&mut conn)
                .await?,
        ))
    }

    /// Makes the paused set as Postgres has it (`queues`, read after `marks` were taken),
    /// but for a queue paused or resumed since: that write is newer than the read, and
    /// stays. Returns whether the set changed; a resume it undid is published as a
    /// wake-up like any resume.
    pub async fn paused_mirror(
        &self,
        marks: &PausedMarks,
        queues: &[String],
    ) -> Result<bool, CoordError> {
        let mut inv = PAUSED_MIRROR.prepare_invoke();
        inv.arg(self.keys.prefix())
            .arg(self.keys.wake())
            .arg(Wake::All.payload())
            .arg(marks.0.len());
        for (queue, mark) in &marks.0 {
            inv.arg(queue).arg(mark);
        }
        for queue in queues {
            inv.arg(queue);
        }
        let mut conn = self.conn().await?;
        let (changed, newer): (u64, u64) = inv.invoke_async(&mut conn).await?;
        if newer > 0 {
            tracing::debug!(
                queues = newer,
                "paused queues written since the read are left as written"
            );
        }
        Ok(changed > 0)
    }

    /// Recounts one concurrency group from its unfinished tasks as Postgres has them:
    /// registers each, counts every claimed one as holding a slot, frees slots no claim
    /// holds, and lets waiting tasks back into line for the slots free.
    pub async fn group_repair(
        &self,
        key: &str,
        tasks: &[Enqueue],
    ) -> Result<GroupRepair, CoordError> {
        let mut inv = GROUPS_REPAIR.prepare_invoke();
        inv.arg(self.keys.prefix()).arg(key);
        for task in tasks {
            if let Some(entry) = task.group_entry() {
                inv.arg(task.task_id.to_string()).arg(entry);
            }
        }
        let mut conn = self.conn().await?;
        let (slots_taken, slots_freed, promoted) = inv.invoke_async(&mut conn).await?;
        Ok(GroupRepair {
            slots_taken,
            slots_freed,
            promoted,
        })
    }

    /// Every task registered with a group: id -> (group key, queue key), for the repair
    /// pass to drop those that ended.
    pub async fn group_entries(&self) -> Result<BTreeMap<Uuid, (String, String)>, CoordError> {
        let mut conn = self.conn().await?;
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.keys.groups())
            .query_async(&mut conn)
            .await?;
        let mut out = BTreeMap::new();
        for (id, raw) in all {
            let entry: serde_json::Value = serde_json::from_str(&raw)
                .map_err(|_| CoordError::Internal(format!("malformed group entry {raw:?}")))?;
            let field = |f: &str| entry[f].as_str().unwrap_or_default().to_string();
            out.insert(parse_uuid(&id)?, (field("key"), field("rel")));
        }
        Ok(out)
    }

    /// How many tasks of `key` hold a lease, and how many wait parked.
    pub async fn group_counts(&self, key: &str) -> Result<(u64, u64), CoordError> {
        let mut conn = self.conn().await?;
        Ok(redis::pipe()
            .scard(self.keys.group_running(key))
            .zcard(self.keys.group_waiting(key))
            .query_async(&mut conn)
            .await?)
    }
}
