//! A real nginx in front of test nodes, from a configuration the test writes (routes to
//! chosen nodes, or an upstream of several): what runners and users talk to in production.

use crate::processes::{Group, StopPolicy, Supervised, running_as_root};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The local cluster's configuration builder, shared with `baton dev`.
pub use crate::nginx_conf as conf;

/// A running nginx, stopped when dropped.
pub struct NginxProc {
    /// The nginx master process, under the cluster's supervisor.
    nginx: Supervised,
    /// `http://127.0.0.1:<port>`, where the site listens.
    pub url: String,
    /// Its configuration, logs (`access.log`, `error.log`) and temp folders.
    pub dir: PathBuf,
}

impl NginxProc {
    /// Starts nginx serving `site` (an `http`-context configuration whose `server`
    /// listens on `{listen}`: replaced by a free loopback port), in the same main context
    /// `baton dev` uses.
    pub async fn start(dir: &Path, site: &str) -> NginxProc {
        let dir = dir.join(format!(
            "nginx-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let port = super::services::free_port();
        let conf = conf::main_context(
            &dir,
            running_as_root(),
            &site.replace("{listen}", &format!("127.0.0.1:{port}")),
        );
        // SIGTERM, nginx's fast shutdown: a test's long polls need not be waited out, and
        // the master takes its workers down with it. In the test's process group, so an
        // interrupted test run stops it too.
        let stop = StopPolicy {
            grace: Duration::from_secs(5),
            ..StopPolicy::signal(Signal::SIGTERM)
        };
        let out = dir.join("nginx.out");
        let nginx = crate::nginx::spawn_in(Group::Owners, &dir, &conf, &out, stop)
            .expect("spawn nginx (scripts/test.sh installs it)");
        let url = format!("http://127.0.0.1:{port}");
        let probe = reqwest::Client::new();
        super::wait_for("nginx to listen", Duration::from_secs(10), || {
            let req = probe.get(format!("{url}/healthz")).send();
            async move { req.await.ok().map(|_| ()) }
        })
        .await;
        NginxProc { nginx, url, dir }
    }

    /// The nginx master's pid (its workers are its children).
    pub fn pid(&self) -> u32 {
        self.nginx.pid() as u32
    }
}

impl Drop for NginxProc {
    fn drop(&mut self) {
        self.nginx.stop_blocking();
    }
}
