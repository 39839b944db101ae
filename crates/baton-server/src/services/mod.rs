//! The node's background services. Each is a [`Service`]: its own settings, the few
//! handles it uses, a pass as of a time it is given that returns what it did (tests call
//! it directly, with the time they choose), and the pauses and wake-ups that call for the
//! next; one loop ([`run`]) runs them all, the stuck-pass guard with it. [`NodeServices`]
//! are a node's services built from its state: [`spawn_all`] runs them, beside the
//! presence writer, which keeps a loop of its own (it writes once more as the node stops),
//! and a test holding a node in its process drives them a pass at a time
//! (`RunningNode::services`).

mod flow_repair;
pub mod janitor;
pub mod orphan_cleaner;
pub mod outbox;
pub mod presence;
pub mod promoter;
pub mod provisioner;
pub mod rebuilder;
pub mod reconciler;
pub mod repairer;
pub mod revocations;
pub mod scheduler;
mod service;
pub mod trends;

pub use service::{Passed, Running, Service, run};

use crate::state::AppState;
use baton_coord::CoordError;
use baton_store::StoreError;
use janitor::{Janitor, JanitorSettings};
use orphan_cleaner::OrphanCleaner;
use outbox::{OutboxDeliverer, OutboxSettings};
use presence::PresenceFlusher;
use promoter::Promoter;
use provisioner::Provisioners;
use rebuilder::Rebuilder;
use reconciler::{Reconciler, ReconcilerSettings};
use repairer::{Repairer, RepairerSettings};
use revocations::RevocationListener;
use scheduler::{Scheduler, SchedulerSettings};
use std::time::Duration;
use tokio::task::JoinHandle;
use trends::TrendRecorder;

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

/// How often a node adds its counts to the cluster's trends: a chart of minutes needs no
/// more, and the last few seconds of a stopping node's counts are all it can lose.
const TREND_INTERVAL: Duration = Duration::from_secs(5);

/// A node's background services, each built from the node's state with the handles it
/// uses: what [`spawn_all`] runs, and what a test drives one pass at a time.
pub struct NodeServices {
    /// Rebuilds Redis's queues and claims from Postgres after a data loss.
    pub rebuilder: Rebuilder,
    /// Ends the runs whose runners are gone, and expired leases.
    pub reconciler: Reconciler,
    /// Adopts a dead node's claims.
    pub orphan_cleaner: OrphanCleaner,
    /// Moves delayed tasks into their queues when they come due.
    pub promoter: Promoter,
    /// Puts back what Redis lost of a task Postgres still has waiting.
    pub repairer: Repairer,
    /// Fires due schedules.
    pub scheduler: Scheduler,
    /// Deletes what is past its retention.
    pub janitor: Janitor,
    /// Delivers webhooks.
    pub outbox: OutboxDeliverer,
    /// Writes the runners' presence, heard in Redis, to Postgres.
    pub presence_flusher: PresenceFlusher,
    /// Keeps the node's cache of runner tokens true.
    pub revocations: RevocationListener,
    /// Adds this node's counts to the cluster's per-minute trends.
    pub trends: TrendRecorder,
    /// Starts runners on demand for waiting work, and lets them go when done.
    pub provisioners: Provisioners,
}

impl NodeServices {
    /// The services of the node whose state this is.
    pub(crate) fn of(state: &AppState) -> NodeServices {
        let timings = &state.config.timings;
        let ms = Duration::from_millis;
        let (store, coord, identity) = (&state.store, &state.coord, &state.identity);
        NodeServices {
            rebuilder: Rebuilder::new(
                state.config.node_ttl() / 3,
                identity.clone(),
                coord.clone(),
                repairer(state),
            ),
            reconciler: reconciler(state),
            orphan_cleaner: OrphanCleaner::new(
                ms(timings.cleaner_interval_ms),
                identity.clone(),
                coord.clone(),
                store.clone(),
                reconciler(state),
            )
            .with_events(state.events.clone()),
            promoter: Promoter::new(
                ms(timings.promote_interval_ms),
                store.clone(),
                coord.clone(),
            )
            .with_events(state.events.clone()),
            repairer: repairer(state),
            scheduler: Scheduler::new(
                SchedulerSettings::of(&state.config),
                state.dispatcher.clone(),
                state.queue_defaults.clone(),
                state.webhooks.clone(),
            ),
            janitor: Janitor::new(
                JanitorSettings {
                    provisions: !state.config.provisioners.is_empty(),
                    ..JanitorSettings::of(timings)
                },
                store.clone(),
                coord.clone(),
            ),
            outbox: OutboxDeliverer::new(
                OutboxSettings::of(&state.config),
                store.clone(),
                state.webhooks.clone(),
                state.clock.clone(),
                state.shutdown.child_token(),
            ),
            presence_flusher: PresenceFlusher::new(
                ms(timings.presence_flush_ms),
                identity.clone(),
                coord.clone(),
                store.clone(),
            ),
            revocations: RevocationListener::new(
                ms(state.config.token_cache_ttl_ms.max(1000)),
                state.tokens.clone(),
                store.clone(),
            ),
            trends: TrendRecorder::new(TREND_INTERVAL, coord.clone()),
            provisioners: Provisioners::new(state.clone()),
        }
    }
}

/// Starts every background service of a node (the liveness heartbeat aside: the node
/// beats once before it serves), each with the handles it uses, until `state.shutdown`;
/// the ones that act on news from Redis hear the node's wake-ups.
pub(crate) fn spawn_all(state: &AppState) -> Vec<JoinHandle<()>> {
    let running = |woken: bool| Running {
        shutdown: state.shutdown.clone(),
        clock: state.clock.clone(),
        wake: woken.then(|| state.wake.clone()),
    };
    let services = NodeServices::of(state);
    let provisioning = !state.config.provisioners.is_empty();
    let mut spawned = vec![
        tokio::spawn(run(services.rebuilder, running(false))),
        tokio::spawn(run(services.reconciler, running(false))),
        tokio::spawn(run(services.orphan_cleaner, running(false))),
        tokio::spawn(run(services.promoter, running(false))),
        tokio::spawn(run(services.repairer, running(false))),
        tokio::spawn(run(services.scheduler, running(true))),
        tokio::spawn(run(services.janitor, running(false))),
        tokio::spawn(run(services.outbox, running(true))),
        tokio::spawn(run(services.presence_flusher, running(false))),
        tokio::spawn(run(services.revocations, running(true))),
        tokio::spawn(run(services.trends, running(false))),
        {
            let (presence, coord) = (state.dispatcher.presence.clone(), state.coord.clone());
            let interval = Duration::from_millis(state.config.timings.presence_write_ms);
            let stop = state.shutdown.clone();
            tokio::spawn(async move { presence.run(coord, interval, stop).await })
        },
    ];
    // A node with no provisioner neither starts runners nor adopts their assignments:
    // nodes of one cluster share their settings, and an idle one pays nothing for it.
    if provisioning {
        spawned.push(tokio::spawn(run(services.provisioners, running(false))));
    }
    spawned
}
