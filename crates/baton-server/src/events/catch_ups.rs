//! How much of the event history a node reads at once for subscribers that are behind.
//!
//! A subscriber resuming from an old place has the history read for it page by page, and
//! a filter that matches nothing sends nothing while it is read: one request can cost
//! Redis the whole history. So catch-ups take a permit: at most `max_catch_ups` read at
//! once on a node, and at most `max_catch_ups_per_token` of them for one token; the rest
//! wait their turn (and stop waiting when their client goes). Live subscribers, once
//! caught up, read nothing from Redis and need no permit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// This node's catch-up permits.
#[derive(Debug)]
pub(crate) struct CatchUps {
    node: Arc<Semaphore>,
    per_token: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_token_limit: usize,
}

/// A catch-up may read while this is held.
#[derive(Debug)]
pub(crate) struct Reading {
    _node: OwnedSemaphorePermit,
    _token: OwnedSemaphorePermit,
}

impl CatchUps {
    pub(crate) fn new(node_limit: usize, per_token_limit: usize) -> CatchUps {
        CatchUps {
            node: Arc::new(Semaphore::new(node_limit.max(1))),
            per_token: Mutex::default(),
            per_token_limit: per_token_limit.max(1),
        }
    }

    /// Waits for a turn to read for `token`: its own first, then the node's, so one
    /// token's waiting catch-ups never hold the node's places.
    pub(crate) async fn turn(&self, token: &str) -> Reading {
        let own = {
            let mut tokens = self.per_token.lock().unwrap_or_else(|e| e.into_inner());
            // Tokens no catch-up uses or waits for are forgotten.
            tokens.retain(|_, s| {
                Arc::strong_count(s) > 1 || s.available_permits() < self.per_token_limit
            });
            tokens
                .entry(token.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_token_limit)))
                .clone()
        };
        let token = own.acquire_owned().await.expect("never closed");
        let node = self
            .node
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        metrics::gauge!(crate::metrics::EVENT_CATCH_UPS).increment(1.0);
        Reading {
            _node: node,
            _token: token,
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        metrics::gauge!(crate::metrics::EVENT_CATCH_UPS).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_token_reads_within_its_share_and_the_node_within_its_own() {
        let catch_ups = CatchUps::new(3, 2);
        let (a1, _a2) = (catch_ups.turn("a").await, catch_ups.turn("a").await);
        let waiting = tokio::time::timeout(Duration::from_millis(50), catch_ups.turn("a")).await;
        assert!(waiting.is_err(), "a third for one token waits");
        let _b = catch_ups.turn("b").await;
        let full = tokio::time::timeout(Duration::from_millis(50), catch_ups.turn("c")).await;
        assert!(full.is_err(), "the node's places are all taken");
        drop(a1);
        let _c = tokio::time::timeout(Duration::from_millis(50), catch_ups.turn("c"))
            .await
            .expect("a place came back");
    }
}
