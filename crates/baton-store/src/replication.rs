//! `require_sync_standby`: a write is acknowledged only if the primary that committed it
//! was replicating synchronously when the commit returned.
//!
//! Postgres lets a primary acknowledge commits its standby never received the moment
//! `synchronous_standby_names` is emptied — pg_auto_failover does exactly that when it
//! puts a primary in `wait_primary`, even during a failover it was asked for, and the
//! commits then waiting for the standby are released as if it had answered. A failover
//! afterwards loses them. The check therefore runs *after* each commit, on the
//! connection that committed: emptying the setting reloads the configuration of every
//! backend (the reload reaches ours before the commit is released, and a backend applies
//! it before it reads its next statement), so the check sees whether the commit was held
//! for a standby. A commit that was not is answered as Postgres unavailable (503): the
//! write is there but not acknowledged, and a submit retried with its idempotency key, a
//! run end retried by its runner, find it or make it again — whichever the next primary
//! holds.
//!
//! Once a check has failed, writes are refused before they are made (one query says
//! whether synchronous replication is back), so none is committed unacknowledged while
//! the standby is away.

use sqlx::PgConnection;
use std::sync::atomic::{AtomicBool, Ordering};

/// Synchronous replication is on for this session's commits: a standby is named, and a
/// commit waits for one. (`local` and `off` commit without waiting for any standby.)
const REPLICATING_SYNCHRONOUSLY: &str = "SELECT current_setting('synchronous_standby_names') <> '' \
     AND current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply')";

/// What a refused write is answered with, in the node's logs and readiness.
pub(crate) const NO_SYNC_STANDBY: &str =
    "the primary has no synchronous standby (require_sync_standby is set)";

#[derive(Debug, Default)]
pub(crate) struct Replication {
    required: bool,
    /// The last check found no synchronous standby.
    lost: AtomicBool,
}

impl Replication {
    pub(crate) fn new(required: bool) -> Self {
        Replication {
            required,
            lost: AtomicBool::new(false),
        }
    }

    pub(crate) fn required(&self) -> bool {
        self.required
    }

    /// Before a write: refused without being made while the last check found no
    /// synchronous standby and this one still does not.
    pub(crate) async fn before_write(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        if self.required && self.lost.load(Ordering::Relaxed) {
            self.check(conn).await?;
        }
        Ok(())
    }

    /// After a commit, on the connection that made it: whether it was held for a
    /// standby. An error means it is committed but must not be acknowledged.
    pub(crate) async fn after_commit(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        if self.required {
            self.check(conn).await?;
        }
        Ok(())
    }

    /// For readiness: a node that would refuse every write is not ready.
    pub(crate) async fn ready(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        self.after_commit(conn).await
    }

    async fn check(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let synchronous: bool = sqlx::query_scalar(REPLICATING_SYNCHRONOUSLY)
            .fetch_one(conn)
            .await?;
        self.lost.store(!synchronous, Ordering::Relaxed);
        if synchronous {
            Ok(())
        } else {
            tracing::warn!("{NO_SYNC_STANDBY}: a write is refused");
            Err(sqlx::Error::Protocol(NO_SYNC_STANDBY.into()))
        }
    }
}
