//! Throughput, pickup latency, bulk submit and idle cost of a whole Baton cluster on this
//! machine, with the counts that do not move with its load beside the rates that do.
//!
//! It starts a private Postgres (durable), a private Redis, three `baton serve` nodes
//! and nginx with the production configuration, and prints, each the median of three
//! rounds:
//!
//! - **drain**: 20,000 bulk-submitted tasks drained by 32 in flight — two protocol-level
//!   runner processes × 16 over the batched exchange, nothing spawned — through nginx;
//! - **bulk submit**: the same 20,000 in batches of 1,000, four at once;
//! - **real agent**: the same drain with two `baton runner` agents (16 slots each)
//!   running `true`, beside the rate of spawning `true` 20,000 times, 32 at once, with no
//!   scheduler (the floor of this machine);
//! - **events**: the drain again with one event-stream subscriber on each node (all
//!   task events, `GET /v1/events`), beside the drain without: the rate and the counts
//!   per task with and without subscribers, and the events each subscriber received;
//! - **pickup**: a runner parked on one node, 200 tasks submitted on another 20 ms apart,
//!   through nginx: submit sent → task in the runner's hands;
//! - per task, for each phase: Postgres commits (`pg_stat_database`) and statements
//!   (`pg_stat_statements`, BEGIN and COMMIT included), Redis commands
//!   (`INFO commandstats`), HTTP requests (nginx's access log), CPU milliseconds by
//!   process (`/proc`);
//! - **idle**: 1,000 parked runners for 60 s: Postgres statements per second in all,
//!   Redis commands per poll, each node's resident memory;
//! - the drain again with 1,000,000 finished tasks in the table.
//!
//! Run with `cargo bench --bench throughput` (`-- --quick`: one round, smaller counts).

use baton_localcluster::testing as support;

mod counters;
mod protocol_runner;
mod stack;

use baton_client::{Client, Exchange, ItemResult, StartItem, SubmitTask};
use counters::{Sources, Usage, rss_mib, usage};
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

