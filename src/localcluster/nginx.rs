//! nginx in front of the nodes: the cluster's one address, as in production. Tuned for
//! Baton's traffic: long polls that park for up to 50 s, and followed logs that stream.

use super::processes::{StopPolicy, Supervised, find_program};
use super::readiness::{http_ok, probe_client, wait_until};
use super::workdir::WorkDir;
use anyhow::Context;
use nix::sys::signal::Signal;
use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

const READY_WITHIN: Duration = Duration::from_secs(15);

/// The configuration: everything nginx writes (pid, logs, temp files) stays under `dir`.
pub fn config(dir: &Path, listen_port: u16, nodes: &[u16], as_root: bool) -> String {
    let dir = dir.display();
    // As root, workers would otherwise drop to `nobody`, which cannot write the temp
    // folders under a root-owned work folder.
    let user = if as_root { "user root;\n" } else { "" };
    let servers: String = nodes
        .iter()
        .map(|port| format!("        server 127.0.0.1:{port} max_fails=3 fail_timeout=5s;\n"))
        .collect();
    format!(
        r#"# Written by `baton dev` at each start; edits are lost.
daemon off;
{user}worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log notice;

events {{
    worker_connections 1024;
}}

http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/client_body_temp;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;

    upstream baton {{
{servers}        keepalive 32;
    }}

    server {{
        listen 127.0.0.1:{listen_port};
        client_max_body_size 16m;

        location / {{
            proxy_pass http://baton;
            # Keep-alive to the nodes.
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            # Lease requests park up to 50 s on a node; leave them room.
            proxy_read_timeout 90s;
            proxy_send_timeout 90s;
            # Followed logs reach the client as they come.
            proxy_buffering off;
            # A dead node's requests go to the next one. Without `non_idempotent`, a POST
            # is retried only when it never reached a node, so no submit runs twice.
            proxy_next_upstream error timeout http_502 http_503;
            proxy_next_upstream_tries 3;
        }}
    }}
}}
"#
    )
}

pub fn spawn(
    work: &WorkDir,
    listen_port: u16,
    nodes: &[u16],
    as_root: bool,
) -> anyhow::Result<Supervised> {
    let nginx = find_program("nginx", &["/usr/sbin/nginx"])
        .context("nginx not found on PATH nor at /usr/sbin/nginx; ./scripts/dev.sh installs it")?;
    let dir = work.join("nginx");
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, config(&dir, listen_port, nodes, as_root))?;
    let mut command = Command::new(nginx);
    command
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        // Errors before the configuration is read go here, not to /var/log/nginx.
        .arg("-e")
        .arg(dir.join("error.log"));
    // SIGQUIT is nginx's graceful stop: finish the requests in flight, then exit.
    Supervised::spawn(
        "nginx",
        command,
        &work.log("nginx"),
        StopPolicy::signal(Signal::SIGQUIT),
    )
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
