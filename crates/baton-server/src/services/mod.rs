//! The node's background services. Each has the same shape: its own settings, the few
//! handles it uses (never the whole node state), a `run_once(now)` that does one pass
//! and returns what it did (tests call it directly, with the time they choose), and a
//! `run(shutdown)` loop that runs it on a ticker until shutdown. [`spawn_all`] wires them
//! to a node.

mod flow_repair;
pub mod janitor;
mod orphan_cleaner;
mod outbox;
mod presence;
pub mod promoter;
pub mod rebuilder;
pub mod reconciler;
pub mod repairer;
mod revocations;
mod scheduler;

use crate::state::AppState;
use baton_coord::CoordError;
use baton_store::StoreError;
use janitor::{Janitor, JanitorSettings};
use orphan_cleaner::OrphanCleaner;
use outbox::{OutboxDeliverer, OutboxSettings};
use presence::PresenceFlusher;
use promoter::Promoter;
use rebuilder::Rebuilder;
use reconciler::{Reconciler, ReconcilerSettings};
use repairer::{Repairer, RepairerSettings};
use revocations::RevocationListener;
use scheduler::{Scheduler, SchedulerSettings};
use std::future::Future;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Why a pass stopped early: Redis or Postgres failed. The next pass tries again.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Postgres failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis failed.
    #[error(transparent)]
    Coord(#[from] CoordError),
}

/// Runs `pass` every `interval` until `shutdown`. A pass that overruns delays the next
/// one rather than stacking them.
pub(crate) async fn every<F, Fut>(interval: Duration, shutdown: CancellationToken, mut pass: F)
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

fn reconciler(state: &AppState) -> Reconciler {
    Reconciler::new(
        ReconcilerSettings::of(&state.config.timings),
        state.identity.clone(),
        state.store.clone(),
        state.coord.clone(),
        state.clocks.clone(),
        state.finalizer(),
    )
    .with_events(state.events.clone())
}

fn repairer(state: &AppState) -> Repairer {
    Repairer::new(
        RepairerSettings::of(&state.config.timings),
        state.identity.clone(),
        state.store.clone(),
        state.coord.clone(),
    )
    .with_events(state.events.clone())
}

/// Starts every background service of a node (the liveness heartbeat aside: the node
/// beats once before it serves), each with the handles it uses, until `state.shutdown`.
pub(crate) fn spawn_all(state: &AppState) -> Vec<JoinHandle<()>> {
    let timings = &state.config.timings;
    let ms = Duration::from_millis;
    let stop = || state.shutdown.clone();
    let clock = || state.clock.clone();
    let (store, coord, identity) = (&state.store, &state.coord, &state.identity);
    vec![
        tokio::spawn(
            Rebuilder::new(
                state.config.node_ttl() / 3,
                identity.clone(),
                coord.clone(),
                repairer(state),
            )
            .run(stop(), clock()),
        ),
        tokio::spawn(reconciler(state).run(stop(), clock())),
        tokio::spawn(
            OrphanCleaner::new(
                ms(timings.cleaner_interval_ms),
                identity.clone(),
                coord.clone(),
                store.clone(),
                reconciler(state),
            )
            .with_events(state.events.clone())
            .run(stop(), clock()),
        ),
        tokio::spawn(
            Promoter::new(
                ms(timings.promote_interval_ms),
                store.clone(),
                coord.clone(),
            )
            .with_events(state.events.clone())
            .run(stop(), clock()),
        ),
        tokio::spawn(repairer(state).run(stop(), clock())),
        tokio::spawn(
            Scheduler::new(SchedulerSettings::of(&state.config), state.clone()).run(stop()),
        ),
        tokio::spawn(
            Janitor::new(JanitorSettings::of(timings), store.clone(), coord.clone())
                .run(stop(), clock()),
        ),
        tokio::spawn(
            OutboxDeliverer::new(
                OutboxSettings::of(&state.config),
                store.clone(),
                state.webhooks.clone(),
                state.wake.clone(),
                clock(),
            )
            .run(stop()),
        ),
        tokio::spawn(
            PresenceFlusher::new(
                ms(timings.presence_flush_ms),
                identity.clone(),
                coord.clone(),
                store.clone(),
            )
            .run(stop()),
        ),
        tokio::spawn(
            RevocationListener::new(
                ms(state.config.token_cache_ttl_ms.max(1000)),
                state.tokens.clone(),
                store.clone(),
                state.wake.clone(),
            )
            .run(stop()),
        ),
        {
            let (presence, coord) = (state.presence.clone(), coord.clone());
            let interval = ms(timings.presence_write_ms);
            let stop = stop();
            tokio::spawn(async move { presence.run(coord, interval, stop).await })
        },
    ]
}
