//! The orphan cleaner, on every node: claims whose node's liveness key expired are taken
//! over — all of a dead node's claims at once, by one Lua script that checks the owner is
//! still dead — so exactly one live node adopts each orphan. The adopter reconciles them
//! at once (design.md invariant 5).

use super::ServiceError;
use super::reconciler::Reconciler;
use super::service::Service;
use crate::events::{EventLog, NodeChange};
use crate::identity::NodeIdentity;
use baton_client::trace_context;
use baton_coord::Coord;
use baton_store::Store;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// What a pass took over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanerReport {
    /// Dead nodes whose claims this node took over.
    pub dead_nodes: Vec<String>,
    /// Claims adopted from them.
    pub adopted: usize,
}

/// Takes over the claims of nodes whose liveness lapsed, and reconciles them at once.
pub struct OrphanCleaner {
    interval: Duration,
    identity: Arc<NodeIdentity>,
    coord: Coord,
    store: Store,
    /// Reconciles what was adopted at once, not at its next pass.
    reconciler: Reconciler,
    events: Option<EventLog>,
}

impl OrphanCleaner {
    /// A cleaner looking every `interval`, as the node `identity`.
    pub fn new(
        interval: Duration,
        identity: Arc<NodeIdentity>,
        coord: Coord,
        store: Store,
        reconciler: Reconciler,
    ) -> Self {
        OrphanCleaner {
            interval,
            identity,
            coord,
            store,
            reconciler,
            events: None,
        }
    }

    /// Tells the event stream of the nodes it finds lost.
    pub(crate) fn with_events(self, events: EventLog) -> Self {
        OrphanCleaner {
            events: Some(events),
            ..self
        }
    }

    /// A span in each adopted task's trace, so its story shows the hand-over.
    async fn trace_adoptions(&self, adopted: &[uuid::Uuid], dead: &str, me: &str) {
        let Ok(tasks) = self.store.tasks_by_ids(adopted).await else {
            return; // Only the traces miss it; the adoption itself stands.
        };
        for task in tasks {
            let span = tracing::info_span!("task.adopt", task.id = %task.id, node.dead = %dead, node.id = %me);
            trace_context::adopt_parent(&span, task.traceparent.as_deref());
            span.in_scope(|| tracing::info!(task.id = %task.id, "claim adopted"));
        }
    }

    /// One pass as of `now`: every dead node's claims taken over, then reconciled.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<CleanerReport, ServiceError> {
        let mut report = CleanerReport::default();
        if !self.identity.is_live() {
            return Ok(report);
        }
        let me = self.identity.id();
        let live: HashSet<String> = self
            .coord
            .nodes_live()
            .await?
            .into_iter()
            .map(|n| n.id)
            .collect();
        for owner in self.coord.claim_owners().await? {
            if owner == me || live.contains(&owner) {
                continue;
            }
            let Some(adopted) = self.coord.claims_take_over(&owner, &me).await? else {
                continue; // it came back
            };
            if !adopted.is_empty() {
                tracing::warn!(node.dead = %owner, node.id = %me, adopted = adopted.len(), "adopted a dead node's claims");
                self.trace_adoptions(&adopted, &owner, &me).await;
                if let Some(events) = &self.events {
                    let adoption = (me.clone(), adopted.len());
                    events.node(NodeChange::Lost, &owner, Some(adoption)).await;
                }
                report.adopted += adopted.len();
                crate::metrics::orphans_adopted(adopted.len());
                report.dead_nodes.push(owner);
            }
        }
        if report.adopted > 0 {
            self.reconciler.run_once(now).await?;
        }
        Ok(report)
    }
}

impl Service for OrphanCleaner {
    const NAME: &'static str = "orphan cleaner";
    type Report = CleanerReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<CleanerReport, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}
