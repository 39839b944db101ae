//! The nginx configuration of a local cluster, with no I/O: the production file
//! (`deploy/nginx/baton.conf`) with local nodes and address put in, inside a main context
//! of its own. Shared by `baton dev`, `baton chaos` and the tests (which include this
//! file), so all of them run the production file.

use std::path::Path;

/// The production file: an `upstream` and a `server`, for nginx's `http` context.
pub const PRODUCTION: &str = include_str!("../../../deploy/nginx/baton.conf");

/// The local cluster's configuration: the production site with these nodes and port.
pub fn config(dir: &Path, listen_port: u16, nodes: &[u16], as_root: bool) -> String {
    let site = site(PRODUCTION, &format!("127.0.0.1:{listen_port}"), nodes);
    main_context(dir, as_root, &site)
}

/// `site` (an `http`-context file) in a main context that keeps everything nginx writes
/// (pid, logs, temp files) under `dir`, in the foreground.
pub fn main_context(dir: &Path, as_root: bool, site: &str) -> String {
    let dir = dir.display();
    // As root, workers would otherwise drop to `nobody`, which cannot write the temp
    // folders under a root-owned work folder.
    let user = if as_root { "user root;\n" } else { "" };
    format!(
        r#"# Written at each start from deploy/nginx/baton.conf; edits are lost.
daemon off;
{user}worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log notice;

events {{
    worker_connections 4096;
}}

http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/client_body_temp;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;

{site}}}
"#
    )
}

/// `production` with its upstream's `server` lines replaced by one per local node (same
/// parameters: `max_fails`, `fail_timeout`) and its `listen` line by `listen`.
pub fn site(production: &str, listen: &str, nodes: &[u16]) -> String {
    let (mut in_upstream, mut servers_done, mut listens) = (false, false, 0);
    let mut out = String::new();
    for line in production.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("upstream ") {
            in_upstream = true;
        } else if in_upstream && trimmed.starts_with('}') {
            in_upstream = false;
        }
        if in_upstream && trimmed.starts_with("server ") {
            if !servers_done {
                // `server ADDRESS PARAMETERS;`: keep the parameters.
                let params = trimmed["server ".len()..]
                    .split_once(' ')
                    .map_or(";", |(_, params)| params);
                for port in nodes {
                    out.push_str(&format!("{indent}server 127.0.0.1:{port} {params}\n"));
                }
                servers_done = true;
            }
            continue;
        }
        if trimmed.starts_with("listen ") {
            listens += 1;
            out.push_str(&format!("{indent}listen {listen};\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert!(
        servers_done && listens == 1,
        "deploy/nginx/baton.conf must have an upstream with `server` lines and one `listen`"
    );
    out
}
