//! The drill's Redis and Postgres: single servers the drill restarts and cuts off, or the
//! stores' own failover setups — Redis behind three sentinels or as a six-node Cluster,
//! Postgres as a primary with a synchronous standby under pg_auto_failover — whose master
//! or primary it kills, or fails over by hand.

use super::ChaosArgs;
use anyhow::Context;
use baton_coord::RedisTarget;
use baton_localcluster::pg_failover::PgFailover;
use baton_localcluster::ports::Ports;
use baton_localcluster::postgres::Postgres;
use baton_localcluster::processes::Supervised;
use baton_localcluster::redis;
use baton_localcluster::redis_cluster::RedisCluster;
use baton_localcluster::redis_sentinel::{MASTER_NAME, RedisSentinel};
use baton_localcluster::replication;
use baton_localcluster::workdir::WorkDir;
use sqlx::{Connection, PgConnection};
use std::time::{Duration, Instant};

/// Where the drill keeps Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisMode {
    /// One server: the drill restarts it (with and without its data) and cuts nodes off.
    Single,
    /// A master and a replica behind three sentinels: the drill kills the master or asks
    /// the sentinels for a failover.
    Sentinel,
    /// Six nodes, three masters with a replica each: the drill kills the master of
    /// Baton's slot or fails it over to its replica.
    Cluster,
}

/// Where the drill keeps Postgres.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PostgresMode {
    /// One server (a private one, or a database on `--database-url`'s).
    Single,
    /// A primary and a synchronous standby under pg_auto_failover: the drill kills the
    /// primary or fails it over by hand.
    Failover,
}

// One per drill, matched where it is used: boxing the bigger variants buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum RedisStore {
    Single {
        port: u16,
        process: Option<Supervised>,
    },
    Sentinel(RedisSentinel),
    Cluster(RedisCluster),
}

/// The hash tag of Baton's keys in the drill: the slot whose master the drill kills.
const TAG: &str = "{baton}";

impl RedisStore {
    pub async fn start(
        mode: RedisMode,
        work: &WorkDir,
        ports: &mut Ports,
    ) -> anyhow::Result<RedisStore> {
        Ok(match mode {
            RedisMode::Single => {
                let port = ports.pick()?;
                let mut process = redis::spawn(work, port)?;
                redis::wait_ready(&mut process, port).await?;
                RedisStore::Single {
                    port,
                    process: Some(process),
                }
            }
            RedisMode::Sentinel => RedisStore::Sentinel(RedisSentinel::start(work, ports).await?),
            RedisMode::Cluster => RedisStore::Cluster(RedisCluster::start(work, ports).await?),
        })
    }

    /// How Baton reaches it (for the drill's own looks, with no fault proxy between).
    pub fn target(&self) -> RedisTarget {
        let urls = |addrs: Vec<String>| addrs.iter().map(|a| format!("redis://{a}")).collect();
        match self {
            RedisStore::Single { port, .. } => RedisTarget::Url(redis::url(*port)),
            RedisStore::Sentinel(s) => RedisTarget::Sentinel {
                sentinels: urls(s.addresses()),
                master: MASTER_NAME.into(),
            },
            RedisStore::Cluster(c) => RedisTarget::Cluster {
                nodes: urls(c.addresses()),
            },
        }
    }

    /// The `baton serve` flags that point a node at a Sentinel or Cluster setup (a single
    /// server goes through the node's fault proxy as its `--redis-url`).
    pub fn node_flags(&self) -> Vec<String> {
        match self {
            RedisStore::Single { .. } => Vec::new(),
            RedisStore::Sentinel(s) => vec![
                "--redis-sentinel".into(),
                s.addresses().join(","),
                "--redis-sentinel-master".into(),
                MASTER_NAME.into(),
            ],
            // The one-URL form, so the drill covers it too (`--redis-cluster` is the same).
            RedisStore::Cluster(c) => vec![
                "--redis-url".into(),
                format!("redis+cluster://{}", c.addresses().join(",")),
            ],
        }
    }

    pub fn describe(&self) -> String {
        match self {
            RedisStore::Single { port, .. } => redis::url(*port),
            RedisStore::Sentinel(s) => format!("sentinels {}", s.addresses().join(",")),
            RedisStore::Cluster(c) => format!("cluster {}", c.addresses().join(",")),
        }
    }

