//! The one way to Postgres, timed: every statement the store runs on its pool goes
//! through `&MeteredPool` (an sqlx executor), every transaction through
//! [`MeteredPool::begin`], timed from `BEGIN` to `COMMIT` (its statements run on the
//! transaction's own connection), and a connection held for a few statements that
//! commit by themselves through [`MeteredPool::acquire`]. Timing here, rather than in
//! each store method, keeps one place that cannot be forgotten by the next method. The
//! `op` label says which (`query`, `transaction`, `statement`); each includes the wait
//! for a pooled connection, since that is what a caller waits for. Errors are counted where every sqlx error
//! becomes a [`StoreError`](crate::StoreError) (error.rs).

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::postgres::{PgQueryResult, PgRow};
use sqlx::{Database, Describe, Either, Execute, Executor, PgConnection, PgPool, Postgres, SqlStr};
use std::ops::{Deref, DerefMut};
use std::time::Instant;

/// Histogram of Postgres round trips, by `op`.
pub const QUERY_DURATION: &str = "baton_postgres_query_duration_seconds";
/// Counter of Postgres failures, by `kind` (`unavailable`, `internal`).
pub const ERRORS: &str = "baton_postgres_errors_total";

/// Records how long it lived, when dropped: a cancelled call is timed too.
struct Timer {
    op: &'static str,
    started: Instant,
}

impl Timer {
    fn start(op: &'static str) -> Timer {
        Timer {
            op,
            started: Instant::now(),
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        metrics::histogram!(QUERY_DURATION, "op" => self.op)
            .record(self.started.elapsed().as_secs_f64());
    }
}

/// The store's connection pool; `&MeteredPool` runs queries like `&PgPool` does.
#[derive(Debug, Clone)]
pub(crate) struct MeteredPool(PgPool);

impl MeteredPool {
    pub(crate) fn new(pool: PgPool) -> Self {
        MeteredPool(pool)
    }

    pub(crate) fn inner(&self) -> &PgPool {
        &self.0
    }

    /// A connection of the pool for statements that commit by themselves, timed until it
    /// is given back (`op` = `statement`).
    pub(crate) async fn acquire(&self) -> Result<MeteredConn, sqlx::Error> {
        let timer = Timer::start("statement");
        Ok(MeteredConn {
            conn: self.0.acquire().await?,
            _timer: timer,
        })
    }

    pub(crate) async fn begin(&self) -> Result<MeteredTx, sqlx::Error> {
        let timer = Timer::start("transaction");
        Ok(MeteredTx {
            tx: self.0.begin().await?,
            _timer: timer,
        })
    }
}

/// A transaction, timed until it is committed or dropped (rolled back). Dereferences to
/// its connection, as `sqlx::Transaction` does.
pub(crate) struct MeteredTx {
    tx: sqlx::Transaction<'static, Postgres>,
    _timer: Timer,
}

impl MeteredTx {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

/// A pooled connection, timed until dropped.
pub(crate) struct MeteredConn {
    conn: sqlx::pool::PoolConnection<Postgres>,
    _timer: Timer,
}

impl Deref for MeteredConn {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for MeteredConn {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

impl Deref for MeteredTx {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.tx
    }
}

impl DerefMut for MeteredTx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.tx
    }
}

impl<'p> Executor<'p> for &'p MeteredPool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let timer = Timer::start("query");
        self.0
            .fetch_many(query)
            .map(move |item| {
                // The timer lives as long as the stream: until the last row is read.
                let _running = &timer;
                item
            })
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let timer = Timer::start("query");
        let fetch = self.0.fetch_optional(query);
        Box::pin(async move {
            let row = fetch.await;
            drop(timer);
            row
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [<Postgres as Database>::TypeInfo],
    ) -> BoxFuture<'e, Result<<Postgres as Database>::Statement, sqlx::Error>>
    where
        'p: 'e,
    {
        self.0.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.0.describe(sql)
    }
}
