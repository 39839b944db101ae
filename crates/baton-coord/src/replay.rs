//! Lease replay (design.md §4.7). What a lease request (or runner exchange) leased is
//! recorded by the lease script itself, under the request's id, for the node's
//! `replay_ttl` (the ack timeout, the longest park and a runner's longest backoff). A
//! resend of the request — its first answer was lost on the wire — is looked up there
//! first and gets the same tasks back, on any node, instead of stranding them until their
//! ack timeout.
//!
//! Nothing is written for a request that leased nothing, so an idle poll costs no replay
//! bookkeeping; and the lease script is one atomic step, so there is no "in progress"
//! state for a resend to wait on.

use crate::queue::parse_uuid;
use crate::{Coord, CoordError};
use baton_core::LeaseId;
use baton_core::RunnerId;
use uuid::Uuid;

/// Where a lease request's result is recorded for replay, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayKey {
    /// The record's Redis key.
    pub key: String,
    /// How long the record is kept, in ms.
    pub ttl_ms: u64,
}

impl Coord {
    /// The replay record of `runner`'s request `request_id`, kept for `ttl_ms`.
    pub fn replay_key(&self, runner: RunnerId, request_id: Uuid, ttl_ms: u64) -> ReplayKey {
        ReplayKey {
            key: self
                .keys
                .lease_request(&runner.to_string(), &request_id.to_string()),
            ttl_ms,
        }
    }

    /// Whether a replay record exists under `key`: a request that leased something was
    /// seen, on some node, under this id. A node that would answer a poll from its memory
    /// that the queues are empty (`KnownEmpty`) asks this first, so that a load balancer's
    /// unmarked resend of a request that leased (and started) tasks is replayed, not told
    /// "nothing": the queue's wake-up does not order the record against that memory.
    pub async fn replay_recorded(&self, key: &ReplayKey) -> Result<bool, CoordError> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("EXISTS")
            .arg(&key.key)
            .query_async::<i64>(&mut conn)
            .await?
            == 1)
    }
}

/// Parses a replay record: `task:lease,task:lease,...`.
pub(crate) fn parse_record(record: &str) -> Result<Vec<(Uuid, LeaseId)>, CoordError> {
    record
        .split(',')
        .map(|pair| {
            let (task, lease) = pair.split_once(':').ok_or_else(|| {
                CoordError::Internal(format!("malformed lease record {record:?}"))
            })?;
            Ok((parse_uuid(task)?, parse_uuid(lease)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse() {
        let (a, b, c, d) = (
            Uuid::new_v4(),
            LeaseId::random(),
            Uuid::new_v4(),
            LeaseId::random(),
        );
        assert_eq!(
            parse_record(&format!("{a}:{b},{c}:{d}")).unwrap(),
            vec![(a, b), (c, d)]
        );
        assert!(parse_record("nonsense").is_err());
    }
}
