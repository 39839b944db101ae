//! `baton dev`: a local cluster for newcomers. It starts what is missing (Redis, Postgres),
//! the nodes behind nginx and the runners, runs a demo task through the load balancer,
//! says how to use the cluster, keeps it whole — a member that dies is started again, so
//! a newcomer can kill a node and watch the failover — and on Ctrl-C stops everything
//! it started. `baton dev status|kill|restart` steer it from another terminal.

mod control;
mod demo;
mod supervise;

use baton_localcluster::cluster::{Cluster, Role};
use baton_localcluster::nodes::NodeSettings;
use baton_localcluster::ports::Ports;
use baton_localcluster::postgres::Postgres;
use baton_localcluster::runners::RunnerSpec;
use baton_localcluster::workdir::WorkDir;
use baton_localcluster::{nginx, nodes, redis, runners};

/// The demo runners: two slots each, labelled like a typical Linux build host, each
/// serving its health and Prometheus metrics on a port of its own (`baton dev status`
/// lists where), as a scraper would find it on a real host.
fn runner_spec(health_port: u16) -> RunnerSpec {
    RunnerSpec {
        labels: "linux,dev".into(),
        capacity: 2,
        extra_args: vec![
            "--healthz-listen".into(),
            format!("127.0.0.1:{health_port}"),
        ],
        extra_env: Vec::new(),
    }
}
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Folder for logs, data and configuration; wiped and recreated at each start.
    #[arg(long, default_value = ".baton-dev")]
    dir: PathBuf,
    /// Port of the load balancer, the cluster's one address.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Number of nodes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    nodes: u16,
    /// Number of runners.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    runners: u16,
    /// Use this Redis instead of starting one.
    #[arg(long)]
    redis_url: Option<String>,
    /// Use this Postgres database (as given) instead of starting a cluster.
    #[arg(long)]
    database_url: Option<String>,
    /// API token with every scope.
    #[arg(long, default_value = "dev-admin-token")]
    api_token: String,
    /// Token runners register with.
    #[arg(long, default_value = "dev-registration-token")]
    registration_token: String,
    /// Bring everything up, check the demo task, tear down: exit 0 only if all of it worked.
    #[arg(long)]
    smoke: bool,
    /// Seconds before a node, runner, nginx or Redis that died is started again (a node
    /// first waits for the cluster to adopt its claims).
    #[arg(long, default_value_t = 2.0, value_parser = parse_delay)]
    restart_after_s: f64,
    /// Leave a member that died down (`baton dev restart NAME` starts it again).
    #[arg(long)]
    no_restart: bool,
    #[command(subcommand)]
    action: Option<control::DevAction>,
}

fn parse_delay(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds from 0 to 3600")),
    }
}

pub async fn run(mut args: DevArgs) -> anyhow::Result<ExitCode> {
    if let Some(action) = args.action.take() {
        return control::run(action).await;
    }
    let mut ports = Ports::default();
    ports.claim(args.port)?;
    let work = WorkDir::recreate(&args.dir)?;
    println!("baton dev: working in {}", work.root().display());
    let mut cluster = Cluster::default();
    let outcome = tokio::select! {
        outcome = up_and_running(&args, &work, &mut ports, &mut cluster) => outcome,
        // Ctrl-C is how a normal run ends, but a smoke run that did not finish failed.
        () = crate::cli::shutdown_signal() => match args.smoke {
            true => Err(anyhow::anyhow!("interrupted before the smoke test finished")),
            false => Ok(()),
        },
    };
    if let Err(e) = &outcome {
        for line in crate::cli::report(e) {
            eprintln!("baton dev: {line}");
        }
    }
    println!("\nstopping the cluster");
    cluster.stop().await;
    match outcome {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // Already said above, before the stop's lines.
        Err(_) => Ok(ExitCode::FAILURE),
    }
}

/// Brings the cluster up and runs the demo; then, with `--smoke`, returns, or else keeps
/// the cluster whole until Ctrl-C, which is the caller's business.
async fn up_and_running(
    args: &DevArgs,
    work: &WorkDir,
    ports: &mut Ports,
    cluster: &mut Cluster,
) -> anyhow::Result<()> {
    let lb_url = bring_up(args, work, ports, cluster).await?;
    let client = baton_client::Client::new(&lb_url, Some(args.api_token.clone()))?;
    tokio::select! {
        demo = demo::run(&client) => demo?,
        exit = cluster.any_exit() => return Err(exit),
    }
    if args.smoke {
        println!("\nsmoke test passed");
        return Ok(());
    }
    print_next_steps(&lb_url, &args.api_token, work);
    let restart_after = (!args.no_restart).then(|| Duration::from_secs_f64(args.restart_after_s));
    supervise::keep_up(cluster, work.root(), &lb_url, &client, restart_after).await
}

