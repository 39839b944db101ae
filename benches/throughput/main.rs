//! Throughput, pickup latency, bulk submit and idle cost of a whole Baton cluster on this
//! machine, with the counts that do not move with its load beside the rates that do.
//!
//! It starts a private Postgres (durable), a private Redis, three `baton serve` nodes
//! and nginx with the production configuration, and prints, each the median of three
//! rounds:
//!
//! - **drain**: 20,000 bulk-submitted tasks drained by 32 in flight — two protocol-level
//!   runner processes × 16 over the batched exchange, nothing spawned — through nginx;
//! - **bulk submit**: the same 20,000 from one client in batches of 1,000, one after
//!   another;
//! - **real agent**: the same drain with two `baton runner` agents (16 slots each)
//!   running `true`, beside the rate of spawning `true` 20,000 times, 32 at once, with no
//!   scheduler (the floor of this machine);
//! - **events**: the drain again with one event-stream subscriber on each node (all
//!   task events, `GET /v1/events`), beside the drain without: the rate and the counts
//!   per task with and without subscribers, and the events each subscriber received;
//! - **first pickup**: before anything else, one pickup on each lease path (the
//!   single-item lease and the exchange) by nodes that wake for the first time;
//! - **pickup**: a runner parked on one node, 200 tasks submitted on another 20 ms apart,
//!   through nginx: submit sent → task in the runner's hands;
//! - per task, for each phase: Postgres commits (`pg_stat_database`) and statements
//!   (`pg_stat_statements`, BEGIN and COMMIT included), Redis commands
//!   (`INFO commandstats`), HTTP requests (nginx's access log), CPU milliseconds by
//!   process (`/proc`);
//! - **pipelines**: what a release costs per job (a pipeline of pairs beside as many
//!   tasks flat), the wait from the last needed job's end to a job's start, and a
//!   10,000-job fan-out/fan-in beside 10,000 tasks flat (`pipelines.rs`);
//! - **idle**: 1,000 parked runners for 60 s: Postgres statements per second in all,
//!   Redis commands per poll, each node's resident memory;
//! - the drain again with 1,000,000 finished tasks in the table;
//! - **BullMQ**, the baseline (`benches/bullmq`, needs Node): the same drain (2 worker
//!   processes x 16, no-op) and pickup run by BullMQ on a private Redis of the same build,
//!   before the cluster starts, and Baton's figures beside it.
//!
//! Run with `cargo bench --bench throughput` (`-- --quick`: one round, smaller counts).

use baton_localcluster::testing as support;

mod bullmq;
mod counters;
mod drains;
mod idle;
mod pickup;
mod pipelines;
mod protocol_runner;
mod stack;
mod sustained;

use baton_client::{Client, Exchange, ItemResult, StartItem, SubmitTask};
use counters::{Sources, Usage, rss_mib, usage};
use drains::*;
use idle::*;
use pickup::*;
use stack::Stack;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::*;
use uuid::Uuid;

struct Scale {
    rounds: usize,
    drain: usize,
    pickups: usize,
    idle_runners: usize,
    idle_window: Duration,
    finished_rows: i64,
}

fn scale() -> Scale {
    let mut scale = rounds_and_counts();
    // A longer phase for a profiler to sample (`BATON_BENCH_TASKS=200000 ... --only
    // submit`): the tasks of every drain and bulk submit.
    if let Some(n) = std::env::var("BATON_BENCH_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        scale.drain = n;
    }
    scale
}

