//! nginx in front of the nodes: the cluster's one address, as in production. The
//! configuration is the production one, `deploy/nginx/baton.conf` (tuned for Baton's
//! traffic: long polls that park for up to 50 s, followed logs that stream, retries only
//! where they are safe), with this cluster's nodes and address put in, inside a main
//! context that keeps everything nginx writes under the cluster's folder.

use super::nginx_conf::config;
use super::processes::{Group, StopPolicy, Supervised, find_program};
use super::readiness::{http_ok, probe_client, wait_until};
use super::workdir::WorkDir;
use anyhow::Context;
use nix::sys::signal::Signal;
use std::path::Path;
use std::time::Duration;

const READY_WITHIN: Duration = Duration::from_secs(15);

/// Starts nginx on `listen_port` with the production configuration, in front of the
/// nodes on `nodes` ports, in the foreground; its files stay under the work folder.
pub fn spawn(
    work: &WorkDir,
    listen_port: u16,
    nodes: &[u16],
    as_root: bool,
) -> anyhow::Result<Supervised> {
    let dir = work.join("nginx");
    let conf = config(&dir, listen_port, nodes, as_root);
    // SIGQUIT is nginx's graceful stop: finish the requests in flight, then exit.
    let stop = StopPolicy::signal(Signal::SIGQUIT);
    spawn_in(Group::Own, &dir, &conf, &work.log("nginx"), stop)
}

/// Starts nginx in the foreground on `conf`, in `dir`, output to `log`, in process group
/// `group`, stopped by `stop`.
pub(crate) fn spawn_in(
    group: Group,
    dir: &Path,
    conf: &str,
    log: &Path,
    stop: StopPolicy,
) -> anyhow::Result<Supervised> {
    let command = command_on(dir, conf)?;
    Supervised::spawn_in(group, "nginx", command.into(), log, stop)
}

/// nginx's command line for `conf`, which it writes to `dir/nginx.conf`; `dir` is
/// nginx's prefix (relative paths and `error.log` are under it).
fn command_on(dir: &Path, conf: &str) -> anyhow::Result<std::process::Command> {
    let nginx = find_program("nginx", &["/usr/sbin/nginx"])
        .context("nginx not found on PATH nor at /usr/sbin/nginx; ./scripts/dev.sh and ./scripts/test.sh install it")?;
    let file = dir.join("nginx.conf");
    std::fs::write(&file, conf).with_context(|| format!("writing {}", file.display()))?;
    let mut command = std::process::Command::new(nginx);
    command
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(file)
        // Errors before the configuration is read go here, not to /var/log/nginx.
        .arg("-e")
        .arg(dir.join("error.log"));
    Ok(command)
}

/// Waits until a node answers ready through nginx.
pub async fn wait_ready(nginx: &mut Supervised, lb_url: &str) -> anyhow::Result<()> {
    let http = probe_client()?;
    let url = format!("{lb_url}/readyz");
    let (http, url) = (&http, url.as_str());
    wait_until(nginx, "/readyz through nginx", READY_WITHIN, || {
        http_ok(http, url)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processes::running_as_root;
    use std::path::Path;

    #[test]
    fn the_production_file_gets_every_node_and_the_local_address() {
        let dir = Path::new("/tmp/baton-dev/nginx");
        let conf = config(dir, 18080, &[18081, 18082, 18083], false);
        for port in [18081, 18082, 18083] {
            assert!(
                conf.contains(&format!(
                    "server 127.0.0.1:{port} max_fails=3 fail_timeout=5s;"
                )),
                "node {port} is in the upstream:\n{conf}"
            );
        }
        assert!(conf.contains("listen 127.0.0.1:18080;"));
        assert_eq!(conf.matches("listen ").count(), 1);
        assert!(
            !conf.contains("192.0.2.") && !conf.contains("listen 80;"),
            "no example address of the production file is left:\n{conf}"
        );
        assert!(conf.contains("pid /tmp/baton-dev/nginx/nginx.pid;"));
        // The production tuning is there, untouched.
        for tuning in [
            "proxy_read_timeout 90s;",
            "proxy_buffering off;",
            "keepalive 32;",
            "location = /v1/runner/lease",
        ] {
            assert!(conf.contains(tuning), "{tuning} is kept");
        }
    }

    /// nginx itself accepts the rendered file (when nginx is installed: scripts/test.sh
    /// installs it).
    #[test]
    fn nginx_accepts_the_rendered_configuration() {
        if find_program("nginx", &["/usr/sbin/nginx"]).is_none() {
            eprintln!("nginx not installed: not checked");
            return;
        }
        let dir = std::env::temp_dir().join(format!("baton-nginx-t-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        // `user root;` needs root; `nginx -t` runs as whoever runs the tests.
        let conf = config(&dir, 18080, &[18081, 18082], running_as_root());
        let out = command_on(&dir, &conf).unwrap().arg("-t").output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "nginx -t refused the configuration:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