/// Starts every member, each once the ones it needs are ready. Returns the cluster's URL.
async fn bring_up(
    args: &DevArgs,
    work: &WorkDir,
    ports: &mut Ports,
    cluster: &mut Cluster,
) -> anyhow::Result<String> {
    let as_root = baton_localcluster::processes::running_as_root();
    let exe = std::env::current_exe()?;

    let redis_url = match &args.redis_url {
        None => {
            let port = ports.pick()?;
            let again = work.clone();
            let redis = cluster.add_restartable(
                Role::Redis,
                Some(redis::url(port)),
                Box::new(move || redis::spawn(&again, port)),
            )?;
            redis::wait_ready(cluster.get(redis), port).await?;
            println!("  redis     {}", redis::url(port));
            redis::url(port)
        }
        Some(url) => {
            println!("  redis     {url} (given)");
            url.clone()
        }
    };

    let database_url = match &args.database_url {
        None => {
            let pg = Postgres::prepare(work, ports.pick()?, as_root).await?;
            if let Some(dir) = pg.scratch_dir() {
                cluster.remove_after_stop(dir.to_path_buf());
            }
            pg.initdb(&work.log("initdb")).await?;
            // Each node's pool, plus room for psql sessions of a curious newcomer.
            let max_connections = 20 * u32::from(args.nodes) + 20;
            let postgres = pg.spawn(&work.log("postgres"), max_connections)?;
            let postgres = cluster.add(Role::Postgres, postgres);
            pg.wait_ready(cluster.get(postgres)).await?;
            println!(
                "  postgres  {} (data in {})",
                pg.url(),
                pg.data_dir().display()
            );
            pg.url()
        }
        Some(url) => {
            println!("  postgres  {url} (given)");
            url.clone()
        }
    };

    let lb_url = format!("http://127.0.0.1:{}", args.port);
    let provisioned = work.root().join("provisioned");
    let config = provisioners_file(work, &lb_url, &provisioned)?;
    cluster.stop_provisioned_runners(provisioned);
    let settings = NodeSettings {
        database_url,
        redis_url,
        api_token: args.api_token.clone(),
        registration_token: args.registration_token.clone(),
        secrets_key: nodes::fresh_secrets_key(),
        fixed_ids: true,
        extra_args: vec!["--config".into(), config.display().to_string()],
        extra_env: Vec::new(),
    };
    // The first node alone, since it applies the migrations; then the rest together.
    let mut node_ports = Vec::new();
    let mut node_members = Vec::new();
    for index in 1..=usize::from(args.nodes) {
        let port = ports.pick()?;
        let (exe, again, settings) = (exe.clone(), work.clone(), settings.clone());
        let node = cluster.add_restartable(
            Role::Node,
            Some(format!("http://127.0.0.1:{port}")),
            Box::new(move || nodes::spawn(&exe, &again, index, port, &settings)),
        )?;
        if index == 1 {
            nodes::wait_ready(cluster.get(node), port).await?;
        }
        node_ports.push(port);
        node_members.push(node);
    }
    for (node, port) in node_members.iter().zip(&node_ports) {
        nodes::wait_ready(cluster.get(*node), *port).await?;
        println!("  {:<9} http://127.0.0.1:{port}", cluster.get(*node).name());
    }

    let (again, lb_port, upstream) = (work.clone(), args.port, node_ports.clone());
    let lb = cluster.add_restartable(
        Role::LoadBalancer,
        Some(lb_url.clone()),
        Box::new(move || nginx::spawn(&again, lb_port, &upstream, as_root)),
    )?;
    nginx::wait_ready(cluster.get(lb), &lb_url).await?;
    println!("  nginx     {lb_url}");

    for index in 1..=usize::from(args.runners) {
        // Kept across restarts, as a node's port is: the address status shows holds.
        let health_port = ports.pick()?;
        let spec = runner_spec(health_port);
        let labels = spec.labels.clone();
        let (exe, again, url) = (exe.clone(), work.clone(), lb_url.clone());
        let token = args.registration_token.clone();
        let address = format!("http://127.0.0.1:{health_port}");
        let runner = cluster.add_restartable(
            Role::Runner,
            Some(address.clone()),
            Box::new(move || runners::spawn(&exe, &again, index, &url, &token, &spec)),
        )?;
        println!(
            "  {:<9} labels {labels}, metrics {address}/metrics",
            cluster.get(runner).name(),
        );
    }
    Ok(lb_url)
}

/// The nodes' settings file: one provisioner, `ephemeral`, which starts a runner as a
/// process of the node for each task labelled `ephemeral` (up to 4 at once), talking to
/// the load balancer, in `dir` (docs/dynamic-runners.md).
fn provisioners_file(work: &WorkDir, lb_url: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let file = work.root().join("baton.toml");
    let settings = format!(
        "[[provisioners]]\n\
         name = \"ephemeral\"\n\
         labels = [\"ephemeral\"]\n\
         capacity = 4\n\
         claim_timeout_s = 60\n\
         server_url = {lb_url:?}\n\
         dir = {dir:?}\n\
         runner_args = [\"--shutdown-grace-s\", \"5\"]\n"
    );
    std::fs::write(&file, settings)?;
    Ok(file)
}

fn print_next_steps(lb_url: &str, api_token: &str, work: &WorkDir) {
    let baton = baton_for_display();
    println!(
        "\nThe cluster is up.\n\
         \n  load balancer  {lb_url}\
         \n  console        {lb_url}/ui/  (sign in with the API token)\
         \n  API token      {api_token}\
         \n  logs           {logs}/\
         \n\nIn another terminal:\
         \n  export BATON_SERVER={lb_url} BATON_TOKEN={api_token}\
         \n  {baton} task submit --wait -- echo hi\
         \n  {baton} task submit --label ephemeral --wait -- echo hi   # a runner is started for it\
         \n  {baton} task list\
         \n  {baton} task watch         # every status change, as it happens\
         \n\nBreak it and watch it mend (a member that dies is started again):\
         \n  {baton} dev status          # what runs: pids, addresses, metrics\
         \n  {baton} dev kill node-2     # SIGKILL, as a crash; its tasks are adopted\
         \n  {baton} dev restart node-2\
         \n\nCtrl-C stops everything.",
        logs = work.logs().display(),
    );
}

/// This binary as the user would type it: relative to the current folder when inside it.
fn baton_for_display() -> String {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("baton"));
    let cwd = std::env::current_dir().unwrap_or_default();
    exe.strip_prefix(&cwd)
        .map(Path::to_path_buf)
        .unwrap_or(exe)
        .display()
        .to_string()
}
