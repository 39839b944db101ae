//! Who this node is right now. A node that could not refresh its liveness for `node_ttl`
//! may have been declared dead and had its claims adopted; it must not act on them, so it
//! takes a new id and starts over with no claims (design.md §4.11). The Postgres
//! compare-and-set on the lease remains the real fence for anything already in flight.

use baton_coord::NodeInfo;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// This node's current id and whether its liveness key certainly still lives. Shared by
/// everything that claims or acts on claims: each asks [`NodeIdentity::is_live`] first.
#[derive(Debug)]
pub struct NodeIdentity {
    base: String,
    generation: AtomicU32,
    current: RwLock<Arc<NodeInfo>>,
    /// When the last refresh that landed was sent, in nanoseconds after `origin`, plus
    /// one (0 = none since the last rotation). Monotonic: Redis counts the key's TTL on
    /// its own clock, and a wall clock stepped back by NTP or an operator must not
    /// stretch how long this node believes its key lives.
    last_beat_sent: AtomicU64,
    origin: Instant,
    ttl: Duration,
}

impl NodeIdentity {
    /// A node starting as `info`, not yet live: it is live only once a refresh of its key
    /// lands ([`NodeIdentity::beat_succeeded`]). `ttl_ms` is the key's TTL.
    pub fn new(info: NodeInfo, ttl_ms: u64) -> Self {
        NodeIdentity {
            base: info.id.clone(),
            generation: AtomicU32::new(0),
            current: RwLock::new(Arc::new(info)),
            last_beat_sent: AtomicU64::new(0),
            origin: Instant::now(),
            ttl: Duration::from_millis(ttl_ms),
        }
    }

    /// What the liveness key says of this node now, under its current id.
    pub fn current(&self) -> Arc<NodeInfo> {
        self.current.read().expect("identity lock").clone()
    }

    /// The current id: the one claims are made under from now on. It changes at each
    /// rotation, so read it for each use rather than keeping it.
    pub fn id(&self) -> String {
        self.current().id.clone()
    }

    /// A refresh sent at `sent` landed. Its TTL started when Redis ran it, no earlier than
    /// the send: counting from the send never overstates the key's life.
    pub fn beat_succeeded(&self, sent: Instant) {
        let nanos = sent.saturating_duration_since(self.origin).as_nanos() as u64;
        self.last_beat_sent.store(nanos + 1, Ordering::Relaxed);
    }

    /// Whether a refresh landed since the last rotation.
    pub fn has_beaten(&self) -> bool {
        self.last_beat_sent.load(Ordering::Relaxed) > 0
    }

    /// Whether our liveness key is certainly still there: refreshed within the TTL. Acting
    /// on claims is allowed only then.
    pub fn is_live(&self) -> bool {
        self.is_live_at(Instant::now())
    }

    fn is_live_at(&self, now: Instant) -> bool {
        match self.last_beat_sent.load(Ordering::Relaxed) {
            0 => false,
            sent => {
                let sent = self.origin + Duration::from_nanos(sent - 1);
                now.saturating_duration_since(sent) < self.ttl
            }
        }
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
            opens_sealed_secrets: true,
        });
        *current = next.clone();
        self.last_beat_sent.store(0, Ordering::Relaxed);
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
                opens_sealed_secrets: true,
            },
            10_000,
        );
        let t0 = Instant::now();
        assert!(!id.is_live_at(t0), "not live before the first beat");
        id.beat_succeeded(t0);
        assert!(id.is_live_at(t0 + Duration::from_millis(9_999)));
        assert!(!id.is_live_at(t0 + Duration::from_millis(10_000)));
        let next = id.rotate(20_000);
        assert_eq!(next.id, "node-a.1");
        assert_eq!(id.id(), "node-a.1");
        assert!(!id.is_live_at(t0 + Duration::from_millis(10_001)));
        assert_eq!(id.rotate(30_000).id, "node-a.2");
    }
}
