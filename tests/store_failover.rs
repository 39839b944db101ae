//! The stores fail over under load, each a short `baton chaos` run on the stores' own
//! failover setups, judged by the drill's history checker (no overlapping runs, exactly
//! one right terminal state, nothing acknowledged lost): Redis behind three sentinels
//! (its master killed, then a failover asked of the sentinels), Redis Cluster (the
//! master of Baton's slot killed, then failed over to its replica), and Postgres with a
//! synchronous standby under pg_auto_failover (the primary killed, then a failover by
//! hand). Nodes and runners are killed meanwhile. Each report is kept in
//! `target/store-failover-<kind>.txt`.

use std::process::Command;

/// One drill at a time: each is a whole cluster on this machine's two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn drill(kind: &str, store_flags: &[&str], faults: &str) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("failover-{kind}"));
    let admin = std::env::var("BATON_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let mut command = Command::new(env!("CARGO_BIN_EXE_baton"));
    command
        .args(["chaos", "--duration-s", "45", "--min-node-kills", "2"])
        .args(["--min-store-failovers", "2", "--faults", faults])
        .args(store_flags)
        .arg("--dir")
        .arg(&dir);
    if !store_flags.contains(&"failover") {
        command.args(["--database-url", &admin]);
    }
    let out = command.output().expect("run baton chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("target/store-failover-{kind}.txt"));
    let _ = std::fs::write(&report, stdout.as_bytes());
    assert!(
        out.status.success(),
        "the drill found violations or failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = std::fs::read(dir.join(baton_drill::REPORT_JSON)).expect("the JSON report");
    let report: serde_json::Value = serde_json::from_slice(&json).expect("a JSON report");
    assert_eq!(report["violations"], serde_json::json!([]), "{stdout}");
    let failovers = report["faults"]["store_failovers"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(
        failovers >= 2,
        "two failovers, each writable again: {stdout}"
    );
}

#[test]
fn redis_sentinel_fails_over_under_load_and_nothing_is_lost() {
    drill(
        "sentinel",
        &["--redis", "sentinel"],
        "failover-redis,kill-node,kill-runner",
    );
}

#[test]
fn redis_cluster_fails_over_under_load_and_nothing_is_lost() {
    drill(
        "cluster",
        &["--redis", "cluster"],
        "failover-redis,kill-node,kill-runner",
    );
}

#[test]
fn postgres_fails_over_to_its_synchronous_standby_and_nothing_acknowledged_is_lost() {
    drill(
        "postgres",
        &["--postgres", "failover"],
        "failover-postgres,kill-node,kill-runner,cut-node-postgres",
    );
}
