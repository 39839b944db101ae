//! Keeping a `baton dev` cluster whole, so a newcomer can break it and watch: a member
//! that dies is reported (what died, how, where its log is) and started again after a
//! short delay, or left down with `--no-restart`; restart requests from
//! `baton dev restart` are carried out. The state file is rewritten at every change.

use super::control::{take_restart_requests, write_state};
use baton_localcluster::cluster::Cluster;
use std::path::Path;
use std::time::Duration;

/// How often restart requests are looked for.
const CONTROL_EVERY: Duration = Duration::from_millis(250);

/// Runs until the caller stops it (Ctrl-C); returns only if the state cannot be written.
pub async fn keep_up(
    cluster: &mut Cluster,
    root: &Path,
    load_balancer: &str,
    restart_after: Option<Duration>,
) -> anyhow::Result<()> {
    let mut control = tokio::time::interval(CONTROL_EVERY);
    // Written at each change only: `status` checks the pids itself.
    write_state(root, load_balancer, cluster)?;
    loop {
        tokio::select! {
            (member, how) = cluster.next_exit() => {
                let process = cluster.get(member);
                let name = process.name().to_string();
                println!("\nbaton dev: {name} died ({how}); its log: {}", process.log().display());
                let Some(delay) = restart_after else {
                    cluster.leave_down(member);
                    println!("baton dev: {name} left down (--no-restart); `baton dev restart {name}` starts it again");
                    write_state(root, load_balancer, cluster)?;
                    continue;
                };
                println!("baton dev: starting {name} again in {} s", delay.as_secs_f64());
                write_state(root, load_balancer, cluster)?;
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
