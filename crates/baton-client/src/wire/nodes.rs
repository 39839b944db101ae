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
    /// `--node-id`, else random per `baton serve` start; `<id>.<n>` once it rejoined after
    /// its liveness lapsed, so a node that was presumed dead is never its old self.
    pub id: String,
    /// The address it serves the API on, as it announces it: for operators to find it, not
    /// for clients to pick a node by.
    pub addr: String,
    /// When it joined under this id (a rejoin under a new id starts it again).
    pub started_at: DateTime<Utc>,
    /// Dispatched tasks this node owns (reconciles).
    pub claims: u64,
}
