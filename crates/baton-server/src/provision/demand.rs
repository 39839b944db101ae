//! The demand, measured: how many tasks wait in each queue key that is not paused
//! (Redis), and which
//! registered runners could take some now (Postgres's runners, Redis's presence). The
//! runners are read only when some served task waits, so an idle cluster pays one
//! pipelined Redis read per pass.

use crate::services::ServiceError;
use baton_coord::Coord;
use baton_core::LabelSet;
use baton_core::provision::{Demand, FreeRunner, Offer, Waiting, demand};
use baton_store::Store;
use chrono::{DateTime, TimeZone, Utc};
use std::time::Duration;

/// What the demand is measured from.
pub(crate) struct Measure<'a> {
    /// Postgres: the runners.
    pub store: &'a Store,
    /// Redis: the queues and the runners' presence.
    pub coord: &'a Coord,
    /// The time of the reading.
    pub now: DateTime<Utc>,
    /// A runner not heard from for this long could take nothing now
    /// (`runner_offline_after_s`).
    pub offline_after: Duration,
}

impl Measure<'_> {
    /// The demand each of `offers` sees, in their order.
    pub(crate) async fn demands(&self, offers: &[Offer]) -> Result<Vec<Demand>, ServiceError> {
        // A paused queue's tasks wait, but no runner may take them: they call for none.
        let paused = self.coord.queues_paused().await?;
        let waiting: Vec<Waiting> = self
            .coord
            .queue_key_depths()
            .await?
            .into_iter()
            .filter(|(queue, _, tasks)| *tasks > 0 && !paused.contains(queue))
            .map(|(queue, labels, tasks)| Waiting {
                queue,
                labels,
                tasks,
            })
            .collect();
        let served = |offer: &Offer| waiting.iter().any(|w| offer.serves(&w.queue, &w.labels));
        let free = if offers.iter().any(served) {
            self.free_runners().await?
        } else {
            Vec::new()
        };
        Ok(offers
            .iter()
            .map(|offer| demand(offer, &waiting, &free))
            .collect())
    }

    /// Registered runners, started by hand, that could take a task now: heard from
    /// lately, not paused, with capacity left over their started tasks (a lease Redis
    /// alone holds is not counted: it starts within milliseconds).
    async fn free_runners(&self) -> Result<Vec<FreeRunner>, ServiceError> {
        let runners: Vec<_> = self
            .store
            .runners_list()
            .await?
            .into_iter()
            .filter(|(r, _)| r.provisioner.is_none() && !r.paused)
            .collect();
        let ids: Vec<_> = runners.iter().map(|(r, _)| r.id).collect();
        let presence = self.coord.presence_get(&ids).await?;
        let offline_after = chrono::Duration::from_std(self.offline_after).unwrap_or_default();
        Ok(runners
            .into_iter()
            .zip(presence)
            .filter_map(|((runner, running), seen)| {
                let heard = seen.and_then(|(ms, _)| Utc.timestamp_millis_opt(ms).single());
                let live = heard
                    .max(runner.last_seen)
                    .is_some_and(|at| self.now - at < offline_after);
                let free = (i64::from(runner.capacity) - running).max(0) as u64;
                (live && free > 0).then(|| FreeRunner {
                    labels: LabelSet::new(runner.labels).unwrap_or_default(),
                    queues: runner.queues,
                    free,
                })
            })
            .collect())
    }
}
