//! The cluster's nodes as operators see them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `GET /v1/nodes`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct NodeList {
    pub nodes: Vec<NodeView>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeView {
    pub id: String,
    pub addr: String,
    pub started_at: DateTime<Utc>,
    /// Dispatched tasks this node owns (reconciles).
    pub claims: u64,
}
