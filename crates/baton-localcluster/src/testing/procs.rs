//! Real `baton` processes for tests, under the local cluster's supervisor: killed
//! (SIGKILL) when dropped, their output kept in the test's folder for post-mortems.

use super::{API_TOKEN, REGISTRATION_TOKEN, SECRETS_KEY, TestEnv};
use crate::processes::{Group, StopPolicy, Supervised};
use crate::readiness::wait_until;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::process::Command;

/// The `baton` binary under test: `BATON_BIN` if set, else the one cargo built beside the
/// running test or bench (`target/<profile>/baton`, the parent of its `deps/` folder;
/// cargo builds the binary before any integration test or bench of its package).
pub fn baton_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(bin) = std::env::var_os("BATON_BIN") {
            // Absolute: the test folders are found from it, and nginx and Postgres take
            // paths relative to their own prefix.
            return std::path::absolute(bin).expect("the working folder exists");
        }
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("a test runs from target/<profile>/deps");
        let bin = profile_dir.join("baton");
        assert!(
            bin.is_file(),
            "{} is missing: run the tests through cargo, or set BATON_BIN",
            bin.display()
        );
        bin
    })
}

/// Where tests keep their files: `target/tmp`, as cargo's `CARGO_TARGET_TMPDIR` names it.
pub fn target_tmp_dir() -> PathBuf {
    let target = baton_binary()
        .parent()
        .and_then(Path::parent)
        .expect("the binary is in target/<profile>");
    target.join("tmp")
}

static LOG_FILTER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// What the processes log: everything of Baton's, for a test's post-mortem, unless
/// [`log_as`] said otherwise.
fn log_filter() -> String {
    LOG_FILTER
        .get()
        .cloned()
        .unwrap_or_else(|| "info,baton=debug".into())
}

/// Processes started from now on log with this filter (the benchmark runs them as
/// production does, at `info`).
pub fn log_as(filter: &str) {
    let _ = LOG_FILTER.set(filter.to_string());
}

/// Starts `command` as `name`, its stdout and stderr in `<test dir>/<name>.log`.
fn spawn(env: &TestEnv, name: &str, command: Command) -> Supervised {
    let log = env.dir.join(format!("{name}.log"));
    // A stop is a SIGKILL to the process alone, as a crash of it would be: a runner's
    // agent must see its supervisor die and kill its tasks, as it would in production. In
    // the test's process group, so an interrupted test run (Ctrl-C, a timeout's kill of
    // the group) takes its nodes and runners with it.
    let crash = StopPolicy::signal(Signal::SIGKILL);
    Supervised::spawn_in(Group::Owners, name, command, &log, crash)
        .unwrap_or_else(|e| panic!("starting {name}: {e:#}"))
}

/// `signal` by its name without `SIG` (`TERM`), as the `kill` command takes it.
fn send_signal(process: &Supervised, signal: &str) {
    let signal: Signal = format!("SIG{signal}").parse().expect("a signal's name");
    assert!(process.signal(signal), "{signal} to {}", process.name());
}

/// How it exited, once it has, or `None` if it still runs after `timeout`.
async fn exit_within(process: &mut Supervised, timeout: Duration) -> Option<ExitStatus> {
    tokio::time::timeout(timeout, process.exited())
        .await
        .ok()?
        .ok()
}

/// The URL a node prints on its stdout once it listens (`baton node <id> listening on
/// <url>`), from a whole line of its log.
fn listening_url(log: &Path) -> Option<String> {
    let log = std::fs::read_to_string(log).ok()?;
    log.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .find_map(|line| {
            let url = line
                .strip_prefix("baton node ")?
                .split(" listening on ")
                .nth(1)?;
            Some(url.trim().to_string())
        })
}

