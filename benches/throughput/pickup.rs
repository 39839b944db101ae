//! Pickup latency: a runner parked on one node, tasks submitted on another.

use super::*;
use baton_core::LeaseId;

/// The exchange a parked protocol-level runner sends.
pub(crate) fn poll(boot_id: Uuid, wait_s: u32) -> Exchange {
    Exchange {
        request_id: Uuid::new_v4(),
        boot_id,
        max: 1,
        wait_s,
        ..Exchange::default()
    }
}

/// The lease endpoint a parked runner waits on: the batched exchange, or the single-item
/// `POST /v1/runner/lease`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeasePath {
    Exchange,
    Lease,
}

impl LeasePath {
    /// Parks `runner` for up to 30 s; the tasks it is handed.
    async fn ask(self, runner: &Client, boot_id: Uuid) -> Vec<baton_client::LeasedTask> {
        match self {
            LeasePath::Exchange => runner.exchange(&poll(boot_id, 30)).await.unwrap().tasks,
            LeasePath::Lease => {
                let ask = baton_client::LeaseRequest {
                    request_id: Uuid::new_v4(),
                    max: 1,
                    wait_s: 30,
                    boot_id,
                    running: Vec::new(),
                    secrets_at_start: true,
                };
                runner.lease(&ask).await.unwrap().tasks
            }
        }
    }
}

/// A runner registered through `url`, and a boot of its agent.
pub(crate) async fn pickup_runner(url: &str) -> (Client, Uuid) {
    let (_, token) = register_runner_token(url, &[], 1).await;
    (Client::new(url, Some(token)).unwrap(), Uuid::new_v4())
}

/// One pickup: `runner` parks through `path`, a task is submitted through `submitter` 20 ms
/// after; from the submit's send to the task in the runner's hands, and to the submit's
/// answer. The task is started and completed after.
pub(crate) async fn one_pickup(
    stack: &Stack,
    (runner, boot): &(Client, Uuid),
    submitter: &Client,
    path: LeasePath,
) -> (Duration, Duration) {
    let already = stack.parked().await;
    let parked = {
        let (runner, boot) = (runner.clone(), *boot);
        tokio::spawn(async move { path.ask(&runner, boot).await })
    };
    wait_for("the runner to park", Duration::from_secs(10), || async {
        (stack.parked().await > already).then_some(())
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
    let answered = sent.elapsed();
    let got = parked.await.unwrap();
    let picked = sent.elapsed();
    let leased = got.first().expect("the parked runner got the task");
    assert_eq!(leased.id, task.id);
    finish(runner, *boot, leased.id, leased.lease_id).await;
    (picked, answered)
}

/// The first pickup of a freshly started cluster on each lease path, in ms: before
/// anything else ran, a runner parked on node 0 through the single-item lease, a task
/// submitted on node 1; then one parked on node 2 (straight, not through nginx) through
/// the exchange, a task submitted on node 1. Each parked node wakes for the first time.
pub(crate) async fn first_pickups(stack: &Stack) -> [f64; 2] {
    let submitter = user_client(&stack.pinned[1]);
    let on_lease = pickup_runner(&stack.pinned[0]).await;
    let (lease, lease_submit) = one_pickup(stack, &on_lease, &submitter, LeasePath::Lease).await;
    let on_exchange = pickup_runner(&stack.nodes[2].url).await;
    let (exchange, exchange_submit) =
        one_pickup(stack, &on_exchange, &submitter, LeasePath::Exchange).await;
    let [lease, exchange] = [lease, exchange].map(ms);
    println!(
        "first pickup after the start: single lease (node 0) {lease:.2} ms (the submit \
         answered in {:.2} ms), exchange (node 2) {exchange:.2} ms (submit {:.2} ms); \
         submitted on node 1",
        ms(lease_submit),
        ms(exchange_submit)
    );
    [lease, exchange]
}

/// Pickup latency through `path`, a runner parked on node 0, tasks submitted on node 1
/// 20 ms after it parked: p50, p99, max in ms.
pub(crate) async fn pickup(stack: &Stack, scale: &Scale, path: LeasePath) -> [f64; 3] {
    let runner = pickup_runner(&stack.pinned[0]).await;
    let submitter = user_client(&stack.pinned[1]);
    let histograms = node_histograms(stack).await;
    let mut samples = Vec::with_capacity(scale.pickups);
    // Where the time goes: until the submit is answered (its commit), and the rest.
    let mut submit_answered = Vec::with_capacity(scale.pickups);
    for _ in 0..scale.pickups {
        let (picked, answered) = one_pickup(stack, &runner, &submitter, path).await;
        samples.push(picked);
        submit_answered.push(answered);
    }
    samples.sort();
    let (p50, p99, max) = (
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap()),
    );
    submit_answered.sort();
    println!(
        "pickup ({path:?}): p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms (n={}); the submit \
         alone answered at p50 {:.2} ms, p99 {:.2} ms",
        samples.len(),
        ms(percentile(&submit_answered, 0.5)),
        ms(percentile(&submit_answered, 0.99)),
    );
    println!("{}", timings(&histograms, &node_histograms(stack).await));
    [p50, p99, max]
}

/// Starts and completes a leased task, so nothing comes back after its ack timeout.
pub(crate) async fn finish(runner: &Client, boot_id: Uuid, task_id: Uuid, lease_id: LeaseId) {
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
            completions: vec![baton_client::CompletionItem::succeeded(task_id, lease_id)],
            ..Exchange::default()
        })
        .await
        .unwrap();
    assert_eq!(done.completions[0].result, ItemResult::Done);
}
