//! Exponential backoff with jitter, for runner error retries and task retries. The
//! caller passes the random draw so the rule stays a pure function.

use std::time::Duration;

/// Exponential backoff: `initial`, doubling per failure up to `max`, spread by `jitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub initial: Duration,
    /// The longest wait, however many failures.
    pub max: Duration,
    /// Relative spread: 0.2 means ±20 %.
    pub jitter: f64,
}

impl Backoff {
    /// The runner's retry policy on server errors: 0.5 s doubling to 30 s, ±20 %.
    pub const RUNNER: Backoff = Backoff {
        initial: Duration::from_millis(500),
        max: Duration::from_secs(30),
        jitter: 0.2,
    };

    /// Delay before retry number `failures` (1 for the first retry). `unit` is a random
    /// draw in `[0, 1)`; 0.5 gives the un-jittered delay.
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        Duration::from_secs_f64(self.base(failures).as_secs_f64() * self.jitter_factor(unit))
    }

    /// The un-jittered delay before retry number `failures`: `initial` doubling up to `max`.
    pub fn base(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        let base = (self.initial.as_secs_f64() * 2f64.powi(exp as i32)).min(self.max.as_secs_f64());
        Duration::from_secs_f64(base)
    }

    /// What the jitter multiplies the base by, for a random draw `unit` in `[0, 1)`.
    pub fn jitter_factor(&self, unit: f64) -> f64 {
        1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0)
    }

    /// `base(1)`, `base(2)`, ... up to the first that reaches `max`: every later retry
    /// waits as long as the last entry. For a store that looks the delay up by attempt
    /// inside a batched statement, so the doubling rule stays here.
    pub fn schedule(&self) -> Vec<Duration> {
        let mut out = Vec::new();
        for failures in 1..=31 {
            let base = self.base(failures);
            out.push(base);
            if base >= self.max {
                break;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn doubles_until_the_cap() {
        let b = Backoff::RUNNER;
        assert_eq!(b.delay(1, 0.5), Duration::from_millis(500));
        assert_eq!(b.delay(2, 0.5), Duration::from_secs(1));
        assert_eq!(b.delay(3, 0.5), Duration::from_secs(2));
        assert_eq!(b.delay(20, 0.5), Duration::from_secs(30));
        assert_eq!(b.delay(u32::MAX, 0.5), Duration::from_secs(30));
    }

    #[test]
    fn the_schedule_is_the_base_delays_until_the_cap() {
        let b = Backoff::RUNNER;
        let schedule = b.schedule();
        assert_eq!(schedule.first(), Some(&Duration::from_millis(500)));
        assert_eq!(schedule.last(), Some(&Duration::from_secs(30)));
        for (i, base) in schedule.iter().enumerate() {
            assert_eq!(*base, b.base(i as u32 + 1));
        }
        assert_eq!(b.base(schedule.len() as u32 + 5), *schedule.last().unwrap());
    }

    proptest! {
        #[test]
        fn jitter_stays_within_twenty_percent(failures in 1u32..40, unit in 0.0f64..1.0) {
            let b = Backoff::RUNNER;
            let plain = b.delay(failures, 0.5).as_secs_f64();
            let jittered = b.delay(failures, unit).as_secs_f64();
            prop_assert!(jittered >= plain * 0.8 - 1e-9);
            prop_assert!(jittered <= plain * 1.2 + 1e-9);
        }
    }
}
