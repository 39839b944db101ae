//! Postgres with a synchronous standby under pg_auto_failover (Debian
//! `postgresql-<version>-auto-failover`): a monitor and two data nodes on this machine,
//! each node a `pg_autoctl run` keeper with its Postgres under it. The standby is
//! synchronous (`synchronous_standby_names` is set while it is healthy): a commit the
//! primary acknowledged is on the standby too. The drill kills the primary's keeper and
//! Postgres together (a machine lost), or asks for a failover by hand; the killed node,
//! started again, rejoins as the standby.
//!
//! The monitor's timeouts are lowered so a failover takes seconds, not the default
//! minute; `network_partition_timeout` (3 s) stays under `primary_demote_timeout` (5 s),
//! so a primary cut off from the monitor and its standby demotes itself before the standby
//! is promoted, and two primaries never take writes.

use super::ports::Ports;
use super::postgres::{
    DATABASE, SUPERUSER, find_bin_dir, postgres_user_ids, reachable_by_postgres_user,
};
use super::processes::{StopPolicy, Supervised, find_program};
use super::readiness::{poll_every, poll_until};
use super::workdir::WorkDir;
use anyhow::Context;
use nix::sys::signal::Signal;
use sqlx::Connection;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// Longer than a lone Postgres's: each step initdb's a cluster and waits for the monitor.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// A pg_auto_failover formation: its monitor and two data nodes, each a supervised keeper.
pub struct PgFailover {
    base: PathBuf,
    bin: PathBuf,
    /// `pg_autoctl`, and `runuser` to run it as the postgres user.
    program: PathBuf,
    runuser: PathBuf,
    as_postgres_user: bool,
    work: WorkDir,
    monitor_port: u16,
    monitor: Option<Supervised>,
    /// The data nodes' ports, node 0 first; either may be the primary.
    pub node_ports: [u16; 2],
    nodes: [Option<Supervised>; 2],
}

fn admin_url(port: u16, database: &str) -> String {
    format!("postgres://{SUPERUSER}@127.0.0.1:{port}/{database}?sslmode=require")
}

/// Whether the server on `port` takes writes (`None`: unreachable).
pub async fn writable(port: u16) -> Option<bool> {
    let probe = async {
        let mut conn = sqlx::PgConnection::connect(&admin_url(port, "postgres"))
            .await
            .ok()?;
        let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&mut conn)
            .await
            .ok()?;
        Some(!in_recovery)
    };
    tokio::time::timeout(Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
}

impl PgFailover {
    /// `pg_autoctl` with the environment it needs: our Postgres binaries first on PATH,
    /// its config and pid files under our folder (not the postgres user's home).
    fn pg_autoctl(&self) -> Command {
        // Whole paths: the PATH set below is the one it runs with, and the one programs
        // are looked up in.
        let mut command = if self.as_postgres_user {
            let mut runuser = Command::new(&self.runuser);
            runuser.args(["-u", SUPERUSER, "--"]).arg(&self.program);
            runuser
        } else {
            Command::new(&self.program)
        };
        let xdg = self.base.join("xdg");
        command
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("HOME", &self.base)
            .env("XDG_CONFIG_HOME", xdg.join("config"))
            .env("XDG_DATA_HOME", xdg.join("data"))
            .env("XDG_RUNTIME_DIR", xdg.join("run"))
            .current_dir(&self.base);
        command
    }

    async fn run_to_end(&self, args: &[&str], what: &str) -> anyhow::Result<()> {
        let log = self.work.log("pg-autoctl-commands");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let status = self
            .pg_autoctl()
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .await
            .with_context(|| {
                format!("{what}: is pg_autoctl installed? ./scripts/test.sh installs it")
            })?;
        anyhow::ensure!(status.success(), "{what} failed; see {}", log.display());
        Ok(())
    }

    fn keeper(&self, name: &str) -> anyhow::Result<Supervised> {
        let mut command = self.pg_autoctl();
        command.arg("run").arg("--pgdata").arg(self.base.join(name));
        // The keeper and its Postgres are one process group: a kill takes both, as the
        // loss of their machine would.
        Supervised::spawn(
            format!("pg-{name}"),
            command,
            &self.work.log(&format!("pg-{name}")),
            StopPolicy::signal(Signal::SIGTERM),
        )
    }

