//! Real `baton` processes for tests: killed (SIGKILL) when dropped, their output kept in
//! the test's folder for post-mortems.

use super::{API_TOKEN, REGISTRATION_TOKEN, SECRETS_KEY, TestEnv};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The `baton` binary under test: `BATON_BIN` if set, else the one cargo built beside the
/// running test or bench (`target/<profile>/baton`, the parent of its `deps/` folder;
/// cargo builds the binary before any integration test or bench of its package).
pub fn baton_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(bin) = std::env::var_os("BATON_BIN") {
            return PathBuf::from(bin);
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

fn log_file(env: &TestEnv, name: &str) -> (PathBuf, std::fs::File) {
    let path = env.dir.join(format!("{name}.log"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("process log file");
    (path, file)
}

pub struct NodeProc {
    pub child: Child,
    pub url: String,
    pub node_id: String,
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
        let (log, stderr) = log_file(env, &name);
        let mut child = Command::new(baton_binary())
            .args(["serve", "--listen", "127.0.0.1:0", "--node-id", &name])
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
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn baton serve");
        // The node prints its bound address on stdout once listening.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut echo = log_file(env, &name).1;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = writeln!(echo, "{line}");
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap()
            .unwrap_or_else(|_| panic!("node did not start; see {}", log.display()));
        NodeProc {
            child,
            url,
            node_id: name,
            log,
        }
    }

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

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (a graceful drain), then waits up to `timeout` for the exit: its code,
    /// or `None` if it is still running then.
    pub async fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        send_signal(&self.child, "TERM");
        exit_within(&mut self.child, timeout).await
    }
}

/// Sends `signal` (e.g. `TERM`) to a child process.
fn send_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// The child's exit code once it exits, or `None` if it still runs after `timeout`.
async fn exit_within(child: &mut Child, timeout: Duration) -> Option<i32> {
    super::poll_until(timeout, || {
        let status = child.try_wait().expect("try_wait");
        async move { status.map(|s| s.code().unwrap_or(-1)) }
    })
    .await
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct RunnerProc {
    pub child: Child,
    pub state_dir: PathBuf,
    pub log: PathBuf,
}

impl RunnerProc {
    pub async fn start(
        env: &TestEnv,
        server: &str,
        labels: &[&str],
        capacity: u32,
        extra_args: &[&str],
    ) -> RunnerProc {
        let name = format!("runner-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        Self::start_in(
            env,
            server,
            labels,
            capacity,
            extra_args,
            &env.dir.join(&name),
        )
        .await
    }

    /// A runner agent with a given state directory (a restart of an earlier one).
    pub async fn start_in(
        env: &TestEnv,
        server: &str,
        labels: &[&str],
        capacity: u32,
        extra_args: &[&str],
        state_dir: &std::path::Path,
    ) -> RunnerProc {
        let name = format!("runner-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
        let (log, out) = log_file(env, &name);
        let state_dir = state_dir.to_path_buf();
        let child = Command::new(baton_binary())
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
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn baton runner");
        RunnerProc {
            child,
            state_dir,
            log,
        }
    }

    /// Sends a signal to the agent (e.g. SIGTERM for a graceful stop).
    pub fn signal(&self, signal: &str) {
        send_signal(&self.child, signal);
    }

    /// Waits for the agent to exit and returns its exit code.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let child = &mut self.child;
        super::wait_for("the runner to exit", timeout, || {
            let status = child.try_wait().expect("try_wait");
            async move { status.map(|s| s.code()) }
        })
        .await
    }
}

impl Drop for RunnerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        .env("BATON_TOKEN", token);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}
