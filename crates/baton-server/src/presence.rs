//! Runner presence, kept in the node and written to Redis in one command per interval
//! for every runner it heard, instead of one command per request: an idle runner's poll
//! costs Redis nothing for its presence (design.md invariant 6). The reconciler reads it
//! from Redis, at most one interval late; the presence flusher copies it on to Postgres.

use baton_coord::Coord;
use baton_core::RunnerId;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// When each runner was last heard by this node, and under which boot, not yet written.
#[derive(Debug)]
pub(crate) struct PresenceBuffer {
    heard: Mutex<HashMap<RunnerId, (i64, Uuid)>>,
    /// The last write reached Redis: what is heard now will be seen by every node.
    reaching_redis: AtomicBool,
}

impl Default for PresenceBuffer {
    fn default() -> Self {
        PresenceBuffer {
            heard: Mutex::default(),
            reaching_redis: AtomicBool::new(true),
        }
    }
}

impl PresenceBuffer {
    /// `runner` (agent process `boot`) was heard at `at_ms`. Presence only moves forward.
    pub(crate) fn record(&self, runner: RunnerId, boot: Uuid, at_ms: i64) {
        let mut heard = self.heard.lock().expect("presence lock");
        let entry = heard.entry(runner).or_insert((at_ms, boot));
        if at_ms >= entry.0 {
            *entry = (at_ms, boot);
        }
    }

    fn take(&self) -> Vec<(RunnerId, i64, Uuid)> {
        let mut heard = self.heard.lock().expect("presence lock");
        heard
            .drain()
            .map(|(runner, (at, boot))| (runner, at, boot))
            .collect()
    }

    /// Whether presence heard now reaches the other nodes (its last write did).
    pub(crate) fn reaching_redis(&self) -> bool {
        self.reaching_redis.load(Ordering::Relaxed)
    }

    /// Puts back what could not be written, unless newer news came meanwhile.
    fn restore(&self, seen: Vec<(RunnerId, i64, Uuid)>) {
        for (runner, at, boot) in seen {
            self.record(runner, boot, at);
        }
    }

    /// Writes what was heard every `interval`, until `shutdown` (and once more then).
    pub(crate) async fn run(&self, coord: Coord, interval: Duration, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                _ = shutdown.cancelled() => true,
                _ = ticker.tick() => false,
            };
            let seen = self.take();
            let written = coord.presence_write(&seen).await;
            if !seen.is_empty() {
                self.reaching_redis
                    .store(written.is_ok(), Ordering::Relaxed);
            }
            if let Err(e) = written {
                tracing::debug!(error = %e, runners = seen.len(), "presence not written; next interval");
                self.restore(seen);
            }
            if stopping {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_only_moves_forward() {
        let buffer = PresenceBuffer::default();
        let (runner, old_boot, new_boot) = (RunnerId::random(), Uuid::new_v4(), Uuid::new_v4());
        buffer.record(runner, new_boot, 200);
        buffer.record(runner, old_boot, 100);
        assert_eq!(buffer.take(), vec![(runner, 200, new_boot)]);
        assert!(buffer.take().is_empty());
        buffer.record(runner, new_boot, 300);
        buffer.restore(vec![(runner, 250, old_boot)]);
        assert_eq!(buffer.take(), vec![(runner, 300, new_boot)]);
    }
}
