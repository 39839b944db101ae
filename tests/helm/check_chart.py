"""Checks the deployment artefacts: the Helm chart in deploy/helm/baton and the Grafana
dashboard in deploy/grafana.

The chart is linted and rendered by the Helm engine itself (PyPI `helm-python-sdk`, which
bundles it: no helm binary, no cluster), for the default values, for
deploy/helm/values-production.yaml and for a few variants; every rendered object is
validated against the Kubernetes schemas (PyPI `kubernetes-validate`), and the facts the
HA design depends on are asserted: replicas, probes, drain timing, hooks, security. Every
BATON_* variable the chart sets must be one the binary reads (`baton <cmd> --help`).

The runners on demand (`dynamicRunners`: a KEDA ScaledJob and its TriggerAuthentication)
are validated against KEDA's own CRD schemas, vendored in tests/helm/keda (with the
`jsonschema` package, which kubernetes-validate brings), the Job KEDA would make of the
ScaledJob against Kubernetes', and the trigger is checked to poll GET /v1/demand for the
labels its runners offer and to read a number of the demand's answer. No cluster and no
KEDA run here: these are the rendered objects against the schemas, nothing more.

Run by tests/deploy_chart.rs; by hand: python3 tests/helm/check_chart.py --baton target/debug/baton
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
from pathlib import Path

from urllib.parse import parse_qs, urlsplit

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/baton"
PRODUCTION = ROOT / "deploy/helm/values-production.yaml"
DASHBOARD = ROOT / "deploy/grafana/baton-dashboard.json"
DOCKERFILE = ROOT / "deploy/Dockerfile"

# Validated against this Kubernetes version's schemas, strictly (unknown fields refused).
KUBERNETES = "1.35"
# Prometheus Operator kinds: CRDs kubernetes-validate has no schema for. Their shape is
# checked by hand below instead.
CRD_KINDS = {"ServiceMonitor", "PodMonitor"}
# KEDA's CRDs, vendored from KEDA's repository (tests/helm/keda/README.md says from
# which release): the ScaledJob and TriggerAuthentication the chart renders are
# validated against their OpenAPI schemas.
KEDA_DIR = ROOT / "tests/helm/keda"
KEDA_VERSION = "v2.20.2"
KEDA_CRD_FILES = ("keda.sh_scaledjobs.yaml", "keda.sh_triggerauthentications.yaml")
# An answer of GET /v1/demand (crates/baton-client/src/wire/provisioning.rs, DemandView):
# the ScaledJob's valueLocation must name a number in it.
SAMPLE_DEMAND = {"labels": ["ephemeral"], "queues": [], "waiting": 3, "covered": 0, "demand": 3}
DEMAND_WIRE = ROOT / "crates/baton-client/src/wire/provisioning.rs"
# Read by the telemetry code from the environment directly, so absent from `--help`.
READ_DIRECTLY = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}

# The metric names the nodes and runners export (the dashboard may use no other).
METRICS = {
    "baton_queue_depth",
    "baton_tasks",
    "baton_tasks_submitted_total",
    "baton_tasks_leased_total",
    "baton_tasks_completed_total",
    "baton_pickup_latency_seconds",
    "baton_lease_wait_seconds",
    "baton_parked_leases",
    "baton_reconciler_actions_total",
    "baton_orphan_adoptions_total",
    "baton_redis_rebuilds_total",
    "baton_redis_errors_total",
    "baton_redis_command_duration_seconds",
    "baton_postgres_errors_total",
    "baton_postgres_query_duration_seconds",
    "baton_live_nodes",
    "baton_http_requests_total",
    "baton_http_request_duration_seconds",
    "baton_runner_slots_busy",
    "baton_runner_slots_total",
    "baton_runner_lease_requests_total",
    "baton_runner_backoffs_total",
    "baton_runner_report_errors_total",
    "baton_task_run_seconds",
    "baton_build_info",
}
HISTOGRAMS = {m for m in METRICS if m.endswith("_seconds")}

failures: list[str] = []
passed = 0


def check(ok: bool, what: str) -> bool:
    global passed
    if ok:
        passed += 1
    else:
        failures.append(what)
    return ok


# ---------------------------------------------------------------------------- rendering


class Release:
    """The objects one set of values renders to."""

    def __init__(self, name: str, values: dict):
        self.name = name
        self.values = values
        with helm.Chart.load(CHART) as chart:
            manifests = chart.render(values, name="baton", namespace="baton", is_install=True)
            self.merged = chart.merge_values(values)
        self.notes = ""
        self.objects: list[dict] = []
        for path, text in sorted(manifests.items()):
            if path.endswith("NOTES.txt"):
                self.notes = text
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    doc["_template"] = path
                    self.objects.append(doc)

    def all(self, kind: str) -> list[dict]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, component: str | None = None) -> dict | None:
        found = [
            o
            for o in self.all(kind)
            if component is None
            or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
        check(len(found) <= 1, f"{self.name}: at most one {kind} {component or ''}")
        return found[0] if found else None

    def config(self, component: str) -> dict:
        cm = self.one("ConfigMap", component)
        return (cm or {}).get("data") or {}


def pod_templates(release: Release) -> list[tuple[str, dict]]:
    """Every pod the chart makes, KEDA's Jobs included (their template is the ScaledJob's
    jobTargetRef.template), so the security, Secret and setting checks cover them too."""
    out = []
    for o in release.objects:
        if o["kind"] in ("Deployment", "Job"):
            out.append((f"{o['kind']} {o['metadata']['name']}", o["spec"]["template"]))
        elif o["kind"] == "ScaledJob":
            out.append((f"ScaledJob {o['metadata']['name']}", o["spec"]["jobTargetRef"]["template"]))
    return out


def env_names(release: Release, template: dict) -> set[str]:
    """Every variable a pod's containers get: `env` entries and their ConfigMaps' keys."""
    names = set()
    configmaps = {cm["metadata"]["name"]: cm.get("data") or {} for cm in release.all("ConfigMap")}
    for c in template["spec"]["containers"]:
        names |= {e["name"] for e in c.get("env", [])}
        for source in c.get("envFrom", []):
            ref = source.get("configMapRef", {}).get("name")
            check(ref in configmaps, f"{release.name}: envFrom names a rendered ConfigMap ({ref})")
            names |= set(configmaps.get(ref, {}))
    return names


# ------------------------------------------------------------------------------- checks


def lint(name: str, values: dict | None) -> None:
    report = helm.lint(CHART, values, strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2] + [
        {"error": e} for e in report["errors"]
    ]
    check(not problems, f"helm lint --strict ({name}): {problems}")


def schema_refuses_typos() -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(helm.values_from_yaml(PRODUCTION.read_text()))
        for typo in (
            {"server": {"replica": 3}},
            {"existingSecrets": "mine"},
            {"secret": {"apiToken": "x"}},
            {"runner": {"label": ["linux"]}},
            {"otlp": {"protocol": "http"}},
            {"server": {"env": {"NODE_TTL_MS": "1"}}},
            {"server": {"autoscaling": {"enabled": True, "minReplicas": 1}}},
            {"dynamicRunners": {"labels": []}},
            {"dynamicRunners": {"label": ["ephemeral"]}},
            {"dynamicRunners": {"labels": ["a,b"]}},
            {"dynamicRunners": {"maxReplicas": 3}},
            {"dynamicRunners": {"apiTokenSecret": {"secret": "baton-keda"}}},
            {"dynamicRunners": {"env": {"BATON_RUNNER_LABELS": "gpu"}}},
        ):
            try:
                chart.validate_schema(typo)
                check(False, f"values.schema.json refuses {typo}")
            except helm.HelmValuesError:
                check(True, "")


def validate_kubernetes(release: Release) -> None:
    for o in release.objects:
        kind = o["kind"]
        body = {k: v for k, v in o.items() if not k.startswith("_")}
        if kind in CRD_KINDS or o["apiVersion"].startswith("keda.sh/"):
            continue
        try:
            kubernetes_validate.validate(body, KUBERNETES, strict=True)
            check(True, "")
        except kubernetes_validate.ValidationError as e:
            where = "/".join(str(p) for p in e.path)
            check(False, f"{release.name}: {kind} {o['metadata']['name']} at {where}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            check(False, f"{release.name}: no Kubernetes schema: {e.message}")


def check_crd_shapes(release: Release) -> None:
    """ServiceMonitor and PodMonitor: what kubernetes-validate cannot check."""
    service = release.one("Service")
    for o in release.objects:
        if o["kind"] not in CRD_KINDS:
            continue
        what = f"{release.name}: {o['kind']} {o['metadata']['name']}"
        check(o["apiVersion"] == "monitoring.coreos.com/v1", f"{what}: monitoring.coreos.com/v1")
        spec = o.get("spec", {})
        selector = spec.get("selector", {}).get("matchLabels", {})
        endpoints = spec.get("endpoints" if o["kind"] == "ServiceMonitor" else "podMetricsEndpoints", [])
        check(bool(selector) and len(endpoints) >= 1, f"{what}: a selector and endpoints")
        for endpoint in endpoints:
            check(endpoint.get("path") == "/metrics", f"{what}: scrapes /metrics")
            check(
                re.fullmatch(r"\d+(ms|s|m|h)", str(endpoint.get("interval", ""))) is not None,
                f"{what}: a Prometheus duration as interval",
            )
        if o["kind"] == "ServiceMonitor":
            labels = service["metadata"]["labels"]
            check(
                all(labels.get(k) == v for k, v in selector.items()),
                f"{what}: selects the nodes' Service",
            )
            ports = {p["name"] for p in service["spec"]["ports"]}
            check(all(e.get("port") in ports for e in endpoints), f"{what}: a named Service port")
        else:
            runner = release.one("Deployment", "runner")
            pod = runner["spec"]["template"]
            check(
                all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items()),
                f"{what}: selects the runner pods",
            )
            ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
            check(all(e.get("port") in ports for e in endpoints), f"{what}: a named pod port")


def strict_schema(schema):
    """A CRD's OpenAPI schema as the API server applies it with strict field validation
    (kubectl's default): an object schema that lists its properties refuses others."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items()}
    if (
        isinstance(out.get("properties"), dict)
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def load_keda_crds() -> dict[str, dict]:
    """kind -> its group and, per version, whether it is served and its schema."""
    crds = {}
    for name in KEDA_CRD_FILES:
        crd = yaml.safe_load((KEDA_DIR / name).read_text())
        check(crd.get("kind") == "CustomResourceDefinition", f"tests/helm/keda/{name} is a CRD")
        spec = crd["spec"]
        crds[spec["names"]["kind"]] = {
            "group": spec["group"],
            "versions": {
                v["name"]: (v.get("served", False), strict_schema(v["schema"]["openAPIV3Schema"]))
                for v in spec["versions"]
            },
        }
    return crds


# OpenAPI's integer formats, which JSON Schema does not know.
OPENAPI_FORMATS = jsonschema.FormatChecker(formats=())


@OPENAPI_FORMATS.checks("int32")
def _int32(value) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@OPENAPI_FORMATS.checks("int64")
def _int64(value) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def validate_keda(release: Release, crds: dict[str, dict]) -> None:
    """Every keda.sh object against its CRD's schema (for the served version it names),
    and its metadata as Kubernetes validates any object's."""
    for o in release.objects:
        if not o["apiVersion"].startswith("keda.sh/"):
            continue
        body = {k: v for k, v in o.items() if not k.startswith("_")}
        what = f"{release.name}: {o['kind']} {o['metadata'].get('name')}"
        group, _, version = o["apiVersion"].partition("/")
        crd = crds.get(o["kind"])
        if not check(crd is not None and crd["group"] == group, f"{what}: a kind of KEDA's CRDs ({o['apiVersion']})"):
            continue
        served, schema = crd["versions"].get(version, (False, None))
        if not check(served, f"{what}: KEDA serves {o['apiVersion']}"):
            continue
        errors = sorted(
            jsonschema.Draft4Validator(schema, format_checker=OPENAPI_FORMATS).iter_errors(body),
            key=lambda e: list(e.absolute_path),
        )
        for e in errors:
            where = "/".join(str(p) for p in e.absolute_path)
            check(False, f"{what} at {where}: {e.message[:300]} (KEDA {KEDA_VERSION} schema)")
        if not errors:
            check(True, "")
        # The API server validates a custom object's metadata as any object's.
        try:
            meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": body["metadata"]}
            kubernetes_validate.validate(meta, KUBERNETES, strict=True)
            check(True, "")
        except kubernetes_validate.ValidationError as e:
            check(False, f"{what}: metadata: {e.message}")
        check(
            re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", o["metadata"]["name"])
            is not None,
            f"{what}: a DNS-1123 name",
        )


def flags(args: list[str]) -> dict[str, str | bool]:
    """`--name value` and bare `--name` (true) of a command line."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[arg] = args[i + 1]
                i += 1
            else:
                out[arg] = True
        i += 1
    return out


def demand_field(answer: dict, location: str):
    """What KEDA's metrics-api scaler reads at `valueLocation` (a GJSON path: fields and
    array indexes joined by dots) of a JSON answer; None if nothing is there."""
    value = answer
    for part in location.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def check_demand_sample() -> None:
    """SAMPLE_DEMAND has the fields the server's answer has (DemandView)."""
    struct = re.search(r"pub struct DemandView \{(.*?)\n\}", DEMAND_WIRE.read_text(), re.S)
    fields = set(re.findall(r"^\s*pub (\w+):", struct.group(1), re.M)) if struct else set()
    check(fields == set(SAMPLE_DEMAND), f"the sample demand answer has DemandView's fields {sorted(fields)}")


def check_dynamic_runners(release: Release, runner_flags: set[str]) -> None:
    """KEDA's ScaledJob polls GET /v1/demand for the labels its runners offer, reads a
    number of the answer, and makes Jobs whose pods are valid and run `baton runner
    --once` against the chart's Service with the registration token as a file."""
    name = release.name
    merged = release.merged["dynamicRunners"]
    jobs, auths = release.all("ScaledJob"), release.all("TriggerAuthentication")
    if not merged["enabled"]:
        check(not jobs and not auths, f"{name}: no KEDA objects unless dynamicRunners.enabled")
        return
    if not check(len(jobs) == 1 and len(auths) == 1, f"{name}: one ScaledJob and one TriggerAuthentication"):
        return
    (scaled,), (auth,) = jobs, auths
    spec = scaled["spec"]
    service = release.one("Service")
    service_name, port = service["metadata"]["name"], service["spec"]["ports"][0]["port"]

    # The Job KEDA makes of jobTargetRef is a valid batch/v1 Job, its pod a valid PodTemplateSpec.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{scaled['metadata']['name']}-x7k2p", "namespace": "baton"},
        "spec": spec["jobTargetRef"],
    }
    try:
        kubernetes_validate.validate(job, KUBERNETES, strict=True)
        check(True, "")
    except kubernetes_validate.ValidationError as e:
        where = "/".join(str(p) for p in e.path)
        check(False, f"{name}: the Job of the ScaledJob (jobTargetRef) at {where}: {e.message}")

    pod = spec["jobTargetRef"]["template"]["spec"]
    check(pod.get("restartPolicy") == "Never", f"{name}: a runner Job's pod is not restarted")
    (container,) = pod["containers"]
    args = container["args"]
    given = flags(args[1:])
    check(args[0] == "runner" and given.get("--once") is True, f"{name}: the Job runs `baton runner --once` ({args})")
    unknown = sorted(set(given) - runner_flags)
    check(not unknown, f"{name}: `baton runner` has no flags {unknown}")
    check(given.get("--capacity") == "1", f"{name}: an on-demand runner has capacity 1")
    check(
        given.get("--server") == f"http://{service_name}:{port}",
        f"{name}: on-demand runners reach the nodes through the Service ({given.get('--server')})",
    )
    runner_labels = str(given.get("--labels", "")).split(",")
    check(runner_labels == merged["labels"], f"{name}: the runners offer dynamicRunners.labels ({runner_labels})")
    runner_queues = str(given["--queues"]).split(",") if "--queues" in given else []
    check(runner_queues == merged["queues"], f"{name}: the runners serve dynamicRunners.queues ({runner_queues})")

    # The registration token: a file from the chart's (or your) Secret, never the environment.
    token_file = str(given.get("--registration-token-file", ""))
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mount = mounts.get(token_file.rsplit("/", 1)[0])
    secret = volumes.get(mount["name"], {}).get("secret", {}) if mount else {}
    check(
        bool(mount and mount.get("readOnly"))
        and secret.get("secretName") == (release.merged["existingSecret"] or "baton")
        and any(i["key"] == "registration-token" and i["path"] == token_file.rsplit("/", 1)[1]
                for i in secret.get("items", [])),
        f"{name}: on-demand runners read the registration token from the Secret, as a mounted file",
    )
    check(
        "BATON_REGISTRATION_TOKEN" not in env_names(release, spec["jobTargetRef"]["template"]),
        f"{name}: the registration token is not in the on-demand runner's environment",
    )
    configmaps = {cm["metadata"]["name"]: cm.get("data") or {} for cm in release.all("ConfigMap")}
    config = {}
    for source in container.get("envFrom", []):
        config.update(configmaps.get(source.get("configMapRef", {}).get("name"), {}))
    empty_dirs = {n for n, v in volumes.items() if "emptyDir" in v}
    for key in ("BATON_RUNNER_STATE_DIR", "BATON_RUNNER_WORK_DIR"):
        path = config.get(key)
        check(mounts.get(path, {}).get("name") in empty_dirs, f"{name}: on-demand {key}={path} is a writable emptyDir")
    check(mounts.get("/tmp", {}).get("name") in empty_dirs, f"{name}: on-demand tasks get a writable /tmp")
    check(
        pod["terminationGracePeriodSeconds"] > int(config.get("BATON_RUNNER_SHUTDOWN_GRACE_S", "30")),
        f"{name}: an on-demand runner's task gets its shutdown grace before the pod is killed",
    )

    # The trigger: GET /v1/demand on the Service, from KEDA's namespace, for those labels.
    triggers = spec["triggers"]
    if not check(len(triggers) == 1 and triggers[0]["type"] == "metrics-api", f"{name}: one metrics-api trigger"):
        return
    trigger = triggers[0]
    meta = trigger["metadata"]
    url = urlsplit(meta.get("url", ""))
    query = parse_qs(url.query, strict_parsing=True) if url.query else {}
    check(url.scheme == "http" and url.path == "/v1/demand", f"{name}: the trigger polls GET /v1/demand ({meta.get('url')})")
    check(
        url.hostname == f"{service_name}.baton.svc" and url.port == port,
        f"{name}: the trigger reaches the Service by its namespaced name, from KEDA's namespace ({url.netloc})",
    )
    asked = query.get("labels", [""])
    check(
        len(asked) == 1 and asked[0].split(",") == runner_labels,
        f"{name}: the demand asked for (labels={asked}) is that of the runners the Jobs start ({runner_labels})",
    )
    asked_queues = query.get("queues", [""])
    check(
        len(asked_queues) == 1 and [q for q in asked_queues[0].split(",") if q] == runner_queues,
        f"{name}: the demand's queues ({asked_queues}) are those the runners serve ({runner_queues})",
    )
    check(set(query) <= {"labels", "queues"}, f"{name}: GET /v1/demand takes labels and queues only ({sorted(query)})")
    check(meta.get("format", "json") == "json", f"{name}: the demand is read as JSON")
    value = demand_field(SAMPLE_DEMAND, meta.get("valueLocation", ""))
    check(
        isinstance(value, (int, float)) and not isinstance(value, bool),
        f"{name}: valueLocation {meta.get('valueLocation')!r} is a number of the demand's answer {SAMPLE_DEMAND}",
    )
    check(float(meta.get("targetValue", "0")) == 1, f"{name}: one Job per waiting task (targetValue 1)")
    check(spec.get("scalingStrategy", {}).get("strategy") == "accurate",
          f"{name}: the accurate strategy (KEDA subtracts the Jobs it started that have not begun)")
    check(spec.get("rollout", {}).get("strategy") == "gradual",
          f"{name}: an upgrade leaves the running Jobs (and their tasks) alone")
    for key in ("pollingInterval", "maxReplicaCount", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        check(spec.get(key) == merged[key], f"{name}: the ScaledJob's {key} is dynamicRunners.{key}")

    # Its bearer token: the TriggerAuthentication it names, from the Secret given.
    check(meta.get("authMode") == "bearer", f"{name}: the trigger authenticates with a bearer token")
    ref = trigger.get("authenticationRef", {})
    check(
        ref.get("name") == auth["metadata"]["name"] and ref.get("kind", "TriggerAuthentication") == "TriggerAuthentication",
        f"{name}: the trigger uses the chart's TriggerAuthentication",
    )
    token = merged["apiTokenSecret"]
    check(
        auth["spec"].get("secretTargetRef") == [{"parameter": "token", "name": token["name"], "key": token["key"]}],
        f"{name}: KEDA's bearer token is dynamicRunners.apiTokenSecret ({auth['spec'].get('secretTargetRef')})",
    )


def dynamic_runners_need_a_token() -> None:
    """Enabled without the Secret KEDA reads its API token from, the chart refuses to render."""
    try:
        with helm.Chart.load(CHART) as chart:
            chart.render({"dynamicRunners": {"enabled": True}}, name="baton", namespace="baton", is_install=True)
        check(False, "dynamicRunners without apiTokenSecret.name refuses to render")
    except helm.HelmRenderError as e:
        check("apiTokenSecret.name" in str(e), f"dynamicRunners without apiTokenSecret.name: {e}")


def check_selectors(release: Release) -> None:
    """Deployments select their own pods; the Service and the PDB select the nodes."""
    for d in release.all("Deployment"):
        selector = d["spec"]["selector"]["matchLabels"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        check(
            all(labels.get(k) == v for k, v in selector.items()),
            f"{release.name}: Deployment {d['metadata']['name']} selects its pods",
        )
    server = release.one("Deployment", "server")
    pod_labels = server["spec"]["template"]["metadata"]["labels"]
    runner = release.one("Deployment", "runner")
    runner_labels = runner["spec"]["template"]["metadata"]["labels"] if runner else {}
    service = release.one("Service")
    pdb = release.one("PodDisruptionBudget")
    for what, selector in [
        ("Service", service["spec"]["selector"]),
        ("PodDisruptionBudget", pdb["spec"]["selector"]["matchLabels"] if pdb else None),
    ]:
        if selector is None:
            continue
        check(
            all(pod_labels.get(k) == v for k, v in selector.items()),
            f"{release.name}: the {what} selects the nodes",
        )
        check(
            not runner_labels or not all(runner_labels.get(k) == v for k, v in selector.items()),
            f"{release.name}: the {what} does not select the runners",
        )
    check(service["spec"].get("sessionAffinity", "None") == "None", f"{release.name}: no stickiness")
    check(
        service["spec"]["ports"][0]["targetPort"] == "http",
        f"{release.name}: the Service targets the nodes' http port",
    )


def check_server(release: Release, uid: int) -> None:
    name = release.name
    server = release.one("Deployment", "server")
    if not check(server is not None, f"{name}: a server Deployment"):
        return
    hpa = release.one("HorizontalPodAutoscaler")
    replicas = server["spec"].get("replicas")
    if hpa:
        check(replicas is None, f"{name}: with an HPA the Deployment leaves replicas to it")
        check(hpa["spec"]["minReplicas"] >= 2, f"{name}: HPA minReplicas >= 2")
        check(
            hpa["spec"]["scaleTargetRef"]["name"] == server["metadata"]["name"],
            f"{name}: the HPA scales the server Deployment",
        )
    else:
        check(replicas is not None and replicas >= 2, f"{name}: server replicas >= 2 ({replicas})")
    check(
        server["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0,
        f"{name}: a rollout adds a node before it drains one",
    )

    pod = server["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    check(
        container["args"][:3] == ["serve", "--listen", "0.0.0.0:8080"],
        f"{name}: baton serve --listen 0.0.0.0:8080 ({container['args']})",
    )
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check(ports.get("http") == 8080, f"{name}: container port 8080 named http")
    def probe(kind: str) -> tuple:
        get = container.get(kind, {}).get("httpGet", {})
        return get.get("path"), get.get("port")

    check(probe("readinessProbe") == ("/readyz", "http"), f"{name}: readiness probe on /readyz")
    check(probe("livenessProbe") == ("/healthz", "http"), f"{name}: liveness probe on /healthz")

    config = release.config("server")
    drain = int(config.get("BATON_DRAIN_GRACE_S", "25"))
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    sleep = pre_stop.get("sleep", {}).get("seconds")
    check(sleep is not None and sleep > 0, f"{name}: a preStop sleep before SIGTERM")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    check(grace > drain, f"{name}: terminationGracePeriodSeconds {grace} > drain grace {drain}")
    check(
        grace >= (sleep or 0) + drain + 1,
        f"{name}: the preStop sleep ({sleep}) and the drain ({drain}) fit in {grace} s",
    )

    env = {e["name"]: e for e in container.get("env", [])}
    check(
        "BATON_NODE_ID" not in env_names(release, server["spec"]["template"]),
        f"{name}: node ids stay random per start (a restarted container is a new node)",
    )
    migrate = release.one("Job", "migrate")
    if release.merged["migration"]["enabled"]:
        check(migrate is not None, f"{name}: a migration Job")
        check(config.get("BATON_NO_MIGRATE") == "true", f"{name}: nodes start with BATON_NO_MIGRATE=true")
    else:
        check(migrate is None, f"{name}: no migration Job when disabled")
        check("BATON_NO_MIGRATE" not in config, f"{name}: nodes migrate at start when the Job is off")
    if migrate:
        hooks = migrate["metadata"].get("annotations", {})
        check(
            set(hooks.get("helm.sh/hook", "").split(",")) == {"pre-install", "pre-upgrade"},
            f"{name}: the migration Job is a pre-install,pre-upgrade hook",
        )
        check(migrate["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"], f"{name}: baton migrate")

    sentinels = release.merged["redis"]["sentinel"]["addresses"]
    if sentinels:
        check(config.get("BATON_REDIS_SENTINEL") == ",".join(sentinels), f"{name}: BATON_REDIS_SENTINEL")
        check("BATON_REDIS_SENTINEL_MASTER" in config, f"{name}: BATON_REDIS_SENTINEL_MASTER")
        check("BATON_REDIS_URL" not in env, f"{name}: no BATON_REDIS_URL with Sentinel")
    else:
        check("BATON_REDIS_URL" in env, f"{name}: BATON_REDIS_URL from the Secret")
        check("BATON_REDIS_SENTINEL" not in config, f"{name}: no Sentinel unless asked")

    otlp = release.merged["otlp"]
    if otlp["enabled"]:
        check(config.get("OTEL_EXPORTER_OTLP_ENDPOINT") == otlp["endpoint"], f"{name}: OTLP endpoint")
        protocol = config.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        check(protocol in ("grpc", "http/protobuf", "http/json"), f"{name}: OTLP protocol")
        ratio = float(config.get("OTEL_TRACES_SAMPLER_ARG", "-1"))
        check(0 <= ratio <= 1, f"{name}: OTEL_TRACES_SAMPLER_ARG a ratio")
        check(bool(config.get("OTEL_SERVICE_NAME")), f"{name}: OTEL_SERVICE_NAME")
    else:
        check(not any(k.startswith("OTEL_") for k in config), f"{name}: no OTLP settings when off")


def check_store_tls(release: Release) -> None:
    """TLS to the stores as the values ask: Postgres's sslmode (libpq's PGSSLMODE, read by
    the nodes and the migration Job alike) and CA file, Redis's TLS and CA file, each CA a
    read-only mount of the Secret named, at the path the setting gives; the Redis passwords
    from the Secret, never from the ConfigMap."""
    merged = release.merged
    pg, redis = merged["postgres"], merged["redis"]
    for what, template in pod_templates(release):
        pod = template["spec"]
        (container,) = pod["containers"]
        where = f"{release.name}: {what}"
        configmaps = {cm["metadata"]["name"]: cm.get("data") or {} for cm in release.all("ConfigMap")}
        values = {e["name"]: e.get("value") for e in container.get("env", []) if "value" in e}
        for source in container.get("envFrom", []):
            values.update(configmaps.get(source.get("configMapRef", {}).get("name"), {}))
        secrets = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}

        def mounted_from(path: str | None, secret: str) -> bool:
            mount = mounts.get(path.rsplit("/", 1)[0]) if path else None
            return bool(mount and mount.get("readOnly") and secrets.get(mount["name"]) == secret)

        command = container["args"][0]
        if command in ("serve", "migrate"):
            check(values.get("PGSSLMODE") == (pg["sslMode"] or None), f"{where}: PGSSLMODE {pg['sslMode']!r}")
            if pg["caSecret"]:
                check(mounted_from(values.get("PGSSLROOTCERT"), pg["caSecret"]),
                      f"{where}: PGSSLROOTCERT is ca.crt of the Secret {pg['caSecret']}, mounted read-only")
            else:
                check("PGSSLROOTCERT" not in values, f"{where}: no PGSSLROOTCERT without postgres.caSecret")
        if command != "serve":
            continue
        check((values.get("BATON_REDIS_TLS") == "true") == redis["tls"]["enabled"], f"{where}: BATON_REDIS_TLS")
        if redis["tls"]["caSecret"]:
            check(mounted_from(values.get("BATON_REDIS_CA_FILE"), redis["tls"]["caSecret"]),
                  f"{where}: BATON_REDIS_CA_FILE is ca.crt of the Secret {redis['tls']['caSecret']}, mounted read-only")
        check(values.get("BATON_REDIS_USERNAME") == (redis["username"] or None), f"{where}: BATON_REDIS_USERNAME")
        for name in ("BATON_REDIS_PASSWORD", "BATON_REDIS_SENTINEL_PASSWORD"):
            check(name not in values, f"{where}: {name} is not in plain sight")
        from_secret = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"]
                       for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
        check(from_secret.get("BATON_REDIS_PASSWORD") == "redis-password", f"{where}: the Redis password from the Secret")
        if redis["sentinel"]["addresses"]:
            check(from_secret.get("BATON_REDIS_SENTINEL_PASSWORD") == "redis-sentinel-password",
                  f"{where}: the sentinels' password from the Secret")


def check_security(release: Release, uid: int) -> None:
    for what, template in pod_templates(release):
        pod = template["spec"]
        ctx = pod.get("securityContext", {})
        where = f"{release.name}: {what}"
        check(ctx.get("runAsNonRoot") is True, f"{where}: runAsNonRoot")
        check(ctx.get("runAsUser") == uid, f"{where}: runAsUser {ctx.get('runAsUser')} is the image's uid {uid}")
        check(ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: seccomp RuntimeDefault")
        check(pod.get("automountServiceAccountToken") is False, f"{where}: no API token mounted")
        for c in pod["containers"]:
            sc = c.get("securityContext", {})
            check(sc.get("readOnlyRootFilesystem") is True, f"{where}: read-only root file system")
            check(sc.get("allowPrivilegeEscalation") is False, f"{where}: no privilege escalation")
            check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: drops ALL capabilities")


def check_runner(release: Release) -> None:
    runner = release.one("Deployment", "runner")
    if not check(runner is not None, f"{release.name}: a runner Deployment"):
        return
    pod = runner["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    token_file = "/var/run/secrets/baton/registration-token"
    check(
        container["args"] == ["runner", "--registration-token-file", token_file],
        f"{release.name}: baton runner, reading its registration token from a file",
    )
    config = release.config("runner")
    service = release.one("Service")
    check(
        config.get("BATON_SERVER") == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}",
        f"{release.name}: runners reach the nodes through the Service ({config.get('BATON_SERVER')})",
    )
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    for key in ("BATON_RUNNER_STATE_DIR", "BATON_RUNNER_WORK_DIR"):
        path = config.get(key)
        check(mounts.get(path) in empty_dirs, f"{release.name}: {key}={path} is a writable emptyDir")
    check(mounts.get("/tmp") in empty_dirs, f"{release.name}: tasks get a writable /tmp")
    env = {e["name"]: e for e in container.get("env", [])}
    check(
        "BATON_REGISTRATION_TOKEN" not in env,
        f"{release.name}: the registration token is not in the runner's environment",
    )
    secret_volumes = {
        v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v
    }
    token_mount = mounts.get(token_file.rsplit("/", 1)[0])
    check(
        token_mount in secret_volumes
        and any(i["key"] == "registration-token" and i["path"] == "registration-token"
                for i in secret_volumes[token_mount].get("items", [])),
        f"{release.name}: runners get the registration token as a mounted file",
    )
    check(
        pod["terminationGracePeriodSeconds"] > int(config["BATON_RUNNER_SHUTDOWN_GRACE_S"]),
        f"{release.name}: running tasks get their shutdown grace before the pod is killed",
    )
    if "BATON_RUNNER_HEALTHZ_LISTEN" in config:
        port = int(config["BATON_RUNNER_HEALTHZ_LISTEN"].rsplit(":", 1)[1])
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        check(ports.get("healthz") == port, f"{release.name}: the healthz port is the one listened on")
        check(
            container.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz",
            f"{release.name}: runner liveness on /healthz",
        )


def check_secrets(release: Release) -> None:
    existing = release.merged["existingSecret"]
    secrets = release.all("Secret")
    expected_name = existing or "baton"
    if existing:
        check(not secrets, f"{release.name}: no Secret when existingSecret is set")
    else:
        check(len(secrets) == 1, f"{release.name}: one Secret")
    keys = set()
    for s in secrets:
        keys |= set(s.get("stringData", {})) | set(s.get("data", {}))
        for key in ("api-token", "registration-token"):
            check(len(s.get("stringData", {}).get(key, "")) >= 32, f"{release.name}: a generated {key}")
    for what, template in pod_templates(release):
        for c in template["spec"]["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if not ref:
                    continue
                check(ref["name"] == expected_name, f"{release.name}: {what} {e['name']} from {expected_name}")
                # An optional key (a Redis password) is read only where the Secret has it.
                if secrets and not ref.get("optional"):
                    check(ref["key"] in keys, f"{release.name}: {what} {e['name']}: key {ref['key']} exists")
    if secrets and release.one("Job", "migrate"):
        hook = secrets[0]["metadata"].get("annotations", {}).get("helm.sh/hook-weight")
        job_hook = release.one("Job", "migrate")["metadata"]["annotations"]["helm.sh/hook-weight"]
        check(
            hook is not None and int(hook) < int(job_hook),
            f"{release.name}: the Secret exists before the migration Job runs",
        )


def check_settings_exist(release: Release, known: dict[str, set[str]]) -> None:
    """Every BATON_*/OTEL_* variable given to a command is one that command reads."""
    for what, template in pod_templates(release):
        command = template["spec"]["containers"][0]["args"][0]
        names = {n for n in env_names(release, template) if n.startswith(("BATON_", "OTEL_"))}
        unknown = sorted(names - known[command] - READ_DIRECTLY)
        check(not unknown, f"{release.name}: {what}: `baton {command}` reads no {unknown}")



def known_settings(baton: str) -> dict[str, set[str]]:
    known = {}
    for command in ("serve", "runner", "migrate"):
        out = subprocess.run([baton, command, "--help"], capture_output=True, text=True, check=True).stdout
        known[command] = set(re.findall(r"\[env: ([A-Z0-9_]+)", out))
        check("BATON_LOG_FORMAT" in known[command], f"`baton {command} --help` lists its variables")
    return known


def runner_flags(baton: str) -> set[str]:
    out = subprocess.run([baton, "runner", "--help"], capture_output=True, text=True, check=True).stdout
    found = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", out))
    check("--once" in found and "--labels" in found, "`baton runner --help` lists its flags")
    return found


def image_uid() -> int:
    match = re.search(r"useradd[^\n]*--uid (\d+)", DOCKERFILE.read_text())
    check(match is not None, "deploy/Dockerfile creates a user with a fixed uid")
    user = re.search(r"^USER (\d+)", DOCKERFILE.read_text(), re.M)
    check(user is not None and match is not None and user.group(1) == match.group(1), "the image runs as that uid")
    return int(match.group(1)) if match else -1


def check_dashboard() -> None:
    dash = json.loads(DASHBOARD.read_text())
    check(dash.get("schemaVersion", 0) >= 36, "dashboard: a current schemaVersion")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    check(
        ds.get("type") == "datasource" and ds.get("query") == "prometheus",
        "dashboard: a ${datasource} Prometheus variable",
    )
    used = set()
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    check(len(panels) >= 10, "dashboard: panels")
    for panel in panels:
        check(
            panel.get("datasource", {}).get("uid") == "${datasource}",
            f"dashboard: {panel['title']} uses ${{datasource}}",
        )
        check(bool(panel.get("targets")), f"dashboard: {panel['title']} has queries")
        for target in panel.get("targets", []):
            expr = target["expr"]
            check(expr.count("(") == expr.count(")"), f"dashboard: balanced parentheses in {expr}")
            for name in re.findall(r"\bbaton_[a-z0-9_]+", expr):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if base in HISTOGRAMS:
                    check(name != base, f"dashboard: histogram {base} is read through its series ({expr})")
                    used.add(base)
                else:
                    check(name in METRICS, f"dashboard: {panel['title']} uses unknown metric {name}")
                    used.add(name)
            for q in re.findall(r"histogram_quantile\(([^,]+),[^\n]*?rate\((baton_[a-z_]+)", expr):
                check(q[1].endswith("_bucket"), f"dashboard: histogram_quantile over _bucket rates ({expr})")
    check(used == METRICS, f"dashboard: every metric shown; missing {sorted(METRICS - used)}")
    quantiles = json.dumps(dash)
    check("histogram_quantile(0.5" in quantiles and "histogram_quantile(0.99" in quantiles, "dashboard: p50 and p99")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baton", default=str(ROOT / "target/debug/baton"), help="the baton binary")
    args = parser.parse_args()

    production = helm.values_from_yaml(PRODUCTION.read_text())
    variants = {
        "defaults": {},
        "production": production,
        "no migration Job": {"migration": {"enabled": False}},
        "existing secret, no runners": {"existingSecret": "mine", "runner": {"enabled": False}},
        # KEDA's ScaledJob, with its defaults but the Secret it must be given.
        "runners on demand": {"dynamicRunners": {"enabled": True, "apiTokenSecret": {"name": "baton-keda"}}},
        # And with every one of its values, beside runners from an existing Secret.
        "runners on demand, every option": {
            "existingSecret": "mine",
            "runner": {"image": {"repository": "example.com/runner", "tag": "1"}},
            "otlp": {"enabled": True, "endpoint": "http://collector:4317"},
            "dynamicRunners": {
                "enabled": True,
                "labels": ["ephemeral", "os=linux", "example.com/gpu"],
                "queues": ["build", "test"],
                "apiTokenSecret": {"name": "keda-reader", "key": "baton-token"},
                "pollingInterval": 5,
                "maxReplicaCount": 50,
                "successfulJobsHistoryLimit": 0,
                "failedJobsHistoryLimit": 20,
                "backoffLimit": 1,
                "activeDeadlineSeconds": 7200,
                "workDirSizeLimit": "20Gi",
                "env": {"BATON_RUNNER_WAIT_S": "20", "BATON_RUNNER_MIN_FREE_DISK_MB": 1024},
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
                "podAnnotations": {"example.com/team": "ci"},
                "podLabels": {"team": "ci"},
                "nodeSelector": {"pool": "ephemeral"},
                "tolerations": [{"key": "ephemeral", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ephemeral"]}]}
                            ]
                        }
                    }
                },
            },
        },
        "stores over TLS, own Secret": {
            "secrets": {"redisUrl": "rediss+cluster://redis-0:6379,redis-1:6379", "redisPassword": "pw"},
            "postgres": {"sslMode": "verify-ca", "caSecret": "pg-ca"},
            "redis": {"username": "baton", "tls": {"enabled": True, "caSecret": "redis-ca"}},
        },
        "every option": {
            "imagePullSecrets": [{"name": "registry"}],
            "logFormat": "human",
            "redis": {"prefix": "{ci}:"},
            "otlp": {
                "enabled": True,
                "endpoint": "http://collector:4318",
                "protocol": "http/protobuf",
                "samplerRatio": 0.5,
            },
            "server": {
                "env": {"BATON_ACK_TIMEOUT_S": 45, "BATON_RUNNER_LOST_AFTER_S": "300"},
                "nodeSelector": {"pool": "baton"},
                "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 1,
                                "preference": {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["baton"]}
                                    ]
                                },
                            }
                        ]
                    }
                },
                "podAnnotations": {"example.com/team": "ci"},
                "podLabels": {"team": "ci"},
                "spreadAcrossNodes": False,
                "service": {"type": "LoadBalancer", "annotations": {"example.com/lb": "internal"}},
                "pdb": {"enabled": False},
            },
            "runner": {
                "image": {"repository": "example.com/runner", "tag": "1"},
                "queues": ["build", "test"],
                "labels": ["linux"],
                "healthz": {"enabled": False},
                "nodeSelector": {"pool": "runners"},
                "env": {"BATON_RUNNER_WAIT_S": "20"},
            },
        },
    }
    for name, values in variants.items():
        lint(name, values)
    schema_refuses_typos()
    dynamic_runners_need_a_token()
    check_demand_sample()

    uid = image_uid()
    known = known_settings(args.baton)
    flags_of_runner = runner_flags(args.baton)
    keda_crds = load_keda_crds()
    releases = {name: Release(name, copy.deepcopy(values)) for name, values in variants.items()}
    for release in releases.values():
        checks = [
            (validate_kubernetes, ()),
            (validate_keda, (keda_crds,)),
            (check_crd_shapes, ()),
            (check_dynamic_runners, (flags_of_runner,)),
            (check_selectors, ()),
            (check_server, (uid,)),
            (check_security, (uid,)),
            (check_store_tls, ()),
            (check_secrets, ()),
            (check_settings_exist, (known,)),
        ]
        if release.merged["runner"]["enabled"]:
            checks.append((check_runner, ()))
        for run, extra in checks:
            # An object missing a field the check reads is a failure, not the end of the run.
            try:
                run(release, *extra)
            except (KeyError, TypeError, IndexError, ValueError) as e:
                check(False, f"{release.name}: {run.__name__}: missing or malformed {e!r}")
        check(bool(release.notes.strip()), f"{release.name}: NOTES.txt renders")
        if not release.merged["runner"]["enabled"]:
            check(release.one("Deployment", "runner") is None, f"{release.name}: no runners when disabled")

    defaults, prod = releases["defaults"], releases["production"]
    for kind in ("HorizontalPodAutoscaler", "ServiceMonitor", "PodMonitor"):
        check(not defaults.all(kind), f"defaults: no {kind}")
        check(len(prod.all(kind)) == 1, f"production: a {kind}")
    check(defaults.one("PodDisruptionBudget") is not None, "defaults: a PodDisruptionBudget")
    check(prod.one("PodDisruptionBudget") is not None, "production: a PodDisruptionBudget")
    check(prod.merged["server"]["replicas"] >= 3, "production: 3 nodes")
    prod_server = prod.one("Deployment", "server")["spec"]["template"]["spec"]
    check(bool(prod_server["containers"][0].get("resources")), "production: resources set")
    check(not releases["existing secret, no runners"].all("Secret"), "existingSecret: no Secret rendered")
    # Production verifies both stores' certificates and names, and is told so by the chart.
    check(prod.merged["postgres"]["sslMode"] == "verify-full", "production: Postgres sslmode verify-full")
    check(bool(prod.merged["postgres"]["caSecret"]), "production: the Postgres CA from a Secret")
    check(prod.merged["redis"]["tls"]["enabled"] and bool(prod.merged["redis"]["tls"]["caSecret"]),
          "production: Redis over TLS, its CA from a Secret")
    own = releases["stores over TLS, own Secret"].all("Secret")[0]["stringData"]
    check(own.get("redis-password") == "pw" and "redis-sentinel-password" not in own,
          "the chart's Secret holds the Redis passwords given, and only those")

    check_dashboard()

    kinds = sorted({o["kind"] for r in releases.values() for o in r.objects})
    print(f"rendered {len(releases)} value sets; kinds: {', '.join(kinds)}")
    crds = ", ".join(sorted(CRD_KINDS))
    keda = ", ".join(sorted(keda_crds))
    print(f"validated against Kubernetes {KUBERNETES} (strict); against KEDA {KEDA_VERSION}'s CRD schemas "
          f"(strict): {keda}; by shape only: {crds} (CRDs); no cluster")
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"{passed} checks passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
