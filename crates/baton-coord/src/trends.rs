//! The cluster's per-minute counts of each queue — tasks accepted, succeeded, failed,
//! cancelled, and the queue's depth as last seen that minute — one hash per minute, kept
//! two hours. Nodes add what they counted (`baton_core::trend_tally`) every few seconds;
//! any node reads them for the console's charts. They are a picture, not a record: a
//! Redis that loses its data loses them, and nothing else depends on them.

use crate::{Coord, CoordError};
use baton_core::trend_tally::QueueTally;
use std::collections::BTreeMap;

/// How long a minute's counts are kept, in seconds: the console charts the last hour.
pub const TREND_KEEP_S: i64 = 2 * 3600;

/// What the cluster counted of one queue in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueMinute {
    /// Tasks accepted, succeeded, and ended otherwise.
    pub counts: QueueTally,
    /// Tasks waiting, as a node last saw it that minute.
    pub depth: Option<u64>,
}

// The hash's fields: `<queue>|<what>`. Queue names have no `|`.
const SUBMITTED: &str = "submitted";
const SUCCEEDED: &str = "succeeded";
const FAILED: &str = "failed";
const CANCELLED: &str = "cancelled";
const DEPTH: &str = "depth";

impl Coord {
    /// Adds `counts` to minute `minute`'s, and records `depths` as that minute's last
    /// seen depths: one pipeline.
    pub async fn trends_add(
        &self,
        minute: i64,
        counts: &BTreeMap<String, QueueTally>,
        depths: &[(String, u64)],
    ) -> Result<(), CoordError> {
        if counts.is_empty() && depths.is_empty() {
            return Ok(());
        }
        let key = self.keys.trend(minute);
        let mut pipe = redis::pipe();
        for (queue, c) in counts {
            for (what, n) in [
                (SUBMITTED, c.submitted),
                (SUCCEEDED, c.succeeded),
                (FAILED, c.failed),
                (CANCELLED, c.cancelled),
            ] {
                if n > 0 {
                    pipe.cmd("HINCRBY")
                        .arg(&key)
                        .arg(format!("{queue}|{what}"))
                        .arg(n)
                        .ignore();
                }
            }
        }
        for (queue, depth) in depths {
            pipe.cmd("HSET")
                .arg(&key)
                .arg(format!("{queue}|{DEPTH}"))
                .arg(depth)
                .ignore();
        }
        pipe.cmd("EXPIRE").arg(&key).arg(TREND_KEEP_S).ignore();
        let mut conn = self.conn().await?;
        pipe.query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// The counts of minutes `from..=to`, by minute then queue; a minute nobody counted
    /// is absent.
    pub async fn trends_read(
        &self,
        from: i64,
        to: i64,
    ) -> Result<BTreeMap<i64, BTreeMap<String, QueueMinute>>, CoordError> {
        let minutes: Vec<i64> = (from..=to).collect();
        if minutes.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut pipe = redis::pipe();
        for minute in &minutes {
            pipe.cmd("HGETALL").arg(self.keys.trend(*minute));
        }
        let mut conn = self.conn().await?;
        let hashes: Vec<BTreeMap<String, u64>> = pipe.query_async(&mut conn).await?;
        let mut out = BTreeMap::new();
        for (minute, hash) in minutes.into_iter().zip(hashes) {
            if hash.is_empty() {
                continue;
            }
            let mut queues = BTreeMap::<String, QueueMinute>::new();
            for (field, n) in hash {
                let Some((queue, what)) = field.rsplit_once('|') else {
                    continue;
                };
                let entry = queues.entry(queue.to_string()).or_default();
                match what {
                    SUBMITTED => entry.counts.submitted = n,
                    SUCCEEDED => entry.counts.succeeded = n,
                    FAILED => entry.counts.failed = n,
                    CANCELLED => entry.counts.cancelled = n,
                    DEPTH => entry.depth = Some(n),
                    _ => {}
                }
            }
            out.insert(minute, queues);
        }
        Ok(out)
    }
}
