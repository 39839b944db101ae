//! Keeping a `baton dev` cluster whole, so a newcomer can break it and watch: a member
//! that dies is reported (what died, how, where its log is) and started again after a
//! short delay, or left down with `--no-restart`; restart requests from
//! `baton dev restart` are carried out. The state file is rewritten at every change.
//!
//! A node is started again only once the cluster has seen it go: its liveness lapses, a
//! live node adopts its claims (the `node` event `lost`), and only then does it come back,
//! under its own id. Started again at once, it would have taken its claims back before
//! anyone noticed it was gone, and the story the README tells — its tasks adopted, the
//! console's Nodes page showing it lost — would never be seen.

use super::control::{take_restart_requests, write_state};
use baton_client::{Client, EventFilter};
use baton_localcluster::cluster::{Cluster, Role};
use futures::StreamExt;
use std::path::Path;
use std::time::Duration;

/// The longest a dead node waits for the cluster to adopt its claims: past it, it is
/// started again all the same (a cluster that cannot adopt is not made worse by a wait).
const ADOPTION_PATIENCE: Duration = Duration::from_secs(60);

/// The longest the event stream or the node list may take to answer the supervisor.
const OPEN_PATIENCE: Duration = Duration::from_secs(5);

/// How often restart requests are looked for.
const CONTROL_EVERY: Duration = Duration::from_millis(250);

/// Runs until the caller stops it (Ctrl-C); returns only if the state cannot be written.
pub async fn keep_up(
    cluster: &mut Cluster,
    root: &Path,
    load_balancer: &str,
    client: &Client,
    restart_after: Option<Duration>,
) -> anyhow::Result<()> {
    let mut control = tokio::time::interval(CONTROL_EVERY);
    // Written at each change only: `status` checks the pids itself.
    write_state(root, load_balancer, cluster)?;
    loop {
        tokio::select! {
            (member, how) = cluster.next_exit() => {
                let role = cluster.role(member);
                let process = cluster.get(member);
                let name = process.name().to_string();
                println!("\nbaton dev: {name} died ({how}); its log: {}", process.log().display());
                // Listening from now: the adoption is told a node TTL or so later.
                let losses = if role == Role::Node && restart_after.is_some() {
                    let filter = EventFilter { kind: Some("node".into()), ..EventFilter::default() };
                    tokio::time::timeout(OPEN_PATIENCE, client.events(&filter, None))
                        .await
                        .ok()
                        .and_then(Result::ok)
                } else {
                    None
                };
                let Some(delay) = restart_after else {
                    cluster.leave_down(member);
                    println!("baton dev: {name} left down (--no-restart); `baton dev restart {name}` starts it again");
                    write_state(root, load_balancer, cluster)?;
                    continue;
                };
                write_state(root, load_balancer, cluster)?;
                if role == Role::Node {
                    println!("baton dev: {name} will start again once its claims are adopted");
                    adopted(client, losses, &name).await;
                }
                println!("baton dev: starting {name} again in {} s", delay.as_secs_f64());
                tokio::time::sleep(delay).await;
                restart(cluster, &name).await;
            }
            _ = control.tick() => {
                let asked = take_restart_requests(root);
                if asked.is_empty() {
                    continue;
                }
                for name in asked {
                    println!("\nbaton dev: restarting {name}, as asked");
                    restart(cluster, &name).await;
                }
            }
        }
        write_state(root, load_balancer, cluster)?;
    }
}

/// Waits until the cluster has taken over the dead node `name`: the `lost` event of its
/// adoption, or — a node that held no claims has none to adopt, and no event — its
/// liveness gone from `GET /v1/nodes` with a few seconds more for a cleaner to act; at
/// most [`ADOPTION_PATIENCE`].
async fn adopted(
    client: &Client,
    losses: Option<
        impl futures::Stream<Item = Result<baton_client::EventFrame, baton_client::ClientError>>,
    >,
    name: &str,
) {
    // No other node is up to adopt anything (`--nodes 1`, or all down): no wait.
    let others = tokio::time::timeout(OPEN_PATIENCE, client.nodes()).await;
    if !matches!(&others, Ok(Ok(live)) if live.nodes.iter().any(|n| n.id != name)) {
        println!("baton dev: no other node is up to adopt {name}'s claims");
        return;
    }
    let lost = async {
        let Some(losses) = losses else {
            return std::future::pending().await;
        };
        let mut losses = std::pin::pin!(losses);
        while let Some(frame) = losses.next().await {
            let Ok(data) = frame.and_then(|f| f.json()) else {
                continue;
            };
            if data["event"] == "lost" && data["node_id"] == name {
                let by = data["adopted_by"]
                    .as_str()
                    .unwrap_or("another node")
                    .to_string();
                return by;
            }
        }
        std::future::pending().await
    };
    let gone = async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if let Ok(live) = client.nodes().await
                && live.nodes.iter().all(|n| n.id != name)
            {
                break;
            }
        }
        // Its liveness lapsed: a cleaner adopts within its interval, if there is anything.
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    tokio::select! {
        by = lost => println!("baton dev: {name} is lost to the cluster; {by} adopted its claims"),
        () = gone => println!("baton dev: {name} is gone from the cluster"),
        () = tokio::time::sleep(ADOPTION_PATIENCE) => {
            println!("baton dev: {name}'s claims were not adopted within {} s", ADOPTION_PATIENCE.as_secs());
        }
    }
}

async fn restart(cluster: &mut Cluster, name: &str) {
    let Some(member) = cluster.by_name(name) else {
        eprintln!("baton dev: no member {name} to restart");
        return;
    };
    match cluster.restart(member).await {
        Ok(()) => println!(
            "baton dev: {name} is running again (pid {})",
            cluster.get(member).pid()
        ),
        Err(e) => {
            cluster.leave_down(member);
            eprintln!("baton dev: {name} could not be started again: {e:#}");
        }
    }
}
