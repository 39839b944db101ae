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
}

impl From<deadpool_redis::PoolError> for CoordError {
    fn from(e: deadpool_redis::PoolError) -> Self {
        match e {
            deadpool_redis::PoolError::Backend(e) => e.into(),
            other => CoordError::Unavailable(other.to_string()),
        }
    }
}
