//! The drains: tasks bulk-submitted, then run to the end by protocol-level runners, by
//! real agents, or with event subscribers watching; and the floor of spawning `true` here.

use super::*;

/// Registers a runner through `url`; its token.
pub(crate) async fn runner_token(url: &str) -> String {
    register_runner_token(url, &[], 16).await.1
}

/// Submits `n` tasks to `queue` from one client in batches of 1,000, one after another
/// (each sent when the last was answered: the figure the target names); returns
/// how long it took.
pub(crate) async fn bulk_submit(url: &str, queue: &str, n: usize, command: &str) -> Duration {
    let started = Instant::now();
    let batches: Vec<Vec<SubmitTask>> = tasks_of(queue, n, command)
        .chunks(1000)
        .map(|c| c.to_vec())
        .collect();
    let client = user_client(url);
    for batch in batches {
        client.submit_batch(batch).await.expect("bulk submit");
    }
    started.elapsed()
}

/// `n` tasks running `command` in `queue`.
pub(crate) fn tasks_of(queue: &str, n: usize, command: &str) -> Vec<SubmitTask> {
    (0..n)
        .map(|_| SubmitTask {
            queue: Some(queue.to_string()),
            command: Some(vec![command.to_string()]),
            ..SubmitTask::default()
        })
        .collect()
}

/// Starts a protocol-level runner process with 16 slots for each token, talking to
/// `url`, with `env` set.
pub(crate) fn protocol_runners(
    url: &str,
    tokens: &[String],
    env: &[(&str, &std::path::Path)],
) -> Vec<std::process::Child> {
    let exe = std::env::current_exe().unwrap();
    tokens
        .iter()
        .map(|token| {
            std::process::Command::new(&exe)
                .args(["--protocol-runner", url, token, "16"])
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("protocol runner")
        })
        .collect()
}

/// A bulk submit of `scale.drain` tasks to `queue` with the cost read around it.
async fn measured_submit(stack: &Stack, scale: &Scale, src: &Sources, queue: &str) -> Figure {
    stack.settle().await;
    let before = src.snapshot().await;
    let took = bulk_submit(&stack.lb.url, queue, scale.drain, "true").await;
    stack.settle().await;
    let after = src.snapshot().await;
    Figure {
        rate: scale.drain as f64 / took.as_secs_f64(),
        usage: usage(&before, &after),
        tasks: scale.drain,
    }
}

/// Waits until no task of `queue` is unfinished. It asks only whether an unfinished task
/// is left (the partial index of unfinished tasks answers at its first row): a count over
/// the queue read every row ten times a second, and Postgres spent more on the
/// benchmark's question than on a task.
pub(crate) async fn finished(stack: &Stack, queue: &str) {
    let mut db = stack.env.db().await;
    let deadline = Instant::now() + Duration::from_secs(600);
    let left = format!(
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status IN ({}))",
        baton_store::sql_list(baton_core::TaskStatus::UNFINISHED)
    );
    loop {
        let unfinished: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(left.as_str()))
            .bind(queue)
            .fetch_one(&mut db)
            .await
            .unwrap();
        if !unfinished {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the tasks of {queue} did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every task of `queue` succeeded ([`finished`]); the drain rate from
/// Postgres's own timestamps (first lease to last finish).
pub(crate) async fn drained(stack: &Stack, queue: &str, n: usize) -> f64 {
    finished(stack, queue).await;
    let mut db = stack.env.db().await;
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

pub(crate) async fn protocol_drain(
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
    let submit = measured_submit(stack, scale, &sources(processes), &queue).await;
    let mut runners = protocol_runners(&stack.lb.url, &tokens, &[]);
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

/// Bulk submit alone (`--only submit`, for profiling it): `scale.drain` tasks from one
/// client in batches of 1,000, left queued; the rate and the cost per task, the
/// benchmark's own client included.
pub(crate) async fn submit_alone(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &[(String, Vec<u32>)],
    round: usize,
) -> Figure {
    let mut with_client = processes.to_vec();
    with_client.push(("client".into(), vec![std::process::id()]));
    let src = sources(&with_client);
    stack.settle().await;
    let before = src.snapshot().await;
    let took = bulk_submit(
        &stack.lb.url,
        &format!("submit-{round}"),
        scale.drain,
        "true",
    )
    .await;
    stack.settle().await;
    let after = src.snapshot().await;
    let submit = Figure {
        rate: scale.drain as f64 / took.as_secs_f64(),
        usage: usage(&before, &after),
        tasks: scale.drain,
    };
    println!("round {round}: bulk submit {:.0} tasks/s", submit.rate);
    println!("  submit {}", submit.usage.per_task(submit.tasks));
    println!("{}", submit.usage.top_statements(submit.tasks, 8));
    submit
}

/// The drain with a subscriber to every task event on each node; and the fewest events
/// a subscriber received (each task has three: queued, running, succeeded).
pub(crate) async fn subscribed_drain(
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

pub(crate) async fn agent_drain(
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
    let mut pids: Vec<u32> = agents.iter().map(|a| a.pid()).collect();
    for agent in &agents {
        pids.extend(counters::children_of(agent.pid()));
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

/// How fast this machine spawns `true`, 32 at once, with nothing else: the floor a
/// runner that spawns a process per task is measured against. Prints what one spawn
/// costs in CPU (this process and the children), to set beside the agents' figure.
pub(crate) async fn spawn_floor(n: usize) -> f64 {
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
