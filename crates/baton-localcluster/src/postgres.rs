//! A private Postgres cluster: `initdb` into a folder of its own, `postgres` in the
//! foreground. Postgres refuses to run as root, so as root both run as the `postgres` user
//! through `runuser`, in a folder that user owns.

use super::processes::{StopPolicy, Supervised, pid_in_file, run_to_end};
use super::readiness::wait_until;
use super::workdir::WorkDir;
use anyhow::Context;
use nix::sys::signal::Signal;
use sqlx::Connection;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// How long a start may take to accept connections: `pg_ctl start`'s own default wait, so
/// a crash recovery on a loaded machine has the time pg_ctl gave it.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// The Postgres user that owns the cluster, and the one that runs it when we are root.
pub(crate) const SUPERUSER: &str = "postgres";
/// The database Baton's nodes use.
pub(crate) const DATABASE: &str = "baton";

/// Which of Postgres's shutdown modes [`Supervised::stop`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// SIGINT: disconnect the clients, checkpoint, exit.
    Fast,
    /// SIGQUIT: every process quits at once, without a checkpoint, and the next start
    /// recovers as after a crash. Unlike a SIGKILL, the postmaster waits for its backends
    /// and frees its shared memory, so the same folder can start again at once.
    Immediate,
}

/// A Postgres cluster of our own: where its binaries and folder are, whom it runs as, and
/// its port. It starts, stops and starts again on the same folder.
pub struct Postgres {
    /// The folder holding `initdb` and `postgres`.
    bin: PathBuf,
    /// Owned by whoever runs Postgres: `data/` and the Unix socket live here.
    base: PathBuf,
    /// Run through `runuser -u postgres` (we are root).
    as_postgres_user: bool,
    /// `base` is outside the work folder, so it is ours to remove after the stop.
    scratch: bool,
    port: u16,
}

impl Postgres {
    /// Finds the binaries and makes a folder the Postgres process can own and reach.
    pub async fn prepare(work: &WorkDir, port: u16, as_root: bool) -> anyhow::Result<Self> {
        let bin = find_bin_dir()?;
        let in_workdir = work.join("postgres");
        std::fs::create_dir_all(&in_workdir)?;
        if !as_root {
            return Ok(Postgres {
                bin,
                base: in_workdir,
                as_postgres_user: false,
                scratch: false,
                port,
            });
        }
        let (uid, gid) = postgres_user_ids().await?;
        std::os::unix::fs::chown(&in_workdir, Some(uid), Some(gid))?;
        // The work folder is the better home (one place to look, wiped with the rest), but
        // the postgres user cannot reach it when it lies under a private folder such as
        // /root; then the cluster goes to /tmp, and is removed after the stop.
        let (base, scratch) = if reachable_by_postgres_user(&in_workdir).await {
            (in_workdir, false)
        } else {
            let scratch = std::env::temp_dir().join(format!("baton-dev-pg-{port}"));
            if scratch.exists() {
                std::fs::remove_dir_all(&scratch)?;
            }
            std::fs::create_dir_all(&scratch)?;
            std::os::unix::fs::chown(&scratch, Some(uid), Some(gid))?;
            (scratch, true)
        };
        Ok(Postgres {
            bin,
            base,
            as_postgres_user: true,
            scratch,
            port,
        })
    }

    /// The cluster's data folder (`PGDATA`).
    pub fn data_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    /// The folder to remove once Postgres has stopped, if it lives outside the work folder.
    pub fn scratch_dir(&self) -> Option<&Path> {
        self.scratch.then_some(self.base.as_path())
    }

    /// The `baton` database, as the superuser: what the nodes are given.
    pub fn url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// Creates the cluster; trust auth on loopback, since only this machine's users reach it.
    pub async fn initdb(&self, log: &Path) -> anyhow::Result<()> {
        let mut command = self.command("initdb");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-A", "trust", "-U", SUPERUSER, "--no-sync"])
            .args(["-E", "UTF8", "--locale=C"]);
        run_to_end("initdb", command, log).await
    }

    /// Copies the cluster on `primary_port` into ours as its streaming standby
    /// (`standby.signal` and `primary_conninfo` written, `-R`).
    pub async fn base_backup(&self, primary_port: u16, log: &Path) -> anyhow::Result<()> {
        let mut command = self.command("pg_basebackup");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-h", "127.0.0.1", "-p", &primary_port.to_string()])
            .args(["-U", SUPERUSER, "-R", "--no-sync", "-X", "stream"]);
        run_to_end("pg_basebackup", command, log).await
    }

    /// `postgres` for throwaway data, with a fast shutdown.
    pub fn spawn(&self, log: &Path, max_connections: u32) -> anyhow::Result<Supervised> {
        let settings = [
            // Durability buys nothing here and costs start-up time.
            "fsync=off".to_string(),
            format!("max_connections={max_connections}"),
        ];
        self.spawn_with(log, &settings, Shutdown::Fast)
    }