    fn monitor_uri(&self) -> String {
        format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=require",
            self.monitor_port
        )
    }

    /// The states the monitor has assigned and seen, node by node.
    async fn states(&self) -> anyhow::Result<Vec<(String, String, String)>> {
        let mut conn =
            sqlx::PgConnection::connect(&admin_url(self.monitor_port, "pg_auto_failover")).await?;
        Ok(sqlx::query_as(
            "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid",
        )
        .fetch_all(&mut conn)
        .await?)
    }

    async fn wait_states(&self, want: &[(&str, &str)], within: Duration) -> anyhow::Result<()> {
        let settled = poll_until(within, || async {
            let states = self.states().await.ok()?;
            let settled = states.len() == want.len()
                && want.iter().all(|(name, state)| {
                    states
                        .iter()
                        .any(|(n, seen, goal)| n == name && seen == state && goal == state)
                });
            settled.then_some(())
        })
        .await;
        if settled.is_none() {
            let last = self.states().await.unwrap_or_default();
            anyhow::bail!(
                "pg_auto_failover did not reach {want:?} within {within:?}; last {last:?}"
            )
        }
        Ok(())
    }

    async fn create_node(&mut self, index: usize) -> anyhow::Result<()> {
        let name = format!("node{}", index + 1);
        let pgdata = self.base.join(&name);
        let port = self.node_ports[index].to_string();
        let monitor = self.monitor_uri();
        self.run_to_end(
            &[
                "create",
                "postgres",
                "--pgdata",
                &pgdata.display().to_string(),
                "--pgport",
                &port,
                "--hostname",
                "127.0.0.1",
                "--listen",
                "127.0.0.1",
                "--name",
                &name,
                "--auth",
                "trust",
                "--ssl-self-signed",
                "--monitor",
                &monitor,
            ],
            "pg_autoctl create postgres",
        )
        .await?;
        self.nodes[index] = Some(self.keeper(&name)?);
        Ok(())
    }

    /// A monitor, then a primary, then its synchronous standby; the `baton` database on
    /// the primary; the monitor's timeouts lowered.
    pub async fn start(
        work: &WorkDir,
        ports: &mut Ports,
        as_root: bool,
    ) -> anyhow::Result<PgFailover> {
        let program = find_program("pg_autoctl", &["/usr/bin/pg_autoctl"]).context(
            "pg_autoctl not found: apt-get install postgresql-<version>-auto-failover \
             (./scripts/test.sh does)",
        )?;
        let runuser = find_program("runuser", &["/usr/sbin/runuser", "/sbin/runuser"])
            .unwrap_or_else(|| PathBuf::from("runuser"));
        let bin = find_bin_dir()?;
        let mut base = work.join("pg-failover");
        std::fs::create_dir_all(&base)?;
        let as_postgres_user = as_root;
        if as_root {
            let (uid, gid) = postgres_user_ids().await?;
            if !reachable_by_postgres_user(&base).await {
                base = std::env::temp_dir().join(format!("baton-pg-failover-{}", ports.pick()?));
                let _ = std::fs::remove_dir_all(&base);
                std::fs::create_dir_all(&base)?;
            }
            for dir in ["", "xdg", "xdg/config", "xdg/data", "xdg/run"] {
                let dir = base.join(dir);
                std::fs::create_dir_all(&dir)?;
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
            }
        }
        std::fs::set_permissions(
            base.join("xdg/run"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .ok();
        let mut pg = PgFailover {
            base,
            bin,
            program,
            runuser,
            as_postgres_user,
            work: work.clone(),
            monitor_port: ports.pick()?,
            monitor: None,
            node_ports: [ports.pick()?, ports.pick()?],
            nodes: [None, None],
        };
        let monitor_dir = pg.base.join("monitor").display().to_string();
        pg.run_to_end(
            &[
                "create",
                "monitor",
                "--pgdata",
                &monitor_dir,
                "--pgport",
                &pg.monitor_port.to_string(),
                "--hostname",
                "127.0.0.1",
                "--auth",
                "trust",
                "--ssl-self-signed",
            ],
            "pg_autoctl create monitor",
        )
        .await?;
        pg.monitor = Some(pg.keeper("monitor")?);
        let monitor = admin_url(pg.monitor_port, "pg_auto_failover");
        poll_until(READY_WITHIN, || async {
            sqlx::PgConnection::connect(&monitor).await.ok().map(drop)
        })
        .await
        .context("the monitor did not start")?;
        pg.fast_timeouts().await?;
        pg.create_node(0).await?;
        pg.wait_states(&[("node1", "single")], READY_WITHIN).await?;
        pg.create_node(1).await?;
        pg.wait_states(
            &[("node1", "primary"), ("node2", "secondary")],
            READY_WITHIN,
        )
        .await?;
        for name in ["node1", "node2"] {
            let pgdata = pg.base.join(name).display().to_string();
            pg.run_to_end(
                &[
                    "config",
                    "set",
                    "timeout.network_partition_timeout",
                    "3",
                    "--pgdata",
                    &pgdata,
                ],
                "pg_autoctl config set",
            )
            .await?;
        }
        let mut conn =
            sqlx::PgConnection::connect(&admin_url(pg.node_ports[0], "postgres")).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
            .execute(&mut conn)
            .await?;
        Ok(pg)
    }

    /// The monitor notices a dead node within 2 s and promotes the standby 5 s later
    /// (defaults: 20 s and 30 s).
    async fn fast_timeouts(&self) -> anyhow::Result<()> {
        let mut conn =
            sqlx::PgConnection::connect(&admin_url(self.monitor_port, "pg_auto_failover")).await?;
        for (setting, value) in [
            ("pgautofailover.health_check_period", "1000"),
            ("pgautofailover.health_check_timeout", "1000"),
            ("pgautofailover.health_check_max_retries", "1"),
            ("pgautofailover.health_check_retry_delay", "500"),
            ("pgautofailover.node_considered_unhealthy_timeout", "2000"),
            ("pgautofailover.primary_demote_timeout", "5000"),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ALTER SYSTEM SET {setting} = {value}"
            )))
            .execute(&mut conn)
            .await?;
        }
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    /// The URL naming both data nodes, as an operator gives it to Baton.
    pub fn url(&self) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{},127.0.0.1:{}/{DATABASE}?sslmode=require",
            self.node_ports[0], self.node_ports[1]
        )
    }

    /// A single-host URL of the primary now (the drill's own checks connect there).
    pub async fn primary_url(&self, database: &str) -> anyhow::Result<String> {
        let primary = self.primary().await?;
        Ok(admin_url(self.node_ports[primary], database))
    }

    /// The index of the node that takes writes now.
    pub async fn primary(&self) -> anyhow::Result<usize> {
        for (index, port) in self.node_ports.iter().enumerate() {
            if writable(*port).await == Some(true) {
                return Ok(index);
            }
        }
        anyhow::bail!("no Postgres node takes writes")
    }

    /// Whether node `index` was killed and not started again.
    pub fn is_down(&self, index: usize) -> bool {
        self.nodes[index].is_none()
    }

    /// SIGKILL to the node's keeper and Postgres at once: its machine lost.
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut node) = self.nodes[index].take() {
            node.kill_now().await;
        }
    }

    /// Starts a killed node's keeper again; it rejoins as the standby (`pg_rewind`).
    /// The killed keeper's and Postgres's pid files go first: both were killed, but pids
    /// wrap (at 32768 on a default kernel), and a pid file naming a pid some live process
    /// of the postgres user holds by now made the new keeper refuse to start ("already
    /// running") — the pair then ran without its standby for good, every write refused
    /// for want of a synchronous one.
    pub fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        if self.nodes[index].is_none() {
            for file in self.pid_files(index) {
                match std::fs::remove_file(&file) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("removing {}", file.display()));
                    }
                    _ => {}
                }
            }
            self.nodes[index] = Some(self.keeper(&format!("node{}", index + 1))?);
        }
        Ok(())
    }

    /// Node `index`'s pid files: its keeper's (under `XDG_RUNTIME_DIR`, at the path of its
    /// data folder) and its Postgres's (`postmaster.pid`).
    pub fn pid_files(&self, index: usize) -> [PathBuf; 2] {
        let pgdata = self.base.join(format!("node{}", index + 1));
        let relative = pgdata.strip_prefix("/").unwrap_or(&pgdata);
        [
            self.base
                .join("xdg/run/pg_autoctl")
                .join(relative)
                .join("pg_autoctl.pid"),
            pgdata.join("postmaster.pid"),
        ]
    }

    /// A failover by hand, as before maintenance: the standby is promoted once it has
    /// caught up, the primary demoted.
    pub async fn fail_over(&self) -> anyhow::Result<()> {
        let monitor = self.base.join("monitor").display().to_string();
        self.run_to_end(
            &["perform", "failover", "--pgdata", &monitor],
            "pg_autoctl perform failover",
        )
        .await
    }

    /// Waits until a node other than `old` takes writes; how long that took from `since`.
    pub async fn wait_new_primary(&self, old: usize, since: Instant) -> anyhow::Result<Duration> {
        let other = 1 - old;
        let left = Duration::from_secs(120).saturating_sub(since.elapsed());
        poll_every(left, Duration::from_millis(100), || async {
            (writable(self.node_ports[other]).await == Some(true)).then(|| since.elapsed())
        })
        .await
        .context("the standby was not promoted within two minutes")
    }

    /// Waits until both nodes are back as primary and standby: so the monitor says, and
    /// each node's Postgres answers as one (the monitor's word alone can be the one it
    /// had before a kill it has not noticed yet).
    pub async fn wait_whole(&self, within: Duration) -> anyhow::Result<()> {
        poll_until(within, || async {
            let states = self.states().await.ok()?;
            let has = |state: &str| {
                states
                    .iter()
                    .any(|(_, seen, goal)| seen == state && goal == state)
            };
            let mut answers = Vec::new();
            for port in self.node_ports {
                answers.push(writable(port).await?);
            }
            let one_primary = answers.iter().filter(|w| **w).count() == 1;
            (states.len() == 2 && has("primary") && has("secondary") && one_primary).then_some(())
        })
        .await
        .with_context(|| format!("pg_auto_failover was not whole again within {within:?}"))
    }

    /// Stops the data nodes' keepers, then the monitor's: the nodes report to it.
    pub async fn stop(&mut self) {
        for node in self.nodes.iter_mut().flatten() {
            node.stop().await;
        }
        if let Some(monitor) = &mut self.monitor {
            monitor.stop().await;
        }
    }
}
