//! What a step of the hot path can refuse with, in its own words: a stale lease, a task
//! gone, a node or store that cannot answer now, a cap reached. The HTTP status and error
//! code each becomes are chosen in one place (`crate::error`), and a caller that must
//! decide something (an item's answer, a heartbeat riding out an outage) matches on the
//! kind, not on a status code.

use baton_client::ItemResult;
use baton_coord::CoordError;
use baton_core::TaskStatus;
use baton_store::StoreError;

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum DispatchError {
    /// The item's lease is not the task's any more, or the task is not in a state that
    /// takes it: its runner drops the item (design.md §4.4).
    #[error("{reason} (task is {status})")]
    Stale {
        /// Where the task is now.
        status: TaskStatus,
        /// Why the step was refused.
        reason: &'static str,
    },
    /// No such task, or not this runner's (or this token's) to act on.
    #[error("no such task")]
    Gone,
    /// A start recorded whose secrets this node cannot open: run without them the task
    /// would do something else than was asked, so its runner drops it unrun.
    #[error("{0}")]
    SecretsSealed(String),
    /// This node or a store cannot take the request now; it may be asked again (of
    /// another node). `presence_recorded` says, on the runner API, whether the request
    /// still counted as its runner's proof of life.
    #[error("{message}")]
    Unavailable {
        /// What is away, with an id into this node's log for the store's own words.
        message: String,
        /// Whether the runner was heard by every node all the same (`None`: not said).
        presence_recorded: Option<bool>,
    },
    /// The runner already has as many lease requests parked here as it may.
    #[error("{0}")]
    TooManyParked(String),
    /// The submit would add a queue past `max_queues` (or the owner's cap).
    #[error("{0}")]
    TooManyQueues(String),
    /// The submit would add a label set past `max_label_sets` (or the owner's cap).
    #[error("{0}")]
    TooManyLabelSets(String),
    /// The runner was deleted while its request waited.
    #[error("this runner was deleted")]
    RunnerDeleted,
    /// Postgres refused for a reason of its own (a log chunk past the end, a value it
    /// does not take) or failed outright: answered as the store's error.
    #[error(transparent)]
    Store(StoreError),
    /// Redis failed outright (not merely away).
    #[error(transparent)]
    Coord(CoordError),
}

impl DispatchError {
    /// Its kind, in a word, for a trace: what refused the item, a store's outage told
    /// apart from its failure.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            DispatchError::Stale { .. } => "stale",
            DispatchError::Gone => "gone",
            DispatchError::SecretsSealed(_) => "secrets_sealed",
            DispatchError::Unavailable { .. } => "unavailable",
            DispatchError::TooManyParked(_) => "too_many_parked",
            DispatchError::TooManyQueues(_) => "too_many_queues",
            DispatchError::TooManyLabelSets(_) => "too_many_label_sets",
            DispatchError::RunnerDeleted => "runner_deleted",
            DispatchError::Store(_) => "store_refused",
            DispatchError::Coord(_) => "redis_failed",
        }
    }

    /// What a runner's item refused so tells the runner to do with it.
    pub(crate) fn item_result(&self) -> ItemResult {
        match self {
            DispatchError::Stale { .. } => ItemResult::Stale,
            DispatchError::Gone | DispatchError::SecretsSealed(_) => ItemResult::Gone,
            _ => ItemResult::Retry,
        }
    }

    /// Refused for being unavailable, said in this node's words.
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        DispatchError::Unavailable {
            message: message.into(),
            presence_recorded: None,
        }
    }
}

impl From<StoreError> for DispatchError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => DispatchError::Gone,
            StoreError::Conflict { status, reason } => DispatchError::Stale { status, reason },
            StoreError::Unavailable(m) => {
                DispatchError::unavailable(logged("database unavailable", &m))
            }
            other => DispatchError::Store(other),
        }
    }
}

impl From<CoordError> for DispatchError {
    fn from(e: CoordError) -> Self {
        match e {
            CoordError::Unavailable(m) => {
                DispatchError::unavailable(logged("redis unavailable", &m))
            }
            other => DispatchError::Coord(other),
        }
    }
}

/// A store's error, for the client: what failed and an id to find it by in this node's
/// log, where the store's own words go. They name hosts, users, tables and statements,
/// which are the operator's to read, not every caller's.
pub(crate) fn logged(what: &str, detail: &dyn std::fmt::Display) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let id = &id[..12];
    tracing::warn!(error.id = id, error = %detail, "{what}");
    format!("{what} (error {id} in the node's log)")
}
