//! The test-only faults a node can be started with (`--fault`), parsed once at start: a
//! name no node knows is refused there, not silently ignored by every check that compares
//! against it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A fault a node injects into itself, as a crash or a stall at that point would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Fault {
    /// `after-pop`: abort between the Redis pop of a lease and its Postgres write.
    AfterPop,
    /// `after-fire`: abort after a schedule's fire that cancels an earlier run committed,
    /// before anything follows it.
    AfterFire,
    /// `abort-before-commit`: abort inside a group commit, before its `COMMIT`.
    AbortBeforeCommit,
    /// `abort-after-commit`: abort inside a group commit, after its `COMMIT`.
    AbortAfterCommit,
    /// `fail-after-commit`: a group commit takes effect but answers as if Postgres were
    /// unreachable (the answer to a commit lost).
    FailAfterCommit,
    /// `hold-answer:<queue>:<seconds>`: the first exchange answer handing out a task of
    /// the queue waits that long after its commit, as behind a frozen node or a held link.
    HoldAnswer {
        /// The queue whose task the held answer hands out.
        queue: String,
        /// How long it is held.
        seconds: u64,
    },
    /// `hold-answer-refusing-resends:<queue>:<seconds>`: as `hold-answer`, and every
    /// resend arriving while the answer is held is refused as unavailable, as when the
    /// node that answered is cut off and the others are out of reach of its resends.
    HoldAnswerRefusingResends {
        /// The queue whose task the held answer hands out.
        queue: String,
        /// How long it is held, and resends refused.
        seconds: u64,
    },
    /// `hold-results:<seconds>`: every exchange carrying a run's result waits until that
    /// long after the first such arrived, having counted as the runner's presence, while
    /// exchanges without one are answered at once: a result slowed on its way while the
    /// runner's other requests get through.
    HoldResults {
        /// How long after the first result arrived the held ones go on.
        seconds: u64,
    },
    /// `hold-logs:<seconds>`: every chunk of a run's output waits that long before it is
    /// stored, as behind a node slow to take logs, while exchanges are answered at once.
    HoldLogs {
        /// How long each chunk waits.
        seconds: u64,
    },
}

impl Fault {
    /// The names `--fault` takes, for the refusal of any other.
    pub const NAMES: &'static str = "after-pop, after-fire, abort-before-commit, abort-after-commit, fail-after-commit, hold-answer:<queue>:<seconds>, hold-answer-refusing-resends:<queue>:<seconds>, hold-results:<seconds>, hold-logs:<seconds>";
}

/// A `--fault` no node knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault {0:?}: one of {names}", names = Fault::NAMES)]
pub struct UnknownFault(String);

impl FromStr for Fault {
    type Err = UnknownFault;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Ok(match name {
            "after-pop" => Fault::AfterPop,
            "after-fire" => Fault::AfterFire,
            "abort-before-commit" => Fault::AbortBeforeCommit,
            "abort-after-commit" => Fault::AbortAfterCommit,
            "fail-after-commit" => Fault::FailAfterCommit,
            _ => parsed_with_arguments(name).ok_or_else(|| UnknownFault(name.to_string()))?,
        })
    }
}

/// A fault whose name carries its arguments, or `None`.
fn parsed_with_arguments(name: &str) -> Option<Fault> {
    let queue_and_seconds = |rest: &str| -> Option<(String, u64)> {
        let (queue, seconds) = rest.rsplit_once(':')?;
        if queue.is_empty() {
            return None;
        }
        Some((queue.to_string(), seconds.parse().ok()?))
    };
    if let Some(rest) = name.strip_prefix("hold-answer:") {
        let (queue, seconds) = queue_and_seconds(rest)?;
        Some(Fault::HoldAnswer { queue, seconds })
    } else if let Some(rest) = name.strip_prefix("hold-answer-refusing-resends:") {
        let (queue, seconds) = queue_and_seconds(rest)?;
        Some(Fault::HoldAnswerRefusingResends { queue, seconds })
    } else if let Some(seconds) = name.strip_prefix("hold-results:") {
        Some(Fault::HoldResults {
            seconds: seconds.parse().ok()?,
        })
    } else {
        let seconds = name.strip_prefix("hold-logs:")?.parse().ok()?;
        Some(Fault::HoldLogs { seconds })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::AfterPop => f.write_str("after-pop"),
            Fault::AfterFire => f.write_str("after-fire"),
            Fault::AbortBeforeCommit => f.write_str("abort-before-commit"),
            Fault::AbortAfterCommit => f.write_str("abort-after-commit"),
            Fault::FailAfterCommit => f.write_str("fail-after-commit"),
            Fault::HoldAnswer { queue, seconds } => write!(f, "hold-answer:{queue}:{seconds}"),
            Fault::HoldAnswerRefusingResends { queue, seconds } => {
                write!(f, "hold-answer-refusing-resends:{queue}:{seconds}")
            }
            Fault::HoldResults { seconds } => write!(f, "hold-results:{seconds}"),
            Fault::HoldLogs { seconds } => write!(f, "hold-logs:{seconds}"),
        }
    }
}

impl TryFrom<String> for Fault {
    type Error = UnknownFault;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        name.parse()
    }
}

impl From<Fault> for String {
    fn from(fault: Fault) -> String {
        fault.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_reads_back_as_it_is_written() {
        for fault in [
            Fault::AfterPop,
            Fault::AfterFire,
            Fault::AbortBeforeCommit,
            Fault::AbortAfterCommit,
            Fault::FailAfterCommit,
            Fault::HoldAnswer {
                queue: "q:1".into(),
                seconds: 8,
            },
            Fault::HoldAnswerRefusingResends {
                queue: "q".into(),
                seconds: 30,
            },
            Fault::HoldResults { seconds: 20 },
            Fault::HoldLogs { seconds: 8 },
        ] {
            assert_eq!(fault.to_string().parse::<Fault>(), Ok(fault));
        }
    }

    #[test]
    fn a_name_no_node_knows_is_refused_with_the_names_it_could_be() {
        for bad in [
            "after-pops",
            "",
            "hold-answer:q",
            "hold-answer::3",
            "hold-answer:q:x",
            "hold-answer-refusing-resends::3",
            "hold-results:",
            "hold-results:q:3",
        ] {
            let refused = bad.parse::<Fault>().unwrap_err().to_string();
            assert!(refused.contains("after-pop, after-fire"), "{refused}");
        }
        assert!(serde_json::from_str::<Fault>("\"abort-now\"").is_err());
    }
}
