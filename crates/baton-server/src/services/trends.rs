//! The trends recorder, on every node: every few seconds, what this node counted of each
//! queue (`baton_core::trend_tally`) is added to the cluster's per-minute counts in Redis,
//! with the queues' depths as seen now (`baton_coord::trends`). The console's charts and
//! its list of recently busy queues read them (`GET /v1/queues/trends`).

use super::ServiceError;
use super::service::Service;
use baton_coord::Coord;
use baton_core::trend_tally;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// What one pass wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrendReport {
    /// Queues whose counts it added.
    pub counted: usize,
    /// Queues whose depth it recorded.
    pub depths: usize,
}

/// Adds this node's counts to the cluster's every `interval`.
pub struct TrendRecorder {
    interval: Duration,
    coord: Coord,
}

impl TrendRecorder {
    /// A recorder passing every `interval`.
    pub fn new(interval: Duration, coord: Coord) -> Self {
        TrendRecorder { interval, coord }
    }

    /// One pass as of `now`: the tally so far, and the depths now, into `now`'s minute.
    /// Counts a failed write could not deliver go back to the tally for the next pass.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<TrendReport, ServiceError> {
        let minute = now.timestamp().div_euclid(60);
        let counts = trend_tally::take();
        let written = async {
            let depths = depths_seen(self.coord.queue_depths().await?, &counts);
            self.coord.trends_add(minute, &counts, &depths).await?;
            Ok::<_, baton_coord::CoordError>(depths.len())
        }
        .await;
        match written {
            Ok(depths) => Ok(TrendReport {
                counted: counts.len(),
                depths,
            }),
            Err(e) => {
                trend_tally::put_back(counts);
                Err(e.into())
            }
        }
    }
}

/// The depths to record: those of the queues with work (at most
/// [`trend_tally::MAX_QUEUES`] of them, as the counts are bounded), and 0 for a queue
/// counted now with none waiting — so a chart shows its backlog reach zero.
fn depths_seen(
    waiting: Vec<(String, u64)>,
    counted: &std::collections::BTreeMap<String, trend_tally::QueueTally>,
) -> Vec<(String, u64)> {
    let mut depths: Vec<(String, u64)> =
        waiting.into_iter().take(trend_tally::MAX_QUEUES).collect();
    let drained: Vec<(String, u64)> = counted
        .keys()
        .filter(|queue| !depths.iter().any(|(name, _)| name == *queue))
        .map(|queue| (queue.clone(), 0))
        .collect();
    depths.extend(drained);
    depths
}

impl Service for TrendRecorder {
    const NAME: &'static str = "trends";
    type Report = TrendReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<TrendReport, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::trend_tally::QueueTally;
    use std::collections::BTreeMap;

    #[test]
    fn a_queue_counted_with_nothing_waiting_is_recorded_at_zero() {
        let counted = BTreeMap::from([
            ("busy".to_string(), QueueTally::default()),
            ("drained".to_string(), QueueTally::default()),
        ]);
        let depths = depths_seen(vec![("busy".into(), 7), ("idle".into(), 2)], &counted);
        assert_eq!(
            depths,
            vec![
                ("busy".into(), 7),
                ("idle".into(), 2),
                ("drained".into(), 0)
            ]
        );
    }
}
