//! Runner labels and the matching rule: a runner may take a task when the task's labels
//! are a subset of the runner's, and, if the runner names queues, the task's queue is one
//! of them.

use crate::validate::{Invalid, check_name};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A normalised (sorted, de-duplicated) set of labels. Normalising on the way in makes
/// `[b, a]` and `[a, b, a]` the same set, and so the same Redis queue key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct LabelSet(Vec<String>);

/// The most labels one task or runner may carry; matching is a subset test on each
/// lease, so keep sets small.
pub const MAX_LABELS: usize = 32;

impl LabelSet {
    /// The set of `labels`, each checked, deduplicated and sorted; at most [`MAX_LABELS`].
    pub fn new<I, S>(labels: I) -> Result<Self, Invalid>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let set: BTreeSet<String> = labels.into_iter().map(Into::into).collect();
        if set.len() > MAX_LABELS {
            return Err(Invalid::new(
                "labels",
                format!("at most {MAX_LABELS} labels are allowed, got {}", set.len()),
            ));
        }
        for label in &set {
            check_label(label)?;
        }
        Ok(LabelSet(set.into_iter().collect()))
    }

    /// The set with no labels: a task that needs none, a runner that offers none.
    pub fn empty() -> Self {
        LabelSet(Vec::new())
    }

    /// The labels, sorted.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// How many labels the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set holds no label.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every label of `self` is also in `other`.
    pub fn is_subset_of(&self, other: &LabelSet) -> bool {
        self.0.iter().all(|l| other.0.binary_search(l).is_ok())
    }

    /// The canonical text form used inside Redis keys: labels joined by commas
    /// (labels cannot contain one), `-` for the empty set.
    pub fn key_part(&self) -> String {
        if self.0.is_empty() {
            "-".to_string()
        } else {
            self.0.join(",")
        }
    }
}

impl TryFrom<Vec<String>> for LabelSet {
    type Error = Invalid;
    fn try_from(v: Vec<String>) -> Result<Self, Self::Error> {
        LabelSet::new(v)
    }
}

impl From<LabelSet> for Vec<String> {
    fn from(s: LabelSet) -> Self {
        s.0
    }
}

/// A label: 1–64 characters of `[a-zA-Z0-9._:=/-]`, starting with a letter or digit.
/// `key=value` style labels (`os=linux`) are welcome; commas are not (they separate labels
/// in queue keys).
pub fn check_label(label: &str) -> Result<(), Invalid> {
    check_name("labels", label, 64, |c| {
        c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '=' | '/' | '-')
    })
}

/// The matching rule of design.md §2.
pub fn runner_can_take(
    runner_labels: &LabelSet,
    runner_queues: &[String],
    task_queue: &str,
    task_labels: &LabelSet,
) -> bool {
    task_labels.is_subset_of(runner_labels)
        && (runner_queues.is_empty() || runner_queues.iter().any(|q| q == task_queue))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(labels: &[&str]) -> LabelSet {
        LabelSet::new(labels.iter().copied()).unwrap()
    }

    #[test]
    fn normalises_order_and_duplicates() {
        assert_eq!(set(&["b", "a", "b"]), set(&["a", "b"]));
        assert_eq!(set(&["b", "a"]).key_part(), "a,b");
        assert_eq!(LabelSet::empty().key_part(), "-");
    }

    #[test]
    fn rejects_bad_labels() {
        for bad in ["", "-x", "a,b", "a b", "é", &"x".repeat(65)] {
            assert!(LabelSet::new([bad]).is_err(), "{bad:?} should be refused");
        }
        for good in ["linux", "os=linux", "gpu:a100", "x86_64", "team/ci", "A1"] {
            assert!(LabelSet::new([good]).is_ok(), "{good:?} should be accepted");
        }
        let too_many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}")).collect();
        assert!(LabelSet::new(too_many).is_err());
    }

    #[test]
    fn matching_table() {
        type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a str, &'a [&'a str], bool);
        let cases: &[Case] = &[
            // runner labels, runner queues, task queue, task labels, may take
            (&[], &[], "default", &[], true),
            (&["linux"], &[], "default", &[], true),
            (&["linux"], &[], "default", &["linux"], true),
            (&["linux", "gpu"], &[], "default", &["gpu", "linux"], true),
            (&["linux"], &[], "default", &["gpu"], false),
            (&[], &[], "default", &["linux"], false),
            (&["linux"], &["builds"], "default", &["linux"], false),
            (
                &["linux"],
                &["builds", "default"],
                "default",
                &["linux"],
                true,
            ),
            (&[], &["builds"], "builds", &[], true),
        ];
        for (rl, rq, tq, tl, expected) in cases {
            let rq: Vec<String> = rq.iter().map(|s| s.to_string()).collect();
            assert_eq!(
                runner_can_take(&set(rl), &rq, tq, &set(tl)),
                *expected,
                "runner {rl:?} queues {rq:?} task {tq} {tl:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn subset_agrees_with_set_semantics(
            a in proptest::collection::btree_set("[a-c]", 0..4),
            b in proptest::collection::btree_set("[a-c]", 0..4),
        ) {
            let sa = LabelSet::new(a.iter().cloned()).unwrap();
            let sb = LabelSet::new(b.iter().cloned()).unwrap();
            prop_assert_eq!(sa.is_subset_of(&sb), a.is_subset(&b));
            // Every set serves itself, and the empty task set is served by anyone.
            prop_assert!(sa.is_subset_of(&sa));
            prop_assert!(LabelSet::empty().is_subset_of(&sb));
        }
    }
}
