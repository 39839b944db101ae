//! Runners on demand (docs/dynamic-runners.md): the demand an autoscaler reads, and the
//! provisioners with their assignments.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `GET /v1/demand`: for a runner with `labels` serving `queues`, the waiting tasks it
/// could take and how many of them no registered runner could take now. KEDA's
/// `metrics-api` scaler reads one number of it (`valueLocation: waiting`, or `demand`).
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandView {
    /// The runner's labels, as asked (normalised).
    pub labels: Vec<String>,
    /// The queues it would serve; empty: all.
    pub queues: Vec<String>,
    /// Tasks waiting that such a runner could take and that ask for one of its labels
    /// (an unlabeled task never calls for a runner on demand).
    pub waiting: u64,
    /// How many of those the free slots of live runners, started by hand, could take now.
    pub covered: u64,
    /// `waiting - covered`: tasks no registered runner could take now.
    pub demand: u64,
}

/// One open assignment: a runner started on demand, or about to be started again.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignmentView {
    /// Its id.
    pub id: Uuid,
    /// `starting` (its runner has not taken a task yet), `running`, or `retrying` (its
    /// last runner failed; another starts at `retry_at` if the demand is still there).
    pub state: String,
    /// Which start of a runner for it this is.
    pub attempt: i32,
    /// Its runner's name.
    pub runner_name: String,
    /// The node that owns it.
    pub node_id: String,
    /// When its runner was started.
    pub started_at: DateTime<Utc>,
    /// When its runner took its task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<DateTime<Utc>>,
    /// When a retrying assignment starts a runner again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<DateTime<Utc>>,
    /// Why its last runner failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A provisioner as this node is configured with it, with its open assignments.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvisionerView {
    /// Its name.
    pub name: String,
    /// `process` or `command`.
    pub backend: String,
    /// Its runners' labels.
    pub labels: Vec<String>,
    /// Its runners' queues; empty: all.
    pub queues: Vec<String>,
    /// Most runners starting or running at once.
    pub capacity: u32,
    /// Its demand now ([`DemandView`]).
    pub demand: DemandView,
    /// Its open assignments, oldest first.
    pub assignments: Vec<AssignmentView>,
}

/// `GET /v1/provisioners`.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvisionerList {
    /// Every provisioner of this node's settings.
    pub provisioners: Vec<ProvisionerView>,
}
