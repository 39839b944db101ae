/// Redis failures, classified for the HA code.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CoordError {
    /// Redis could not be reached or did not answer in time.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// A reply we did not expect: a bug, or a key written by something else.
    #[error("redis error: {0}")]
    Internal(String),
}

/// Counter of Redis failures, by `kind` (`unavailable`, `internal`).
pub const ERRORS: &str = "baton_redis_errors_total";

/// Every Redis failure becomes a `CoordError` here, so this is where they are counted
/// (`baton_redis_errors_total{kind}`).
impl From<redis::RedisError> for CoordError {
    fn from(e: redis::RedisError) -> Self {
        counted(classify(e))
    }
}

/// No connection could be had (the pool timed out waiting or creating one).
pub(crate) fn unavailable(reason: String) -> CoordError {
    counted(CoordError::Unavailable(reason))
}

fn counted(error: CoordError) -> CoordError {
    count(match &error {
        CoordError::Unavailable(_) => "unavailable",
        CoordError::Internal(_) => "internal",
    });
    error
}

/// Counts a Redis failure that is not a `CoordError` (the wake subscriber's).
pub(crate) fn count(kind: &'static str) {
    metrics::counter!(ERRORS, "kind" => kind).increment(1);
}

fn classify(e: redis::RedisError) -> CoordError {
    // A replica, a server still loading, a master without replicas: try again later.
    if e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || crate::connection::server_not_ready(&e)
    {
        CoordError::Unavailable(e.to_string())
    } else {
        CoordError::Internal(e.to_string())
    }
}