fn rounds_and_counts() -> Scale {
    if std::env::args().any(|a| a == "--quick") {
        Scale {
            rounds: 1,
            drain: 5_000,
            pickups: 50,
            idle_runners: 200,
            idle_window: Duration::from_secs(20),
            finished_rows: 100_000,
        }
    } else {
        Scale {
            rounds: 3,
            drain: 20_000,
            pickups: 200,
            idle_runners: 1_000,
            idle_window: Duration::from_secs(60),
            finished_rows: 1_000_000,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Some(i) = args.iter().position(|a| a == "--protocol-runner") {
        let slots = args[i + 3].parse().expect("slots");
        rt.block_on(protocol_runner::run(&args[i + 1], &args[i + 2], slots));
        return;
    }
    rt.block_on(bench());
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A phase's rate (median of rounds) and its per-task counts (of the median round).
struct Figure {
    rate: f64,
    usage: Usage,
    tasks: usize,
}

fn median_figure(mut rounds: Vec<Figure>) -> Figure {
    rounds.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    rounds.swap_remove(rounds.len() / 2)
}

/// `--only PHASE`: one phase (bullmq, first, drain, events, agent, pickup, pipelines, idle,
/// full), to
/// profile it; or one not in the default run (submit, alone; sustained, half an hour).
fn only() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == "--only")?;
    args.get(i + 1).cloned()
}

fn runs(phase: &str) -> bool {
    only().is_none_or(|o| o == phase)
}

async fn bench() {
    // The cluster logs as production does.
    support::procs::log_as("info");
    let scale = scale();
    // The baseline first, on a Redis of its own, with nothing of Baton's running yet.
    let baseline = if runs("bullmq") {
        let figures = bullmq::on_private_redis(scale.drain, scale.pickups).await;
        if let Some(f) = &figures {
            println!("{}", f.summary());
        }
        figures
    } else {
        None
    };
    // The sustained run keeps finished tasks as long as the issue names; the other
    // phases keep them all (the full-table drain counts on it).
    let stack = if only().as_deref() == Some("sustained") {
        Stack::start_with(&["--retention-s", sustained::RETENTION_S]).await
    } else {
        Stack::start().await
    };
    let mut processes: Vec<(String, Vec<u32>)> = vec![
        (
            "nodes".into(),
            stack.nodes.iter().map(|n| n.pid()).collect(),
        ),
        ("redis".into(), vec![stack.redis.pid().expect("redis runs")]),
        ("nginx".into(), {
            let master = stack.lb.pid();
            let mut pids = vec![master];
            pids.extend(counters::children_of(master));
            pids
        }),
    ];
    let sources = |processes: &[(String, Vec<u32>)]| Sources {
        admin_url: stack.pg.admin_url(),
        database: stack.env.database.clone(),
        redis_url: stack.redis.url(),
        access_log: stack.lb.dir.join("access.log"),
        processes: processes.to_vec(),
        postmaster: stack.pg.postmaster_pid().expect("postgres runs"),
    };
    println!(
        "baton throughput benchmark: {} rounds, 3 nodes behind nginx, private Redis and Postgres \
         (fsync on), {} cores",
        scale.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // First, while every node is as started.
    let first = if runs("first") {
        Some(first_pickups(&stack).await)
    } else {
        None
    };
    let (mut drains, mut submits) = (Vec::new(), Vec::new());
    if runs("drain") {
        for round in 0..scale.rounds {
            let (submit, drain) = protocol_drain(&stack, &scale, &sources, &processes, round).await;
            submits.push(submit);
            drains.push(drain);
        }
    }
    // Only when asked for by name: the drain's rounds measure the bulk submit too.
    if only().as_deref() == Some("submit") {
        for round in 0..scale.rounds {
            submit_alone(&stack, &scale, &sources, &processes, round).await;
        }
    }
    // Half an hour: only when asked for by name.
    if only().as_deref() == Some("sustained") {
        sustained::sustained(&stack, &scale, &sources, &processes).await;
    }
    let mut subscribed = Vec::new();
    if runs("events") {
        for round in 0..scale.rounds {
            subscribed.push(subscribed_drain(&stack, &scale, &sources, &processes, round).await);
        }
    }
    let (mut agents, mut floors) = (Vec::new(), Vec::new());
    if runs("agent") {
        for round in 0..scale.rounds {
            let (agent, floor) = agent_drain(&stack, &scale, &sources, &mut processes, round).await;
            agents.push(agent);
            floors.push(floor);
        }
    }
    let (mut pickups, mut lease_pickups) = (Vec::new(), Vec::new());
    if runs("pickup") {
        for _ in 0..scale.rounds {
            pickups.push(pickup(&stack, &scale, LeasePath::Exchange).await);
            lease_pickups.push(pickup(&stack, &scale, LeasePath::Lease).await);
        }
    }
    if runs("pipelines") {
        pipelines::pipelines(&stack, &scale, &sources, &processes).await;
    }
    let idle = if runs("idle") {
        Some(idle(&stack, &scale, &sources, &processes).await)
    } else {
        None
    };
    let mut full = Vec::new();
    if runs("full") {
        fill_finished(&stack, scale.finished_rows).await;
        for round in 0..scale.rounds {
            let (_, drain) =
                protocol_drain(&stack, &scale, &sources, &processes, 100 + round).await;
            full.push(drain);
        }
    }
    if only().is_some() {
        return;
    }
    let drain = median_figure(drains);
    let submit = median_figure(submits);
    let least_received = subscribed.iter().map(|(_, r)| *r).min().unwrap_or(0);
    let subscribed = median_figure(subscribed.into_iter().map(|(f, _)| f).collect());
    let agent = median_figure(agents);
    let floor = median(floors);
    let pickup_at = |i: usize| median(pickups.iter().map(|p| p[i]).collect());
    let (p50, p99, max) = (pickup_at(0), pickup_at(1), pickup_at(2));
    let lease_at = |i: usize| median(lease_pickups.iter().map(|p| p[i]).collect());
    let [first_lease, first_exchange] = first.expect("ran");
    let idle = idle.expect("ran");
    let full = median_figure(full);

    println!();
    println!("== baton throughput: medians of {} rounds ==", scale.rounds);
    println!(
        "drain, protocol-level (2 runners x 16, exchange, nginx): {:.0} tasks/s   [target >= BullMQ's]",
        drain.rate
    );
    println!("  {}", drain.usage.per_task(drain.tasks));
    println!(
        "drain with 3 event subscribers (one per node, every task event): {:.0} tasks/s \
         ({:+.1} % of the rate without); each subscriber received at least {least_received} of {} events",
        subscribed.rate,
        (subscribed.rate / drain.rate - 1.0) * 100.0,
        3 * scale.drain
    );
    println!("  {}", subscribed.usage.per_task(subscribed.tasks));
    println!(
        "drain with {} finished tasks in the table: {:.0} tasks/s ({:+.1} % of the empty-table rate)",
        scale.finished_rows,
        full.rate,
        (full.rate / drain.rate - 1.0) * 100.0
    );
    println!("  {}", full.usage.per_task(full.tasks));
    println!(
        "drain, real agents running `true` (2 x 16): {:.0} tasks/s; spawning `true` alone, 32 at once: \
         {floor:.0}/s; ratio {:.2}   [target >= 0.6]",
        agent.rate,
        agent.rate / floor
    );
    println!("  {}", agent.usage.per_task(agent.tasks));
    println!(
        "bulk submit (one client, batches of 1000 one after another, nginx): {:.0} tasks/s   \
         [target >= 50000]",
        submit.rate
    );
    println!("  {}", submit.usage.per_task(submit.tasks));
    println!(
        "pickup, exchange, parked on one node, submitted on another, nginx: p50 {p50:.2} ms, \
         p99 {p99:.2} ms, max {max:.2} ms   [target p50 <= 2, p99 <= BullMQ's]"
    );
    println!(
        "pickup, single-item lease, the same: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms   \
         [target p99 <= 10]",
        lease_at(0),
        lease_at(1),
        lease_at(2)
    );
    println!(
        "first pickup after the start: single lease (node 0 through nginx, node 1's first \
         submit) {first_lease:.2} ms; exchange (node 2 straight, node 1's second submit) \
         {first_exchange:.2} ms   [target <= 10]"
    );
    println!("{idle}");
    match &baseline {
        Some(bull) => {
            println!("{}", bull.summary());
            println!(
                "beside BullMQ, this run: drain {:.2}x; pickup p50 {:.2}x, p99 {:.2}x its \
                 (< 1: Baton's quicker); bulk submit {:.2}x its bulk add",
                drain.rate / bull.drain_per_s,
                p50 / bull.pickup_p50_ms,
                p99 / bull.pickup_p99_ms,
                submit.rate / bull.bulk_add_per_s,
            );
        }
        None => println!("BullMQ baseline: not measured (the reason is above)"),
    }
}
