//! Queue ordering: one sorted set per (queue, label set), scored so that `ZPOPMIN` yields
//! the highest priority first and, within a priority, the oldest.

use crate::labels::LabelSet;
use crate::validate::{PRIORITY_MAX, PRIORITY_MIN};

/// Milliseconds from the Unix epoch to 2024-01-01T00:00:00Z: ages are measured from here
/// so they stay small.
pub const AGE_EPOCH_MS: i64 = 1_704_067_200_000;

/// How far apart submit's add tags one owner's tasks in one queue, at the least
/// (`coord/src/lua/enqueue.lua`): an owner that queues faster than one task a second
/// yields to the others with work waiting.
pub const FAIR_SPACING_MS: i64 = 1_000;

/// One priority step outweighs any age: 2^42 ms is about 139 years.
pub const PRIORITY_STEP: f64 = (1u64 << 42) as f64;

/// The sorted-set score of a task: lower pops first. With priorities bounded to ±1000
/// and ages below 2^42 ms, every score is an integer below 2^53, so doubles hold it
/// exactly and no two orderings collide.
pub fn score(priority: i32, enqueued_at_ms: i64) -> f64 {
    let priority = priority.clamp(PRIORITY_MIN, PRIORITY_MAX);
    let age = (enqueued_at_ms - AGE_EPOCH_MS).clamp(0, (1i64 << 42) - 1);
    -(priority as f64) * PRIORITY_STEP + age as f64
}

/// The identity of one Redis queue, relative to the key prefix.
pub fn queue_key(queue: &str, labels: &LabelSet) -> String {
    format!("q:{queue}:{}", labels.key_part())
}

/// The inverse of [`queue_key`]: `(queue, labels)`, or `None` for a key that is not a
/// queue key. Queue names hold no `:`, so the first one after `q:` ends the name.
pub fn parse_queue_key(key: &str) -> Option<(String, LabelSet)> {
    let rest = key.strip_prefix("q:")?;
    let (queue, labels) = rest.split_once(':')?;
    let labels = match labels {
        "-" => LabelSet::empty(),
        joined => LabelSet::new(joined.split(',')).ok()?,
    };
    Some((queue.to_string(), labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn higher_priority_pops_first_whatever_its_age() {
        let old_low = score(0, AGE_EPOCH_MS);
        let new_high = score(1, AGE_EPOCH_MS + 100 * 365 * 24 * 3600 * 1000);
        assert!(new_high < old_low);
    }

    #[test]
    fn keys_name_queue_and_labels() {
        let labels = LabelSet::new(["linux", "gpu"]).unwrap();
        assert_eq!(queue_key("builds", &labels), "q:builds:gpu,linux");
        assert_eq!(queue_key("default", &LabelSet::empty()), "q:default:-");
    }

    #[test]
    fn keys_parse_back() {
        for labels in [
            LabelSet::empty(),
            LabelSet::new(["os=linux", "gpu:a100"]).unwrap(),
        ] {
            let key = queue_key("builds.x", &labels);
            assert_eq!(
                parse_queue_key(&key),
                Some(("builds.x".to_string(), labels))
            );
        }
        assert_eq!(parse_queue_key("running"), None);
        assert_eq!(parse_queue_key("q:nolabels"), None);
    }

    proptest! {
        #[test]
        fn order_is_priority_desc_then_age_asc(
            p1 in PRIORITY_MIN..=PRIORITY_MAX, p2 in PRIORITY_MIN..=PRIORITY_MAX,
            t1 in AGE_EPOCH_MS..AGE_EPOCH_MS + (1i64 << 41),
            t2 in AGE_EPOCH_MS..AGE_EPOCH_MS + (1i64 << 41),
        ) {
            let (s1, s2) = (score(p1, t1), score(p2, t2));
            let expected = (-(p1 as i64), t1).cmp(&(-(p2 as i64), t2));
            prop_assert_eq!(s1.partial_cmp(&s2).unwrap(), expected);
            prop_assert!(s1.abs() < (1u64 << 53) as f64);
        }
    }
}
