//! `baton chaos`: the failover drill, in a crate of its own so a build for production can
//! leave it out (the `drill` feature of the `baton` package). It starts a cluster on this machine (Redis, Postgres,
//! N nodes behind nginx, M runners) with short thresholds, submits a steady mix of tasks
//! (some in concurrency groups, some to a queue it pauses and resumes throughout, beside
//! schedules of every overlap policy), and for a set time injects faults (`faults.rs`)
//! long enough to cross every threshold. Then it waits for the cluster to settle and
//! checks the history against the invariants of design.md §3 — from Postgres's audit, the
//! tasks' own records of their runs, and the fault log, which must name a cause for every
//! run the server or a runner ended without an exit (`causes.rs`) — prints a report, and
//! writes it as JSON (`report.json` in its folder), and exits non-zero on any violation.

mod asking;
mod causes;
mod checks;
mod cluster;
mod faults;
mod groups;
mod load;
mod on_demand;
mod overlaps;
mod pauses;
mod pipelines;
mod records;
mod report;
mod schedules;
mod stores;
mod webhooks;

use baton_localcluster::timings::NodeTimings;
use baton_localcluster::workdir::WorkDir;
use cluster::ChaosCluster;
use report::Report;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The report as JSON, in the drill's folder.
pub const REPORT_JSON: &str = "report.json";

#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// Folder for logs, data and the execution record; wiped at each start.
    #[arg(long, default_value = ".baton-chaos")]
    pub dir: PathBuf,
    /// How long faults are injected, in seconds.
    #[arg(long, default_value_t = 120)]
    pub duration_s: u64,
    /// Nodes in the drill's cluster (at least 2: one must be left to adopt).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..))]
    pub nodes: u16,
    /// Runner agents taking the drill's tasks.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    pub runners: u16,
    /// Tasks submitted per second.
    #[arg(long, default_value_t = 4.0)]
    pub rate: f64,
    /// Seconds between faults.
    #[arg(long, default_value_t = 4.0)]
    pub fault_every_s: f64,
    /// At least this many node kills (SIGKILL) happen.
    #[arg(long, default_value_t = 10)]
    pub min_node_kills: u32,
    /// At least this many Redis restarts happen, alternately keeping and losing the data.
    #[arg(long, default_value_t = 2)]
    pub min_redis_restarts: u32,
    /// At least this many failovers of each store that has them (`--redis sentinel|cluster`,
    /// `--postgres failover`), alternately its master killed and a failover by hand.
    #[arg(long, default_value_t = 2)]
    pub min_store_failovers: u32,
    /// Seed of the fault schedule and task mix [default: random].
    #[arg(long)]
    pub seed: Option<u64>,
    /// A Postgres server (admin URL) to create the drill's database on; without it a
    /// private Postgres is started. (Not with `--postgres failover`, which starts its own.)
    #[arg(long, env = "BATON_CHAOS_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Redis as one server, behind three sentinels, or as a six-node Cluster.
    #[arg(long, value_enum, default_value_t = stores::RedisMode::Single)]
    pub redis: stores::RedisMode,
    /// Postgres as one server, or a primary with a synchronous standby under
    /// pg_auto_failover.
    #[arg(long, value_enum, default_value_t = stores::PostgresMode::Single)]
    pub postgres: stores::PostgresMode,
    /// How long the cluster may take to settle after the faults stop, in seconds.
    #[arg(long, default_value_t = 180)]
    pub settle_s: u64,
    /// The kinds of fault to inject (comma-separated) [default: all].
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = faults::Fault::ALL)]
    pub faults: Vec<faults::Fault>,
}

/// The nodes' thresholds: short, so a run of minutes sees many failovers.
pub const TIMINGS: NodeTimings = NodeTimings::DRILL;
pub const NODE_TTL_MS: u64 = TIMINGS.node_ttl_ms;
pub const CLEANER_INTERVAL_MS: u64 = TIMINGS.cleaner_interval_ms;
pub const RUNNER_LOST_AFTER_S: u64 = TIMINGS.runner_lost_after_s;
/// How long a runner goes without an answer before it kills its tasks (see
/// `NodeTimings::DRILL` for its margin to the lost threshold).
pub const RUNNER_FENCE_AFTER_S: u64 = 7;

