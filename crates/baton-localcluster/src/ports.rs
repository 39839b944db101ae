//! Loopback ports for the cluster's members.

use anyhow::Context;
use std::collections::HashSet;
use std::net::TcpListener;

/// Hands out free loopback ports, never the same one twice. They are drawn below the
/// kernel's ephemeral range: a port the OS hands out — for a `:0` listener, or as the
/// source port of any connection on the machine, which a busy test run makes thousands
/// of — is never one of these, so a port picked here stays free until its member binds
/// it (seen: Redis refused its port, taken meanwhile as a connection's source port).
#[derive(Debug, Default)]
pub struct Ports {
    given: HashSet<u16>,
}

impl Ports {
    /// Reserves `port` (the load balancer's), failing clearly if something listens on it.
    pub fn claim(&mut self, port: u16) -> anyhow::Result<u16> {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => {
                self.given.insert(port);
                Ok(port)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
                "port {port} on 127.0.0.1 is busy (another `baton dev`?); \
                 pick another with --port"
            ),
            Err(e) => Err(e).with_context(|| format!("checking port {port}")),
        }
    }

    /// A free port below the ephemeral range, never one handed out before.
    pub fn pick(&mut self) -> anyhow::Result<u16> {
        let (low, high) = below_ephemeral();
        for _ in 0..1_000 {
            let port = low + rand::random::<u16>() % (high - low);
            if !self.given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                self.given.insert(port);
                return Ok(port);
            }
        }
        // Below the range all is taken (hardly): what the OS gives.
        loop {
            let port = TcpListener::bind(("127.0.0.1", 0))
                .and_then(|listener| listener.local_addr())
                .context("asking the OS for a free loopback port")?
                .port();
            if self.given.insert(port) {
                return Ok(port);
            }
        }
    }
}

/// Ports from 10,000 up to where the kernel's ephemeral range starts
/// (`ip_local_port_range`; 32,768 when it cannot be read).
fn below_ephemeral() -> (u16, u16) {
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    (10_000, start.max(10_001))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picked_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let mut ports = Ports::default();
        let (low, high) = below_ephemeral();
        let picked: Vec<u16> = (0..20).map(|_| ports.pick().unwrap()).collect();
        let distinct: HashSet<u16> = picked.iter().copied().collect();
        assert_eq!(distinct.len(), picked.len());
        assert!(picked.iter().all(|p| (low..high).contains(p)), "{picked:?}");
    }
}
