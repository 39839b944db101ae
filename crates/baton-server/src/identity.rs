//! Who this node is right now. A node that could not refresh its liveness for `node_ttl`
//! may have been declared dead and had its claims adopted; it must not act on them, so it
//! takes a new id and starts over with no claims (design.md §4.11). The Postgres
//! compare-and-set on the lease remains the real fence for anything already in flight.

use baton_coord::NodeInfo;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

#[derive(Debug)]
pub struct NodeIdentity {
    base: String,
    generation: AtomicU32,
    current: RwLock<Arc<NodeInfo>>,
    /// When the liveness key was last refreshed (ms since the epoch, 0 = never).
    last_beat_ms: AtomicI64,
    ttl_ms: i64,
}

impl NodeIdentity {
    pub fn new(info: NodeInfo, ttl_ms: u64) -> Self {
        NodeIdentity {
            base: info.id.clone(),
            generation: AtomicU32::new(0),
            current: RwLock::new(Arc::new(info)),
            last_beat_ms: AtomicI64::new(0),
            ttl_ms: ttl_ms as i64,
        }
    }

    pub fn current(&self) -> Arc<NodeInfo> {
        self.current.read().expect("identity lock").clone()
    }

    pub fn id(&self) -> String {
        self.current().id.clone()
    }

    pub fn beat_succeeded(&self, now_ms: i64) {
        self.last_beat_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn last_beat_ms(&self) -> i64 {
        self.last_beat_ms.load(Ordering::Relaxed)
    }

    /// Whether our liveness key is certainly still there: refreshed within the TTL. Acting
    /// on claims is allowed only then.
    pub fn is_live(&self, now_ms: i64) -> bool {
        let last = self.last_beat_ms();
        last > 0 && now_ms - last < self.ttl_ms
    }

    /// Takes the next id (`<base>.<generation>`); the old id's claims are left to the
    /// orphan cleaner of whichever node gets there first — possibly this one.
    pub fn rotate(&self, now_ms: i64) -> Arc<NodeInfo> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut current = self.current.write().expect("identity lock");
        let next = Arc::new(NodeInfo {
            id: format!("{}.{generation}", self.base),
            addr: current.addr.clone(),
            started_at_ms: now_ms,
        });
        *current = next.clone();
        self.last_beat_ms.store(0, Ordering::Relaxed);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_lapses_after_the_ttl_and_rotation_starts_over() {
        let id = NodeIdentity::new(
            NodeInfo {
                id: "node-a".into(),
                addr: "x".into(),
                started_at_ms: 0,
            },
            10_000,
        );
        assert!(!id.is_live(1), "not live before the first beat");
        id.beat_succeeded(1_000);
        assert!(id.is_live(10_999));
        assert!(!id.is_live(11_000));
        let next = id.rotate(20_000);
        assert_eq!(next.id, "node-a.1");
        assert_eq!(id.id(), "node-a.1");
        assert!(!id.is_live(20_001));
        assert_eq!(id.rotate(30_000).id, "node-a.2");
    }
}
