//! The drill's cluster, with the means to break it: every member can be killed and
//! started again on the same port (nodes) or with the same identity (runners), and every
//! link a member has — each node's to Redis and to each Postgres server, each runner's to
//! the load balancer — runs through its own fault proxy, to be cut, half-cut or slowed
//! alone. (A node reaches Redis behind Sentinel or as a Cluster directly: the addresses
//! it is handed there are the servers' own.) The stores themselves are in `stores.rs`.

use super::stores::{PostgresStore, RedisStore};
use super::{ChaosArgs, RUNNER_FENCE_AFTER_S, TIMINGS};
use baton_coord::{Coord, CoordOptions};
use baton_localcluster::fault_proxy::{FaultProxy, Link};
use baton_localcluster::nodes::NodeSettings;
use baton_localcluster::ports::Ports;
use baton_localcluster::processes::{Supervised, running_as_root};
use baton_localcluster::runners::RunnerSpec;
use baton_localcluster::skewed_clock::{SkewedClock, faketime_library};
use baton_localcluster::workdir::WorkDir;
use baton_localcluster::{nginx, nodes, runners};
use nix::sys::signal::Signal;
use std::path::PathBuf;
use std::sync::Arc;

pub const API_TOKEN: &str = "chaos-admin-token";
const REGISTRATION_TOKEN: &str = "chaos-registration-token";

/// Runners heartbeat every second, park 5 s (below the 8 s offline threshold) and fence
/// themselves after `RUNNER_FENCE_AFTER_S` without an answer (`NodeTimings::DRILL` gives
/// the margin to the lost threshold).
fn runner_spec() -> RunnerSpec {
    RunnerSpec {
        labels: "chaos".into(),
        capacity: 3,
        extra_args: [
            "--heartbeat-s",
            "1",
            "--fence-after-s",
            &RUNNER_FENCE_AFTER_S.to_string(),
            "--wait-s",
            "5",
            "--shutdown-grace-s",
            "2",
        ]
        .map(String::from)
        .to_vec(),
        extra_env: Vec::new(),
    }
}

/// The label set the nodes start runners for on demand (docs/dynamic-runners.md).
pub const EPHEMERAL: &str = "ephemeral";

/// Where the runners started on demand keep their folders and logs.
pub fn provisioned_dir(work: &WorkDir) -> PathBuf {
    work.join("provisioned")
}

/// The nodes' settings file: one `process` provisioner for the [`EPHEMERAL`] label set,
/// its runners on the drill's runner timings, talking to the load balancer. Returns the
/// `baton serve` flags that read it.
fn provisioners(work: &WorkDir, lb_url: &str) -> anyhow::Result<Vec<String>> {
    let file = work.join("provisioners.toml");
    let runner_args: Vec<String> = runner_spec()
        .extra_args
        .iter()
        .map(|a| format!("{a:?}"))
        .collect();
    std::fs::write(
        &file,
        format!(
            "[[provisioners]]\nname = \"{EPHEMERAL}\"\nlabels = [\"{EPHEMERAL}\"]\n\
             capacity = 4\nclaim_timeout_s = 30\nretry_initial_ms = 1000\n\
             server_url = {lb_url:?}\ndir = {:?}\nrunner_args = [{}]\n",
            provisioned_dir(work),
            runner_args.join(", ")
        ),
    )?;
    Ok(vec!["--config".into(), file.display().to_string()])
}

pub struct NodeSlot {
    pub port: u16,
    pub process: Option<Supervised>,
    pub paused: bool,
    /// The node's Redis URL points at this (a single Redis only).
    pub redis_link: Option<Arc<FaultProxy>>,
    /// One per Postgres server: the node's database URL names them all.
    pub postgres_links: Vec<Arc<FaultProxy>>,
    settings: NodeSettings,
}

pub struct RunnerSlot {
    pub process: Option<Supervised>,
    /// The runner's server URL points at this, in front of the load balancer.
    pub link: Arc<FaultProxy>,
    spec: RunnerSpec,
}

/// The clocks the drill can step: node 1's and runner 1's, when libfaketime is here.
pub struct Clocks {
    pub node: SkewedClock,
    pub runner: SkewedClock,
}

/// `url` with its host and port replaced by the proxy's.
fn through(url: &str, proxy: &FaultProxy) -> anyhow::Result<String> {
    let mut url = reqwest::Url::parse(url)?;
    url.set_host(Some("127.0.0.1"))?;
    url.set_port(Some(proxy.port()))
        .map_err(|()| anyhow::anyhow!("cannot set a port on {url}"))?;
    Ok(url.to_string())
}

/// A database URL naming every server through its proxy (several hosts: the node finds
/// the writable one).
fn through_all(urls: &[String], proxies: &[Arc<FaultProxy>]) -> anyhow::Result<String> {
    let first = reqwest::Url::parse(&through(&urls[0], &proxies[0])?)?;
    if proxies.len() == 1 {
        return Ok(first.to_string());
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port()))
        .collect();
    let query = first.query().map(|q| format!("?{q}")).unwrap_or_default();
    Ok(format!(
        "{}://{}@{}{}{query}",
        first.scheme(),
        first.username(),
        hosts.join(","),
        first.path()
    ))
}