    /// `postgres` in the foreground on our port and socket folder, loopback only, with
    /// `settings` (`name=value`, each passed as `-c`) besides.
    pub fn spawn_with(
        &self,
        log: &Path,
        settings: &[String],
        shutdown: Shutdown,
    ) -> anyhow::Result<Supervised> {
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.base)
            .args(["-c", "listen_addresses=127.0.0.1"]);
        for setting in settings {
            command.arg("-c").arg(setting);
        }
        let signal = match shutdown {
            Shutdown::Fast => Signal::SIGINT,
            Shutdown::Immediate => Signal::SIGQUIT,
        };
        let stop = StopPolicy {
            pid_file: Some(self.pid_file()),
            ..StopPolicy::signal(signal)
        };
        Supervised::spawn("postgres", command, log, stop)
    }

    /// Written by the postmaster once it runs; its pid is on the first line.
    fn pid_file(&self) -> PathBuf {
        self.data_dir().join("postmaster.pid")
    }

    /// The postmaster's pid while it runs (its children are the backends). Not the
    /// supervised process's: as root that is `runuser`.
    pub fn postmaster_pid(&self) -> Option<i32> {
        pid_in_file(&self.pid_file())
    }

    /// The `postgres` database, which every cluster has, as the superuser.
    pub fn admin_url(&self) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/postgres", self.port)
    }

    /// Waits until Postgres takes connections, then creates the `baton` database.
    pub async fn wait_ready(&self, postgres: &mut Supervised) -> anyhow::Result<()> {
        self.wait_accepting(postgres).await?;
        let mut conn = sqlx::PgConnection::connect(&self.admin_url()).await?;
        let create = format!("CREATE DATABASE {DATABASE}");
        match sqlx::query(sqlx::AssertSqlSafe(create))
            .execute(&mut conn)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_duplicate_database(&e) => Ok(()),
            Err(e) => Err(e).context("creating the baton database"),
        }
    }

    /// Waits until Postgres takes connections (a standby's included, once it is
    /// consistent).
    pub async fn wait_accepting(&self, postgres: &mut Supervised) -> anyhow::Result<()> {
        let admin_url = self.admin_url();
        let connects = || async {
            let attempt = sqlx::PgConnection::connect(&admin_url);
            matches!(
                tokio::time::timeout(Duration::from_secs(2), attempt).await,
                Ok(Ok(_))
            )
        };
        wait_until(
            postgres,
            "postgres to accept connections",
            READY_WITHIN,
            connects,
        )
        .await
    }

    /// `program` from Postgres's binaries, run as the user that owns the cluster.
    fn command(&self, program: &str) -> Command {
        let mut command = if self.as_postgres_user {
            let mut runuser = Command::new("runuser");
            runuser
                .args(["-u", SUPERUSER, "--"])
                .arg(self.bin.join(program));
            runuser
        } else {
            Command::new(self.bin.join(program))
        };
        // A cwd the postgres user can enter (ours may be /root).
        command.current_dir(&self.base);
        command
    }
}

fn is_duplicate_database(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "42P04")
}

/// The folder of `initdb`: the one on PATH, else Debian's newest
/// `/usr/lib/postgresql/<version>/bin`. `postgres` is taken from the same folder, after
/// resolving symlinks, so the two always match.
pub(super) fn find_bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(initdb) = super::processes::find_program("initdb", &[]) {
        let real = std::fs::canonicalize(&initdb)?;
        if let Some(dir) = real.parent()
            && dir.join("postgres").is_file()
        {
            return Ok(dir.to_path_buf());
        }
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    newest.map(|(_, bin)| bin).context(
        "initdb not found on PATH nor under /usr/lib/postgresql/*/bin; \
         ./scripts/dev.sh installs postgresql",
    )
}

pub(super) async fn postgres_user_ids() -> anyhow::Result<(u32, u32)> {
    let id = |flag: &'static str| async move {
        let out = Command::new("id").args([flag, SUPERUSER]).output().await?;
        anyhow::ensure!(
            out.status.success(),
            "running as root, Postgres needs a `{SUPERUSER}` user to run as \
             (the postgresql package creates it)"
        );
        Ok::<u32, anyhow::Error>(String::from_utf8_lossy(&out.stdout).trim().parse()?)
    };
    Ok((id("-u").await?, id("-g").await?))
}

/// Whether the postgres user can write `dir`, which needs every parent to let it through.
pub(super) async fn reachable_by_postgres_user(dir: &Path) -> bool {
    Command::new("runuser")
        .args(["-u", SUPERUSER, "--", "test", "-w"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|status| status.success())
}
