//! The drill's cluster, with the means to break it: every member can be killed and
//! started again on the same port (nodes) or with the same identity (runners).

use super::{CLEANER_INTERVAL_MS, ChaosArgs, NODE_TTL_MS};
use crate::localcluster::nodes::NodeSettings;
use crate::localcluster::ports::Ports;
use crate::localcluster::postgres::Postgres;
use crate::localcluster::processes::{Supervised, running_as_root};
use crate::localcluster::runners::RunnerSpec;
use crate::localcluster::workdir::WorkDir;
use crate::localcluster::{nginx, nodes, redis, runners};
use anyhow::Context;
use baton_coord::{Coord, CoordOptions};
use nix::sys::signal::Signal;
use sqlx::{Connection, PgConnection};
use std::path::PathBuf;

pub const API_TOKEN: &str = "chaos-admin-token";
const REGISTRATION_TOKEN: &str = "chaos-registration-token";

/// Node thresholds for the drill: a 3 s TTL, services twice a second, runners offline
/// after 8 s and lost after 12 s.
fn node_args() -> Vec<String> {
    [
        ("--node-ttl-ms", NODE_TTL_MS.to_string()),
        ("--cleaner-interval-ms", CLEANER_INTERVAL_MS.to_string()),
        ("--reconcile-interval-ms", "500".into()),
        ("--promote-interval-ms", "300".into()),
        ("--repair-interval-ms", "2000".into()),
        ("--dispatch-grace-ms", "2000".into()),
        ("--ack-timeout-s", "5".into()),
        ("--runner-offline-after-s", "8".into()),
        ("--runner-lost-after-s", "12".into()),
        ("--timeout-grace-s", "2".into()),
        ("--retry-initial-ms", "300".into()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value])
    .collect()
}

/// Runners heartbeat every second, park 5 s (below the 8 s offline threshold) and fence
/// themselves after 9 s without an answer (below the 12 s lost threshold).
fn runner_spec() -> RunnerSpec {
    RunnerSpec {
        labels: "chaos".into(),
        capacity: 3,
        extra_args: [
            "--heartbeat-s",
            "1",
            "--fence-after-s",
            "9",
            "--wait-s",
            "5",
            "--shutdown-grace-s",
            "2",
        ]
        .map(String::from)
        .to_vec(),
    }
}

pub struct NodeSlot {
    pub port: u16,
    pub process: Option<Supervised>,
    pub paused: bool,
}

pub struct ChaosCluster {
    exe: PathBuf,
    work: WorkDir,
    settings: NodeSettings,
    lb_url: String,
    pub redis_port: u16,
    redis: Option<Supervised>,
    postgres: Option<Supervised>,
    nginx: Option<Supervised>,
    pub nodes: Vec<NodeSlot>,
    pub runners: Vec<Option<Supervised>>,
    pub database_url: String,
    /// The admin URL and name of a database this drill created (dropped at the end).
    created_database: Option<(String, String)>,
    pub coord: Coord,
}

impl ChaosCluster {
    pub async fn start(args: &ChaosArgs, work: &WorkDir) -> anyhow::Result<ChaosCluster> {
        let exe = std::env::current_exe()?;
        let as_root = running_as_root().await?;
        let mut ports = Ports::default();

        let redis_port = ports.pick()?;
        let mut redis_proc = redis::spawn(work, redis_port)?;
        redis::wait_ready(&mut redis_proc, redis_port).await?;
        let redis_url = redis::url(redis_port);

        let (database_url, postgres, created_database) = match &args.database_url {
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
                (url.to_string(), None, Some((admin.clone(), name)))
            }
            None => {
                let pg = Postgres::prepare(work, ports.pick()?, as_root).await?;
                pg.initdb(&work.log("initdb")).await?;
                let mut proc = pg.spawn(&work.log("postgres"), 300)?;
                pg.wait_ready(&mut proc).await?;
                (pg.url(), Some(proc), None)
            }
        };