pub struct ChaosCluster {
    exe: PathBuf,
    work: WorkDir,
    lb_url: String,
    pub redis: RedisStore,
    pub postgres: PostgresStore,
    nginx: Option<Supervised>,
    pub nodes: Vec<NodeSlot>,
    pub runners: Vec<RunnerSlot>,
    /// `None` without libfaketime: clock steps are left out.
    pub clocks: Option<Clocks>,
    pub coord: Coord,
}

impl ChaosCluster {
    pub async fn start(args: &ChaosArgs, work: &WorkDir) -> anyhow::Result<ChaosCluster> {
        let exe = std::env::current_exe()?;
        let as_root = running_as_root();
        let mut ports = Ports::default();

        let redis = RedisStore::start(args.redis, work, &mut ports).await?;
        let postgres = PostgresStore::start(args, work, &mut ports, as_root).await?;
        let database_urls = postgres.server_urls();
        let redis_url = match &redis {
            RedisStore::Single { port, .. } => baton_localcluster::redis::url(*port),
            _ => String::new(),
        };

        // Picked before the nodes start: their provisioner's runners talk to it.
        let lb_port = ports.pick()?;
        let lb_url = format!("http://127.0.0.1:{lb_port}");
        let mut node_args = TIMINGS.args();
        node_args.extend(redis.node_flags());
        node_args.extend(postgres.node_flags());
        node_args.extend(provisioners(work, &lb_url)?);
        let settings = NodeSettings {
            database_url: String::new(),
            redis_url: redis_url.clone(),
            api_token: API_TOKEN.into(),
            registration_token: REGISTRATION_TOKEN.into(),
            secrets_key: nodes::fresh_secrets_key(),
            fixed_ids: false,
            extra_args: node_args,
            extra_env: Vec::new(),
        };
        let clocks = match faketime_library() {
            Some(library) => Some(Clocks {
                node: SkewedClock::new(&work.join("clock-node-1"), library.clone())?,
                runner: SkewedClock::new(&work.join("clock-runner-1"), library)?,
            }),
            None => None,
        };
        let mut slots = Vec::new();
        for index in 1..=usize::from(args.nodes) {
            let port = ports.pick()?;
            let redis_link = match &redis {
                RedisStore::Single { .. } => {
                    Some(Arc::new(FaultProxy::in_front_of(&redis_url).await?))
                }
                _ => None,
            };
            let mut postgres_links = Vec::new();
            for url in &database_urls {
                postgres_links.push(Arc::new(FaultProxy::in_front_of(url).await?));
            }
            let settings = NodeSettings {
                redis_url: match &redis_link {
                    Some(link) => through(&redis_url, link)?,
                    None => String::new(),
                },
                database_url: through_all(&database_urls, &postgres_links)?,
                extra_env: match &clocks {
                    Some(clocks) if index == 1 => clocks.node.env(),
                    _ => Vec::new(),
                },
                ..settings.clone()
            };
            let mut process = nodes::spawn(&exe, work, index, port, &settings)?;
            nodes::wait_ready(&mut process, port).await?;
            if index == 1 {
                // The first node applied the migrations: the audit trigger can go in.
                super::checks::install_audit(&postgres.url_now().await?).await?;
            }
            slots.push(NodeSlot {
                port,
                process: Some(process),
                paused: false,
                redis_link,
                postgres_links,
                settings,
            });
        }
        let node_ports: Vec<u16> = slots.iter().map(|s| s.port).collect();
        let mut lb = nginx::spawn(work, lb_port, &node_ports, as_root)?;
        nginx::wait_ready(&mut lb, &lb_url).await?;

        let mut runner_procs = Vec::new();
        for index in 1..=usize::from(args.runners) {
            let spec = RunnerSpec {
                extra_env: match &clocks {
                    Some(clocks) if index == 1 => clocks.runner.env(),
                    _ => Vec::new(),
                },
                ..runner_spec()
            };
            let link = Arc::new(FaultProxy::in_front_of(&lb_url).await?);
            let process = runners::spawn(
                &exe,
                work,
                index,
                &through(&lb_url, &link)?,
                REGISTRATION_TOKEN,
                &spec,
            )?;
            runner_procs.push(RunnerSlot {
                process: Some(process),
                link,
                spec,
            });
        }
        println!(
            "  cluster up: redis {}, postgres {}, {} nodes behind {lb_url}, {} runners",
            redis.describe(),
            postgres.describe(),
            slots.len(),
            runner_procs.len()
        );
        let coord = Coord::new(
            redis.target(),
            baton_coord::DEFAULT_PREFIX,
            &CoordOptions::default(),
        )?;
        Ok(ChaosCluster {
            exe,
            work: work.clone(),
            lb_url,
            redis,
            postgres,
            nginx: Some(lb),
            nodes: slots,
            runners: runner_procs,
            clocks,
            coord,
        })
    }

