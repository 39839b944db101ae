//! Private Redis and Postgres servers for tests that kill or restart them, so the shared
//! ones other tests use are never disturbed. Both are the local cluster's own starters under
//! its supervisor, so a test's Postgres is initdb'd and configured as `baton dev`'s is; it
//! differs in stopping as a crash would (immediate shutdown: a test may stop and start one
//! data folder as many times as it likes) and in being awaited until it accepts
//! connections, with no `baton` database made (a standby cannot make one).

use crate::ports::Ports;
use crate::postgres::{Postgres, SUPERUSER, Shutdown};
use crate::processes::{Supervised, running_as_root};
use crate::redis;
use crate::workdir::WorkDir;
use std::path::Path;
use std::sync::{LazyLock, Mutex};

/// A free loopback port, never handed out twice in this process, below the kernel's
/// ephemeral range (see [`Ports`]).
pub fn free_port() -> u16 {
    static PORTS: LazyLock<Mutex<Ports>> = LazyLock::new(Mutex::default);
    PORTS
        .lock()
        .expect("no port pick panics")
        .pick()
        .expect("a free loopback port")
}

/// A `redis-server` on a free port, without persistence: a restart loses everything, as
/// a crash of a cache-configured Redis would.
pub struct RedisProc {
    /// Where it listens, on 127.0.0.1.
    pub port: u16,
    work: WorkDir,
    process: Option<Supervised>,
}

impl RedisProc {
    /// Starts one in `dir` (its data folder and log) and waits until it answers.
    pub async fn start(dir: &Path) -> RedisProc {
        let mut redis = RedisProc {
            port: free_port(),
            work: WorkDir::open(dir).expect("the private redis's folder"),
            process: None,
        };
        redis.spawn().await;
        redis
    }

    /// Its URL.
    pub fn url(&self) -> String {
        redis::url(self.port)
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.pid().unsigned_abs())
    }

    async fn spawn(&mut self) {
        let mut process = redis::spawn(&self.work, self.port).expect("redis-server");
        redis::wait_ready(&mut process, self.port)
            .await
            .expect("the private redis to answer");
        self.process = Some(process);
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill_now().await;
        }
    }

    /// SIGKILL and start again on the same port, empty.
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }
}

/// A private Postgres cluster (initdb'd per test) that a test can stop and start again on
/// the same data folder.
pub struct PostgresProc {
    /// Where it listens, on 127.0.0.1.
    pub port: u16,
    postgres: Postgres,
    /// Its logs, and (unless the postgres user cannot reach it) the cluster.
    work: WorkDir,
    /// Server settings (`name=value`) beyond the port and socket.
    settings: Vec<String>,
    process: Option<Supervised>,
}

impl PostgresProc {
    /// A cluster for tests: `fsync` off, since nothing a test asserts survives a power cut.
    pub async fn start() -> PostgresProc {
        Self::start_with(&["fsync=off"]).await
    }

    /// A cluster as production runs it (`fsync` and synchronous commit on), with these
    /// settings (`name=value`) besides: for benchmarks.
    pub async fn start_durable(settings: &[&str]) -> PostgresProc {
        Self::start_with(settings).await
    }

    async fn start_with(settings: &[&str]) -> PostgresProc {
        let mut pg = Self::prepare(settings.iter().map(|s| s.to_string()).collect()).await;
        pg.initdb().await;
        pg.up().await;
        pg
    }

    /// A streaming standby of `primary`, copied from it by `pg_basebackup`, that names
    /// itself `name` to the primary (its `cluster_name`): a primary whose
    /// `synchronous_standby_names` lists `name` waits for it at each commit.
    pub async fn standby_of(primary: &PostgresProc, name: &str) -> PostgresProc {
        let mut standby = Self::prepare(vec![format!("cluster_name={name}")]).await;
        standby
            .postgres
            .base_backup(primary.port, &standby.work.log("pg_basebackup"))
            .await
            .expect("pg_basebackup");
        standby.up().await;
        standby
    }

    /// A cluster that takes TCP connections over TLS only (`hostssl`: a client that does
    /// not ask for TLS is refused), presenting `cert`.
    pub async fn start_tls(cert: &super::tls::ServerCert) -> PostgresProc {
        let mut pg = Self::prepare(vec!["fsync=off".into(), "ssl=on".into()]).await;
        pg.initdb().await;
        let data = pg.postgres.data_dir();
        // Postgres reads its key only if the key is its own and private.
        for (from, to) in [(&cert.cert, "server.crt"), (&cert.key, "server.key")] {
            let to = data.join(to);
            std::fs::copy(from, &to).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
            let _ = std::process::Command::new("chown")
                .arg(SUPERUSER)
                .arg(&to)
                .status();
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        pg.up().await;
        pg
    }

    /// A folder of its own in /tmp (which the postgres user can reach), and a free port.
    async fn prepare(settings: Vec<String>) -> PostgresProc {
        let dir =
            std::env::temp_dir().join(format!("baton-test-pg-{}", uuid::Uuid::new_v4().simple()));
        let work = WorkDir::open(&dir).expect("the private postgres's folder");
        let port = free_port();
        let postgres = Postgres::prepare(&work, port, running_as_root())
            .await
            .expect("Postgres's binaries and a folder for its cluster");
        PostgresProc {
            port,
            postgres,
            work,
            settings,
            process: None,
        }
    }

    async fn initdb(&self) {
        self.postgres
            .initdb(&self.work.log("initdb"))
            .await
            .expect("initdb");
    }

    /// The postmaster's pid (its children are the backends).
    pub fn postmaster_pid(&self) -> Option<u32> {
        self.postgres.postmaster_pid()?.try_into().ok()
    }

    /// The `postgres` database, as the superuser.
    pub fn admin_url(&self) -> String {
        self.postgres.admin_url()
    }

    /// Starts the server and waits until it accepts connections.
    pub async fn up(&mut self) {
        let mut process = self
            .postgres
            .spawn_with(
                &self.work.log("postgres"),
                &self.settings,
                Shutdown::Immediate,
            )
            .expect("postgres");
        self.postgres
            .wait_accepting(&mut process)
            .await
            .expect("postgres to start");
        self.process = Some(process);
    }

    /// Stops it at once, as a crash would (immediate mode: no checkpoint).
    pub async fn down(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop().await;
        }
    }
}

impl Drop for PostgresProc {
    fn drop(&mut self) {
        if let Some(process) = &mut self.process {
            process.stop_blocking();
        }
        if let Some(scratch) = self.postgres.scratch_dir() {
            let _ = std::fs::remove_dir_all(scratch);
        }
        let _ = std::fs::remove_dir_all(self.work.root());
    }
}
