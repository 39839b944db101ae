//! A real nginx in front of test nodes, from a configuration the test writes (routes to
//! chosen nodes, or an upstream of several): what runners and users talk to in production.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The local cluster's configuration builder, shared with `baton dev`.
pub use crate::nginx_conf as conf;

/// A running nginx, stopped when dropped.
pub struct NginxProc {
    /// The nginx master process.
    pub child: Child,
    /// `http://127.0.0.1:<port>`, where the site listens.
    pub url: String,
    /// Its configuration, logs (`access.log`, `error.log`) and temp folders.
    pub dir: PathBuf,
}

/// nginx where `baton dev` finds it (Debian keeps it in /usr/sbin).
fn nginx_binary() -> PathBuf {
    crate::processes::find_program("nginx", &["/usr/sbin/nginx"]).unwrap_or_else(|| "nginx".into())
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
            is_root(),
            &site.replace("{listen}", &format!("127.0.0.1:{port}")),
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn nginx (scripts/test.sh installs it)");
        let url = format!("http://127.0.0.1:{port}");
        let probe = reqwest::Client::new();
        super::wait_for(
            "nginx to listen",
            std::time::Duration::from_secs(10),
            || {
                let req = probe.get(format!("{url}/healthz")).send();
                async move { req.await.ok().map(|_| ()) }
            },
        )
        .await;
        NginxProc { child, url, dir }
    }
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

impl Drop for NginxProc {
    /// SIGTERM (nginx's fast shutdown), so the master takes its workers down with it: a
    /// SIGKILLed master leaves them running, still listening on the port.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