    /// Kills the master holding Baton's keys, or (`by_hand`) asks for a failover; waits
    /// for the new master to take writes and brings a killed server back. Says what
    /// happened and how long Baton's keys took no write.
    pub async fn fail_over(&mut self, by_hand: bool) -> anyhow::Result<(String, Duration)> {
        match self {
            RedisStore::Single { .. } => anyhow::bail!("a single Redis has no failover"),
            RedisStore::Sentinel(sentinel) => {
                sentinel.wait_whole(Duration::from_secs(60)).await?;
                let old = sentinel.master().await?;
                let started = Instant::now();
                let (took, how) = if by_hand {
                    (
                        sentinel.fail_over(old, started).await?,
                        "SENTINEL FAILOVER".into(),
                    )
                } else {
                    let replica = sentinel.redis_ports[1 - old];
                    let master = sentinel.redis_ports[old];
                    let lost = unreplicated_for_a_while(master, replica).await;
                    sentinel.kill(old).await;
                    replication::release(replica).await?;
                    let took = sentinel
                        .wait_new_master(old, started, Duration::from_secs(60))
                        .await?;
                    (took, format!("killed the master {}", lost?))
                };
                sentinel.restart(old).await?;
                Ok((format!("redis sentinel: {how}"), took))
            }
            RedisStore::Cluster(cluster) => {
                let (master, replica) = wait_for_replica(cluster).await?;
                let started = Instant::now();
                let how = if by_hand {
                    cluster.fail_over_to(replica).await?;
                    "CLUSTER FAILOVER to the replica of Baton's slot".to_string()
                } else {
                    let (master_port, replica_port) =
                        (cluster.ports[master], cluster.ports[replica]);
                    let lost = unreplicated_for_a_while(master_port, replica_port).await;
                    cluster.kill(master).await;
                    replication::release(replica_port).await?;
                    format!("killed the master of Baton's slot {}", lost?)
                };
                let took = cluster.wait_writable(TAG, started).await?;
                cluster.restart(master).await?;
                Ok((format!("redis cluster: {how}"), took))
            }
        }
    }

    /// Kills a single Redis and starts it again on its port: with `keep_data` it
    /// snapshots first and reloads the snapshot (writes after it are lost, as in a
    /// failover that drops the last writes); otherwise it comes back empty.
    pub async fn restart_single(&mut self, work: &WorkDir, keep_data: bool) -> anyhow::Result<()> {
        let RedisStore::Single { port, process } = self else {
            anyhow::bail!("only a single Redis is restarted");
        };
        let snapshot = work.join("redis").join("dump.rdb");
        if keep_data {
            let mut conn = ::redis::Client::open(redis::url(*port))?
                .get_multiplexed_async_connection()
                .await?;
            let _: () = ::redis::cmd("SAVE").query_async(&mut conn).await?;
        }
        if let Some(mut running) = process.take() {
            running.kill_now().await;
        }
        if !keep_data {
            let _ = std::fs::remove_file(&snapshot);
        }
        let mut started = redis::spawn(work, *port)?;
        redis::wait_ready(&mut started, *port).await?;
        *process = Some(started);
        Ok(())
    }

    /// Everything running again.
    pub async fn heal(&mut self, work: &WorkDir) -> anyhow::Result<()> {
        match self {
            RedisStore::Single { process: None, .. } => self.restart_single(work, true).await,
            RedisStore::Single { .. } => Ok(()),
            RedisStore::Sentinel(s) => {
                for index in 0..2 {
                    if s.is_down(index) {
                        s.restart(index).await?;
                    }
                }
                Ok(())
            }
            RedisStore::Cluster(c) => {
                for index in 0..c.ports.len() {
                    if c.is_down(index) {
                        c.restart(index).await?;
                    }
                }
                Ok(())
            }
        }
    }

    pub async fn stop(&mut self) {
        match self {
            RedisStore::Single { process, .. } => {
                if let Some(p) = process {
                    p.stop().await;
                }
            }
            RedisStore::Sentinel(s) => s.stop().await,
            RedisStore::Cluster(c) => c.stop().await,
        }
    }
}

/// The shard of Baton's slot, once its master has a replica to fail over to (a master
/// killed a moment ago rejoins as one).
/// How long the replica is held back before its master is killed: the load writes on.
const UNREPLICATED_FOR: Duration = Duration::from_millis(1500);

/// Holds `replica` back from `master` for [`UNREPLICATED_FOR`], so the master's kill
/// loses what it took meanwhile; says how much that was. The caller kills the master,
/// then releases the replica.
async fn unreplicated_for_a_while(master: u16, replica: u16) -> anyhow::Result<String> {
    replication::hold(replica).await?;
    tokio::time::sleep(UNREPLICATED_FOR).await;
    let lost = replication::offset(master).await? - replication::offset(replica).await?;
    Ok(format!("with {lost} bytes of writes its replica never had"))
}

