//! The drill's Postgres pair under pg_auto_failover (`baton_localcluster::pg_failover`):
//! a killed node comes back as the standby, whatever its old pid files say. An hour's soak
//! ended without a verdict when it did not: the killed keeper's pid file named a pid
//! that, the pids having wrapped, a live backend of the postgres user held; the new keeper
//! refused to start ("already running") and the primary had no synchronous standby for
//! the remaining 55 minutes, every write refused.

use baton_localcluster::pg_failover::PgFailover;
use baton_localcluster::ports::Ports;
use baton_localcluster::workdir::WorkDir;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_node_rejoins_though_its_old_pid_files_name_a_live_process() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pg-failover-pids");
    let work = WorkDir::recreate(&dir).unwrap();
    let mut ports = Ports::default();
    let as_root = nix::unistd::geteuid().is_root();
    let mut pg = PgFailover::start(&work, &mut ports, as_root).await.unwrap();
    let primary = pg.primary().await.unwrap();
    let standby = 1 - primary;
    pg.kill(standby).await;

    // What a wrapped pid looks like: the killed node's pid files name a live process of
    // the postgres user, the primary's postmaster.
    let [_, primary_postmaster] = pg.pid_files(primary);
    let live = std::fs::read_to_string(&primary_postmaster).unwrap();
    let live = live.lines().next().unwrap();
    for file in pg.pid_files(standby) {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("{live}\n")).unwrap();
    }

    pg.restart(standby).unwrap();
    let whole = pg.wait_whole(Duration::from_secs(90)).await;
    pg.stop().await;
    whole.unwrap();
}
