//! Lease replay (design.md §4.7). A lease request's id is recorded before it looks for
//! work, and what it leased is recorded by the lease script itself, for `ack_timeout`. A
//! retry of the request — its first answer was lost on the wire — finds either the first
//! attempt still in progress (and waits for it) or what it leased (and gets it back),
//! instead of stranding those tasks until their ack timeout.

use crate::queue::{ReplayKey, parse_uuid};
use crate::{Coord, CoordError};
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

const PENDING: &str = "pending";

/// Deletes the record only while it still says pending: a result recorded meanwhile must
/// stay for retries.
static FORGET_PENDING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

/// What a lease request's id says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// First time seen: go ahead (the id is now marked in progress).
    Fresh(ReplayKey),
    /// An earlier attempt with this id is still looking for work.
    InProgress,
    /// An earlier attempt leased these (task, lease) pairs.
    Leased(Vec<(Uuid, Uuid)>),
}

/// Who asks for a lease: the runner, the agent process's boot, and when.
#[derive(Debug, Clone, Copy)]
pub struct LeaseCaller {
    pub runner: Uuid,
    pub boot_id: Uuid,
    pub now_ms: i64,
}

impl Coord {
    /// Marks lease request `request_id` in progress, or finds what an earlier attempt
    /// of it did. In the same round trip it records the runner's presence: a lease
    /// request is also a heartbeat, and an idle poll should cost as few commands as can be.
    pub async fn replay_begin(
        &self,
        caller: LeaseCaller,
        request_id: Uuid,
        ttl_ms: u64,
    ) -> Result<Replay, CoordError> {
        let key = self
            .keys
            .lease_request(&caller.runner.to_string(), &request_id.to_string());
        let mut conn = self.conn().await?;
        let (set, value): (Option<String>, Option<String>) = redis::pipe()
            .cmd("HSET")
            .arg(self.keys.presence())
            .arg(caller.runner.to_string())
            .arg(format!("{}|{}", caller.now_ms, caller.boot_id))
            .ignore()
            .cmd("SET")
            .arg(&key)
            .arg(PENDING)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        if set.is_some() {
            return Ok(Replay::Fresh(ReplayKey { key, ttl_ms }));
        }
        match value.as_deref() {
            // Gone between the SET and the GET: the earlier attempt just ended empty.
            None | Some(PENDING) => Ok(Replay::InProgress),
            Some(leased) => leased
                .split(',')
                .map(|pair| {
                    let (task, lease) = pair.split_once(':').ok_or_else(|| {
                        CoordError::Internal(format!("malformed lease record {leased:?}"))
                    })?;
                    Ok((parse_uuid(task)?, parse_uuid(lease)?))
                })
                .collect::<Result<_, _>>()
                .map(Replay::Leased),
        }
    }

    /// The request ended with nothing leased: forget it, so a retry starts afresh.
    pub async fn replay_forget(&self, replay: &ReplayKey) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        FORGET_PENDING
            .key(&replay.key)
            .arg(PENDING)
            .invoke_async::<i32>(&mut conn)
            .await?;
        Ok(())
    }
}
