//! Pipelines (docs/pipelines.md) in the benchmark: what a release costs per job, how
//! long a job waits from the end of the last job it needs to its own start, and a
//! fan-out/fan-in pipeline's total time beside the same tasks submitted flat — all drained
//! by the protocol-level runners (two processes x 16 in flight, nothing spawned).

use super::*;
use baton_client::{PipelineJobSpec, SubmitPipeline};

/// Jobs running `true` in `queue`: (name, needs).
fn jobs(queue: &str, graph: Vec<(String, Vec<String>)>) -> SubmitPipeline {
    SubmitPipeline {
        name: Some(queue.to_string()),
        jobs: graph
            .into_iter()
            .map(|(name, needs)| PipelineJobSpec {
                name,
                needs,
                task: SubmitTask {
                    queue: Some(queue.to_string()),
                    command: Some(vec!["true".into()]),
                    ..SubmitTask::default()
                },
            })
            .collect(),
        idempotency_key: None,
    }
}

/// Seconds from the first submit to the last end of `queue`'s tasks, by Postgres's own
/// timestamps; and that every one succeeded.
async fn total_s(stack: &Stack, queue: &str, n: usize) -> f64 {
    let mut db = stack.env.db().await;
    let (succeeded, secs): (i64, f64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'succeeded'),
                EXTRACT(EPOCH FROM max(finished_at) - min(created_at))::float8
         FROM tasks WHERE queue = $1",
    )
    .bind(queue)
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(succeeded as usize, n, "every task of {queue} succeeded");
    secs
}

/// What submitting and draining cost, read around `work`.
async fn measured<F: std::future::Future<Output = ()>>(
    stack: &Stack,
    src: &Sources,
    work: F,
) -> Usage {
    stack.settle().await;
    let before = src.snapshot().await;
    work.await;
    stack.settle().await;
    usage(&before, &src.snapshot().await)
}

/// The jobs of the chain the release's latency is read along.
const CHAIN: usize = 200;

pub(crate) async fn pipelines(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &[(String, Vec<u32>)],
) {
    let pairs = (scale.drain / 4).clamp(100, 5_000);
    let fan = if scale.drain < 20_000 { 2_000 } else { 10_000 };
    let tokens = [
        runner_token(&stack.lb.url).await,
        runner_token(&stack.lb.url).await,
    ];
    let mut runners = protocol_runners(&stack.lb.url, &tokens, &[]);
    let mut with_runners = processes.to_vec();
    with_runners.push(("runners".into(), runners.iter().map(|r| r.id()).collect()));
    let src = sources(&with_runners);
    let client = user_client(&stack.lb.url);

    // The cost of a release: `pairs` jobs each needing one other, beside as many pairs of
    // tasks submitted flat; the difference, per job released, is what releasing costs.
    let flat = measured(stack, &src, async {
        bulk_submit(&stack.lb.url, "pipe-flat", 2 * pairs, "true").await;
        finished(stack, "pipe-flat").await;
    })
    .await;
    let graph: Vec<(String, Vec<String>)> = (0..pairs)
        .flat_map(|i| {
            [
                (format!("p{i}"), vec![]),
                (format!("c{i}"), vec![format!("p{i}")]),
            ]
        })
        .collect();
    let paired = measured(stack, &src, async {
        client
            .pipeline_submit(&jobs("pipe-pairs", graph))
            .await
            .expect("the pairs' pipeline");
        finished(stack, "pipe-pairs").await;
    })
    .await;
    let per_release = |pipe: f64, flat: f64| (pipe - flat) / pairs as f64;
    println!(
        "pipelines: a release costs, per job released ({pairs} pairs beside {} flat tasks): \
         {:+.3} Postgres commits, {:+.3} statements, {:+.3} Redis commands, {:+.3} HTTP requests",
        2 * pairs,
        per_release(paired.commits as f64, flat.commits as f64),
        per_release(paired.statements as f64, flat.statements as f64),
        per_release(paired.redis_commands as f64, flat.redis_commands as f64),
        per_release(paired.http_requests as f64, flat.http_requests as f64),
    );
    println!("  pairs {}", paired.per_task(2 * pairs));
    println!("{}", paired.top_statements(2 * pairs, 8));
    println!("  flat  {}", flat.per_task(2 * pairs));

    // From the end of the last job a job needs to its own start, with nothing else
    // queued (the pairs' children wait behind the parents queued before them): a chain
    // of jobs, each needing the one before.
    let chain: Vec<(String, Vec<String>)> = (0..CHAIN)
        .map(|i| {
            let needs = if i == 0 {
                vec![]
            } else {
                vec![format!("j{}", i - 1)]
            };
            (format!("j{i}"), needs)
        })
        .collect();
    stack.settle().await;
    client
        .pipeline_submit(&jobs("pipe-chain", chain))
        .await
        .expect("the chain's pipeline");
    finished(stack, "pipe-chain").await;
    let mut db = stack.env.db().await;
    let mut waits: Vec<f64> = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM c.started_at - max(p.finished_at))::float8 * 1000
         FROM tasks c JOIN task_needs n ON n.task_id = c.id JOIN tasks p ON p.id = n.needs_id
         WHERE c.queue = 'pipe-chain' GROUP BY c.id, c.started_at",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    waits.sort_by(f64::total_cmp);
    let at = |p: f64| waits[((waits.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "  last need's end to the job's start, along a chain of {CHAIN} (idle runners): \
         p50 {:.1} ms, p99 {:.1} ms",
        at(0.5),
        at(0.99),
    );

    // A fan-out of `fan` - 2 jobs between a root and a join, beside as many tasks flat.
    stack.settle().await;
    bulk_submit(&stack.lb.url, "fan-flat", fan, "true").await;
    finished(stack, "fan-flat").await;
    let flat_s = total_s(stack, "fan-flat", fan).await;
    let leaves: Vec<String> = (0..fan - 2).map(|i| format!("leaf-{i}")).collect();
    let mut graph = vec![("root".to_string(), vec![])];
    graph.extend(leaves.iter().map(|l| (l.clone(), vec!["root".to_string()])));
    graph.push(("join".to_string(), leaves));
    stack.settle().await;
    client
        .pipeline_submit(&jobs("fan-pipeline", graph))
        .await
        .expect("the fan-out's pipeline");
    finished(stack, "fan-pipeline").await;
    let pipeline_s = total_s(stack, "fan-pipeline", fan).await;
    println!(
        "  a fan-out/fan-in of {fan} jobs: {pipeline_s:.2} s from its submit to the join's end, \
         beside {flat_s:.2} s for {fan} tasks submitted flat (batches of 1,000) and drained \
         ({:.2}x)",
        pipeline_s / flat_s
    );
    for r in &mut runners {
        let _ = r.kill();
        let _ = r.wait();
    }
}
