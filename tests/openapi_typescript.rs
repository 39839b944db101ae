//! The OpenAPI document as TypeScript users meet it: the live document of a node passes
//! `redocly lint` with no error; clients generated from it by the two well-known
//! generators (`@hey-api/openapi-ts`, and `openapi-typescript`'s types under
//! `openapi-fetch`) compile under `tsc --strict`; and a script using one
//! (`tests/openapi_ts/use_client.ts`) submits a three-word command, follows its log as
//! text, reads its events and gets typed 404 and 422 errors from the running node.
//!
//! `scripts/test.sh` installs what it needs (Node.js, and the pinned npm packages into
//! `tests/openapi_ts/node_modules`).

use baton_localcluster::testing as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

fn ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi_ts")
}

/// Runs one of the installed tools (or node) in `tests/openapi_ts`; its output, or the
/// test fails with it.
fn run(program: &str, args: &[&str], vars: &[(&str, &str)]) -> String {
    let dir = ts_dir();
    let bin = dir.join("node_modules/.bin").join(program);
    let program = if bin.exists() {
        bin
    } else {
        PathBuf::from(program)
    };
    let out = Command::new(&program)
        .args(args)
        .envs(vars.iter().copied())
        .env("NO_COLOR", "1")
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{text}",
        program.display(),
        out.status
    );
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_clients_generated_from_the_live_document_compile_strictly_and_work() {
    assert!(
        ts_dir().join("node_modules/.bin/tsc").exists(),
        "the TypeScript tools are not installed: run `npm ci` in tests/openapi_ts \
         (scripts/test.sh does)"
    );
    let env = TestEnv::new("openapi-ts").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 2).await;
    let document = reqwest::get(format!("{}/openapi.json", node.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Generated anew each run: what an earlier document made would mislead.
    let generated = ts_dir().join("gen");
    let _ = std::fs::remove_dir_all(&generated);
    std::fs::create_dir_all(&generated).unwrap();
    let spec = generated.join("openapi.json");
    std::fs::write(&spec, document).unwrap();
    let spec = spec.to_str().unwrap();

    let lint = run("redocly", &["lint", spec, "--format", "stylish"], &[]);
    println!("redocly lint:\n{lint}");

    run("openapi-ts", &["-i", spec, "-o", "gen/hey-api"], &[]);
    run(
        "openapi-typescript",
        &[spec, "-o", "gen/openapi-typescript/schema.ts"],
        &[],
    );
    run("tsc", &["-p", "tsconfig.json"], &[]);

    let report = run(
        "node",
        &["gen/js/use_client.js"],
        &[("BATON_URL", node.url.as_str()), ("BATON_TOKEN", API_TOKEN)],
    );
    println!("use_client.ts:\n{report}");
}
