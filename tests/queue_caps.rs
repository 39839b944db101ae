//! A submit token choosing ever new queue names or label sets cannot grow Redis without
//! bound: past `limits.max_queues` queue keys, or `limits.max_label_sets` label sets, with
//! work, a submit that would add one is refused (429) and writes nothing; submits to the
//! queues that exist go on, and an emptied queue makes room again.

use baton_localcluster::testing as support;

use baton_client::{ClientError, SubmitTask};
use support::*;
use uuid::Uuid;

fn task(queue: &str, labels: &[&str]) -> SubmitTask {
    SubmitTask {
        queue: Some(queue.into()),
        labels: labels.iter().map(|l| l.to_string()).collect(),
        command: Some(vec!["true".into()]),
        ..Default::default()
    }
}

fn refused_code(e: ClientError) -> (u16, String) {
    match e {
        ClientError::Api(e) => (e.status.as_u16(), e.body.error.code),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn queues_and_label_sets_past_their_caps_are_refused_until_one_empties() {
    let env = TestEnv::new("queue-caps").await;
    let config = env.dir.join("caps.toml");
    std::fs::write(&config, "[limits]\nmax_queues = 3\nmax_label_sets = 2\n").unwrap();
    let node = env.node_with(&["--config", config.to_str().unwrap()]).await;
    let user = user_client(&node.url);

    for queue in ["a", "b", "c"] {
        user.submit(&task(queue, &[])).await.unwrap();
    }
    let refused = user.submit(&task("d", &[])).await.unwrap_err();
    assert_eq!(refused_code(refused), (429, "too_many_queues".into()));
    assert_eq!(
        env.count_tasks().await,
        3,
        "the refused submit wrote nothing"
    );
    // A batch that names one new queue among known ones is refused whole.
    let refused = user
        .submit_batch(vec![task("a", &[]), task("e", &[])])
        .await
        .unwrap_err();
    assert_eq!(refused_code(refused), (429, "too_many_queues".into()));
    assert_eq!(env.count_tasks().await, 3);
    // The queues that exist take work as before.
    user.submit(&task("a", &[])).await.unwrap();

    // Leasing everything empties every queue, and the room is back: two label sets may
    // have work, a third is one too many.
    let (_, runner) = register_runner(&node.url, &[], 8).await;
    let leased = runner.lease(&lease_now(Uuid::new_v4(), 8)).await.unwrap();
    assert_eq!(
        leased.tasks.len(),
        4,
        "every task leased, the queues emptied"
    );
    user.submit(&task("d", &["gpu"])).await.unwrap();
    user.submit(&task("e", &["arm"])).await.unwrap();
    let refused = user.submit(&task("f", &[])).await.unwrap_err();
    assert_eq!(refused_code(refused), (429, "too_many_label_sets".into()));
    // Another queue of a label set that has work is within both caps.
    user.submit(&task("f", &["gpu"])).await.unwrap();
}
