//! End-to-end figures on this machine, against the Redis and Postgres the tests use
//! (`BATON_TEST_REDIS_URL`, `BATON_TEST_DATABASE_URL`), with two real `baton serve`
//! processes:
//!
//! - pickup latency: a runner parked on node A, a task submitted on node B; the time from
//!   the submit being sent to the lease answer arriving, and `leased_at - queued_at` as
//!   Postgres recorded it;
//! - throughput: tasks per second through lease, start and complete with 8 concurrent
//!   protocol-level runners (no process spawned per task);
//! - idle cost: Redis commands and Postgres transactions per parked poll of an idle runner.
//!
//! Run with `cargo bench --bench pickup` (add `-- --quick` for fewer rounds).

#[path = "../tests/support/mod.rs"]
mod support;

use baton_client::{Client, CompleteTask, LeaseRequest, Outcome, SubmitTask};
use std::time::{Duration, Instant};
use support::*;
use uuid::Uuid;

/// The benchmark's runners never restart: one boot id for all their requests.
const BOOT: Uuid = Uuid::from_u128(0xb007);

fn lease_req(max: u32, wait_s: u32) -> LeaseRequest {
    LeaseRequest {
        request_id: Uuid::new_v4(),
        max,
        wait_s,
        boot_id: BOOT,
        running: vec![],
    }
}

fn done_report(lease_id: Uuid) -> CompleteTask {
    CompleteTask {
        lease_id,
        outcome: Outcome::Succeeded,
        exit_code: Some(0),
        error: None,
        outputs: None,
        log_size: Some(0),
    }
}

fn quick() -> bool {
    std::env::args().any(|a| a == "--quick")
}

fn percentiles(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<44} n={:<5} p50={:>7.2} ms  p90={:>7.2} ms  p99={:>7.2} ms  max={:>7.2} ms",
        samples.len(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(*samples.last().unwrap())
    );
}

