//! Everything `baton dev` started, so it can watch it, start again what dies, and stop
//! it all in the right order.

use super::processes::{Stopped, Supervised};
use futures::future::select_all;
use std::path::PathBuf;

/// What a process is to the cluster. Declared in stop order: runners first, so no task is
/// mid-flight when the nodes go; nodes before nginx, so nothing hits a half-gone proxy;
/// the stores last, once nobody uses them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A `baton runner` agent.
    Runner,
    /// A `baton serve` node.
    Node,
    /// nginx, the cluster's one address.
    LoadBalancer,
    /// The private Postgres.
    Postgres,
    /// The private Redis.
    Redis,
}

impl Role {
    /// Its name in `baton dev status` (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Runner => "runner",
            Role::Node => "node",
            Role::LoadBalancer => "load_balancer",
            Role::Postgres => "postgres",
            Role::Redis => "redis",
        }
    }
}

/// How to start a member again, as it was first started (same port, same state dir).
pub type Respawn = Box<dyn FnMut() -> anyhow::Result<Supervised> + Send>;

struct Entry {
    role: Role,
    process: Supervised,
    respawn: Option<Respawn>,
    /// Where it listens, shown by `baton dev status`.
    address: Option<String>,
    /// Exited and left so (`--no-restart`, or a restart that failed): not waited on.
    down: bool,
}

/// How long runners started on demand have to stop before they are killed.
const PROVISIONED_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// The members `baton dev` started, each with the way to start it again.
#[derive(Default)]
pub struct Cluster {
    members: Vec<Entry>,
    /// Folders to remove once everything has stopped.
    scratch: Vec<PathBuf>,
    /// Folders of the nodes' runners on demand: those runners are stopped first.
    provisioned: Vec<PathBuf>,
}

/// A handle on one member, valid for the cluster's life (a restart keeps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member(usize);

/// One member as `baton dev status` shows it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MemberState {
    /// Its supervised name (`node-0`, `redis`), which `baton dev restart` takes.
    pub name: String,
    /// What it is to the cluster.
    pub role: Role,
    /// Its pid, which is also its process group's.
    pub pid: i32,
    /// Where it listens, when that is worth showing.
    pub address: Option<String>,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// Running, and not left down.
    pub up: bool,
}

impl Cluster {
    /// Adds a member that is not started again if it dies (`baton dev`'s Postgres).
    pub fn add(&mut self, role: Role, process: Supervised) -> Member {
        self.members.push(Entry {
            role,
            process,
            respawn: None,
            address: None,
            down: false,
        });
        Member(self.members.len() - 1)
    }

    /// Adds a member that `respawn` can start again after it died.
    pub fn add_restartable(
        &mut self,
        role: Role,
        address: Option<String>,
        mut respawn: Respawn,
    ) -> anyhow::Result<Member> {
        let process = respawn()?;
        let member = self.add(role, process);
        let entry = &mut self.members[member.0];
        entry.respawn = Some(respawn);
        entry.address = address;
        Ok(member)
    }

    /// The member's process, the current one after a restart.
    pub fn get(&mut self, member: Member) -> &mut Supervised {
        &mut self.members[member.0].process
    }

    /// What the member is to the cluster.
    pub fn role(&self, member: Member) -> Role {
        self.members[member.0].role
    }

    /// The member of that supervised name, as `baton dev restart` names it.
    pub fn by_name(&self, name: &str) -> Option<Member> {
        self.members
            .iter()
            .position(|e| e.process.name() == name)
            .map(Member)
    }

    /// Removes `dir` once every member has stopped (a Postgres cluster outside the work
    /// folder, which its processes may write until then).
    pub fn remove_after_stop(&mut self, dir: PathBuf) {
        self.scratch.push(dir);
    }

    /// Stops the runners the nodes start on demand in `dir` before anything else: they
    /// run in process groups of their own, which the nodes' stop does not reach.
    pub fn stop_provisioned_runners(&mut self, dir: PathBuf) {
        self.provisioned.push(dir);
    }

    /// Resolves when a member that is not down exits: which, and how it ended.
    /// Cancel-safe. Pending forever while every member is down.
    pub async fn next_exit(&mut self) -> (Member, String) {
        let exits: Vec<_> = self
            .members
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| !e.down)
            .map(|(i, e)| {
                Box::pin(async move {
                    let how = match e.process.exited().await {
                        Ok(status) => status.to_string(),
                        Err(e) => format!("could not wait for it: {e}"),
                    };
                    (Member(i), how)
                })
            })
            .collect();
        if exits.is_empty() {
            return std::future::pending().await;
        }
        select_all(exits).await.0
    }

    /// Resolves when any member exits, with what to tell the user: for the bring-up, when
    /// nothing should exit.
    pub async fn any_exit(&mut self) -> anyhow::Error {
        let (member, how) = self.next_exit().await;
        let process = self.get(member);
        anyhow::anyhow!(
            "{} exited unexpectedly ({how}); see {}",
            process.name(),
            process.log().display()
        )
    }

    /// Stops `member` (gracefully, if it still runs) and starts it again. A member with no
    /// way to start again, or whose start fails, is left down, and the error says why.
    pub async fn restart(&mut self, member: Member) -> anyhow::Result<()> {
        let entry = &mut self.members[member.0];
        entry.process.stop().await;
        entry.down = true;
        let Some(respawn) = entry.respawn.as_mut() else {
            anyhow::bail!("{} cannot be started again", entry.process.name());
        };
        entry.process = respawn()?;
        entry.down = false;
        Ok(())
    }

    /// Leaves `member` down: it is not waited on until it is restarted.
    pub fn leave_down(&mut self, member: Member) {
        self.members[member.0].down = true;
    }

    /// Every member as `baton dev status` shows it.
    pub fn states(&mut self) -> Vec<MemberState> {
        self.members
            .iter_mut()
            .map(|e| MemberState {
                name: e.process.name().to_string(),
                role: e.role,
                pid: e.process.pid(),
                address: e.address.clone(),
                log: e.process.log().to_path_buf(),
                up: !e.down && e.process.try_exited().is_none(),
            })
            .collect()
    }

    /// Stops every member, in `Role` order, each with its own signal and grace period.
    pub async fn stop(&mut self) {
        for dir in self.provisioned.drain(..) {
            let stopped = tokio::task::spawn_blocking(move || {
                crate::strays::stop_runners_under(&dir, PROVISIONED_GRACE)
            })
            .await
            .unwrap_or(0);
            if stopped > 0 {
                println!("  stopped {stopped} runner processes started on demand");
            }
        }
        self.members.sort_by_key(|e| e.role);
        for entry in &mut self.members {
            let process = &mut entry.process;
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
