//! Users of other languages generate their clients from `/openapi.json`. The live
//! document passes `openapi-spec-validator`, `openapi-python-client` (both from PyPI;
//! scripts/test.sh installs them) generates a client from it without a warning, and that
//! client, used as a user would (`tests/python_client/use_client.py`), submits, lists,
//! gets, follows a log, cancels, and gets every error as the typed `ErrorBody`.

use baton_localcluster::testing as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::*;

async fn run(mut cmd: Command) -> Output {
    let shown = format!("{cmd:?}");
    tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{shown}: {e} (scripts/test.sh installs the Python tools)"))
}

fn succeeded(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    format!("{stdout}{stderr}")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_document_validates_and_a_client_generated_from_it_works() {
    let env = TestEnv::new("python-client").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 2).await;
    let dir: PathBuf = env.dir.join("python-client");
    std::fs::create_dir_all(&dir).unwrap();
    let doc = reqwest::get(format!("{}/openapi.json", node.url))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let doc_path = dir.join("openapi.json");
    std::fs::write(&doc_path, &doc).unwrap();

    let mut validate = Command::new("python3");
    validate
        .args(["-m", "openapi_spec_validator"])
        .arg(&doc_path);
    succeeded(&run(validate).await, "openapi-spec-validator");

    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "project_name_override: baton-api-client\npackage_name_override: baton_api\n",
    )
    .unwrap();
    let mut generate = Command::new("openapi-python-client");
    generate
        .args(["generate", "--meta", "none", "--path"])
        .arg(&doc_path)
        .arg("--config")
        .arg(&config)
        .arg("--output-path")
        .arg(dir.join("baton_api"));
    let said = succeeded(&run(generate).await, "openapi-python-client");
    assert!(
        !said.to_lowercase().contains("warning") && !said.contains("Unable"),
        "the client is generated whole, no operation or response left out:\n{said}"
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python_client/use_client.py");
    let mut user = Command::new("python3");
    user.arg(script)
        .env("PYTHONPATH", &dir)
        .env("BATON_URL", &node.url)
        .env("BATON_TOKEN", API_TOKEN);
    let said = succeeded(&run(user).await, "the generated client's user");
    assert!(said.trim_end().ends_with("ok"), "{said}");
}
