//! The repair pass, both ways (design.md §4.1, §4.5, §4.6): whatever Redis lacks or holds
//! wrongly, Postgres says what it should be, and the pass mends it.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;
use uuid::Uuid;

const BOOT: Uuid = Uuid::from_u128(0xb007);

fn key(env: &TestEnv, rest: &str) -> String {
    format!("{}{rest}", env.redis_prefix)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_repair_pass_mends_redis_both_ways() {
    let env = TestEnv::new("repair").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 4).await;
    let mut redis = env.redis().await;
    let lease = |max| lease_now(BOOT, max);

    // §4.1: a submit whose node died between the Postgres insert and the Redis add.
    let (lost_add, _) = user
        .submit(&SubmitTask {
            labels: vec!["held".into()],
            command: Some(vec!["true".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    let _: () = redis::cmd("ZREM")
        .arg(key(&env, "q:default:held"))
        .arg(lost_add.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();

    // §4.6: a running task whose claim Redis lost.
    let (running, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    let leased = runner.lease(&lease(1)).await.unwrap().tasks.remove(0);
    runner.start(running.id, leased.lease_id).await.unwrap();
    let _: () = redis::cmd("HDEL")
        .arg(key(&env, "running"))
        .arg(running.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: () = redis::cmd("SREM")
        .arg(key(&env, &format!("owned:{}", node.node_id)))
        .arg(running.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();

    // §4.6: a queue entry of a task that has finished (a stale re-add).
    let (finished, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = runner.lease(&lease(1)).await.unwrap().tasks.remove(0);
    runner.start(finished.id, done.lease_id).await.unwrap();
    runner
        .complete(
            finished.id,
            &baton_client::CompleteTask::succeeded(done.lease_id),
        )
        .await
        .unwrap();
    // Re-added as every add does it: the entry, and its queue registered.
    let _: () = redis::pipe()
        .atomic()
        .cmd("ZADD")
        .arg(key(&env, "q:default:-"))
        .arg(1)
        .arg(finished.id.to_string())
        .ignore()
        .cmd("HSET")
        .arg(key(&env, "queues"))
        .arg("q:default:-")
        .arg(r#"{"queue":"default","labels":[]}"#)
        .ignore()
        .query_async(&mut redis)
        .await
        .unwrap();

    // §4.5: a due scheduled task the delayed set forgot (the promoter died mid-pass).
    let (forgotten, _) = user
        .submit(&SubmitTask {
            run_at: Some(chrono::Utc::now() + chrono::Duration::milliseconds(300)),
            command: Some(vec!["true".into()]),
            labels: vec!["later".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let _: () = redis::cmd("ZREM")
        .arg(key(&env, "delayed"))
        .arg(forgotten.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();

    wait_for(
        "the repair pass to mend everything",
        Duration::from_secs(30),
        || {
            let mut redis = redis.clone();
            let env = &env;
            let user = &user;
            async move {
                let queued: Option<f64> = redis::cmd("ZSCORE")
                    .arg(key(env, "q:default:held"))
                    .arg(lost_add.id.to_string())
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                let claim: Option<String> = redis::cmd("HGET")
                    .arg(key(env, "running"))
                    .arg(running.id.to_string())
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                let stale: Option<f64> = redis::cmd("ZSCORE")
                    .arg(key(env, "q:default:-"))
                    .arg(finished.id.to_string())
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                let promoted: Option<f64> = redis::cmd("ZSCORE")
                    .arg(key(env, "q:default:later"))
                    .arg(forgotten.id.to_string())
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                let promoted_in_pg =
                    user.task_get(forgotten.id).await.ok()?.status == TaskStatus::Queued;
                (queued.is_some()
                    && claim.is_some()
                    && stale.is_none()
                    && promoted.is_some()
                    && promoted_in_pg)
                    .then_some(claim?)
            }
        },
    )
    .await;
    let claim: String = redis::cmd("HGET")
        .arg(key(&env, "running"))
        .arg(running.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        claim.starts_with(&format!("{}|{}|", node.node_id, leased.lease_id)),
        "claimed under its current lease: {claim}"
    );
}
