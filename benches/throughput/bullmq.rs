//! BullMQ as a baseline (issue 28): the same drain and pickup, run by BullMQ on this
//! machine against a Redis of the same build, by `benches/bullmq/baseline.mjs` under
//! Node. See that script for what it measures and how; this side finds Node, installs
//! the pinned packages (`npm ci`) if they are not there, runs the script and reads the
//! one JSON line it prints. A machine without Node skips the baseline with a message
//! rather than failing the bench.

use baton_localcluster::testing::services::RedisProc;
use std::path::Path;
use std::process::{Command, Stdio};

/// The script's figures (its JSON line). Fields it adds later are ignored.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct BullmqFigures {
    pub drain_jobs: usize,
    /// First lease to last finish, as Baton's drain rate.
    pub drain_per_s: f64,
    /// CPU of the worker processes, per job, from their start to the last completion.
    pub drain_cpu_ms_per_job: f64,
    /// `INFO commandstats` calls during the drain (INFO's own left out), per job.
    pub redis_cmds_per_job: f64,
    /// Just before `queue.add` to the processor's entry, a worker in the producer's
    /// process (as Baton's bench has its submitter and parked runner in one process).
    pub pickup_p50_ms: f64,
    pub pickup_p99_ms: f64,
    pub bullmq_version: String,
    pub node_version: String,
    pub workers: usize,
    pub concurrency: usize,
    /// redis-server's CPU during the drain (`INFO cpu`), per job.
    pub redis_cpu_ms_per_job: f64,
    /// Of the Redis commands, the scripts called (EVALSHA): a client's round trips.
    pub redis_scripts_per_job: f64,
    /// `Queue.addBulk`, batches of 1,000, one after another (as Baton's bulk submit).
    pub bulk_add_per_s: f64,
    pub bulk_add_redis_cmds_per_job: f64,
    /// The same pickup to the drain's worker processes, idle.
    pub pickup_forked_p50_ms: f64,
    pub pickup_forked_p99_ms: f64,
}

impl BullmqFigures {
    /// The lines the bench prints for the baseline.
    pub fn summary(&self) -> String {
        format!(
            "BullMQ {} baseline (Node {}, same Redis build): drain ({} workers x {}, no-op): {:.0} jobs/s\n  \
             per job: {:.2} Redis commands ({:.2} scripts); CPU: workers {:.3} ms, redis-server {:.3} ms\n\
             BullMQ bulk add (addBulk, batches of 1000, one client, one at a time): {:.0} jobs/s, {:.2} Redis commands per job\n\
             BullMQ pickup, idle worker in the producer's process: p50 {:.2} ms, p99 {:.2} ms \
             (to the idle worker processes: p50 {:.2} ms, p99 {:.2} ms); {} jobs drained",
            self.bullmq_version,
            self.node_version,
            self.workers,
            self.concurrency,
            self.drain_per_s,
            self.redis_cmds_per_job,
            self.redis_scripts_per_job,
            self.drain_cpu_ms_per_job,
            self.redis_cpu_ms_per_job,
            self.bulk_add_per_s,
            self.bulk_add_redis_cmds_per_job,
            self.pickup_p50_ms,
            self.pickup_p99_ms,
            self.pickup_forked_p50_ms,
            self.pickup_forked_p99_ms,
            self.drain_jobs,
        )
    }
}

/// Runs the baseline on a private Redis of its own: the `redis-server` the stack starts,
/// with the same settings, so that no node's traffic lands in its counts (`INFO
/// commandstats` and `INFO cpu` are the whole server's). The run blocks, on a thread of
/// its own.
pub async fn on_private_redis(drain: usize, pickups: usize) -> Option<BullmqFigures> {
    let dir = std::env::temp_dir().join(format!("baton-bench-bullmq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut redis = RedisProc::start(&dir).await;
    let url = redis.url();
    let figures = tokio::task::spawn_blocking(move || run(&url, drain, pickups))
        .await
        .expect("the BullMQ baseline's thread");
    redis.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    figures
}

/// Runs the baseline against `redis_url` (`drain` jobs by 2 worker processes x 16, then
/// `pickups` pickups); None, with a message on stderr, when it cannot run or fails.
pub fn run(redis_url: &str, drain: usize, pickups: usize) -> Option<BullmqFigures> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/bullmq");
    if drain == 0 || pickups == 0 {
        eprintln!("BullMQ baseline skipped: it needs at least one job to drain and one pickup");
        return None;
    }
    let node = match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => {
            eprintln!(
                "BullMQ baseline skipped: node not found; install Node 20 (apt-get install nodejs npm)"
            );
            return None;
        }
    };
    // BullMQ 5 and the script want a recent Node (they were tried on Node 20).
    let major: u32 = node
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 18 {
        eprintln!(
            "BullMQ baseline skipped: node {node} is too old; install Node 20 (apt-get install nodejs npm)"
        );
        return None;
    }
    if !installed(&dir) {
        eprintln!(
            "BullMQ baseline: installing its packages (npm ci in {})",
            dir.display()
        );
        let status = Command::new("npm")
            .args(["ci", "--silent", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() && installed(&dir) => {}
            Ok(s) => {
                eprintln!(
                    "BullMQ baseline skipped: `npm ci` in {} failed ({s})",
                    dir.display()
                );
                return None;
            }
            Err(e) => {
                eprintln!(
                    "BullMQ baseline skipped: cannot run npm ({e}); install it (apt-get install npm)"
                );
                return None;
            }
        }
    }
    // Its progress lines (stderr) go to the bench's output; stdout is the JSON line.
    let out = Command::new("node")
        .arg(dir.join("baseline.mjs"))
        .args(["--redis", redis_url])
        .args([
            "--drain",
            &drain.to_string(),
            "--workers",
            "2",
            "--concurrency",
            "16",
        ])
        .args(["--pickups", &pickups.to_string()])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            eprintln!("BullMQ baseline skipped: cannot run node ({e})");
            return None;
        }
    };
    if !out.status.success() {
        eprintln!(
            "BullMQ baseline failed ({}); its message is above",
            out.status
        );
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(line) = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
    else {
        eprintln!("BullMQ baseline failed: no JSON line in its output: {stdout:?}");
        return None;
    };
    match serde_json::from_str(line) {
        Ok(figures) => Some(figures),
        Err(e) => {
            eprintln!("BullMQ baseline failed: cannot read its figures ({e}): {line}");
            None
        }
    }
}

/// Whether `npm ci` has run: the pinned BullMQ is there.
fn installed(dir: &Path) -> bool {
    dir.join("node_modules/bullmq/package.json").is_file()
}
