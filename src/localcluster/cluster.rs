//! Everything `baton dev` started, so it can watch it and stop it in the right order.

use super::processes::{Stopped, Supervised};
use futures::future::select_all;
use std::path::PathBuf;

/// What a process is to the cluster. Declared in stop order: runners first, so no task is
/// mid-flight when the nodes go; nodes before nginx, so nothing hits a half-gone proxy;
/// the stores last, once nobody uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Runner,
    Node,
    LoadBalancer,
    Postgres,
    Redis,
}

#[derive(Default)]
pub struct Cluster {
    members: Vec<(Role, Supervised)>,
    /// Folders to remove once everything has stopped.
    scratch: Vec<PathBuf>,
}

/// A handle on one member, valid for the cluster's life.
#[derive(Debug, Clone, Copy)]
pub struct Member(usize);

impl Cluster {
    pub fn add(&mut self, role: Role, process: Supervised) -> Member {
        self.members.push((role, process));
        Member(self.members.len() - 1)
    }

    pub fn get(&mut self, member: Member) -> &mut Supervised {
        &mut self.members[member.0].1
    }

    pub fn remove_after_stop(&mut self, dir: PathBuf) {
        self.scratch.push(dir);
    }

    /// Resolves when any member exits, with what to tell the user. While the cluster is
    /// up nothing should exit, so any exit is a failure.
    pub async fn any_exit(&mut self) -> anyhow::Error {
        if self.members.is_empty() {
            return std::future::pending().await;
        }
        let exits = self.members.iter_mut().map(|(_, process)| {
            Box::pin(async move {
                let status = match process.exited().await {
                    Ok(status) => status.to_string(),
                    Err(e) => format!("could not wait for it: {e}"),
                };
                anyhow::anyhow!(
                    "{} exited unexpectedly ({status}); see {}",
                    process.name(),
                    process.log().display()
                )
            })
        });
        select_all(exits).await.0
    }

    /// Stops every member, in `Role` order, each with its own signal and grace period.
    pub async fn stop(&mut self) {
        self.members.sort_by_key(|(role, _)| *role);
        for (_, process) in &mut self.members {
            match process.stop().await {
                Stopped::Already => {}
                Stopped::Gracefully => println!("  stopped {}", process.name()),
                Stopped::Killed => {
                    println!("  killed {} (it did not stop in time)", process.name())
                }
            }
        }
        for dir in self.scratch.drain(..) {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                eprintln!("baton dev: could not remove {}: {e}", dir.display());
            }
        }
    }
}
