//! The cluster's nodes as operators see them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `GET /v1/nodes`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct NodeList {
    /// Every node whose liveness key is current, by id; a node that stopped refreshing it
    /// is gone, and its claims are adopted by one of these.
    pub nodes: Vec<NodeView>,
}

/// A live node: who it is, where it serves, and how much it answers for.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeView {
    /// Random per `baton serve` start: a restarted process is a new node, never its old
    /// self.
    pub id: String,
    /// The address it serves the API on, as it announces it: for operators to find it, not
    /// for clients to pick a node by.
    pub addr: String,
    /// When its process started; a restart makes a new node, so this is also the node's
    /// age.
    pub started_at: DateTime<Utc>,
    /// Dispatched tasks this node owns (reconciles).
    pub claims: u64,
}
