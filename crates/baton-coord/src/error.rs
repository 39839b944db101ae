/// Redis failures, classified for the HA code.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// Redis could not be reached or did not answer in time.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// A reply we did not expect: a bug, or a key written by something else.
    #[error("redis error: {0}")]
    Internal(String),
}

impl From<redis::RedisError> for CoordError {
    fn from(e: redis::RedisError) -> Self {
        // READONLY: we reached a replica (a failover is under way); try again later.
        let read_only = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_cluster_error()
            || read_only
        {
            CoordError::Unavailable(e.to_string())
        } else {
            CoordError::Internal(e.to_string())
        }
    }
}

impl From<deadpool_redis::PoolError> for CoordError {
    fn from(e: deadpool_redis::PoolError) -> Self {
        match e {
            deadpool_redis::PoolError::Backend(e) => e.into(),
            other => CoordError::Unavailable(other.to_string()),
        }
    }
}
