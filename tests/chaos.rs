//! The failover drill, for two minutes: nodes, runners and Redis killed at random under
//! load, at least ten node kills and two Redis restarts, a runner killed and a node paused,
//! every kind of link fault at least once (a runner cut off, a node cut from Redis, from Postgres, a one-way link, a
//! slow link, a Postgres outage longer than `runner_lost_after`), a node's and a
//! runner's wall clock stepped, a node dying right after a commit; runners cut off in
//! every band of their thresholds and a node frozen past the fence; concurrency groups, a
//! paused queue and schedules of every overlap policy in the load — and not one
//! invariant violated, nor a run ended without a cause in the fault log.
//! The report is kept in `target/chaos-report.txt` (scripts/test.sh prints it).

use serde_json::Value;
use std::process::Command;

#[test]
fn two_minutes_of_chaos_break_no_invariant() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos");
    let admin = std::env::var("BATON_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "chaos",
            "--duration-s",
            "120",
            "--min-node-kills",
            "10",
            "--min-redis-restarts",
            "2",
        ])
        .args(["--database-url", &admin])
        .arg("--dir")
        .arg(&dir)
        .output()
        .expect("run baton chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report_file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/chaos-report.txt");
    let _ = std::fs::write(&report_file, stdout.as_bytes());
    assert!(
        out.status.success(),
        "chaos found violations or failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = std::fs::read(dir.join(baton_drill::REPORT_JSON)).expect("the JSON report");
    let report: Value = serde_json::from_slice(&json).expect("a JSON report");
    assert_eq!(report["violations"], Value::Array(Vec::new()), "{stdout}");
    let faults = &report["faults"];
    let count = |name: &str| {
        faults[name]
            .as_u64()
            .unwrap_or_else(|| panic!("no {name} in {faults}"))
    };
    assert!(count("node_kills") >= 10, "{stdout}");
    assert!(count("redis_restarts") >= 2, "{stdout}");
    assert!(count("link_faults") >= 6, "{stdout}");
    let events: Vec<&str> = faults["events"]
        .as_array()
        .expect("the fault events")
        .iter()
        .filter_map(|e| e["what"].as_str())
        .collect();
    let happened = |what: &str| events.iter().any(|e| e.contains(what));
    for kind in [
        "killed runner",
        "paused node",
        "from every node for",
        "from Redis only",
        "from Postgres only",
        "one way only",
        "slowed by",
        "cut every node from Postgres",
        "wall clock to",
        "started to die after its first commit",
    ] {
        assert!(happened(kind), "no {kind:?} fault in:\n{stdout}");
    }
    // Faults that cross every threshold: a runner cut off in each band of its
    // thresholds, a node frozen past the runners' fence and `forgotten_run_after`.
    for band in [
        "shorter than the timeout grace",
        "between the timeout grace and the fence",
        "longer than runner_lost_after",
        "forgotten_run_after and the runners' fence",
    ] {
        assert!(happened(band), "no {band:?} fault in:\n{stdout}");
    }
    // The strict checks ran, and passed.
    for check in [
        "every run's end has a cause",
        "no group ran over its limit",
        "no start in a paused queue",
        "every overlap policy kept",
    ] {
        assert_eq!(
            report["checks"][check],
            Value::Bool(true),
            "no passing {check:?} check in:\n{stdout}"
        );
    }
}
