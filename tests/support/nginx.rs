//! A real nginx in front of test nodes, from a configuration the test writes (routes to
//! chosen nodes, or an upstream of several): what runners and users talk to in production.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct NginxProc {
    pub child: Child,
    pub url: String,
    pub dir: PathBuf,
}

fn nginx_binary() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

impl NginxProc {
    /// Starts nginx serving `http_block` (the inside of `http {}`, which must contain a
    /// `server` listening on `{listen}`: replaced by a free loopback port).
    pub async fn start(dir: &Path, http_block: &str) -> NginxProc {
        let dir = dir.join(format!(
            "nginx-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let port = super::services::free_port();
        let d = dir.display();
        // As root, workers would drop to `nobody`, who cannot write under the test dir.
        let user = if nix_is_root() { "user root;" } else { "" };
        let conf = format!(
            "daemon off;\n{user}\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n access_log {d}/access.log;\n client_body_temp_path {d}/cb;\n proxy_temp_path {d}/px;\n\
             fastcgi_temp_path {d}/fc;\n uwsgi_temp_path {d}/uw;\n scgi_temp_path {d}/sc;\n{}\n}}\n",
            http_block.replace("{listen}", &format!("127.0.0.1:{port}"))
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

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

impl Drop for NginxProc {
    /// SIGTERM, so the master takes its workers down with it: a SIGKILLed master leaves
    /// them running, still listening on the port.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
