//! One clock for the cluster: Redis's. Wherever one host's time is compared with
//! another's — a runner's presence stamped by one node and judged by the node that owns
//! its tasks, a claim's time, a run's start judged for its timeout — both read this
//! clock, so the nodes' wall clocks may disagree, or be stepped, without moving any
//! threshold.
//!
//! Reading Redis at every use would cost a round trip each, so each node samples Redis's
//! `TIME` at every liveness beat and counts from the sample on its monotonic clock:
//! between beats, only the drift of the node's clock rate counts (parts per million), and
//! a step of its wall clock none at all. Until the first sample lands (Redis unreachable
//! at start) the node's own wall clock stands in.

use crate::{Coord, CoordError};
use chrono::{DateTime, TimeZone, Utc};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The slowest round trip whose reading of Redis's clock is taken over the last one.
pub(crate) const TRUSTED_ROUND_TRIP: Duration = Duration::from_millis(100);

/// The cluster's time, read from Redis's clock and run on locally, so every node's `now` agrees.
#[derive(Debug, Default)]
pub struct ClusterClock {
    sample: Mutex<Option<Sample>>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Redis's time, in microseconds since the epoch, at `at`.
    redis_us: i64,
    at: Instant,
}

impl ClusterClock {
    /// The cluster's time now.
    pub fn now(&self) -> DateTime<Utc> {
        let sample = *self.sample.lock().expect("clock lock");
        match sample {
            Some(s) => {
                let us = s.redis_us + s.at.elapsed().as_micros() as i64;
                Utc.timestamp_micros(us).single().unwrap_or_else(Utc::now)
            }
            None => Utc::now(),
        }
    }

    /// The cluster's time now, in ms since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// Reads Redis's clock once. The reading is placed halfway through the round trip,
    /// so it is off by at most half of it; a reading from a round trip slower than
    /// [`TRUSTED_ROUND_TRIP`] (a slow or one-sided link) is not taken while an earlier
    /// one runs on.
    pub async fn sync(&self, coord: &Coord) -> Result<(), CoordError> {
        let sent = Instant::now();
        let redis_us = coord.time_us().await?;
        let round_trip = sent.elapsed();
        let sampled = self.sample.lock().expect("clock lock").is_some();
        if round_trip <= TRUSTED_ROUND_TRIP || !sampled {
            self.set(redis_us, sent + round_trip / 2);
        }
        Ok(())
    }

    fn set(&self, redis_us: i64, at: Instant) {
        *self.sample.lock().expect("clock lock") = Some(Sample { redis_us, at });
    }

    /// How far this node's wall clock is from the cluster's, for its metrics and logs.
    pub fn offset(&self) -> Duration {
        (Utc::now() - self.now()).abs().to_std().unwrap_or_default()
    }
}

impl Coord {
    /// Redis's clock (`TIME`), in microseconds since the epoch.
    pub async fn time_us(&self) -> Result<i64, CoordError> {
        let mut conn = self.conn().await?;
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
        Ok(secs * 1_000_000 + micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_counts_on_from_its_sample_whatever_the_wall_clock_says() {
        let clock = ClusterClock::default();
        // Whole microseconds, as Redis's TIME gives: the sample keeps no finer part, so
        // a read within a microsecond would otherwise come out before it.
        let redis = Utc
            .timestamp_micros((Utc::now() - chrono::Duration::seconds(3600)).timestamp_micros())
            .unwrap();
        clock.set(redis.timestamp_micros(), Instant::now());
        let read = clock.now();
        assert!(read >= redis && read - redis < chrono::Duration::seconds(1));
        assert!(clock.offset() >= Duration::from_secs(3599));
    }

    #[test]
    fn without_a_sample_it_is_the_wall_clock() {
        let clock = ClusterClock::default();
        assert!((Utc::now() - clock.now()).abs() < chrono::Duration::seconds(1));
    }
}
