//! A Redis Cluster on this machine: six `redis-server --cluster-enabled yes` processes
//! (three masters, each with a replica) joined by `redis-cli --cluster create`. Baton
//! keeps all its keys under one hash tag, so one master (and its replica) holds them; the
//! drill kills that master or fails it over by hand, and brings the killed one back,
//! which rejoins as a replica.

use super::ports::Ports;
use super::processes::{StopPolicy, Supervised};
use super::readiness::{poll_every, poll_until, wait_until};
use super::replication::connect;
use super::workdir::WorkDir;
use anyhow::Context;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use tokio::process::Command;

const NODES: usize = 6;
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Six supervised `redis-server` cluster nodes, and what the drill does to them.
pub struct RedisCluster {
    work: WorkDir,
    /// The nodes' ports, in the order they were given to `--cluster create`.
    pub ports: Vec<u16>,
    nodes: Vec<Option<Supervised>>,
}

/// One node's connection, or why not.
async fn cluster_ok(port: u16) -> bool {
    let Ok(mut conn) = connect(port).await else {
        return false;
    };
    let info: Result<String, _> = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await;
    info.is_ok_and(|i| i.contains("cluster_state:ok"))
}

impl RedisCluster {
    fn spawn(work: &WorkDir, port: u16) -> anyhow::Result<Supervised> {
        let dir = work.join(&format!("redis-cluster/{port}"));
        std::fs::create_dir_all(&dir)?;
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            // Kept in its own folder: a node started again finds its cluster identity.
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "1000"])
            // A failing shard must not stop the others (the default stops them all).
            .args(["--cluster-require-full-coverage", "no"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&dir);
        Supervised::spawn(
            format!("redis-cluster-{port}"),
            command,
            &work.log(&format!("redis-cluster-{port}")),
            StopPolicy::signal(Signal::SIGTERM),
        )
        .map_err(|e| e.context("is redis-server installed? ./scripts/test.sh installs it"))
    }

    /// Starts a node and waits until it takes connections.
    async fn start_node(work: &WorkDir, port: u16) -> anyhow::Result<Supervised> {
        let mut node = Self::spawn(work, port)?;
        wait_until(
            &mut node,
            "a cluster node to listen",
            READY_WITHIN,
            || async { connect(port).await.is_ok() },
        )
        .await?;
        Ok(node)
    }

    /// Starts six nodes and makes them one cluster; returns once every node says the
    /// cluster is whole.
    pub async fn start(work: &WorkDir, ports: &mut Ports) -> anyhow::Result<RedisCluster> {
        let mut picked = Vec::new();
        while picked.len() < NODES {
            // A cluster node also listens on its port + 10000 (the cluster bus).
            let port = ports.pick()?;
            if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
                picked.push(port);
            }
        }
        let mut nodes = Vec::new();
        for &port in &picked {
            nodes.push(Some(Self::start_node(work, port).await?));
        }
        let create = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(picked.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .await
            .context("redis-cli --cluster create")?;
        if !create.status.success() {
            anyhow::bail!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&create.stdout)
            );
        }
        let cluster = RedisCluster {
            work: work.clone(),
            ports: picked,
            nodes,
        };
        cluster.wait_whole(READY_WITHIN).await?;
        Ok(cluster)
    }

    async fn wait_whole(&self, within: Duration) -> anyhow::Result<()> {
        poll_until(within, || async {
            for (port, node) in self.ports.iter().zip(&self.nodes) {
                if node.is_some() && !cluster_ok(*port).await {
                    return None;
                }
            }
            Some(())
        })
        .await
        .with_context(|| format!("the Redis Cluster was not whole within {within:?}"))
    }

    /// `host:port` of every node, for `--redis-cluster`.
    pub fn addresses(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// `(master, replica)` node indexes serving `key`'s slot, as a live node sees them.
    pub async fn shard_of(&self, key: &str) -> anyhow::Result<(usize, Option<usize>)> {
        for (port, node) in self.ports.iter().zip(&self.nodes) {
            if node.is_none() {
                continue;
            }
            let Ok(mut conn) = connect(*port).await else {
                continue;
            };
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async(&mut conn)
                .await?;
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut conn)
                .await?;
            return self.parse_shard(&nodes, slot);
        }
        anyhow::bail!("no cluster node answers")
    }

    /// From `CLUSTER NODES` (id, address, flags, master id, …, slot ranges): the
    /// healthy master holding `slot` and its replica.
    fn parse_shard(&self, nodes: &str, slot: u16) -> anyhow::Result<(usize, Option<usize>)> {
        let index_of = |address: &str| {
            let port: u16 = address.split(['@', ':']).nth(1)?.parse().ok()?;
            self.ports.iter().position(|p| *p == port)
        };
        let rows: Vec<Vec<&str>> = nodes
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let holds = |row: &Vec<&str>| {
            row.iter().skip(8).any(|range| {
                let (from, to) = range.split_once('-').unwrap_or((range, range));
                matches!((from.parse::<u16>(), to.parse::<u16>()), (Ok(f), Ok(t)) if (f..=t).contains(&slot))
            })
        };
        let master = rows
            .iter()
            .find(|r| r.len() > 8 && r[2].contains("master") && !r[2].contains("fail") && holds(r))
            .context("no healthy master holds the slot")?;
        let replica = rows
            .iter()
            .find(|r| r.len() > 3 && r[3] == master[0] && !r[2].contains("fail"))
            .and_then(|r| index_of(r[1]));
        Ok((
            index_of(master[1]).context("the master is not one of ours")?,
            replica,
        ))
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut node) = self.nodes[index].take() {
            node.kill_now().await;
        }
    }

    /// Starts a killed node again; it finds its cluster in its folder and rejoins (as
    /// a replica, once another took its place).
    pub async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        if self.nodes[index].is_some() {
            return Ok(());
        }
        self.nodes[index] = Some(Self::start_node(&self.work, self.ports[index]).await?);
        Ok(())
    }

    /// Whether node `index` was killed and not started again.
    pub fn is_down(&self, index: usize) -> bool {
        self.nodes[index].is_none()
    }

    /// A failover by hand: the replica takes its master's slots (`CLUSTER FAILOVER`).
    pub async fn fail_over_to(&self, replica: usize) -> anyhow::Result<()> {
        let mut conn = connect(self.ports[replica]).await?;
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Waits until `key`'s slot takes writes again; how long that took from `since`.
    pub async fn wait_writable(&self, key: &str, since: Instant) -> anyhow::Result<Duration> {
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect();
        let client = redis::cluster::ClusterClientBuilder::new(nodes)
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .build()?;
        let probe = format!("{key}:writable");
        let left = Duration::from_secs(60).saturating_sub(since.elapsed());
        poll_every(left, Duration::from_millis(50), || async {
            let connecting = client.get_async_connection();
            let mut conn = tokio::time::timeout(Duration::from_secs(2), connecting)
                .await
                .ok()?
                .ok()?;
            super::redis::takes_a_write(&mut conn, &probe)
                .await
                .then(|| since.elapsed())
        })
        .await
        .with_context(|| format!("the slot of {key} took no write for a minute"))
    }

    /// Stops every node that runs.
    pub async fn stop(&mut self) {
        for node in self.nodes.iter_mut().flatten() {
            node.stop().await;
        }
    }
}