async fn pickup_latency(env: &TestEnv, a: &NodeProc, b: &NodeProc) {
    let rounds = if quick() { 30 } else { 300 };
    let (_, runner) = register_runner(&a.url, &[], 1).await;
    let submitter = user_client(&b.url);
    let mut round_trip = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..rounds {
        let r = runner.clone();
        let lease = tokio::spawn(async move { r.lease(&lease_req(1, 30)).await });
        a.wait_parked("the lease to park", |n| n >= 1).await;
        let sent = Instant::now();
        let (task, _) = submitter
            .submit(&SubmitTask {
                command: Some(vec!["true".into()]),
                ..Default::default()
            })
            .await
            .unwrap();
        let got = lease.await.unwrap().unwrap();
        round_trip.push(sent.elapsed());
        let leased = &got.tasks[0];
        assert_eq!(leased.id, task.id);
        ids.push(task.id);
        // Finish it, so nothing comes back to the next round after its ack timeout.
        runner.start(leased.id, leased.lease_id).await.unwrap();
        runner
            .complete(leased.id, &done_report(leased.lease_id))
            .await
            .unwrap();
    }
    let recorded: Vec<(f64,)> = sqlx::query_as(
        "SELECT EXTRACT(EPOCH FROM (leased_at - queued_at))::float8 FROM tasks WHERE id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&mut env.db().await)
    .await
    .unwrap();
    percentiles("pickup, submit sent -> lease answered", round_trip);
    percentiles(
        "pickup, queued_at -> leased_at (Postgres)",
        recorded
            .into_iter()
            .map(|(s,)| Duration::from_secs_f64(s))
            .collect(),
    );
}

async fn throughput(a: &NodeProc, b: &NodeProc) {
    let total = if quick() { 1000 } else { 5000 };
    let user = user_client(&a.url);
    for chunk in 0..total / 1000 {
        let tasks = (0..1000)
            .map(|i| SubmitTask {
                command: Some(vec!["true".into()]),
                idempotency_key: Some(format!("tp-{chunk}-{i}")),
                ..Default::default()
            })
            .collect();
        user.submit_batch(tasks).await.unwrap();
    }
    let started = Instant::now();
    let workers = (0..8).map(|w| {
        let url = if w % 2 == 0 {
            a.url.clone()
        } else {
            b.url.clone()
        };
        tokio::spawn(async move {
            let (_, runner): (Uuid, Client) = register_runner(&url, &[], 32).await;
            let mut done = 0;
            loop {
                let got = runner.lease(&lease_req(32, 0)).await.unwrap();
                if got.tasks.is_empty() {
                    return done;
                }
                for t in got.tasks {
                    runner.start(t.id, t.lease_id).await.unwrap();
                    runner
                        .complete(t.id, &done_report(t.lease_id))
                        .await
                        .unwrap();
                    done += 1;
                }
            }
        })
    });
    let done: usize = futures::future::join_all(workers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(done, total);
    println!(
        "{:<44} {done} tasks in {secs:.2} s = {:.0} tasks/s (lease + start + complete, 8 runners, 2 nodes)",
        "throughput",
        done as f64 / secs
    );
}

async fn redis_calls(env: &TestEnv) -> u64 {
    let mut redis = env.redis().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis)
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

async fn pg_transactions(env: &TestEnv) -> i64 {
    sqlx::query_scalar(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
    )
    .bind(&env.database)
    .fetch_one(&mut env.db().await)
    .await
    .unwrap()
}

/// Redis commands and Postgres transactions during `window`, while `during` runs.
async fn cost_of<F: std::future::Future<Output = ()>>(
    env: &TestEnv,
    during: F,
) -> (u64, i64, Duration) {
    let (redis_before, pg_before) = (redis_calls(env).await, pg_transactions(env).await);
    let started = Instant::now();
    during.await;
    let elapsed = started.elapsed();
    // Backends report their statistics to Postgres lazily (within ~10 s of going idle).
    tokio::time::sleep(Duration::from_secs(11)).await;
    let (redis_after, pg_after) = (redis_calls(env).await, pg_transactions(env).await);
    (redis_after - redis_before, pg_after - pg_before, elapsed)
}

/// The marginal cost of one idle runner's long polls: the same window measured with and
/// without it, so the nodes' own background work cancels out.
async fn idle_cost(env: &TestEnv, a: &NodeProc) {
    let polls = if quick() { 3 } else { 10 };
    let wait_s = 2;
    let (_, runner) = register_runner(&a.url, &[], 1).await;
    runner.lease(&lease_req(1, 0)).await.unwrap(); // warm the token cache
    tokio::time::sleep(Duration::from_secs(11)).await; // let earlier statistics land
    let window = Duration::from_secs(polls * wait_s);
    let (base_redis, base_pg, _) = cost_of(env, tokio::time::sleep(window)).await;
    let (redis, pg, elapsed) = cost_of(env, async {
        for _ in 0..polls {
            let got = runner.lease(&lease_req(1, wait_s as u32)).await.unwrap();
            assert!(got.tasks.is_empty());
        }
    })
    .await;
    let per_poll = |with: f64, without: f64| {
        (with - without * elapsed.as_secs_f64() / window.as_secs_f64()) / polls as f64
    };
    println!(
        "{:<44} {polls} polls of wait_s={wait_s}: {:.1} Redis commands and {:.1} Postgres transactions per poll \
         (background of 2 idle nodes over the same {:.0} s: {base_redis} Redis commands, {base_pg} Postgres transactions)",
        "idle cost, one parked runner",
        per_poll(redis as f64, base_redis as f64),
        per_poll(pg as f64, base_pg as f64),
        window.as_secs_f64(),
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let env = TestEnv::new("bench-pickup").await;
        let a = env.node().await;
        let b = env.node().await;
        println!(
            "baton benchmark: 2 nodes, Redis {}, Postgres {}",
            env.redis_url,
            admin_database_url()
        );
        pickup_latency(&env, &a, &b).await;
        throughput(&a, &b).await;
        idle_cost(&env, &a).await;
    });
}
