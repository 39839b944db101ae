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
    if not_now(&e) {
        CoordError::Unavailable(e.to_string())
    } else {
        CoordError::Internal(e.to_string())
    }
}

/// Whether `e` says "try again later" rather than "this is wrong": a replica, a server
/// still loading, a master without replicas, a slot moving. And two a failover leaves:
/// a new master that has not loaded a script yet (`NOSCRIPT`, where the client cannot
/// load it itself), and a transaction whose commands were refused for one of those
/// reasons while queued — the cluster client follows no redirection inside `MULTI`, and
/// answers the whole `EXECABORT`.
fn not_now(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    let refused_for_now = |kind: Option<ServerErrorKind>| {
        matches!(
            kind,
            Some(
                ServerErrorKind::Moved
                    | ServerErrorKind::Ask
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::MasterDown
            )
        )
    };
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || crate::connection::server_not_ready(e)
        || e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        || (e.kind() == ErrorKind::Server(ServerErrorKind::ExecAbort)
            && e.clone().into_server_errors().is_some_and(|refused| {
                !refused.is_empty() && refused.iter().all(|(_, r)| refused_for_now(r.kind()))
            }))
}