pub async fn run(mut args: ChaosArgs) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(rand::random);
    // The tasks record their runs in a file of the drill's folder, and a root runner's
    // tasks each have a /tmp of their own: under /tmp they would record into theirs.
    if let Some(private) = ["/tmp", "/var/tmp", "/dev/shm"]
        .into_iter()
        .find(|p| std::path::absolute(&args.dir).is_ok_and(|dir| dir.starts_with(p)))
    {
        anyhow::bail!(
            "--dir {} is under {private}, of which every task gets a private one: the tasks' \
             records would not reach the drill. Choose a --dir elsewhere",
            args.dir.display()
        );
    }
    let work = WorkDir::recreate(&args.dir)?;
    println!(
        "baton chaos: seed {seed}, working in {}",
        work.root().display()
    );
    let (redis, postgres) = (args.redis, args.postgres);
    let (kept, left_out): (Vec<_>, Vec<_>) = args
        .faults
        .iter()
        .partition(|f| f.applies_to(redis, postgres));
    if !left_out.is_empty() {
        println!("  left out with these stores: {left_out:?}");
    }
    args.faults = kept;
    let mut cluster = ChaosCluster::start(&args, &work).await?;
    let outcome = drill(&args, seed, &work, &mut cluster).await;
    println!("\nstopping the cluster");
    cluster.stop().await;
    let report = outcome?;
    report.print();
    let json = args.dir.join(REPORT_JSON);
    std::fs::write(&json, serde_json::to_vec_pretty(&report.to_json())?)?;
    println!("  the report as JSON: {}", json.display());
    if !report.violations.is_empty() {
        let listed = args.dir.join("violations.txt");
        report.write_violations(&listed)?;
        println!("  every violation: {}", listed.display());
    }
    Ok(if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn drill(
    args: &ChaosArgs,
    seed: u64,
    work: &WorkDir,
    cluster: &mut ChaosCluster,
) -> anyhow::Result<Report> {
    let hooks = webhooks::Receiver::start(seed).await?;
    let executions = work.join("executions.log");
    // The tasks append to it as users of their own (runners started as root run each
    // task as another uid).
    std::fs::write(&executions, b"")?;
    std::fs::set_permissions(
        &executions,
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )?;
    let stop_load = CancellationToken::new();
    let load = Arc::new(load::Load::new(
        cluster.lb_url(),
        &executions,
        &work.join("history.log"),
        hooks.url(),
        seed,
    )?);
    let submitting = tokio::spawn(load.clone().run(args.rate, stop_load.clone()));
    let client = || baton_client::Client::new(cluster.lb_url(), Some(cluster::API_TOKEN.into()));
    let schedule = schedules::ScheduleWorkload::start(client()?).await?;
    let overlapping = overlaps::OverlapSchedules::start(client()?, &executions).await?;
    let pausing = tokio::spawn(pauses::run(client()?, seed, stop_load.clone()));
    let piping = tokio::spawn(
        pipelines::PipelineWorkload::new(client()?, &executions, seed).run(stop_load.clone()),
    );

    let started = Instant::now();
    let refused = || load.retries();
    let faults = faults::run(
        args,
        seed,
        cluster,
        Duration::from_secs(args.duration_s),
        &refused,
    )
    .await;
    stop_load.cancel();
    let submit_problems = submitting.await?;
    let pauses = pausing.await?;
    let (pipelines, pipeline_ids, pipelines_refused) = piping.await?;
    cluster.heal().await?;
    let mut stop_problems = Vec::new();
    let overlap_tasks = {
        let url = cluster.postgres.url_now().await?;
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await?;
        let within = Duration::from_secs(args.settle_s);
        overlapping
            .stop(&mut conn, within, &mut stop_problems)
            .await?
    };
    let healed_at = Instant::now();
    println!(
        "\nfaults over after {:.0} s; waiting for the cluster to settle",
        started.elapsed().as_secs_f64()
    );

    let mut accepted = load.accepted();
    accepted.extend(overlap_tasks.iter().map(|(policy, id)| load::Accepted {
        id: *id,
        notify: false,
        cancelled_as: None,
        cancel_unanswered: false,
        cancelled_by_a_tick: *policy == "cancel",
    }));
    // Each pipeline job is a task of the load for every check of tasks.
    accepted.extend(pipelines.jobs(&pipeline_ids).await?);
    let settle = Duration::from_secs(args.settle_s);
    let settled = checks::wait_quiescent(cluster, &accepted, settle).await;
    let flow = checks::Flow {
        pauses: &pauses,
        overlap_tasks: &overlap_tasks,
    };
    let mut report = checks::check(cluster, &accepted, &executions, &hooks, &faults, &flow).await?;
    report.seed = seed;
    report.duration = Duration::from_secs(args.duration_s);
    report.submit_retries = load.retries();
    report.violations.extend(submit_problems);
    report.violations.extend(pipelines_refused);
    report.violations.extend(stop_problems);
    let before = report.violations.len();
    report.schedule = schedule.check(cluster, &mut report.violations).await?;
    report.checks.push((
        "every schedule tick fired exactly once",
        report.violations.len() == before,
    ));
    let before = report.violations.len();
    let runs = records::runs_from(&executions);
    report.pipelines = pipelines
        .check(&pipeline_ids, &runs, &mut report.violations)
        .await?;
    report.checks.push((
        "each pipeline job ended as its rule says, after what it needs",
        report.violations.len() == before,
    ));
    let before = report.violations.len();
    // A runner that took no task is let go at its claim timeout (30 s here).
    report.on_demand = on_demand::check(
        cluster,
        settle.max(Duration::from_secs(40)),
        &mut report.violations,
    )
    .await?;
    report.checks.push((
        "every runner started on demand left",
        report.violations.len() == before,
    ));
    match settled {
        Ok(()) => report.settled_after = Some(healed_at.elapsed()),
        Err(e) => report
            .violations
            .push(format!("the cluster did not settle: {e}")),
    }
    Ok(report)
}
