//! The newcomer's command: `baton dev` brings up Redis, Postgres, three nodes behind nginx
//! and two runners, runs a demo task through the load balancer, and tears it all down.

use std::net::TcpListener;
use std::process::Command;

#[test]
fn baton_dev_brings_up_a_cluster_runs_the_demo_and_stops_everything() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("baton-dev-smoke-{}", uuid::Uuid::new_v4().simple()));
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["dev", "--smoke", "--port", &port.to_string()])
        .arg("--dir")
        .arg(&dir)
        .env_remove("BATON_DATABASE_URL")
        .env_remove("BATON_REDIS_URL")
        .output()
        .expect("run baton dev");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "baton dev --smoke failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("demo task succeeded"), "{stdout}");
    for member in [
        "runner-1", "runner-2", "node-1", "node-2", "node-3", "nginx", "postgres", "redis",
    ] {
        assert!(
            stdout.contains(&format!("stopped {member}")),
            "{member} not stopped:\n{stdout}"
        );
    }
    // Nothing it started still listens on the load balancer's port.
    assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
    let _ = std::fs::remove_dir_all(dir);
}
