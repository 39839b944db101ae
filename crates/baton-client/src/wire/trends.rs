//! `GET /v1/queues/trends`: what the cluster saw of each queue, minute by minute.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One minute of one queue.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrendPoint {
    /// The minute's start.
    pub at: DateTime<Utc>,
    /// Tasks accepted in it.
    pub submitted: u64,
    /// Tasks that ended `succeeded` in it.
    pub succeeded: u64,
    /// Tasks that ended `failed` or `timed_out` in it.
    pub failed: u64,
    /// Tasks that ended `cancelled` or `expired` in it.
    #[serde(default)]
    pub cancelled: u64,
    /// Tasks waiting, as last seen in it (0 once a queue counted in it had none waiting);
    /// absent when no node saw the queue in it.
    pub depth: Option<u64>,
}

/// One queue's minutes, oldest first, one point per minute.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueTrend {
    /// The queue (`other queues` sums those past the nodes' bound on names).
    pub queue: String,
    /// Its minutes.
    pub points: Vec<TrendPoint>,
}

/// Every queue with something counted in the window, by name.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueTrends {
    /// Seconds per point: 60.
    pub step_s: u32,
    /// The queues.
    pub queues: Vec<QueueTrend>,
}
