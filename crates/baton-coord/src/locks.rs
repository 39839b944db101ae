//! Locks with an owner and a TTL: `SET NX PX`, released by compare-and-delete. A holder
//! that dies leaves its lock to expire; a holder that outlives its TTL cannot release
//! someone else's. They save duplicate work (two finalizers, two repair passes) —
//! correctness never depends on them: Postgres compare-and-sets with the lease as
//! fencing token do that.

use crate::{Coord, CoordError};
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/lock_release.lua")));

/// A held lock; release it with [`Coord::lock_release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub(crate) key: String,
    pub(crate) owner: String,
}

impl Coord {
    /// Takes lock `name` for `ttl` if nobody holds it.
    pub async fn lock_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Lock>, CoordError> {
        let key = self.keys.lock(name);
        let mut conn = self.conn().await?;
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        Ok(set.map(|_| Lock {
            key,
            owner: owner.to_string(),
        }))
    }

    /// Releases the lock if it is still ours. False when it had expired (and maybe
    /// been taken by someone else).
    pub async fn lock_release(&self, lock: &Lock) -> Result<bool, CoordError> {
        let mut conn = self.conn().await?;
        let released: i32 = RELEASE
            .key(&lock.key)
            .arg(&lock.owner)
            .invoke_async(&mut conn)
            .await?;
        Ok(released == 1)
    }
}
