//! What a phase cost, in counts that do not move with the machine's load: Postgres
//! commits and statements, Redis commands, HTTP requests through nginx, and CPU time by
//! process, read before and after.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where the counts come from.
pub struct Sources {
    /// Where the counters are read: another database of the same cluster, so reading
    /// them adds nothing to what they count.
    pub admin_url: String,
    pub database: String,
    pub redis_url: String,
    pub access_log: PathBuf,
    /// Process groups by name; each pid's CPU counts its reaped children too.
    pub processes: Vec<(String, Vec<u32>)>,
    /// The postmaster: its live children are the backends.
    pub postmaster: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub commits: i64,
    pub statements: i64,
    /// Calls, and total planning and execution milliseconds, of each statement
    /// (`pg_stat_statements`), by its text.
    pub by_statement: BTreeMap<String, (i64, f64, f64)>,
    pub redis_commands: u64,
    pub http_requests: usize,
    /// CPU clock ticks by process group.
    pub cpu_ticks: BTreeMap<String, u64>,
}

/// What happened between two snapshots.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub commits: i64,
    pub statements: i64,
    pub by_statement: BTreeMap<String, (i64, f64, f64)>,
    pub redis_commands: u64,
    pub http_requests: usize,
    pub cpu_ms: BTreeMap<String, f64>,
}

impl Usage {
    pub fn cpu_total_ms(&self) -> f64 {
        self.cpu_ms.values().sum()
    }

    /// The statements called most, per task: where Postgres's work goes.
    pub fn top_statements(&self, tasks: usize, n: usize) -> String {
        let mut top: Vec<(&String, &(i64, f64, f64))> =
            self.by_statement.iter().filter(|(_, c)| c.0 > 0).collect();
        top.sort_by_key(|(_, c)| std::cmp::Reverse(c.0));
        top.iter()
            .take(n)
            .map(|(q, (calls, plan, exec))| {
                let q: String = q.split_whitespace().collect::<Vec<_>>().join(" ");
                let per = *calls as f64;
                format!(
                    "    {:.3}/task  plan {:.3} ms exec {:.3} ms  {:.90}",
                    per / tasks.max(1) as f64,
                    plan / per,
                    exec / per,
                    q
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The line printed for a phase, per task.
    pub fn per_task(&self, tasks: usize) -> String {
        let n = tasks.max(1) as f64;
        let cpu: Vec<String> = self
            .cpu_ms
            .iter()
            .map(|(name, ms)| format!("{name} {:.3}", ms / n))
            .collect();
        format!(
            "per task: {:.3} Postgres commits, {:.2} statements, {:.2} Redis commands, {:.3} HTTP requests; \
             CPU {:.3} ms ({})",
            self.commits as f64 / n,
            self.statements as f64 / n,
            self.redis_commands as f64 / n,
            self.http_requests as f64 / n,
            self.cpu_total_ms() / n,
            cpu.join(", ")
        )
    }
}

impl Sources {
    pub async fn snapshot(&self) -> Snapshot {
        let mut db = sqlx::PgConnection::connect(&self.admin_url).await.unwrap();
        let commits: i64 =
            sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
                .bind(&self.database)
                .fetch_one(&mut db)
                .await
                .unwrap();
        let statements: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(calls), 0)::int8 FROM pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)",
        )
        .bind(&self.database)
        .fetch_one(&mut db)
        .await
        .unwrap();
        let by_statement: BTreeMap<String, (i64, f64, f64)> =
            sqlx::query_as::<_, (String, i64, f64, f64)>(
                "SELECT query, sum(calls)::int8, sum(total_plan_time), sum(total_exec_time)
                 FROM pg_stat_statements
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) GROUP BY query",
            )
            .bind(&self.database)
            .fetch_all(&mut db)
            .await
            .unwrap()
            .into_iter()
            .map(|(q, c, p, e)| (q, (c, p, e)))
            .collect();
        let mut cpu_ticks = BTreeMap::new();
        for (name, pids) in &self.processes {
            let ticks = pids.iter().map(|&pid| process_ticks(pid, true)).sum();
            cpu_ticks.insert(name.clone(), ticks);
        }
        let backends: u64 = children_of(self.postmaster)
            .into_iter()
            .map(|pid| process_ticks(pid, false))
            .sum();
        cpu_ticks.insert(
            "postgres".into(),
            process_ticks(self.postmaster, true) + backends,
        );
        Snapshot {
            commits,
            statements,
            by_statement,
            redis_commands: redis_commands(&self.redis_url).await,
            http_requests: std::fs::read_to_string(&self.access_log)
                .map(|s| s.lines().count())
                .unwrap_or(0),
            cpu_ticks,
        }
    }
}

use sqlx::Connection;

pub fn usage(before: &Snapshot, after: &Snapshot) -> Usage {
    let tick_ms = 1000.0 / clock_ticks_per_second();
    Usage {
        commits: after.commits - before.commits,
        statements: after.statements - before.statements,
        by_statement: after
            .by_statement
            .iter()
            .map(|(q, (c, p, e))| {
                let (c0, p0, e0) = before.by_statement.get(q).copied().unwrap_or_default();
                (q.clone(), (c - c0, p - p0, e - e0))
            })
            .collect(),
        redis_commands: after.redis_commands.saturating_sub(before.redis_commands),
        http_requests: after.http_requests.saturating_sub(before.http_requests),
        cpu_ms: after
            .cpu_ticks
            .iter()
            .map(|(name, ticks)| {
                let was = before.cpu_ticks.get(name).copied().unwrap_or(0);
                (name.clone(), ticks.saturating_sub(was) as f64 * tick_ms)
            })
            .collect(),
    }
}

pub fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of `pid` (and of its reaped children, `cutime + cstime`, if asked).
pub fn process_ticks(pid: u32, with_children: bool) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some(end) = stat.rfind(')') else { return 0 };
    let fields: Vec<u64> = stat[end + 2..]
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // Fields from the state (field 3): utime is field 14, stime 15, cutime 16, cstime 17.
    let at = |field: usize| fields.get(field - 3).copied().unwrap_or(0);
    let own = at(14) + at(15);
    if with_children {
        own + at(16) + at(17)
    } else {
        own
    }
}

/// The live children of `parent`.
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let end = s.rfind(')')?;
                    s[end + 2..].split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// Resident memory of `pid`, in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn redis_commands(url: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
