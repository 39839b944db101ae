//! Loopback ports for the cluster's members.

use anyhow::Context;
use std::collections::HashSet;
use std::net::TcpListener;

/// Hands out free loopback ports, never the same one twice: a port is free when the OS
/// gives it for `127.0.0.1:0`, and a port given out but not yet listened on is still free
/// in the OS's eyes.
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

    pub fn pick(&mut self) -> anyhow::Result<u16> {
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