        let settings = NodeSettings {
            database_url: database_url.clone(),
            redis_url: redis_url.clone(),
            api_token: API_TOKEN.into(),
            registration_token: REGISTRATION_TOKEN.into(),
            fixed_ids: false,
            extra_args: node_args(),
        };
        let mut slots = Vec::new();
        for index in 1..=usize::from(args.nodes) {
            let port = ports.pick()?;
            let mut process = nodes::spawn(&exe, work, index, port, &settings)?;
            nodes::wait_ready(&mut process, port).await?;
            if index == 1 {
                // The first node applied the migrations: the audit trigger can go in.
                super::checks::install_audit(&database_url).await?;
            }
            slots.push(NodeSlot {
                port,
                process: Some(process),
                paused: false,
            });
        }
        let lb_port = ports.pick()?;
        let node_ports: Vec<u16> = slots.iter().map(|s| s.port).collect();
        let mut lb = nginx::spawn(work, lb_port, &node_ports, as_root)?;
        let lb_url = format!("http://127.0.0.1:{lb_port}");
        nginx::wait_ready(&mut lb, &lb_url).await?;

        let spec = runner_spec();
        let mut runner_procs = Vec::new();
        for index in 1..=usize::from(args.runners) {
            runner_procs.push(Some(runners::spawn(
                &exe,
                work,
                index,
                &lb_url,
                REGISTRATION_TOKEN,
                &spec,
            )?));
        }
        println!(
            "  cluster up: redis {redis_url}, {} nodes behind {lb_url}, {} runners",
            slots.len(),
            runner_procs.len()
        );
        let coord = Coord::from_url(
            &redis_url,
            baton_coord::DEFAULT_PREFIX,
            &CoordOptions::default(),
        )?;
        Ok(ChaosCluster {
            exe,
            work: work.clone(),
            settings,
            lb_url,
            redis_port,
            redis: Some(redis_proc),
            postgres,
            nginx: Some(lb),
            nodes: slots,
            runners: runner_procs,
            database_url,
            created_database,
            coord,
        })
    }

    pub fn lb_url(&self) -> &str {
        &self.lb_url
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
        let port = self.nodes[index].port;
        let mut process = nodes::spawn(&self.exe, &self.work, index + 1, port, &self.settings)?;
        nodes::wait_ready(&mut process, port).await?;
        self.nodes[index].process = Some(process);
        Ok(())
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
        if let Some(mut process) = self.runners[index].take() {
            process.kill_now().await;
        }
    }

    pub fn start_runner(&mut self, index: usize) -> anyhow::Result<()> {
        let process = runners::spawn(
            &self.exe,
            &self.work,
            index + 1,
            &self.lb_url,
            REGISTRATION_TOKEN,
            &runner_spec(),
        )?;
        self.runners[index] = Some(process);
        Ok(())
    }

    /// Kills Redis and starts it again on the same port: with `keep_data` it snapshots
    /// first and reloads the snapshot (writes after the snapshot are lost, as in a
    /// failover that drops the last writes); otherwise it comes back empty.
    pub async fn restart_redis(&mut self, keep_data: bool) -> anyhow::Result<()> {
        let snapshot = self.work.join("redis").join("dump.rdb");
        if keep_data {
            let mut conn = ::redis::Client::open(redis::url(self.redis_port))?
                .get_multiplexed_async_connection()
                .await?;
            let _: () = ::redis::cmd("SAVE").query_async(&mut conn).await?;
        }
        if let Some(mut process) = self.redis.take() {
            process.kill_now().await;
        }
        if !keep_data {
            let _ = std::fs::remove_file(&snapshot);
        }
        let mut process = redis::spawn(&self.work, self.redis_port)?;
        redis::wait_ready(&mut process, self.redis_port).await?;
        self.redis = Some(process);
        Ok(())
    }

    /// Everything running again, nothing paused: the state the drill settles in.
    pub async fn heal(&mut self) -> anyhow::Result<()> {
        if self.redis.is_none() {
            self.restart_redis(true).await?;
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index].paused {
                self.pause_node(index, false);
            }
            if self.nodes[index].process.is_none() {
                self.start_node(index).await?;
            }
        }
        for index in 0..self.runners.len() {
            if self.runners[index].is_none() {
                self.start_runner(index)?;
            }
        }
        Ok(())
    }

    /// Stops runners, nodes, nginx, Postgres and Redis, in that order, and drops the
    /// drill's database.
    pub async fn stop(&mut self) {
        for runner in self.runners.iter_mut().flatten() {
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
        for process in [&mut self.nginx, &mut self.postgres, &mut self.redis]
            .into_iter()
            .flatten()
        {
            process.stop().await;
        }
        if let Some((admin, name)) = &self.created_database
            && let Ok(mut conn) = PgConnection::connect(admin).await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await;
        }
    }
}
