use baton_core::TaskStatus;
use std::sync::atomic::{AtomicU64, Ordering};

/// Store failures, classified for the HA code (conventions.md "Errors").
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Postgres could not be reached or did not answer in time: retry later, report
    /// not-ready, answer 503.
    #[error("postgres unavailable: {0}")]
    Unavailable(String),
    /// The task (or runner, or token) does not exist, or is not the caller's to see.
    #[error("not found")]
    NotFound,
    /// The status moved or the lease is stale: the caller must stop.
    #[error("{reason} (task is {status})")]
    Conflict {
        /// Where the task is now.
        status: TaskStatus,
        /// Why the write was refused.
        reason: &'static str,
    },
    /// Postgres refused a value (SQLSTATE class 22: out of range, NUL in text): the
    /// client's mistake that validation did not catch, never a 500.
    #[error("invalid value: {0}")]
    InvalidValue(String),
    /// A name that must be unique is taken (a schedule's, per owner).
    #[error("{0}")]
    Duplicate(&'static str),
    /// A statement given a bound of its own (a search) ran past it and was cancelled:
    /// the caller asked for too much at once, not a store that is down.
    #[error("the statement ran past its bound of {0:?}")]
    OverBound(std::time::Duration),
    /// A log chunk starts past the end of what the server holds.
    #[error("log chunk starts at {requested}, past the {held} bytes held")]
    LogOffsetPastEnd {
        /// Where the chunk starts.
        requested: i64,
        /// How many bytes the server holds.
        held: i64,
    },
    /// Anything else: a bug or a schema mismatch, never the client's fault.
    #[error("postgres error: {0}")]
    Internal(String),
}

/// How many times this process found Postgres unavailable, for whoever must notice an
/// outage without asking Postgres itself (the node's heartbeat).
static UNAVAILABLE_SEEN: AtomicU64 = AtomicU64::new(0);

/// The count of Postgres failures of the `Unavailable` kind so far, in this process.
pub fn unavailable_seen() -> u64 {
    UNAVAILABLE_SEEN.load(Ordering::Relaxed)
}

/// Every sqlx error becomes a `StoreError` here, so this is where Postgres failures are
/// counted (`baton_postgres_errors_total{kind}`); a missing row or a value Postgres
/// refused is the caller's news, not a failure of Postgres.
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        let error = classify(e);
        let kind = match &error {
            StoreError::Unavailable(_) => {
                UNAVAILABLE_SEEN.fetch_add(1, Ordering::Relaxed);
                "unavailable"
            }
            StoreError::Internal(_) => "internal",
            _ => return error,
        };
        metrics::counter!(crate::metered::ERRORS, "kind" => kind).increment(1);
        error
    }
}

/// SQLSTATE `deadlock_detected`.
const DEADLOCK: &str = "40P01";
/// How an `Unavailable` for a deadlock begins, so that it can be told from the others.
const DEADLOCK_TEXT: &str = "deadlock (40P01)";

impl StoreError {
    /// Postgres ended the transaction to break a deadlock: nothing of it was written,
    /// and writing it again may succeed.
    pub fn is_deadlock(&self) -> bool {
        matches!(self, StoreError::Unavailable(m) if m.starts_with(DEADLOCK_TEXT))
    }
}

fn classify(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => StoreError::Unavailable(e.to_string()),
        sqlx::Error::RowNotFound => StoreError::NotFound,
        sqlx::Error::Database(db) if db.code().as_deref() == Some(DEADLOCK) => {
            StoreError::Unavailable(format!("{DEADLOCK_TEXT}: {e}"))
        }
        sqlx::Error::Database(db) if is_unavailable_code(db.code().as_deref()) => {
            StoreError::Unavailable(e.to_string())
        }
        sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("22")) => {
            StoreError::InvalidValue(db.message().to_string())
        }
        _ => StoreError::Internal(e.to_string()),
    }
}

/// SQLSTATE classes that mean "the server cannot serve now", not "your query is wrong":
/// 08 connection exception, 53 insufficient resources, 57P admin shutdown / crash
/// shutdown / cannot connect now, 40001/40P01 serialization and deadlock (retryable),
/// 25006 read-only (a demoted primary), 57014 cancelled by the statement timeout.
fn is_unavailable_code(code: Option<&str>) -> bool {
    code.is_some_and(|c| {
        c.starts_with("08")
            || c.starts_with("53")
            || c.starts_with("57P")
            || c == "40001"
            || c == "40P01"
            // A server that was the primary is read-only now (demoted in a failover):
            // another host will take the write.
            || c == "25006"
            // Cancelled by its statement timeout: the server is too slow now, not the
            // statement wrong.
            || c == "57014"
    })
}
