//! Private Redis and Postgres servers for tests that kill or restart them, so the shared
//! ones other tests use are never disturbed. Redis is the local cluster's own starter under
//! the supervisor; Postgres runs under `pg_ctl`, which stops and starts one data folder as
//! many times as a test asks.

use crate::ports::Ports;
use crate::postgres::find_bin_dir;
use crate::processes::{Supervised, running_as_root};
use crate::redis;
use crate::workdir::WorkDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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

fn as_postgres(program: &str) -> Command {
    let program = find_bin_dir().expect("Postgres's binaries").join(program);
    if running_as_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

/// A private Postgres cluster (initdb'd per test) that a test can stop and start.
pub struct PostgresProc {
    pub port: u16,
    data: PathBuf,
    /// Server settings beyond the port and socket.
    settings: Vec<String>,
}

impl PostgresProc {
    /// A cluster for tests: `fsync` off, since nothing a test asserts survives a power cut.
    pub async fn start() -> PostgresProc {
        Self::start_with(&["-c", "fsync=off"]).await
    }

    /// A cluster as production runs it (`fsync` and synchronous commit on), with these
    /// settings (`-c name=value` pairs) besides: for benchmarks.
    pub async fn start_durable(settings: &[&str]) -> PostgresProc {
        Self::start_with(settings).await
    }

    /// A streaming standby of `primary`, copied from it by `pg_basebackup`, that names
    /// itself `name` to the primary (its `cluster_name`): a primary whose
    /// `synchronous_standby_names` lists `name` waits for it at each commit.
    pub async fn standby_of(primary: &PostgresProc, name: &str) -> PostgresProc {
        let data = Self::data_dir();
        let status = as_postgres("pg_basebackup")
            .arg("-D")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-R", "--no-sync", "-X", "stream"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("pg_basebackup");
        assert!(status.success(), "pg_basebackup failed");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let pg = PostgresProc {
            port: free_port(),
            data,
            settings: vec!["-c".into(), format!("cluster_name={name}")],
        };
        pg.up();
        pg
    }

    /// An empty folder the postgres user owns, in /tmp (which it can reach).
    fn data_dir() -> PathBuf {
        let data =
            std::env::temp_dir().join(format!("baton-test-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&data).unwrap();
        let _ = Command::new("chown").arg("postgres").arg(&data).status();
        data
    }

    /// A cluster that takes TCP connections over TLS only (`hostssl`: a client that does
    /// not ask for TLS is refused), presenting `cert`.
    pub async fn start_tls(cert: &super::tls::ServerCert) -> PostgresProc {
        let data = Self::initdb();
        // Postgres reads its key only if the key is its own and private.
        for (from, to) in [(&cert.cert, "server.crt"), (&cert.key, "server.key")] {
            let to = data.join(to);
            std::fs::copy(from, &to).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
            let _ = Command::new("chown").arg("postgres").arg(&to).status();
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let settings = ["-c", "fsync=off", "-c", "ssl=on"];
        let pg = PostgresProc {
            port: free_port(),
            data,
            settings: settings.iter().map(|s| s.to_string()).collect(),
        };
        pg.up();
        pg
    }

    /// A new cluster's data folder, every connection trusted.
    fn initdb() -> PathBuf {
        let data = Self::data_dir();
        let status = as_postgres("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("initdb");
        assert!(status.success(), "initdb failed");
        data
    }

    async fn start_with(settings: &[&str]) -> PostgresProc {
        let data = Self::initdb();
        let pg = PostgresProc {
            port: free_port(),
            data,
            settings: settings.iter().map(|s| s.to_string()).collect(),
        };
        pg.up();
        pg
    }

    /// The postmaster's pid (its children are the backends).
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn up(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 {}",
            self.port,
            self.data.display(),
            self.settings.join(" ")
        );
        let status = as_postgres("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.data.join("server.log"))
            .args(["-w", "-o", &options, "start"])
            .stdout(Stdio::null())
            .status()
            .expect("pg_ctl start");
        assert!(status.success(), "postgres did not start");
    }

    /// Stops it at once, as a crash would (immediate mode: no checkpoint).
    pub fn down(&self) {
        let _ = as_postgres("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for PostgresProc {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
