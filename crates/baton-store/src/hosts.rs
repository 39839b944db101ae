//! Postgres behind a failover: the database URL may name every host of a primary and its
//! standbys, as libpq's does — `postgres://user@host1:5432,host2:5432/baton` — and the
//! node finds the writable one by itself (`target_session_attrs=read-write`), and finds it
//! again after a failover, with no restart.
//!
//! The pool connects to one host at a time. A new connection is kept only if its server is
//! not in recovery (a standby, or a demoted primary not yet restarted). When Postgres
//! fails this process's work, the hosts are asked which one is writable, and the pool is
//! pointed there; connections opened before the switch are not handed out again. While no
//! host is writable, every request fails as unavailable: a node answers 503 and reports
//! not-ready, never a write it could not make.

use crate::StoreError;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{ConnectOptions, Connection};
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One URL per host, in the order given: the same user, database and parameters.
/// `target_session_attrs` is dropped from each (sqlx does not know it): a multi-host URL
/// always means "the writable one", which this module finds.
pub fn split(url: &str) -> Result<Vec<String>, StoreError> {
    let invalid = |why: &str| StoreError::Internal(format!("database URL: {why}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, authority),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let query: Vec<&str> = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|kv| !kv.is_empty() && !kv.starts_with("target_session_attrs="))
        .collect();
    let hosts: Vec<&str> = hosts.split(',').filter(|h| !h.is_empty()).collect();
    if hosts.is_empty() {
        return Err(invalid("no host"));
    }
    Ok(hosts
        .iter()
        .map(|host| {
            let mut one = format!("{scheme}://");
            if let Some(user) = userinfo {
                one.push_str(user);
                one.push('@');
            }
            one.push_str(host);
            one.push_str(path);
            if !query.is_empty() {
                one.push('?');
                one.push_str(&query.join("&"));
            }
            one
        })
        .collect())
}

/// How long one host may take to say whether it is writable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the server at `options` takes writes: `None` when it cannot be reached.
async fn writable(options: &PgConnectOptions) -> Option<bool> {
    let probe = async {
        let mut conn = options.connect().await.ok()?;
        let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&mut conn)
            .await
            .ok()?;
        let _ = conn.close().await;
        Some(!in_recovery)
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .ok()
        .flatten()
}

/// Which host the pool connects to, and since when.
#[derive(Debug)]
pub(crate) struct Failover {
    hosts: Vec<PgConnectOptions>,
    current: AtomicUsize,
    switched_at: Mutex<Instant>,
}

impl Failover {
    /// `None` for a URL that names one host: nothing to find.
    pub(crate) fn of(
        url: &str,
        tune: impl Fn(PgConnectOptions) -> PgConnectOptions,
    ) -> Result<Option<Failover>, StoreError> {
        let urls = split(url)?;
        if urls.len() < 2 {
            return Ok(None);
        }
        let hosts = urls
            .iter()
            .map(|u| PgConnectOptions::from_str(u).map(&tune))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StoreError::from)?;
        Ok(Some(Failover {
            hosts,
            current: AtomicUsize::new(0),
            switched_at: Mutex::new(Instant::now()),
        }))
    }

    pub(crate) fn first(&self) -> PgConnectOptions {
        self.hosts[0].clone()
    }

    /// A pooled connection opened before the last switch may still talk to the old
    /// primary (demoted, or cut off): it is not handed out again.
    pub(crate) fn opened_before_switch(&self, age: Duration) -> bool {
        let since_switch = self.switched_at.lock().expect("failover lock").elapsed();
        age > since_switch
    }

    /// Asks every host at once; points `pool` at the writable one if it moved. Returns
    /// whether a writable host was found.
    pub(crate) async fn find(&self, pool: &PgPool) -> bool {
        let answers = futures::future::join_all(self.hosts.iter().map(writable)).await;
        let Some(primary) = answers.iter().position(|a| *a == Some(true)) else {
            return false;
        };
        if self.current.swap(primary, Ordering::Relaxed) != primary {
            tracing::warn!(
                host = %self.hosts[primary].get_host(),
                port = self.hosts[primary].get_port(),
                "postgres primary moved: connecting there"
            );
            pool.set_connect_options(self.hosts[primary].clone());
            *self.switched_at.lock().expect("failover lock") = Instant::now();
        }
        true
    }

    /// Looks for the primary whenever this process found Postgres unavailable, and every
    /// `settle` while none was found; otherwise stays quiet. Ends with the pool.
    pub(crate) async fn watch(self: std::sync::Arc<Self>, pool: PgPool) {
        let mut seen = crate::unavailable_seen();
        let mut found = self.find(&pool).await;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if pool.is_closed() {
                return;
            }
            let now_seen = crate::unavailable_seen();
            if found && now_seen == seen {
                continue;
            }
            seen = now_seen;
            found = self.find(&pool).await;
        }
    }
}

/// The single-host URL of the writable server among those `url` names (itself, for a
/// URL of one host), for what must run on the primary before any pool exists.
pub async fn primary_url(url: &str) -> Result<String, StoreError> {
    let urls = split(url)?;
    if urls.len() < 2 {
        return Ok(url.to_string());
    }
    for one in &urls {
        let options = PgConnectOptions::from_str(one).map_err(StoreError::from)?;
        if writable(&options).await == Some(true) {
            return Ok(one.clone());
        }
    }
    Err(StoreError::Unavailable(
        "no writable Postgres among the hosts of the database URL".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn a_url_of_several_hosts_is_one_url_per_host() {
        assert_eq!(
            split("postgres://baton:pw@10.0.0.1:5432,10.0.0.2:6432/baton?sslmode=require&target_session_attrs=read-write&connect_timeout=1").unwrap(),
            vec![
                "postgres://baton:pw@10.0.0.1:5432/baton?sslmode=require&connect_timeout=1",
                "postgres://baton:pw@10.0.0.2:6432/baton?sslmode=require&connect_timeout=1",
            ]
        );
        assert_eq!(
            split("postgres://h1,h2/db").unwrap(),
            vec!["postgres://h1/db", "postgres://h2/db"]
        );
        assert_eq!(
            split("postgres://postgres@127.0.0.1:5432/baton").unwrap(),
            vec!["postgres://postgres@127.0.0.1:5432/baton"]
        );
        assert!(split("127.0.0.1:5432").is_err());
    }
}
