//! The deployment artefacts hold together: the Helm chart lints and renders (with the Helm
//! engine from PyPI `helm-python-sdk`) for its defaults and for
//! `deploy/helm/values-production.yaml`, every object it renders is valid Kubernetes
//! (PyPI `kubernetes-validate`), the HA facts hold (replicas, probes, drain timing, the
//! migration hook, security), every `BATON_*` variable it sets is one this binary reads,
//! and the Grafana dashboard uses only the metrics the nodes and runners export. With
//! `dynamicRunners` on, the KEDA ScaledJob and TriggerAuthentication validate against
//! KEDA's CRD schemas (vendored in `tests/helm/keda/`; PyPI `jsonschema`, which
//! kubernetes-validate brings), the Job KEDA makes of it against Kubernetes', and its
//! trigger polls `GET /v1/demand` for the labels its `baton runner --once` offers and
//! reads a number of the answer. No cluster runs: rendered objects against schemas only.
//! The checks themselves are in `tests/helm/check_chart.py`.

use std::process::Command;

#[test]
fn the_chart_renders_valid_objects_and_the_dashboard_known_metrics() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tests/helm/check_chart.py"))
        .arg("--baton")
        .arg(env!("CARGO_BIN_EXE_baton"))
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the chart check failed (it needs `python3 -m pip install helm-python-sdk \
         kubernetes-validate`; scripts/test.sh does that):\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
}