    pub fn lb_url(&self) -> &str {
        &self.lb_url
    }

    pub fn work(&self) -> &WorkDir {
        &self.work
    }

    /// The id node `index` (0-based) goes by now, from its `/readyz`.
    pub async fn node_id(&self, index: usize) -> Option<String> {
        let url = format!("http://127.0.0.1:{}/readyz", self.nodes[index].port);
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(2))
            .build()
            .ok()?;
        let body: serde_json::Value = http.get(url).send().await.ok()?.json().await.ok()?;
        body["node"].as_str().map(str::to_string)
    }

    pub async fn kill_node(&mut self, index: usize) {
        if let Some(mut process) = self.nodes[index].process.take() {
            process.kill_now().await;
        }
        self.nodes[index].paused = false;
    }

    pub async fn start_node(&mut self, index: usize) -> anyhow::Result<()> {
        self.start_node_with(index, &[]).await
    }

    /// Starts node `index` with `extra` flags besides its own (a `--fault`), and waits
    /// until it is ready.
    pub async fn start_node_with(&mut self, index: usize, extra: &[&str]) -> anyhow::Result<()> {
        let slot = &self.nodes[index];
        let port = slot.port;
        let mut settings = slot.settings.clone();
        settings
            .extra_args
            .extend(extra.iter().map(|a| a.to_string()));
        let mut process = nodes::spawn(&self.exe, &self.work, index + 1, port, &settings)?;
        let ready = nodes::wait_ready(&mut process, port).await;
        self.nodes[index].process = Some(process);
        ready
    }

    /// Whether node `index` exits by itself within `within`.
    pub async fn node_exited(&mut self, index: usize, within: std::time::Duration) -> bool {
        let Some(process) = &mut self.nodes[index].process else {
            return true;
        };
        tokio::time::timeout(within, process.exited()).await.is_ok()
    }

    pub fn pause_node(&mut self, index: usize, pause: bool) {
        if let Some(process) = &self.nodes[index].process {
            process.signal(if pause {
                Signal::SIGSTOP
            } else {
                Signal::SIGCONT
            });
            self.nodes[index].paused = pause;
        }
    }

    pub async fn kill_runner(&mut self, index: usize) {
        if let Some(mut process) = self.runners[index].process.take() {
            process.kill_now().await;
        }
    }

    pub fn start_runner(&mut self, index: usize) -> anyhow::Result<()> {
        let slot = &mut self.runners[index];
        let process = runners::spawn(
            &self.exe,
            &self.work,
            index + 1,
            &through(&self.lb_url, &slot.link)?,
            REGISTRATION_TOKEN,
            &slot.spec,
        )?;
        slot.process = Some(process);
        Ok(())
    }

    /// Every link open again, every clock back to the real time.
    pub fn open_links(&self) {
        if let Some(clocks) = &self.clocks {
            let _ = clocks.node.set(0.0);
            let _ = clocks.runner.set(0.0);
        }
        for slot in &self.nodes {
            for link in slot.redis_link.iter().chain(&slot.postgres_links) {
                link.set(Link::Open);
            }
        }
        for slot in &self.runners {
            slot.link.set(Link::Open);
        }
    }

    /// Everything running again, nothing paused: the state the drill settles in.
    pub async fn heal(&mut self) -> anyhow::Result<()> {
        self.open_links();
        self.redis.heal(&self.work).await?;
        self.postgres.heal()?;
        for index in 0..self.nodes.len() {
            if self.nodes[index].paused {
                self.pause_node(index, false);
            }
            if self.nodes[index].process.is_none() {
                self.start_node(index).await?;
            }
        }
        for index in 0..self.runners.len() {
            if self.runners[index].process.is_none() {
                self.start_runner(index)?;
            }
        }
        Ok(())
    }

    /// Stops runners, nodes, nginx, Postgres and Redis, in that order, and drops the
    /// drill's database.
    /// Where the runners started on demand keep their folders and logs.
    pub fn provisioned_dir(&self) -> PathBuf {
        provisioned_dir(&self.work)
    }

    pub async fn stop(&mut self) {
        self.open_links();
        // Runners started on demand live in process groups of their own.
        let provisioned = provisioned_dir(&self.work);
        let _ = tokio::task::spawn_blocking(move || {
            baton_localcluster::strays::stop_runners_under(
                &provisioned,
                std::time::Duration::from_secs(5),
            )
        })
        .await;
        for runner in self.runners.iter_mut().filter_map(|r| r.process.as_mut()) {
            runner.stop().await;
        }
        for slot in &mut self.nodes {
            if slot.paused
                && let Some(process) = &slot.process
            {
                process.signal(Signal::SIGCONT);
            }
            if let Some(process) = &mut slot.process {
                process.stop().await;
            }
        }
        if let Some(nginx) = &mut self.nginx {
            nginx.stop().await;
        }
        self.postgres.stop().await;
        self.redis.stop().await;
    }
}
