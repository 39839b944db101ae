//! Named timing profiles for the nodes of a local cluster: the production defaults are
//! minutes apart, too slow for a test or a drill to wait for, so each harness runs its
//! nodes on short thresholds. Each profile is written here once; the flags follow from it.

/// Thresholds and service intervals a node is started with (`baton serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeTimings {
    /// `--node-ttl-ms`: a node is dead this long after its last liveness renewal.
    pub node_ttl_ms: u64,
    /// `--reconcile-interval-ms`.
    pub reconcile_interval_ms: u64,
    /// `--cleaner-interval-ms`: how often a node looks for dead nodes' claims.
    pub cleaner_interval_ms: u64,
    /// `--promote-interval-ms`.
    pub promote_interval_ms: u64,
    /// `--repair-interval-ms`.
    pub repair_interval_ms: u64,
    /// `--dispatch-grace-ms`.
    pub dispatch_grace_ms: u64,
    /// `--ack-timeout-s`.
    pub ack_timeout_s: u64,
    /// `--runner-offline-after-s`.
    pub runner_offline_after_s: u64,
    /// `--runner-lost-after-s`.
    pub runner_lost_after_s: u64,
    /// `--timeout-grace-s`.
    pub timeout_grace_s: u64,
    /// `--retry-initial-ms`.
    pub retry_initial_ms: u64,
    /// `--presence-flush-ms`, when the profile sets it.
    pub presence_flush_ms: Option<u64>,
    /// `--presence-write-ms`, when the profile sets it.
    pub presence_write_ms: Option<u64>,
}

impl NodeTimings {
    /// The tests': failovers in seconds. A 1.5 s node TTL, services every few hundred
    /// milliseconds (presence to Postgres every second), runners offline after 4 s and
    /// lost after 6 s.
    pub const FAST_HA: NodeTimings = NodeTimings {
        node_ttl_ms: 1500,
        reconcile_interval_ms: 300,
        cleaner_interval_ms: 300,
        promote_interval_ms: 200,
        repair_interval_ms: 1000,
        dispatch_grace_ms: 1000,
        ack_timeout_s: 3,
        runner_offline_after_s: 4,
        runner_lost_after_s: 6,
        timeout_grace_s: 1,
        retry_initial_ms: 200,
        presence_flush_ms: Some(1000),
        presence_write_ms: None,
    };

    /// The drill's (`baton chaos`): a 3 s TTL, services twice a second, runners offline
    /// after 8 s and lost after 14 s, presence written four times a second. They keep the
    /// margins of docs/failure-handling.md, scaled down: a runner cut off fences at 7 s
    /// (+ 1 s for the exchanger's check) < 14 s − 0.25 s (presence a dying node had not
    /// written) − (0.25 s + 2 s: a node that just lost Redis vouches for its runners until
    /// a presence write fails) = 11.5 s.
    pub const DRILL: NodeTimings = NodeTimings {
        node_ttl_ms: 3000,
        reconcile_interval_ms: 500,
        cleaner_interval_ms: 500,
        promote_interval_ms: 300,
        repair_interval_ms: 2000,
        dispatch_grace_ms: 2000,
        ack_timeout_s: 5,
        runner_offline_after_s: 8,
        runner_lost_after_s: 14,
        timeout_grace_s: 5,
        retry_initial_ms: 300,
        presence_flush_ms: None,
        presence_write_ms: Some(250),
    };

    /// The `baton serve` flags that set these timings.
    pub fn args(&self) -> Vec<String> {
        let flags = [
            ("--node-ttl-ms", Some(self.node_ttl_ms)),
            ("--reconcile-interval-ms", Some(self.reconcile_interval_ms)),
            ("--cleaner-interval-ms", Some(self.cleaner_interval_ms)),
            ("--promote-interval-ms", Some(self.promote_interval_ms)),
            ("--repair-interval-ms", Some(self.repair_interval_ms)),
            ("--dispatch-grace-ms", Some(self.dispatch_grace_ms)),
            ("--ack-timeout-s", Some(self.ack_timeout_s)),
            (
                "--runner-offline-after-s",
                Some(self.runner_offline_after_s),
            ),
            ("--runner-lost-after-s", Some(self.runner_lost_after_s)),
            ("--timeout-grace-s", Some(self.timeout_grace_s)),
            ("--retry-initial-ms", Some(self.retry_initial_ms)),
            ("--presence-flush-ms", self.presence_flush_ms),
            ("--presence-write-ms", self.presence_write_ms),
        ];
        flags
            .into_iter()
            .filter_map(|(flag, value)| Some([flag.to_string(), value?.to_string()]))
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_is_given_with_its_value() {
        let args = NodeTimings::FAST_HA.args();
        assert_eq!(args.len(), 24);
        let at = args.iter().position(|a| a == "--node-ttl-ms").unwrap();
        assert_eq!(args[at + 1], "1500");
        assert!(!args.iter().any(|a| a == "--presence-write-ms"));
        let drill = NodeTimings::DRILL.args();
        let at = drill
            .iter()
            .position(|a| a == "--presence-write-ms")
            .unwrap();
        assert_eq!(drill[at + 1], "250");
    }
}
