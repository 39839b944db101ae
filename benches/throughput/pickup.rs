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

/// Pickup latency: p50, p99, max in ms.
pub(crate) async fn pickup(stack: &Stack, scale: &Scale) -> [f64; 3] {
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