/// `--only PHASE` (drain, events, agent, pickup, idle, full): one phase, for profiling.
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
    let stack = Stack::start().await;
    let mut processes: Vec<(String, Vec<u32>)> = vec![
        (
            "nodes".into(),
            stack.nodes.iter().map(|n| n.child.id()).collect(),
        ),
        ("redis".into(), vec![stack.redis.pid().expect("redis runs")]),
        ("nginx".into(), {
            let master = stack.lb.child.id();
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

    let (mut drains, mut submits) = (Vec::new(), Vec::new());
    if runs("drain") {
        for round in 0..scale.rounds {
            let (submit, drain) = protocol_drain(&stack, &scale, &sources, &processes, round).await;
            submits.push(submit);
            drains.push(drain);
        }
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
    let mut pickups = Vec::new();
    if runs("pickup") {
        for _ in 0..scale.rounds {
            pickups.push(pickup(&stack, &scale).await);
        }
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
    let idle = idle.expect("ran");
    let full = median_figure(full);

    println!();
    println!("== baton throughput: medians of {} rounds ==", scale.rounds);
    println!(
        "drain, protocol-level (2 runners x 16, exchange, nginx): {:.0} tasks/s   [target >= 5000]",
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
         {floor:.0}/s; ratio {:.2}   [target >= 0.5]",
        agent.rate,
        agent.rate / floor
    );
    println!("  {}", agent.usage.per_task(agent.tasks));
    println!(
        "bulk submit (batches of 1000, 4 at once, nginx): {:.0} tasks/s   [target >= 50000]",
        submit.rate
    );
    println!("  {}", submit.usage.per_task(submit.tasks));
    println!(
        "pickup, parked on one node, submitted on another, nginx: p50 {p50:.2} ms, p99 {p99:.2} ms, \
         max {max:.2} ms   [target p99 <= 3]"
    );
    println!("{idle}");
}

/// Registers a runner through `url`; its token.
async fn runner_token(url: &str) -> String {
    register_runner_token(url, &[], 16).await.1
}

/// Submits `n` tasks to `queue` in batches of 1,000, four batches at once; returns how
/// long it took.
async fn bulk_submit(url: &str, queue: &str, n: usize, command: &str) -> Duration {
    let started = Instant::now();
    let batches: Vec<Vec<SubmitTask>> = (0..n)
        .map(|_| SubmitTask {
            queue: Some(queue.to_string()),
            command: Some(vec![command.to_string()]),
            ..SubmitTask::default()
        })
        .collect::<Vec<_>>()
        .chunks(1000)
        .map(|c| c.to_vec())
        .collect();
    let client = user_client(url);
    let queue = Arc::new(tokio::sync::Mutex::new(batches));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (client, queue) = (client.clone(), queue.clone());
            tokio::spawn(async move {
                loop {
                    let Some(batch) = queue.lock().await.pop() else {
                        return;
                    };
                    client.submit_batch(batch).await.expect("bulk submit");
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    started.elapsed()
}

/// Waits until every task of `queue` succeeded; the drain rate from Postgres's own
/// timestamps (first lease to last finish). The wait asks only whether an unfinished
/// task is left (the partial index of unfinished tasks answers at its first row): a
/// count over the queue read every row ten times a second, and Postgres spent more on
/// the benchmark's question than on a task.
async fn drained(stack: &Stack, queue: &str, n: usize) -> f64 {
    let mut db = stack.env.db().await;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let unfinished: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE queue = $1
                 AND status IN ('scheduled', 'queued', 'leased', 'running', 'cancelling'))",
        )
        .bind(queue)
        .fetch_one(&mut db)
        .await
        .unwrap();
        if !unfinished {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the drain of {queue} did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let succeeded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'succeeded'")
            .bind(queue)
            .fetch_one(&mut db)
            .await
            .unwrap();
    if succeeded as usize != n {
        let others: Vec<(uuid::Uuid, String, i32, Option<String>)> = sqlx::query_as(
            "SELECT id, status, attempt, error FROM tasks WHERE queue = $1 AND status <> 'succeeded'",
        )
        .bind(queue)
        .fetch_all(&mut db)
        .await
        .unwrap();
        panic!("{succeeded} of the {n} tasks of {queue} succeeded; the others: {others:?}");
    }
    let secs: f64 = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM max(finished_at) - min(leased_at))::float8 FROM tasks WHERE queue = $1",
    )
    .bind(queue)
    .fetch_one(&mut db)
    .await
    .unwrap();
    n as f64 / secs
}

async fn protocol_drain(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &[(String, Vec<u32>)],
    round: usize,
) -> (Figure, Figure) {
    let queue = format!("drain-{round}");
    let tokens = [
        runner_token(&stack.lb.url).await,
        runner_token(&stack.lb.url).await,
    ];
    let src = sources(processes);
    stack.settle().await;
    let before = src.snapshot().await;
    let took = bulk_submit(&stack.lb.url, &queue, scale.drain, "true").await;
    stack.settle().await;
    let submitted = src.snapshot().await;
    let submit = Figure {
        rate: scale.drain as f64 / took.as_secs_f64(),
        usage: usage(&before, &submitted),
        tasks: scale.drain,
    };

    let exe = std::env::current_exe().unwrap();
    let mut runners: Vec<std::process::Child> = tokens
        .iter()
        .map(|token| {
            std::process::Command::new(&exe)
                .args(["--protocol-runner", &stack.lb.url, token, "16"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("protocol runner")
        })
        .collect();
    let mut with_runners = processes.to_vec();
    with_runners.push(("runners".into(), runners.iter().map(|r| r.id()).collect()));
    let src = sources(&with_runners);
    let before = src.snapshot().await;
    let histograms = node_histograms(stack).await;
    let rate = drained(stack, &queue, scale.drain).await;
    let means = timings(&histograms, &node_histograms(stack).await);
    stack.settle().await;
    let after = src.snapshot().await;
    for r in &mut runners {
        let _ = r.kill();
        let _ = r.wait();
    }
    let drain = Figure {
        rate,
        usage: usage(&before, &after),
        tasks: scale.drain,
    };
    println!(
        "round {round}: bulk submit {:.0} tasks/s; drain {:.0} tasks/s",
        submit.rate, drain.rate
    );
    println!("  submit {}", submit.usage.per_task(submit.tasks));
    println!("  drain  {}", drain.usage.per_task(drain.tasks));
    println!("{means}");
    println!("{}", drain.usage.top_statements(drain.tasks, 8));

    (submit, drain)
}

/// The drain with a subscriber to every task event on each node; and the fewest events
/// a subscriber received (each task has three: queued, running, succeeded).
async fn subscribed_drain(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &[(String, Vec<u32>)],
    round: usize,
) -> (Figure, u64) {
    let filter = baton_client::EventFilter {
        kind: Some("task".into()),
        ..Default::default()
    };
    let expected = 3 * scale.drain as u64;
    let mut counts = Vec::new();
    let mut subscribers = Vec::new();
    for node in &stack.nodes {
        let frames = user_client(&node.url)
            .events(&filter, None)
            .await
            .expect("subscribe");
        let count = Arc::new(AtomicU64::new(0));
        counts.push(count.clone());
        // Each subscriber ends once it has every event (or its stream does).
        subscribers.push(tokio::spawn(async move {
            use futures::StreamExt;
            let mut frames = std::pin::pin!(frames);
            while let Some(Ok(frame)) = frames.next().await {
                // The stream's first frame is its place, no event.
                if !frame.is_place_only() && count.fetch_add(1, Ordering::Relaxed) + 1 >= expected {
                    return;
                }
            }
        }));
    }
    let (_, drain) = protocol_drain(stack, scale, sources, processes, 200 + round).await;
    // The last events reach the subscribers within moments of the last commit.
    let all = futures::future::join_all(subscribers.iter_mut());
    let _ = tokio::time::timeout(Duration::from_secs(10), all).await;
    for s in subscribers {
        s.abort();
    }
    let least = counts
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0);
    println!(
        "round {round} with subscribers: drain {:.0} tasks/s; events received {least} of {expected}",
        drain.rate
    );
    (drain, least)
}

async fn agent_drain(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &mut [(String, Vec<u32>)],
    round: usize,
) -> (Figure, f64) {
    let queue = format!("agent-{round}");
    let mut agents = Vec::new();
    for _ in 0..2 {
        agents.push(
            stack
                .env
                .runner_with(&stack.lb.url, &[], 16, &["--wait-s", "5"])
                .await,
        );
    }
    // Registered and parked before the clock starts.
    wait_for("the agents to park", Duration::from_secs(30), || async {
        (stack.parked().await >= 2).then_some(())
    })
    .await;
    bulk_submit(&stack.lb.url, &queue, scale.drain, "true").await;
    let mut with_agents = processes.to_vec();
    let mut pids: Vec<u32> = agents.iter().map(|a| a.child.id()).collect();
    for agent in &agents {
        pids.extend(counters::children_of(agent.child.id()));
    }
    with_agents.push(("agents".into(), pids));
    let src = sources(&with_agents);
    let before = src.snapshot().await;
    let rate = drained(stack, &queue, scale.drain).await;
    stack.settle().await;
    let after = src.snapshot().await;
    drop(agents);
    let floor = spawn_floor(scale.drain).await;
    let agent = Figure {
        rate,
        usage: usage(&before, &after),
        tasks: scale.drain,
    };
    println!(
        "round {round}: real agents {:.0} tasks/s; bare spawn of `true` {floor:.0}/s",
        agent.rate
    );
    println!("  agents {}", agent.usage.per_task(agent.tasks));
    println!("{}", agent.usage.top_statements(agent.tasks, 8));
    (agent, floor)
}

/// The nodes' own histograms, summed over the nodes: (sum, count) by series.
async fn node_histograms(stack: &Stack) -> Vec<(String, f64, f64)> {
    let mut out: Vec<(String, f64, f64)> = Vec::new();
    for node in &stack.nodes {
        let text = reqwest::get(format!("{}/metrics", node.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for (family, label, what) in [
            (
                "baton_http_request_duration_seconds",
                "/v1/runner/exchange",
                "exchange request",
            ),
            (
                "baton_postgres_query_duration_seconds",
                "op=\"statement\"",
                "group commit statement",
            ),
            (
                "baton_redis_command_duration_seconds",
                "op=\"evalsha\"",
                "Redis script",
            ),
            ("baton_group_commit_items", "", "items per group commit"),
            (
                "baton_http_request_duration_seconds",
                "route=\"/v1/tasks\"",
                "submit request",
            ),
            (
                "baton_redis_command_duration_seconds",
                "op=\"multi\"",
                "Redis transaction",
            ),
        ] {
            let find = |suffix: &str| {
                text.lines()
                    .filter(|l| l.starts_with(&format!("{family}_{suffix}")) && l.contains(label))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>()
            };
            match out.iter_mut().find(|(w, _, _)| w == what) {
                Some(entry) => {
                    entry.1 += find("sum");
                    entry.2 += find("count");
                }
                None => out.push((what.to_string(), find("sum"), find("count"))),
            }
        }
    }
    out
}

/// Where the nodes' time went between two reads of their histograms: the exchange as
/// nginx sees it, and the Postgres and Redis round trips in it.
fn timings(before: &[(String, f64, f64)], after: &[(String, f64, f64)]) -> String {
    let parts: Vec<String> = after
        .iter()
        .zip(before)
        .filter_map(|((what, sum, count), (_, sum0, count0))| {
            let n = count - count0;
            (n > 0.0).then(|| {
                let mean = (sum - sum0) / n;
                if what.starts_with("items") {
                    format!("{what} {mean:.1}")
                } else {
                    format!("{what} {:.2} ms", mean * 1000.0)
                }
            })
        })
        .collect();
    format!("  means: {}", parts.join("; "))
}

/// How fast this machine spawns `true`, 32 at once, with nothing else: the floor a
/// runner that spawns a process per task is measured against. Prints what one spawn
/// costs in CPU (this process and the children), to set beside the agents' figure.
async fn spawn_floor(n: usize) -> f64 {
    let slots = Arc::new(tokio::sync::Semaphore::new(32));
    let ticks_before = counters::process_ticks(std::process::id(), true);
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..n {
        let slot = slots.clone().acquire_owned().await.unwrap();
        running.spawn(async move {
            let status = tokio::process::Command::new("true")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .status()
                .await;
            drop(slot);
            assert!(status.unwrap().success());
        });
    }
    while running.join_next().await.is_some() {}
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let ticks = counters::process_ticks(std::process::id(), true) - ticks_before;
    println!(
        "  bare spawn: CPU {:.3} ms per `true`, spawner and child",
        ticks as f64 * 1000.0 / counters::clock_ticks_per_second() / n as f64
    );
    rate
}

/// The exchange a parked protocol-level runner sends.
fn poll(boot_id: Uuid, wait_s: u32) -> Exchange {
    Exchange {
        request_id: Uuid::new_v4(),
        boot_id,
        max: 1,
        wait_s,
        ..Exchange::default()
    }
}

/// Pickup latency: p50, p99, max in ms.
async fn pickup(stack: &Stack, scale: &Scale) -> [f64; 3] {
    let (_, token) = register_runner_token(&stack.pinned[0], &[], 1).await;
    let runner = Client::new(&stack.pinned[0], Some(token)).unwrap();
    let submitter = user_client(&stack.pinned[1]);
    let boot = Uuid::new_v4();
    let histograms = node_histograms(stack).await;
    let mut samples = Vec::with_capacity(scale.pickups);
    // Where the time goes: until the submit is answered (its commit), and the rest.
    let mut submit_answered = Vec::with_capacity(scale.pickups);
    for _ in 0..scale.pickups {
        let parked = {
            let runner = runner.clone();
            tokio::spawn(async move { runner.exchange(&poll(boot, 30)).await })
        };
        wait_for("the runner to park", Duration::from_secs(10), || async {
            (stack.parked().await >= 1).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let sent = Instant::now();
        let (task, _) = submitter
            .submit(&SubmitTask {
                queue: Some("pickup".into()),
                command: Some(vec!["true".into()]),
                ..SubmitTask::default()
            })
            .await
            .unwrap();
        submit_answered.push(sent.elapsed());
        let got = parked.await.unwrap().unwrap();
        samples.push(sent.elapsed());
        let leased = got.tasks.first().expect("the parked runner got the task");
        assert_eq!(leased.id, task.id);
        finish(&runner, boot, leased.id, leased.lease_id).await;
    }
    samples.sort();
    let (p50, p99, max) = (
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap()),
    );
    submit_answered.sort();
    println!(
        "pickup: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms (n={}); the submit alone \
         answered at p50 {:.2} ms, p99 {:.2} ms",
        samples.len(),
        ms(percentile(&submit_answered, 0.5)),
        ms(percentile(&submit_answered, 0.99)),
    );
    println!("{}", timings(&histograms, &node_histograms(stack).await));
    [p50, p99, max]
}

/// Starts and completes a leased task, so nothing comes back after its ack timeout.
async fn finish(runner: &Client, boot_id: Uuid, task_id: Uuid, lease_id: Uuid) {
    let started = runner
        .exchange(&Exchange {
            request_id: Uuid::new_v4(),
            boot_id,
            starts: vec![StartItem {
                task_id,
                lease_id,
                traceparent: None,
            }],
            ..Exchange::default()
        })
        .await
        .unwrap();
    assert_eq!(started.starts[0].result, ItemResult::Done);
    let done = runner
        .exchange(&Exchange {
            request_id: Uuid::new_v4(),
            boot_id,
            completions: vec![baton_client::CompletionItem {
                task_id,
                lease_id,
                outcome: baton_client::Outcome::Succeeded,
                exit_code: Some(0),
                error: None,
                outputs: None,
                log_size: Some(0),
                log_tail: None,
                traceparent: None,
            }],
            ..Exchange::default()
        })
        .await
        .unwrap();
    assert_eq!(done.completions[0].result, ItemResult::Done);
}

/// Parked runners for a while: what they cost when there is nothing to do.
async fn idle(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &[(String, Vec<u32>)],
) -> String {
    let n = scale.idle_runners;
    let mut tokens = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(16) {
        let made = futures::future::join_all(
            chunk
                .iter()
                .map(|_| register_runner_token(&stack.lb.url, &[], 1)),
        )
        .await;
        tokens.extend(made.into_iter().map(|(_, t)| (t, Uuid::new_v4())));
    }
    // Steady state: runners parked for long have been heard by every node, so each
    // node's token cache knows them. One poll that does not park, on each node directly.
    for chunk in tokens.chunks(50) {
        let warmups = chunk.iter().flat_map(|(token, boot)| {
            stack.nodes.iter().map(move |node| {
                let client = Client::new(&node.url, Some(token.clone())).unwrap();
                async move { client.exchange(&poll(*boot, 0)).await }
            })
        });
        for answer in futures::future::join_all(warmups).await {
            answer.expect("a warm-up poll");
        }
    }
    let polls = Arc::new(AtomicU64::new(0));
    let pollers: Vec<_> = tokens
        .into_iter()
        .map(|(token, boot)| {
            let (url, polls) = (stack.lb.url.clone(), polls.clone());
            tokio::spawn(async move {
                let client = Client::new(&url, Some(token)).unwrap();
                loop {
                    if client.exchange(&poll(boot, 30)).await.is_ok() {
                        polls.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            })
        })
        .collect();
    wait_for("every runner to park", Duration::from_secs(120), || async {
        (stack.parked().await >= n as u64).then_some(())
    })
    .await;
    let src = sources(processes);
    stack.settle().await;
    let before = src.snapshot().await;
    let polls_before = polls.load(Ordering::Relaxed);
    tokio::time::sleep(scale.idle_window).await;
    let after = src.snapshot().await;
    let answered = polls.load(Ordering::Relaxed) - polls_before;
    let rss: Vec<String> = stack
        .nodes
        .iter()
        .map(|node| format!("{:.0}", rss_mib(node.child.id())))
        .collect();
    for p in pollers {
        p.abort();
    }
    let cost = usage(&before, &after);
    let secs = scale.idle_window.as_secs_f64();
    println!(
        "idle statements over {secs:.0} s:\n{}",
        cost.top_statements(1, 10)
    );
    let line = format!(
        "idle, {n} parked runners (wait_s 30) for {secs:.0} s: {:.2} Postgres statements/s \
         ({:.2} commits/s) in all   [target <= 1]; {:.2} Redis commands per poll ({answered} polls)   \
         [target <= 2]; resident memory per node {} MiB   [target <= 150]",
        cost.statements as f64 / secs,
        cost.commits as f64 / secs,
        cost.redis_commands as f64 / answered.max(1) as f64,
        rss.join(", ")
    );
    println!("{line}");
    line
}

/// `rows` tasks finished a day ago, older than everything else, as a busy cluster's table
/// holds them for the retention; vacuumed and analysed, as autovacuum would leave it.
async fn fill_finished(stack: &Stack, rows: i64) {
    let started = Instant::now();
    let mut db = stack.env.db().await;
    sqlx::query(
        "INSERT INTO tasks (id, queue, labels, command, env, secret_env, priority, timeout_s,
                            queue_timeout_s, max_attempts, status, attempt, created_by,
                            created_at, updated_at, queued_at, leased_at, started_at,
                            finished_at, exit_code, runner_id, lease_id)
         SELECT (lpad(to_hex(ms), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
                'history', '{}', '{true}', '{}', '{}', 0, 3600, 86400, 1, 'succeeded', 1,
                'bench', at, at, at, at, at, at, 0, gen_random_uuid(), gen_random_uuid()
         FROM (SELECT g, md5(g::text) AS h,
                      (extract(epoch FROM now() - interval '1 day') * 1000)::bigint + g AS ms,
                      now() - interval '1 day' + g * interval '1 millisecond' AS at
               FROM generate_series(1, $1) AS g) AS s",
    )
    .bind(rows)
    .execute(&mut db)
    .await
    .unwrap();
    sqlx::query("VACUUM ANALYZE tasks")
        .execute(&mut db)
        .await
        .unwrap();
    println!(
        "{rows} finished tasks written and vacuumed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
