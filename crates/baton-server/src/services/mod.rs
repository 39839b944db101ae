//! The node's background services. Each is a [`Service`]: its own settings, the few
//! handles it uses, a pass as of a time it is given that returns what it did (tests call
//! it directly, with the time they choose), and the pauses and wake-ups that call for the
//! next; one loop ([`run`]) runs them all, the stuck-pass guard with it. [`spawn_all`]
//! wires them to a node, beside the presence writer, which keeps a loop of its own: it
//! writes once more as the node stops.

mod flow_repair;
pub mod janitor;
pub mod orphan_cleaner;
mod outbox;
pub mod presence;
pub mod promoter;
pub mod rebuilder;
pub mod reconciler;
pub mod repairer;
mod revocations;
mod scheduler;
mod service;

pub use service::{Passed, Running, Service, run};

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
use std::time::Duration;
use tokio::task::JoinHandle;

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

fn reconciler(state: &AppState) -> Reconciler {
    Reconciler::new(
        ReconcilerSettings::of(&state.config.timings),
        state.identity.clone(),
        state.store.clone(),
        state.coord.clone(),
        state.clocks.clone(),
        state.dispatcher.finalizer(),
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
    let (store, coord, identity) = (&state.store, &state.coord, &state.identity);
    let running = |woken: bool| Running {
        shutdown: state.shutdown.clone(),
        clock: state.clock.clone(),
        wake: woken.then(|| state.wake.clone()),
    };
    vec![
        tokio::spawn(run(
            Rebuilder::new(
                state.config.node_ttl() / 3,
                identity.clone(),
                coord.clone(),
                repairer(state),
            ),
            running(false),
        )),
        tokio::spawn(run(reconciler(state), running(false))),
        tokio::spawn(run(
            OrphanCleaner::new(
                ms(timings.cleaner_interval_ms),
                identity.clone(),
                coord.clone(),
                store.clone(),
                reconciler(state),
            )
            .with_events(state.events.clone()),
            running(false),
        )),
        tokio::spawn(run(
            Promoter::new(
                ms(timings.promote_interval_ms),
                store.clone(),
                coord.clone(),
            )
            .with_events(state.events.clone()),
            running(false),
        )),
        tokio::spawn(run(repairer(state), running(false))),
        tokio::spawn(run(
            Scheduler::new(
                SchedulerSettings::of(&state.config),
                state.dispatcher.clone(),
                state.queue_defaults.clone(),
                state.webhooks.clone(),
            ),
            running(true),
        )),
        tokio::spawn(run(
            Janitor::new(JanitorSettings::of(timings), store.clone(), coord.clone()),
            running(false),
        )),
        tokio::spawn(run(
            OutboxDeliverer::new(
                OutboxSettings::of(&state.config),
                store.clone(),
                state.webhooks.clone(),
                state.clock.clone(),
            ),
            running(true),
        )),
        tokio::spawn(run(
            PresenceFlusher::new(
                ms(timings.presence_flush_ms),
                identity.clone(),
                coord.clone(),
                store.clone(),
            ),
            running(false),
        )),
        tokio::spawn(run(
            RevocationListener::new(
                ms(state.config.token_cache_ttl_ms.max(1000)),
                state.tokens.clone(),
                store.clone(),
            ),
            running(true),
        )),
        {
            let (presence, coord) = (state.dispatcher.presence.clone(), coord.clone());
            let interval = ms(timings.presence_write_ms);
            let stop = state.shutdown.clone();
            tokio::spawn(async move { presence.run(coord, interval, stop).await })
        },
    ]
}
