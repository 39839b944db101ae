//! Redis behind Sentinel on this machine: a master, a replica, and three sentinels that
//! agree (a quorum of two) when the master is down and promote the replica. The drill
//! kills the master, or asks for a failover by hand (`SENTINEL FAILOVER`), and brings the
//! killed one back, which the sentinels make a replica of the new master.
//!
//! Nothing is persisted: what the master acknowledged but had not sent to its replica
//! is lost in a failover, which is the case Baton must survive (Postgres is the truth).

use super::ports::Ports;
use super::processes::{StopPolicy, Supervised};
use super::readiness::{poll_every, poll_until, wait_until};
use super::replication::connect;
use super::workdir::WorkDir;
use anyhow::Context;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// The name the sentinels watch the master under, which a `redis+sentinel://` URL names.
pub const MASTER_NAME: &str = "mymaster";
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Two supervised data servers, master and replica, and three sentinels that fail over
/// between them.
pub struct RedisSentinel {
    work: WorkDir,
    /// The two data servers; either may be the master.
    pub redis_ports: [u16; 2],
    redis: [Option<Supervised>; 2],
    /// The sentinels' ports: three, so two make a quorum with one lost.
    pub sentinel_ports: [u16; 3],
    sentinels: Vec<Supervised>,
}

impl RedisSentinel {
    fn spawn_redis(
        work: &WorkDir,
        port: u16,
        replica_of: Option<u16>,
    ) -> anyhow::Result<Supervised> {
        let dir = work.join("redis");
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            // Each its own file, though nothing is saved: a restart must not load another's.
            .args(["--dbfilename", &format!("dump-{port}.rdb")])
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&dir);
        if let Some(master) = replica_of {
            command.args(["--replicaof", "127.0.0.1", &master.to_string()]);
        }
        Supervised::spawn(
            format!("redis-{port}"),
            command,
            &work.log(&format!("redis-{port}")),
            StopPolicy::signal(Signal::SIGTERM),
        )
        .map_err(|e| e.context("is redis-server installed? ./scripts/test.sh installs it"))
    }

    fn spawn_sentinel(work: &WorkDir, port: u16, master: u16) -> anyhow::Result<Supervised> {
        // A sentinel rewrites its configuration file as it learns: it must be a real file.
        let conf = work.join(&format!("sentinel-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 2000\n\
                 sentinel failover-timeout {MASTER_NAME} 3000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir = work.join("redis").display()
            ),
        )?;
        let mut command = Command::new("redis-server");
        command.arg(&conf).arg("--sentinel");
        Supervised::spawn(
            format!("sentinel-{port}"),
            command,
            &work.log(&format!("sentinel-{port}")),
            StopPolicy::signal(Signal::SIGTERM),
        )
    }

    /// A master with its replica in sync, and three sentinels that all know both and
    /// each other.
    pub async fn start(work: &WorkDir, ports: &mut Ports) -> anyhow::Result<RedisSentinel> {
        let redis_ports = [ports.pick()?, ports.pick()?];
        let sentinel_ports = [ports.pick()?, ports.pick()?, ports.pick()?];
        let mut master = Self::spawn_redis(work, redis_ports[0], None)?;
        wait_until(&mut master, "redis to listen", READY_WITHIN, || async {
            connect(redis_ports[0]).await.is_ok()
        })
        .await?;
        let mut replica = Self::spawn_redis(work, redis_ports[1], Some(redis_ports[0]))?;
        wait_until(
            &mut replica,
            "the replica to sync",
            READY_WITHIN,
            || async {
                let Ok(mut conn) = connect(redis_ports[1]).await else {
                    return false;
                };
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                info.contains("master_link_status:up")
            },
        )
        .await?;
        let mut sentinels = Vec::new();
        for port in sentinel_ports {
            sentinels.push(Self::spawn_sentinel(work, port, redis_ports[0])?);
        }
        for (sentinel, port) in sentinels.iter_mut().zip(sentinel_ports) {
            wait_until(
                sentinel,
                "the sentinels to know each other",
                READY_WITHIN,
                || async move {
                    let Ok(mut conn) = connect(port).await else {
                        return false;
                    };
                    let info: Vec<String> = redis::cmd("SENTINEL")
                        .arg("MASTER")
                        .arg(MASTER_NAME)
                        .query_async(&mut conn)
                        .await
                        .unwrap_or_default();
                    let field = |name: &str| {
                        info.iter()
                            .position(|f| f == name)
                            .and_then(|i| info.get(i + 1))
                            .cloned()
                    };
                    field("num-other-sentinels").as_deref() == Some("2")
                        && field("num-slaves").as_deref() == Some("1")
                },
            )
            .await?;
        }
        Ok(RedisSentinel {
            work: work.clone(),
            redis_ports,
            redis: [Some(master), Some(replica)],
            sentinel_ports,
            sentinels,
        })
    }

    /// `host:port` of each sentinel, for `--redis-sentinel`.
    pub fn addresses(&self) -> Vec<String> {
        self.sentinel_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// Which of the two data servers the sentinels call the master now.
    pub async fn master(&self) -> anyhow::Result<usize> {
        for port in self.sentinel_ports {
            let Ok(mut conn) = connect(port).await else {
                continue;
            };
            let addr: Option<(String, String)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(MASTER_NAME)
                .query_async(&mut conn)
                .await?;
            if let Some((_, port)) = addr {
                let port: u16 = port.parse()?;
                return self
                    .redis_ports
                    .iter()
                    .position(|p| *p == port)
                    .context("the sentinels name a master that is not ours");
            }
        }
        anyhow::bail!("no sentinel answers")
    }

    /// SIGKILL to data server `index`, as the loss of its machine would be.
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut redis) = self.redis[index].take() {
            redis.kill_now().await;
        }
    }

    /// Whether data server `index` was killed and not started again.
    pub fn is_down(&self, index: usize) -> bool {
        self.redis[index].is_none()
    }

    /// Starts a killed server again, empty, as a replica of whichever is the master now,
    /// as its configuration would say once rewritten by the sentinels. Started as a
    /// master instead, it claims that role until a sentinel converts it, and a sentinel
    /// that saw it claim the role for long converts it back even after a failover has
    /// promoted it: by-hand failovers then fail until every sentinel looked again.
    pub async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        if self.redis[index].is_some() {
            return Ok(());
        }
        let port = self.redis_ports[index];
        let master = self.master().await?;
        anyhow::ensure!(
            master != index,
            "the sentinels still name the killed server"
        );
        let mut redis = Self::spawn_redis(&self.work, port, Some(self.redis_ports[master]))?;
        wait_until(&mut redis, "redis to listen", READY_WITHIN, || async {
            connect(port).await.is_ok()
        })
        .await?;
        self.redis[index] = Some(redis);
        Ok(())
    }

    /// A failover by hand, as an operator asks for one before maintenance; how long the
    /// keys took no write, from `since`. The sentinels refuse while they have not yet
    /// seen the replica healthy (they look at replicas every ten seconds), and give up a
    /// failover whose replica did not report itself master within `failover-timeout`
    /// (a busy machine): asked again, as an operator would, until a new master takes a
    /// write or a minute has passed.
    pub async fn fail_over(&self, old: usize, since: Instant) -> anyhow::Result<Duration> {
        let deadline = since + Duration::from_secs(60);
        loop {
            let mut conn = connect(self.sentinel_ports[0]).await?;
            let asked: Result<(), _> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER_NAME)
                .query_async(&mut conn)
                .await;
            match asked {
                Ok(()) => {
                    let within = Duration::from_secs(10)
                        .min(deadline.saturating_duration_since(Instant::now()));
                    match self.wait_new_master(old, since, within).await {
                        Ok(took) => return Ok(took),
                        Err(_) if Instant::now() < deadline => continue,
                        Err(e) => return Err(e),
                    }
                }
                // Also while the failover it gave up is still held against a new one.
                Err(e)
                    if (e.to_string().contains("NOGOODSLAVE")
                        || e.to_string().contains("INPROG"))
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits up to `within` until the sentinels name a master other than `old` and it
    /// takes a write; how long that took from `since`.
    pub async fn wait_new_master(
        &self,
        old: usize,
        since: Instant,
        within: Duration,
    ) -> anyhow::Result<Duration> {
        poll_every(within, Duration::from_millis(50), || async {
            let now = self.master().await.ok().filter(|now| *now != old)?;
            let mut conn = connect(self.redis_ports[now]).await.ok()?;
            super::redis::takes_a_write(&mut conn, "baton-failover-probe")
                .await
                .then(|| since.elapsed())
        })
        .await
        .with_context(|| format!("no new master took a write within {within:?}"))
    }

    /// Waits until the master has its replica in sync again (a killed one restarted is
    /// made a replica by the sentinels within seconds), so a failover has somewhere to go.
    pub async fn wait_whole(&self, within: Duration) -> anyhow::Result<()> {
        poll_until(within, || async {
            let master = self.master().await.ok()?;
            if self.is_down(1 - master) {
                return None;
            }
            let mut conn = connect(self.redis_ports[1 - master]).await.ok()?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            let following = format!("master_port:{}", self.redis_ports[master]);
            (info.contains("role:slave")
                && info.contains(&following)
                && info.contains("master_link_status:up"))
            .then_some(())
        })
        .await
        .with_context(|| format!("the Redis master had no replica in sync within {within:?}"))
    }

    /// Stops the sentinels first, so none fails over from a master that is only stopping.
    pub async fn stop(&mut self) {
        for sentinel in &mut self.sentinels {
            sentinel.stop().await;
        }
        for redis in self.redis.iter_mut().flatten() {
            redis.stop().await;
        }
    }
}
