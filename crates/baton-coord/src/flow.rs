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

/// The API's pauses and resumes as far as one reading saw them ([`Coord::paused_mark`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PausedMark(String);

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
    /// Pauses or resumes `queue` in Redis, after Postgres recorded it, and moves the
    /// paused mark on, so a mirror read from Postgres before is not written over it. A
    /// resume wakes every parked lease (and ends every node's memory of finding
    /// nothing), so the queue's tasks go out at once.
    pub async fn queue_paused_set(&self, queue: &str, paused: bool) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        let mut pipe = redis::pipe();
        pipe.atomic().incr(self.keys.paused_mark(), 1).ignore();
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

    /// Where the API's pauses and resumes were when read: taken before Postgres's paused
    /// queues are read for [`Coord::paused_mirror`].
    pub async fn paused_mark(&self) -> Result<PausedMark, CoordError> {
        let mut conn = self.conn().await?;
        let mark: Option<String> = redis::cmd("GET")
            .arg(self.keys.paused_mark())
            .query_async(&mut conn)
            .await?;
        Ok(PausedMark(mark.unwrap_or_default()))
    }

    /// Makes the paused set exactly `queues` (the repair pass, from Postgres, read after
    /// `mark` was taken), unless a pause or resume was written since: that one is newer
    /// than the read. Returns whether it changed; a resume it undid is published as a
    /// wake-up like any resume.
    pub async fn paused_mirror(
        &self,
        mark: &PausedMark,
        queues: &[String],
    ) -> Result<bool, CoordError> {
        let mut inv = PAUSED_MIRROR.prepare_invoke();
        inv.arg(self.keys.prefix())
            .arg(&mark.0)
            .arg(self.keys.wake())
            .arg(Wake::All.payload());
        for queue in queues {
            inv.arg(queue);
        }
        let mut conn = self.conn().await?;
        let changed: i64 = inv.invoke_async(&mut conn).await?;
        Ok(changed == 1)
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
