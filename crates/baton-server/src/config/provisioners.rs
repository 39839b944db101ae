//! The settings of runners on demand (docs/dynamic-runners.md): each `[[provisioners]]`
//! entry starts ephemeral runners with one label set, through one backend, up to its
//! capacity.

use baton_core::LabelSet;
use baton_core::backoff::Backoff;
use baton_core::provision::{Limits, Offer};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How a provisioner starts a runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// `baton runner --once`, a child process of the node, on the node's host.
    #[default]
    Process,
    /// The same inside fresh Linux namespaces made by bubblewrap (`bwrap`): its own
    /// mounts, PIDs and a network reaching only the server.
    Sandbox,
    /// The operator's `create` and `delete` scripts (a VM, a cloud instance, anything).
    Command,
}

impl BackendKind {
    /// The backend's name, in assignments, metrics and runner events.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Process => "process",
            BackendKind::Sandbox => "sandbox",
            BackendKind::Command => "command",
        }
    }
}

/// One provisioner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProvisionerConfig {
    /// Its name: in its runners' names, assignments, metrics and events.
    pub name: String,
    /// The labels of the runners it starts; it serves waiting tasks that ask for some of
    /// them and none other (`provision::Offer::serves`).
    pub labels: Vec<String>,
    /// The queues its runners serve; empty: every queue.
    pub queues: Vec<String>,
    /// How it starts a runner.
    pub backend: BackendKind,
    /// Most runners starting or running at once, across the cluster.
    pub capacity: u32,
    /// A runner must register and take a task within this of its start, or it is
    /// deleted (token revoked, backend released) and the assignment tried again.
    pub claim_timeout_s: u64,
    /// Starts of a runner for one assignment before it gives up.
    pub max_attempts: u32,
    /// The wait before the first retry of an assignment, doubling up to 5 minutes.
    pub retry_initial_ms: u64,
    /// The address its runners talk to: the load balancer in front of the nodes.
    /// Unset: this node's own listen address.
    pub server_url: Option<String>,
    /// `process`, `sandbox`: the folder each runner's state and work folders are made
    /// in, removed when it is done [default: the system's temporary folder].
    pub dir: Option<PathBuf>,
    /// `process`, `sandbox`: more `baton runner` flags for every runner it starts.
    pub runner_args: Vec<String>,
    /// `command`: run with the runner to start as JSON on stdin; its first line of
    /// output, if any, is the handle `delete` is given.
    pub create: Option<PathBuf>,
    /// `command`: run with the runner to release as JSON on stdin.
    pub delete: Option<PathBuf>,
}

impl Default for ProvisionerConfig {
    fn default() -> Self {
        ProvisionerConfig {
            name: String::new(),
            labels: Vec::new(),
            queues: Vec::new(),
            backend: BackendKind::Process,
            capacity: 4,
            claim_timeout_s: 120,
            max_attempts: 3,
            retry_initial_ms: 5_000,
            server_url: None,
            dir: None,
            runner_args: Vec::new(),
            create: None,
            delete: None,
        }
    }
}

impl ProvisionerConfig {
    /// Checks what serde cannot: a node with a provisioner it cannot run does not start.
    pub fn check(&self) -> Result<(), String> {
        let named = |what: &str| format!("provisioner {:?}: {what}", self.name);
        baton_core::validate::check_queue(&self.name)
            .map_err(|_| named("its name must be like a queue's ([a-z0-9][a-z0-9._-]*)"))?;
        let labels = LabelSet::new(self.labels.clone()).map_err(|e| named(&e.to_string()))?;
        if labels.is_empty() {
            return Err(named(
                "needs at least one label: it serves only tasks that ask for its labels",
            ));
        }
        for queue in &self.queues {
            baton_core::validate::check_queue(queue).map_err(|e| named(&e.to_string()))?;
        }
        let within = |value: u64, most: u64| (1..=most).contains(&value);
        if !within(u64::from(self.capacity), MAX_CAPACITY)
            || !within(u64::from(self.max_attempts), MAX_ATTEMPTS)
            || !within(self.claim_timeout_s, MAX_CLAIM_TIMEOUT_S)
            || self.retry_initial_ms > MAX_CLAIM_TIMEOUT_S * 1000
        {
            return Err(named(&format!(
                "capacity must be 1-{MAX_CAPACITY}, max_attempts 1-{MAX_ATTEMPTS}, \
                 claim_timeout_s 1-{MAX_CLAIM_TIMEOUT_S}, retry_initial_ms at most a day"
            )));
        }
        if self.backend == BackendKind::Sandbox {
            self.check_sandbox().map_err(|e| named(&e))?;
        }
        if self.backend == BackendKind::Command && (self.create.is_none() || self.delete.is_none())
        {
            return Err(named(
                "the command backend needs both `create` and `delete`",
            ));
        }
        Ok(())
    }

