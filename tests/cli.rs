//! The command line reads well: `task submit` prints the id (the whole task with
//! `--output json`), errors name the fix, shells get completion scripts, and the help of
//! the everyday commands holds only what they take, each with a line saying what it is
//! for — checked against the snapshots in `tests/cli_help/` (regenerate them with
//! `BATON_UPDATE_SNAPSHOTS=1 cargo test --test cli` after a deliberate change).

use baton_localcluster::testing as support;

use std::path::Path;
use std::process::{Command, Output};
use support::procs::{baton_binary, baton_cli};
use support::*;

/// `baton ARGS...` with nothing from the caller's environment but the path, so that
/// neither a `BATON_*` variable nor the terminal changes what is printed.
fn baton_plain(args: &[&str]) -> Output {
    Command::new(baton_binary())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .unwrap()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_prints_the_id_and_json_when_asked() {
    let env = TestEnv::new("cli-output").await;
    let node = env.node().await;
    let out = baton_cli(&node.url, API_TOKEN, &["task", "submit", "--", "true"]).await;
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let id: uuid::Uuid = printed.trim().parse().expect("the id alone");
    assert_eq!(printed, format!("{id}\n"));
    let task = user_client(&node.url).task_get(id).await.unwrap();
    assert_eq!(task.command, Some(vec!["true".to_string()]));

    let out = baton_cli(
        &node.url,
        API_TOKEN,
        &["task", "submit", "--output", "json", "--", "true"],
    )
    .await;
    let task: baton_client::Task = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(task.command, Some(vec!["true".to_string()]));
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_name_the_fix() {
    // A port nobody listens on: bound, then let go.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let out = baton_cli(&nowhere, API_TOKEN, &["task", "list"]).await;
    assert!(!out.status.success());
    let said = stderr_of(&out);
    assert!(
        said.contains(&format!("no server at {nowhere}: connection refused"))
            && said.contains("baton dev")
            && said.contains("BATON_SERVER"),
        "{said}"
    );
    // Once: not again by each layer of the HTTP client.
    assert_eq!(said.matches(&nowhere).count(), 1, "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");

    // A time that is not RFC 3339 is refused with an example, before any request.
    let out = baton_cli(
        &nowhere,
        API_TOKEN,
        &["task", "submit", "--run-at", "tomorrow 8am", "--", "true"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let said = stderr_of(&out);
    assert!(
        said.contains("RFC 3339") && said.contains("2026-12-01T08:00:00Z"),
        "{said}"
    );

    let env = TestEnv::new("cli-hints").await;
    let node = env.node().await;
    let out = baton_cli(&node.url, "not-a-token", &["task", "list"]).await;
    assert!(!out.status.success());
    let said = stderr_of(&out);
    assert!(
        said.contains("401") && said.contains("BATON_TOKEN"),
        "{said}"
    );
}

#[test]
fn completion_scripts_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = baton_plain(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["schedule", "registration-token", "concurrency-key"] {
            assert!(script.contains(word), "{shell} completes {word}");
        }
    }
    // bash loads it and registers the completion.
    let script = baton_plain(&["completions", "bash"]).stdout;
    let file = std::env::temp_dir().join(format!("baton-completion-{}", std::process::id()));
    std::fs::write(&file, script).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p baton", file.display()))
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("baton"));
    assert!(
        !baton_plain(&["completions", "tcsh"]).status.success(),
        "an unknown shell is refused"
    );
}

/// A reader that stops early (`baton completions zsh | head -1`) is no failure: the
/// command ends quietly, with no panic.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let mut child = Command::new(baton_binary())
        .args(["completions", "zsh"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is read, as `head -1` does after its line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn help_matches_its_snapshots() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli_help");
    let update = std::env::var_os("BATON_UPDATE_SNAPSHOTS").is_some();
    for command in [
        &["--help"][..],
        &["task", "--help"],
        &["task", "submit", "--help"],
        &["task", "list", "--help"],
        &["task", "logs", "--help"],
        &["queue", "list", "--help"],
        &["queue", "defaults", "--help"],
        &["runners", "list", "--help"],
        &["token", "create", "--help"],
        &["completions", "--help"],
    ] {
        if command == ["--help"] && !cfg!(feature = "drill") {
            // The snapshot lists `chaos`, which a build without the drill has not.
            continue;
        }
        let out = baton_plain(command);
        assert!(out.status.success(), "{command:?}: {out:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        // The CLI's own commands carry no telemetry flags: those are `serve`'s and `runner`'s.
        for flag in ["--otlp", "--log-format", "--trace-sample-ratio"] {
            assert!(!help.contains(flag), "{command:?} shows {flag}");
        }
        let name = command[..command.len() - 1].join("-");
        let file = dir.join(format!(
            "baton{}{name}.txt",
            if name.is_empty() { "" } else { "-" }
        ));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&file, &help).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (BATON_UPDATE_SNAPSHOTS=1 writes it)",
                file.display()
            )
        });
        assert_eq!(
            help,
            expected,
            "`baton {}` changed; if on purpose, run with BATON_UPDATE_SNAPSHOTS=1",
            command.join(" ")
        );
    }
    // Telemetry flags are still where they belong, under their own heading.
    for command in ["serve", "runner"] {
        let help = String::from_utf8(baton_plain(&[command, "--help"]).stdout).unwrap();
        let heading = help.find("\nTelemetry:\n").expect("a Telemetry heading");
        assert!(help[heading..].contains("--otlp-endpoint"), "{command}");
        assert!(!help[..heading].contains("--otlp-endpoint"), "{command}");
    }
}

/// Starts `baton serve` with `args` and no environment, waits up to 20 s for it to exit
/// (it must refuse to start: nothing it could reach is given), and returns what it said.
fn refused_at_start(args: &[&str]) -> String {
    let mut node = Command::new(baton_binary())
        .arg("serve")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            node.kill().unwrap();
            panic!("`baton serve {args:?}` was still running after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let said = stderr_of(&node.wait_with_output().unwrap());
    assert!(!status.success(), "{said}");
    said
}

/// A Redis Cluster keeps Baton's keys in one slot only through the prefix's hash tag; a
/// node given a prefix without one took submits and never dispatched them (every
/// multi-key script failed with CROSSSLOT). It now refuses to start, naming the fix —
/// before it reaches for either store.
#[test]
fn a_cluster_prefix_without_a_hash_tag_is_refused_at_start() {
    let said = refused_at_start(&[
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        "postgres://postgres@127.0.0.1:1/nowhere",
        "--redis-cluster",
        "127.0.0.1:1,127.0.0.1:2",
        "--redis-prefix",
        "baton:",
    ]);
    assert!(
        said.contains("\"baton:\"") && said.contains("hash tag") && said.contains("{baton}:"),
        "{said}"
    );
}

/// A fault name no node knows was compared against by each fault's check and matched
/// none: a test meaning to crash a node ran against a healthy one. It is refused at
/// start, with the names there are.
#[test]
fn an_unknown_fault_is_refused_at_start() {
    let said = refused_at_start(&[
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        "postgres://postgres@127.0.0.1:1/nowhere",
        "--fault",
        "abort-after-comit",
    ]);
    assert!(
        said.contains("abort-after-comit") && said.contains("abort-after-commit, "),
        "{said}"
    );
}