async fn wait_for_replica(cluster: &RedisCluster) -> anyhow::Result<(usize, usize)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((master, Some(replica))) = cluster.shard_of(TAG).await {
            return Ok((master, replica));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the master of Baton's slot has no replica"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// One per drill, as above.
#[allow(clippy::large_enum_variant)]
pub enum PostgresStore {
    /// A database the drill made on a server it was given (`--database-url`).
    Shared {
        admin: String,
        name: String,
        url: String,
    },
    Private {
        url: String,
        process: Supervised,
    },
    Failover(PgFailover),
}

impl PostgresStore {
    pub async fn start(
        args: &ChaosArgs,
        work: &WorkDir,
        ports: &mut Ports,
        as_root: bool,
    ) -> anyhow::Result<PostgresStore> {
        if args.postgres == PostgresMode::Failover {
            return Ok(PostgresStore::Failover(
                PgFailover::start(work, ports, as_root).await?,
            ));
        }
        Ok(match &args.database_url {
            Some(admin) => {
                let name = format!(
                    "baton_chaos_{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..12]
                );
                let mut conn = PgConnection::connect(admin)
                    .await
                    .context("connecting to --database-url")?;
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await?;
                let mut url = reqwest::Url::parse(admin)?;
                url.set_path(&name);
                PostgresStore::Shared {
                    admin: admin.clone(),
                    name,
                    url: url.to_string(),
                }
            }
            None => {
                let pg = Postgres::prepare(work, ports.pick()?, as_root).await?;
                pg.initdb(&work.log("initdb")).await?;
                let mut process = pg.spawn(&work.log("postgres"), 300)?;
                pg.wait_ready(&mut process).await?;
                PostgresStore::Private {
                    url: pg.url(),
                    process,
                }
            }
        })
    }

    /// The `baton serve` flags this setup needs: with a standby, a node acknowledges only
    /// what the standby confirmed (docs/stores.md), so no failover loses an answered write.
    pub fn node_flags(&self) -> Vec<String> {
        match self {
            PostgresStore::Failover(_) => vec!["--require-sync-standby".into()],
            _ => Vec::new(),
        }
    }

    /// The single-host URL of each server a node connects to (each gets a fault proxy).
    pub fn server_urls(&self) -> Vec<String> {
        match self {
            PostgresStore::Shared { url, .. } | PostgresStore::Private { url, .. } => {
                vec![url.clone()]
            }
            PostgresStore::Failover(pg) => pg
                .node_ports
                .iter()
                .map(|port| format!("postgres://postgres@127.0.0.1:{port}/baton?sslmode=require"))
                .collect(),
        }
    }

    /// A URL of the primary now, for the drill's own reads and checks.
    pub async fn url_now(&self) -> anyhow::Result<String> {
        match self {
            PostgresStore::Shared { url, .. } | PostgresStore::Private { url, .. } => {
                Ok(url.clone())
            }
            PostgresStore::Failover(pg) => pg.primary_url("baton").await,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            PostgresStore::Shared { url, .. } | PostgresStore::Private { url, .. } => url.clone(),
            PostgresStore::Failover(pg) => format!("pg_auto_failover {}", pg.url()),
        }
    }

    /// Kills the primary (its keeper and Postgres, as a lost machine) or asks the
    /// monitor for a failover; waits for the standby to take writes, and starts a killed
    /// node again (it rejoins as the standby). Says what happened and for how long no
    /// server took writes.
    pub async fn fail_over(&mut self, by_hand: bool) -> anyhow::Result<(String, Duration)> {
        let PostgresStore::Failover(pg) = self else {
            anyhow::bail!("a single Postgres has no failover");
        };
        pg.wait_whole(Duration::from_secs(90)).await?;
        let old = pg.primary().await?;
        let started = Instant::now();
        if by_hand {
            pg.fail_over().await?;
        } else {
            pg.kill(old).await;
        }
        let took = pg.wait_new_primary(old, started).await?;
        pg.restart(old)?;
        let how = if by_hand {
            "pg_autoctl perform failover"
        } else {
            "killed the primary"
        };
        Ok((format!("postgres: {how}"), took))
    }

    pub fn heal(&mut self) -> anyhow::Result<()> {
        if let PostgresStore::Failover(pg) = self {
            for index in 0..2 {
                if pg.is_down(index) {
                    pg.restart(index)?;
                }
            }
        }
        Ok(())
    }

    /// Stops what the drill started; drops the database it made on a given server.
    pub async fn stop(&mut self) {
        match self {
            PostgresStore::Shared { admin, name, .. } => {
                if let Ok(mut conn) = PgConnection::connect(admin).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await;
                }
            }
            PostgresStore::Private { process, .. } => {
                process.stop().await;
            }
            PostgresStore::Failover(pg) => pg.stop().await,
        }
    }
}
