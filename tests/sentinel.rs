//! Redis Sentinel: nodes find the master through the sentinels, and when the master dies
//! and a replica is promoted, they follow it — no restart, no task lost.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::services::free_port;
use support::*;

/// Children killed when the test ends, however it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn redis(args: &[String]) -> Child {
    Command::new("redis-server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server")
}

async fn ping(port: u16) -> Option<()> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .ok()
        .map(|_| ())
}

async fn master_port(sentinel: u16) -> Option<u16> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{sentinel}")).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg("mymaster")
        .query_async(&mut conn)
        .await
        .ok()?;
    addr.get(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_follow_a_sentinel_failover() {
    let (master, replica, sentinel) = (free_port(), free_port(), free_port());
    let dir =
        std::env::temp_dir().join(format!("baton-sentinel-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = |port: u16| {
        vec![
            "--port".to_string(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--dbfilename".into(),
            format!("dump-{port}.rdb"),
        ]
    };
    let mut procs = Procs(vec![redis(&base(master))]);
    let mut replica_args = base(replica);
    replica_args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
    procs.0.push(redis(&replica_args));
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sentinel}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor mymaster 127.0.0.1 {master} 1\n\
             sentinel down-after-milliseconds mymaster 1000\n\
             sentinel failover-timeout mymaster 5000\n",
            dir.display()
        ),
    )
    .unwrap();
    procs
        .0
        .push(redis(&[conf.display().to_string(), "--sentinel".into()]));
    for port in [master, replica, sentinel] {
        wait_for(
            "the redis servers to answer",
            Duration::from_secs(10),
            || ping(port),
        )
        .await;
    }
    wait_for(
        "the sentinel to know the master",
        Duration::from_secs(10),
        || async { (master_port(sentinel).await? == master).then_some(()) },
    )
    .await;
    // A failover needs a replica the sentinel has discovered (from the master's INFO,
    // every few seconds) and that is in sync.
    wait_for(
        "the sentinel to discover the replica",
        Duration::from_secs(30),
        || async {
            let client = redis::Client::open(format!("redis://127.0.0.1:{sentinel}")).ok()?;
            let mut conn = client.get_multiplexed_async_connection().await.ok()?;
            let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                .arg("replicas")
                .arg("mymaster")
                .query_async(&mut conn)
                .await
                .ok()?;
            (!replicas.is_empty()).then_some(())
        },
    )
    .await;

    // The test env's own Redis handle (cleanup) points at the master; the nodes use the
    // sentinel only.
    let env = TestEnv::with_servers(
        "sentinel",
        &admin_database_url(),
        &format!("redis://127.0.0.1:{master}"),
    )
    .await;
    let sentinel_arg = format!("127.0.0.1:{sentinel}");
    let mut args = FAST_HA.to_vec();
    args.extend([
        "--redis-sentinel",
        &sentinel_arg,
        "--redis-sentinel-master",
        "mymaster",
    ]);
    let node_a = env.node_with(&args).await;
    let node_b = env.node_with(&args).await;
    let _runner = env
        .runner_with(&node_a.url, &[], 2, &["--heartbeat-s", "1"])
        .await;
    let user = user_client(&node_b.url);
    let task = || SubmitTask {
        script: Some("echo ran".into()),
        ..Default::default()
    };

    let (before, _) = user.submit(&task()).await.unwrap();
    assert_eq!(
        env.wait_terminal(&user, before.id).await.status,
        TaskStatus::Succeeded
    );

    // The master dies; the sentinel promotes the replica.
    let mut old_master = procs.0.remove(0);
    old_master.kill().unwrap();
    old_master.wait().unwrap();
    wait_for(
        "the replica to be promoted",
        Duration::from_secs(30),
        || async { (master_port(sentinel).await? == replica).then_some(()) },
    )
    .await;

    // Submits may fail while the nodes notice; a retry with the same key is safe.
    let mut after = Vec::new();
    for i in 0..5 {
        let submit = SubmitTask {
            idempotency_key: Some(format!("after-{i}")),
            ..task()
        };
        let t = wait_for(
            "a submit to be accepted after the failover",
            Duration::from_secs(30),
            || async { user.submit(&submit).await.ok().map(|(t, _)| t) },
        )
        .await;
        after.push(t.id);
    }
    for id in after {
        assert_eq!(
            env.wait_terminal(&user, id).await.status,
            TaskStatus::Succeeded
        );
    }
    // Both nodes are on the new master and ready.
    for node in [&node_a, &node_b] {
        node.wait_ready().await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