/// A `baton serve` process.
pub struct NodeProc {
    process: Supervised,
    /// Its API's base URL, as it printed it.
    pub url: String,
    /// Its `--node-id`, `node-` and six random hex digits: also its log's name.
    pub node_id: String,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

impl NodeProc {
    /// Starts `baton serve` on a free port and waits until it is ready.
    pub async fn start(env: &TestEnv, extra_args: &[&str]) -> NodeProc {
        Self::start_with_env(env, extra_args, &[]).await
    }

    /// The same, with more environment variables (a clock offset through libfaketime).
    pub async fn start_with_env(
        env: &TestEnv,
        extra_args: &[&str],
        vars: &[(String, String)],
    ) -> NodeProc {
        let node = Self::start_unready(env, extra_args, vars).await;
        node.wait_ready().await;
        node
    }

    /// Starts `baton serve` and returns once it listens, ready or not: for a node that
    /// must not become ready (a store it may not trust).
    pub async fn start_unready(
        env: &TestEnv,
        extra_args: &[&str],
        vars: &[(String, String)],
    ) -> NodeProc {
        let name = format!("node-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let mut command = Command::new(baton_binary());
        command.args(["serve", "--node-id", &name]);
        // A port of the kernel's choosing, unless the test names one (a node restarted
        // where a load balancer expects it).
        if !extra_args.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        command
            .args(extra_args)
            .env("BATON_DATABASE_URL", &env.database_url)
            .env("BATON_REDIS_URL", &env.redis_url)
            .env("BATON_REDIS_PREFIX", &env.redis_prefix)
            .env("BATON_API_TOKEN", API_TOKEN)
            .env("BATON_REGISTRATION_TOKEN", REGISTRATION_TOKEN)
            .env("BATON_SECRETS_KEY", SECRETS_KEY)
            // The tests' webhook receivers listen on loopback, which webhooks may not
            // reach by default; `tests/webhooks.rs` sets it back to nothing.
            .env("BATON_WEBHOOK_ALLOW", "127.0.0.0/8")
            .env("RUST_LOG", log_filter())
            .envs(vars.iter().map(|(k, v)| (k, v)));
        let mut process = spawn(env, &name, command);
        let log = process.log().to_path_buf();
        // It says where it listens.
        let mut url = None;
        let prints_its_url = || {
            url = listening_url(&log);
            let printed = url.is_some();
            async move { printed }
        };
        wait_until(
            &mut process,
            "the node to listen",
            Duration::from_secs(30),
            prints_its_url,
        )
        .await
        .unwrap_or_else(|e| panic!("node did not start: {e:#}"));
        NodeProc {
            url: url.expect("seen by the wait"),
            process,
            node_id: name,
            log,
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.process.pid().unsigned_abs()
    }

    /// Resolves when it exits (a fault injected to crash it).
    pub async fn exited(&mut self) -> std::io::Result<ExitStatus> {
        self.process.exited().await
    }

    /// Waits until `/readyz` answers with success: its stores are reachable.
    pub async fn wait_ready(&self) {
        let http = reqwest::Client::new();
        let url = format!("{}/readyz", self.url);
        super::wait_for(
            &format!("{url} to be ready"),
            Duration::from_secs(30),
            || {
                let req = http.get(&url).send();
                async move {
                    req.await
                        .ok()
                        .filter(|r| r.status().is_success())
                        .map(|_| ())
                }
            },
        )
        .await;
    }

    /// The API description the node serves (`/openapi.json`), as JSON.
    pub async fn openapi(&self) -> serde_json::Value {
        let url = format!("{}/openapi.json", self.url);
        let answer = reqwest::get(&url).await.expect("GET /openapi.json");
        answer.json().await.expect("/openapi.json is JSON")
    }

    /// Waits until the node's count of parked lease requests satisfies `done`.
    pub async fn wait_parked(&self, what: &str, done: impl Fn(u64) -> bool) {
        let http = reqwest::Client::new();
        let url = format!("{}/readyz", self.url);
        super::wait_for(what, Duration::from_secs(10), || {
            let req = http.get(&url).send();
            let done = &done;
            async move {
                let body: serde_json::Value = req.await.ok()?.json().await.ok()?;
                done(body["parked_leases"].as_u64()?).then_some(())
            }
        })
        .await;
    }

    /// SIGKILL, as a crash would, and reaped.
    pub fn kill(&mut self) {
        self.process.stop_blocking();
    }

    /// Sends a signal by its name without `SIG` (`STOP` to pause it, `CONT` to resume).
    pub fn signal(&self, signal: &str) {
        send_signal(&self.process, signal);
    }

    /// SIGTERM (a graceful drain), then waits up to `timeout` for the exit: its code
    /// (-1 for a signal), or `None` if it is still running then.
    pub async fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        self.signal("TERM");
        let status = exit_within(&mut self.process, timeout).await?;
        Some(status.code().unwrap_or(-1))
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `baton runner` process: its supervisor, which starts the agent.
pub struct RunnerProc {
    process: Supervised,
    /// Its `--state-dir`: its identity and kept results, which a restart reuses.
    pub state_dir: PathBuf,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

impl RunnerProc {
    /// Starts `baton runner` against `server`, without waiting for it to register. Its
    /// state folder is `state_dir` (an earlier runner's, to restart it), or with `None` a
    /// new one of its own; `vars` are environment variables of its own (a skewed clock).
    pub async fn start(
        env: &TestEnv,
        server: &str,
        labels: &[&str],
        capacity: u32,
        extra_args: &[&str],
        state_dir: Option<&std::path::Path>,
        vars: &[(String, String)],
    ) -> RunnerProc {
        let name = format!("runner-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let state_dir = match state_dir {
            Some(dir) => dir.to_path_buf(),
            None => env.dir.join(&name),
        };
        let mut command = Command::new(baton_binary());
        command
            .args(["runner", "--server", server, "--name", &name])
            .args(["--labels", &labels.join(",")])
            .args(["--capacity", &capacity.to_string()])
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("--work-dir")
            .arg(work_dir_of(&state_dir))
            .args(if extra_args.contains(&"--wait-s") {
                &[][..]
            } else {
                &["--wait-s", "10"][..]
            })
            .args(extra_args)
            .env("BATON_REGISTRATION_TOKEN", REGISTRATION_TOKEN)
            .env("RUST_LOG", log_filter())
            .envs(vars.iter().map(|(k, v)| (k, v)));
        let process = spawn(env, &name, command);
        RunnerProc {
            log: process.log().to_path_buf(),
            process,
            state_dir,
        }
    }

    /// The supervisor's pid (the agent is its child).
    pub fn pid(&self) -> u32 {
        self.process.pid().unsigned_abs()
    }

    /// Sends a signal (`TERM` for a graceful stop) to the supervisor, which passes stop
    /// signals on to the agent.
    pub fn signal(&self, signal: &str) {
        send_signal(&self.process, signal);
    }

    /// SIGKILL to the supervisor alone, reaped: the agent sees it die and kills its tasks.
    pub fn kill(&mut self) {
        self.process.stop_blocking();
    }

    /// Waits for the runner to exit and returns its exit code (`None` for a signal).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        exit_within(&mut self.process, timeout)
            .await
            .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for the runner to exit"))
            .code()
    }
}

impl Drop for RunnerProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where a runner with `state_dir` runs its tasks: beside it, never inside.
pub fn work_dir_of(state_dir: &std::path::Path) -> PathBuf {
    let mut name = state_dir.file_name().unwrap_or_default().to_os_string();
    name.push("-work");
    state_dir.with_file_name(name)
}

/// Runs the `baton` command line (`baton ARGS...`) against `server` with `token`, to the end.
pub async fn baton_cli(server: &str, token: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(baton_binary());
    cmd.args(args)
        .env("BATON_SERVER", server)
        .env("BATON_TOKEN", token)
        // As std's `output()` did: the CLI reads nothing of the test's own stdin.
        .stdin(std::process::Stdio::null());
    cmd.output().await.expect("baton runs")
}
