//! The node's background services. Each has the same shape: a `run_once(now)` that does
//! one pass and returns what it did (tests call it directly), and a loop that runs it on
//! a ticker until shutdown.

pub mod janitor;
pub mod orphan_cleaner;
pub mod outbox;
pub mod presence;
pub mod promoter;
pub mod rebuilder;
pub mod reconciler;
pub mod repairer;

use baton_coord::CoordError;
use baton_store::StoreError;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why a pass stopped early: Redis or Postgres failed. The next pass tries again.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Coord(#[from] CoordError),
}

/// Runs `pass` every `interval` until `shutdown`. A pass that overruns delays the next
/// one rather than stacking them.
pub async fn every<F, Fut>(interval: Duration, shutdown: CancellationToken, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A pass stuck on a call that never answers must not stop the service for good.
    let limit = (interval * 10).max(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {
                // At shutdown a pass is dropped where it stands, as a crash would: every
                // step is a compare-and-set, so nothing is left half-done.
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    passed = tokio::time::timeout(limit, pass()) => if passed.is_err() {
                        tracing::warn!(limit_s = limit.as_secs(), "a service pass took too long and was abandoned");
                    }
                }
            }
        }
    }
}
