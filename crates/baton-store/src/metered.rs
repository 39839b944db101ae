//! The one way to Postgres, timed: every statement the store runs on its pool goes
//! through `&MeteredPool` (an sqlx executor), every transaction through
//! [`MeteredPool::begin`], timed from `BEGIN` to `COMMIT` (its statements run on the
//! transaction's own connection), and a connection held for a few statements that
//! commit by themselves through [`MeteredPool::acquire`]. Timing here, rather than in
//! each store method, keeps one place that cannot be forgotten by the next method. The
//! `op` label says which (`query`, `transaction`, `statement`); each includes the wait
//! for a pooled connection, since that is what a caller waits for. Errors are counted where every sqlx error
//! becomes a [`StoreError`](crate::StoreError) (error.rs).

use crate::replication::Replication;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use sqlx::postgres::{PgArguments, PgQueryResult, PgRow};
use sqlx::{Database, Describe, Either, Execute, Executor, PgConnection, PgPool, Postgres, SqlStr};
use sqlx_core::transaction::TransactionManager;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Instant;

type Manager = <Postgres as Database>::TransactionManager;

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

/// The store's connection pool; `&MeteredPool` runs queries like `&PgPool` does. Every
/// write through it is also held to the replication requirement (`replication.rs`).
#[derive(Debug, Clone)]
pub(crate) struct MeteredPool {
    pool: PgPool,
    replication: Arc<Replication>,
}

impl MeteredPool {
    pub(crate) fn new(pool: PgPool, replication: Replication) -> Self {
        MeteredPool {
            pool,
            replication: Arc::new(replication),
        }
    }

    pub(crate) fn inner(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn replication(&self) -> &Replication {
        &self.replication
    }

    /// A connection of the pool for a write that commits by itself, timed until it is
    /// given back (`op` = `statement`). The writer calls [`MeteredConn::committed`] once
    /// its statement returned.
    pub(crate) async fn acquire(&self) -> Result<MeteredConn, sqlx::Error> {
        let timer = Timer::start("statement");
        let mut conn = self.pool.acquire().await?;
        self.replication.before_write(&mut conn).await?;
        Ok(MeteredConn {
            conn,
            replication: self.replication.clone(),
            _timer: timer,
        })
    }

    pub(crate) async fn begin(&self) -> Result<MeteredTx, sqlx::Error> {
        let timer = Timer::start("transaction");
        let mut conn = self.pool.acquire().await?;
        self.replication.before_write(&mut conn).await?;
        Manager::begin(&mut conn, None).await?;
        Ok(MeteredTx {
            conn,
            open: true,
            replication: self.replication.clone(),
            _timer: timer,
        })
    }
}

/// A transaction, timed until it is committed or dropped (rolled back), as
/// `sqlx::Transaction` is — but it keeps its connection past the commit, where the
/// replication check must run. Dereferences to its connection.
pub(crate) struct MeteredTx {
    conn: sqlx::pool::PoolConnection<Postgres>,
    open: bool,
    replication: Arc<Replication>,
    _timer: Timer,
}

impl MeteredTx {
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        Manager::commit(&mut self.conn).await?;
        self.open = false;
        self.replication.after_commit(&mut self.conn).await
    }
}

impl Drop for MeteredTx {
    fn drop(&mut self) {
        if self.open {
            // Queued, as `sqlx::Transaction` does: sent before the connection's next use,
            // in the pool or out of it.
            Manager::start_rollback(&mut self.conn);
        }
    }
}

/// A pooled connection, timed until dropped.
pub(crate) struct MeteredConn {
    conn: sqlx::pool::PoolConnection<Postgres>,
    replication: Arc<Replication>,
    _timer: Timer,
}

impl MeteredConn {
    /// After the write on this connection committed: whether it may be acknowledged.
    pub(crate) async fn committed(&mut self) -> Result<(), sqlx::Error> {
        self.replication.after_commit(&mut self.conn).await
    }
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
        &self.conn
    }
}

impl DerefMut for MeteredTx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// Whether a statement may write: anything but a plain `SELECT` (a `WITH` may hold an
/// `INSERT`).
fn may_write(sql: &str) -> bool {
    let first_word = sql.split_whitespace().next().unwrap_or("");
    !first_word.eq_ignore_ascii_case("select")
}

type Rows = Vec<Result<Either<PgQueryResult, PgRow>, sqlx::Error>>;

/// How the pool runs one statement.
enum Route<'q, E> {
    /// As `&PgPool` would.
    AsIs(E),
    /// Likewise, once its text was read to tell it is a plain `SELECT`.
    Read(sqlx_core::query::Query<'q, Postgres, PgArguments>),
    /// With replication required, a statement that may write: on a connection of its
    /// own, checked before and after (`replication.rs`), its rows gathered first, since a
    /// check that fails must be the answer.
    Write(BoxFuture<'q, Rows>),
}

fn route<'q, E>(pool: &MeteredPool, mut query: E) -> Route<'q, E>
where
    E: 'q + Execute<'q, Postgres>,
{
    if !pool.replication.required() || query.statement().is_some() {
        return Route::AsIs(query);
    }
    let persistent = query.persistent();
    let arguments = query.take_arguments().map(Option::unwrap_or_default);
    let sql = query.sql();
    if !may_write(sql.as_str()) {
        return Route::Read(
            sqlx_core::query::query_with_result(sql, arguments).persistent(persistent),
        );
    }
    let pool = pool.clone();
    Route::Write(Box::pin(async move {
        let _timer = Timer::start("query");
        let write = async {
            let mut conn = pool.pool.acquire().await?;
            pool.replication.before_write(&mut conn).await?;
            let query = sqlx_core::query::query_with_result(sql, arguments).persistent(persistent);
            let rows: Rows = Executor::fetch_many(&mut *conn, query).collect().await;
            if rows.iter().all(Result::is_ok) {
                pool.replication.after_commit(&mut conn).await?;
            }
            Ok::<_, sqlx::Error>(rows)
        };
        write.await.unwrap_or_else(|e| vec![Err(e)])
    }))
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
        let rows = match route(self, query) {
            Route::AsIs(query) => self.pool.fetch_many(query),
            Route::Read(query) => self.pool.fetch_many(query),
            Route::Write(write) => {
                return futures::stream::once(write)
                    .flat_map(futures::stream::iter)
                    .boxed();
            }
        };
        let timer = Timer::start("query");
        rows.map(move |item| {
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
        let fetch = match route(self, query) {
            Route::AsIs(query) => self.pool.fetch_optional(query),
            Route::Read(query) => self.pool.fetch_optional(query),
            Route::Write(write) => {
                return Box::pin(async move {
                    write.await.into_iter().try_fold(None, |first, item| {
                        Ok(first.or(match item? {
                            Either::Right(row) => Some(row),
                            Either::Left(_) => None,
                        }))
                    })
                });
            }
        };
        let timer = Timer::start("query");
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
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}