    /// What a sandbox needs: bubblewrap, a root node (the runner inside must be root to
    /// run each task as a uid of its own), a plain-HTTP server (the relay presents it at
    /// `127.0.0.1`, which a certificate would not name), and a folder short enough for
    /// the relay's socket path.
    fn check_sandbox(&self) -> Result<(), String> {
        if !on_path("bwrap") || !on_path("setsid") {
            return Err(
                "the sandbox backend needs bubblewrap's `bwrap` and `setsid` (Debian: \
                 apt-get install bubblewrap util-linux)"
                    .into(),
            );
        }
        if !nix::unistd::geteuid().is_root() {
            return Err("the sandbox backend needs the node to run as root".into());
        }
        if self
            .server_url
            .as_deref()
            .is_some_and(|url| !url.starts_with("http://"))
        {
            return Err(
                "a sandbox's runners reach the server over plain HTTP: give an http:// server_url"
                    .into(),
            );
        }
        // A Unix socket's path has at most 107 bytes: the folder, a runner's name
        // (the provisioner's, a dash and 12 hex digits) and `/relay.sock`.
        let dir = self.runners_dir();
        let longest = dir.as_os_str().len() + 1 + self.name.len() + 13 + 11;
        if longest > 107 {
            return Err(format!(
                "its dir {} is too long for the relay's socket path ({longest} bytes, at most 107)",
                dir.display()
            ));
        }
        Ok(())
    }

    /// `process`, `sandbox`: the folder its runners' folders are made in.
    pub fn runners_dir(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("baton-provisioned"))
    }

    /// Whether some waiting task could call for a runner of both: each would start one
    /// for it.
    fn overlaps(&self, other: &ProvisionerConfig) -> bool {
        let shared_label = self.labels.iter().any(|l| other.labels.contains(l));
        let shared_queue = self.queues.is_empty()
            || other.queues.is_empty()
            || self.queues.iter().any(|q| other.queues.contains(q));
        shared_label && shared_queue
    }

    /// The runners it starts, as the pure rules see them.
    pub fn offer(&self) -> Offer {
        Offer {
            labels: LabelSet::new(self.labels.clone()).unwrap_or_default(),
            queues: self.queues.clone(),
        }
    }

    /// The thresholds its assignments are judged by, with the server's runner-lost one.
    pub fn limits(&self, runner_lost_after: Duration) -> Limits {
        Limits {
            claim_timeout: Duration::from_secs(self.claim_timeout_s),
            runner_lost_after,
            max_attempts: self.max_attempts,
            retry: Backoff {
                initial: Duration::from_millis(self.retry_initial_ms),
                max: Duration::from_secs(300),
                jitter: 0.2,
            },
        }
    }
}

/// Whether `program` is on the `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The most runners one provisioner may have starting or running.
const MAX_CAPACITY: u64 = 1_000;
/// The most starts of a runner for one assignment.
const MAX_ATTEMPTS: u64 = 100;
/// The longest claim timeout: a day.
const MAX_CLAIM_TIMEOUT_S: u64 = 86_400;

/// Checks every provisioner, and that no two share a name (their assignments are
/// told apart by it).
pub(super) fn check_all(provisioners: &[ProvisionerConfig]) -> Result<(), String> {
    for (i, p) in provisioners.iter().enumerate() {
        p.check()?;
        if provisioners[..i].iter().any(|q| q.name == p.name) {
            return Err(format!("two provisioners are named {:?}", p.name));
        }
        if let Some(q) = provisioners[..i].iter().find(|q| q.overlaps(p)) {
            return Err(format!(
                "provisioners {:?} and {:?} share a label and a queue: a task asking for \
                 that label would get a runner from each",
                q.name, p.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> ProvisionerConfig {
        ProvisionerConfig {
            name: "ephemeral".into(),
            labels: vec!["ephemeral".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_provisioner_it_cannot_run_is_refused() {
        assert_eq!(valid().check(), Ok(()));
        let cases = [
            ProvisionerConfig {
                name: "Bad Name".into(),
                ..valid()
            },
            ProvisionerConfig {
                labels: vec![],
                ..valid()
            },
            ProvisionerConfig {
                labels: vec!["a,b".into()],
                ..valid()
            },
            ProvisionerConfig {
                capacity: 0,
                ..valid()
            },
            ProvisionerConfig {
                backend: BackendKind::Command,
                create: Some("/bin/true".into()),
                ..valid()
            },
        ];
        for case in cases {
            assert!(case.check().is_err(), "{case:?} should be refused");
        }
        assert!(check_all(&[valid(), valid()]).is_err(), "two of one name");
        let other = |labels: &[&str], queues: &[&str]| ProvisionerConfig {
            name: "other".into(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            queues: queues.iter().map(|q| q.to_string()).collect(),
            ..valid()
        };
        assert!(
            check_all(&[valid(), other(&["ephemeral", "big"], &[])]).is_err(),
            "a label and every queue shared"
        );
        assert!(check_all(&[valid(), other(&["big"], &[])]).is_ok());
        let ci = ProvisionerConfig {
            queues: vec!["ci".into()],
            ..valid()
        };
        assert!(
            check_all(&[ci, other(&["ephemeral"], &["deploy"])]).is_ok(),
            "no queue shared"
        );
        for huge in [
            ProvisionerConfig {
                claim_timeout_s: u64::MAX,
                ..valid()
            },
            ProvisionerConfig {
                capacity: 1_000_000,
                ..valid()
            },
        ] {
            assert!(huge.check().is_err(), "{huge:?} should be refused");
        }
    }

    #[test]
    fn reads_its_settings() {
        let read: ProvisionerConfig = serde_json::from_value(serde_json::json!({
            "name": "vm", "labels": ["big"], "backend": "command",
            "create": "/c", "delete": "/d", "capacity": 2
        }))
        .unwrap();
        assert_eq!(read.backend, BackendKind::Command);
        assert_eq!(read.capacity, 2);
        assert_eq!(read.claim_timeout_s, 120, "unset keys keep their defaults");
        let misspelt = serde_json::json!({ "name": "x", "labelz": [] });
        assert!(serde_json::from_value::<ProvisionerConfig>(misspelt).is_err());
    }
}
