//! What one lease costs Redis as the number of queues grows: the lease script against a
//! private Redis, with one queue holding every task, and with 10,000 distinct queues
//! holding one task each — side by side, with the counts that do not move with the
//! machine's load (Redis commands and Redis CPU per lease) beside the latencies that do.
//!
//! Scenarios, each leasing one task at a time, 2,000 leases (`--quick`: 500):
//! - **1 queue**: 10,000 tasks in one queue;
//! - **10,000 queues**: one task in each of 10,000 queues of one label set;
//! - **10,000 queues it cannot serve**: 10,000 queues of 200 label sets the runner lacks
//!   (each a label it does not have), and one queue of 10,000 tasks it can serve.
//!
//! Run with `cargo bench --bench lease_cost`.

use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_localcluster::testing as support;

use baton_coord::{Coord, CoordOptions, Enqueue, LeaseAsk, ReplayKey};
use baton_core::LabelSet;
use std::time::{Duration, Instant};
use support::services::RedisProc;
use uuid::Uuid;

const TASKS: usize = 10_000;
const NOW: i64 = 1_800_000_000_000;

fn leases() -> usize {
    if std::env::args().any(|a| a == "--quick") {
        500
    } else {
        2_000
    }
}

fn entry(queue: &str, labels: &LabelSet, i: usize) -> Enqueue {
    Enqueue {
        task_id: Uuid::now_v7(),
        queue: queue.to_string(),
        labels: labels.clone(),
        priority: 0,
        enqueued_at_ms: NOW + i as i64,
        group: None,
        owner: "bench".into(),
    }
}

/// Calls and microseconds Redis spent in each command, from `INFO commandstats`.
async fn command_stats(redis: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .unwrap();
    let field = |line: &str, name: &str| -> u64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info"))
        .fold((0, 0), |(calls, usec), l| {
            // A script's own call counts its time; the commands it runs count their calls.
            let own_usec = if l.starts_with("cmdstat_evalsha") || l.starts_with("cmdstat_eval:") {
                field(l, "usec")
            } else {
                0
            };
            (calls + field(l, "calls"), usec + own_usec)
        })
}

struct Figure {
    name: &'static str,
    p50: Duration,
    p99: Duration,
    commands: f64,
    redis_us: f64,
}

async fn measure(
    name: &'static str,
    coord: &Coord,
    redis: &mut redis::aio::MultiplexedConnection,
    runner_labels: &LabelSet,
) -> Figure {
    let n = leases();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(redis)
        .await
        .unwrap();
    let (calls_before, usec_before) = command_stats(redis).await;
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let replay = ReplayKey {
            key: format!("bench-replay-{}", Uuid::new_v4()),
            ttl_ms: 60_000,
        };
        let lease_ids = [LeaseId::random()];
        let started = Instant::now();
        let leased = coord
            .lease(&LeaseAsk {
                node: "bench-node",
                runner: RunnerId::default(),
                boot_id: Uuid::nil(),
                labels: runner_labels,
                queues: &[],
                lease_ids: &lease_ids,
                replay: &replay,
                retry: false,
                claims_of: &[],
                now_ms: NOW,
            })
            .await
            .unwrap();
        took.push(started.elapsed());
        assert_eq!(leased.popped.len(), 1, "{name}: a task each lease");
    }
    let (calls_after, usec_after) = command_stats(redis).await;
    took.sort();
    Figure {
        name,
        p50: took[n / 2],
        p99: took[(n * 99 / 100).min(n - 1)],
        // Less the INFO and RESETSTAT of the measurement itself.
        commands: (calls_after.saturating_sub(calls_before + 1)) as f64 / n as f64,
        redis_us: (usec_after - usec_before) as f64 / n as f64,
    }
}

async fn fresh(redis: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("FLUSHALL").query_async(redis).await.unwrap();
}

async fn bench() {
    let dir = std::env::temp_dir().join(format!("baton-lease-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = RedisProc::start(&dir).await;
    let coord = Coord::from_url(&server.url(), "{baton}:", &CoordOptions::default()).unwrap();
    let mut redis = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let none = LabelSet::empty();
    let mut figures = Vec::new();

    fresh(&mut redis).await;
    let one: Vec<Enqueue> = (0..TASKS).map(|i| entry("only", &none, i)).collect();
    for chunk in one.chunks(1_000) {
        coord.enqueue(chunk).await.unwrap();
    }
    figures.push(measure("1 queue, 10,000 tasks", &coord, &mut redis, &none).await);

    fresh(&mut redis).await;
    let many: Vec<Enqueue> = (0..TASKS)
        .map(|i| entry(&format!("queue-{i}"), &none, i))
        .collect();
    for chunk in many.chunks(1_000) {
        coord.enqueue(chunk).await.unwrap();
    }
    figures.push(measure("10,000 queues, 1 task each", &coord, &mut redis, &none).await);

    fresh(&mut redis).await;
    let foreign: Vec<Enqueue> = (0..TASKS)
        .map(|i| {
            let labels = LabelSet::new([format!("other-{}", i % 200)]).unwrap();
            entry(&format!("queue-{i}"), &labels, i)
        })
        .collect();
    for chunk in foreign.chunks(1_000) {
        coord.enqueue(chunk).await.unwrap();
    }
    let mine = LabelSet::new(["mine"]).unwrap();
    let served: Vec<Enqueue> = (0..TASKS).map(|i| entry("served", &mine, i)).collect();
    for chunk in served.chunks(1_000) {
        coord.enqueue(chunk).await.unwrap();
    }
    figures.push(
        measure(
            "10,000 queues of 200 label sets it cannot serve, + 1 it can",
            &coord,
            &mut redis,
            &mine,
        )
        .await,
    );

    println!();
    println!(
        "lease of one task, {} leases each (Redis {}):",
        leases(),
        server.url()
    );
    println!(
        "{:<62} {:>9} {:>9} {:>14} {:>16}",
        "", "p50 ms", "p99 ms", "Redis cmds", "Redis µs/lease"
    );
    for f in &figures {
        println!(
            "{:<62} {:>9.3} {:>9.3} {:>14.1} {:>16.1}",
            f.name,
            f.p50.as_secs_f64() * 1e3,
            f.p99.as_secs_f64() * 1e3,
            f.commands,
            f.redis_us
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}
