#!/usr/bin/env python3
"""Lints, renders and validates the sediment Helm chart offline; exits non-zero on any error.

What it checks, for each scenario (the default values; helm/ci/all-options.yaml; the same with
keda.enabled=false, which takes the HPA path):
  1. `helm lint --strict` and `helm template` through helm-python-sdk (Helm's Go SDK, no helm
     binary): a chart that does not lint or render fails.
  2. Every rendered manifest against the Kubernetes OpenAPI schemas (kubernetes-validate,
     strict: unknown fields are errors) for the oldest and newest Kubernetes the chart supports.
     The custom resources (KEDA ScaledObject and TriggerAuthentication, Prometheus Operator
     ServiceMonitor and PrometheusRule) against the models generated from their CRDs
     (cloudcoil-models-keda, cloudcoil-models-prometheus-operator; strict types, and any field
     the CRD does not know is an error). A kind with no schema at all is an error, not a skip.
  3. How the pieces fit: selectors and scale targets name what the chart renders, probes use
     declared ports, listen addresses match container ports, grace periods exceed the drain
     deadline, KEDA reads the worker's real queue ({prefix}.{kind}), autoscaled Deployments
     leave `replicas` unset, and (defaults) each worker's binary is a [[bin]] of the workspace.
Once per run:
  4. The Grafana dashboard and the alert rules: every PromQL expression parses (promql-parser)
     and every sediment_* metric it reads is defined in shared/src/metrics.rs.
  5. helm/README.md documents every key of values.yaml, and names no key that does not exist.
  6. A self-test: broken inputs (replicas: "three", a misspelt field, a KEDA field of the wrong
     type, a grace period under the drain deadline, an unknown metric, bad PromQL, an
     undocumented value) must each be rejected, so the checks above are known to bite.

Usage: validate.py [--no-self-test] [-v]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import helm_python as helm
import kubernetes_validate
import kubernetes_validate.utils as kv_utils
import promql_parser
import pydantic
import yaml

HERE = Path(__file__).resolve().parent
HELM_DIR = HERE.parent
CHART = HELM_DIR / "sediment"
REPO = HELM_DIR.parent
README = HELM_DIR / "README.md"
DASHBOARD = CHART / "dashboards" / "sediment.json"
METRICS_RS = REPO / "shared" / "src" / "metrics.rs"
WORKERS_CARGO = REPO / "workers" / "Cargo.toml"
API_CARGO = REPO / "api" / "Cargo.toml"

RELEASE = "sediment"
NAMESPACE = "sediment"
# The chart's kubeVersion floor and the newest schemas kubernetes-validate bundles.
KUBE_VERSIONS = ("1.25.0", kv_utils.latest_version())

# Custom resources: (apiVersion, kind) -> (module, class) of the model generated from the CRD.
CRD_MODELS = {
    ("keda.sh/v1alpha1", "ScaledObject"): ("cloudcoil.models.keda.v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"): ("cloudcoil.models.keda.v1alpha1", "TriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("cloudcoil.models.prometheus_operator.v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"): ("cloudcoil.models.prometheus_operator.v1", "PrometheusRule"),
}

# kubernetes-validate reads its (large) schema files on every call; read each once.
kv_utils.schema_contents = functools.lru_cache(maxsize=None)(kv_utils.schema_contents)


class Errors(list):
    """Error messages of one check; empty means it passed."""

    def add(self, where: str, message: str) -> None:
        self.append(f"{where}: {message}")


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


# --- 1. lint and render ------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_stderr():
    """Silences file descriptor 2. In lint mode Helm turns a template's `fail` into a log line
    on stderr rather than an error; the render that follows reports it as an error instead."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def lint(values: dict, errors: Errors, where: str) -> None:
    with quiet_stderr():
        report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
    for message in report.get("messages", []):
        # Severity: 1 info, 2 warning, 3 error; --strict makes warnings fail too.
        if message["severity"] >= 2:
            errors.add(f"{where}: lint {message['path']}", message["error"])
    for error in report.get("errors", []):
        errors.add(f"{where}: lint", error)


def render(values: dict, errors: Errors, where: str) -> dict[str, list[dict]]:
    """Template path -> the manifests it rendered (empty documents dropped)."""
    try:
        chart = helm.Chart.load(str(CHART))
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    except helm.HelmError as e:
        errors.add(f"{where}: render", str(e))
        return {}
    out: dict[str, list[dict]] = {}
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as e:
            errors.add(f"{where}: {path}", f"not YAML: {e}")
            continue
        for doc in docs:
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                errors.add(f"{where}: {path}", "a document that is not a Kubernetes object")
        out[path] = [d for d in docs if isinstance(d, dict)]
    return out


# --- 2. schemas ------------------------------------------------------------------------------------


def name_of(doc: dict) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def validate_builtin(doc: dict, errors: Errors, where: str) -> None:
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(root)"
            errors.add(f"{where}: {name_of(doc)}", f"Kubernetes {e.version} schema: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            errors.add(f"{where}: {name_of(doc)}", f"no schema for {doc['apiVersion']} {doc['kind']} in Kubernetes {version}")


def unknown_fields(given: Any, kept: Any, path: str) -> list[str]:
    """Paths present in `given` but dropped by the model: fields the CRD does not define."""
    found = []
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            sub = f"{path}.{key}" if path else key
            if key not in kept:
                found.append(sub)
            else:
                found += unknown_fields(value, kept[key], sub)
    elif isinstance(given, list) and isinstance(kept, list):
        for i, (g, k) in enumerate(zip(given, kept)):
            found += unknown_fields(g, k, f"{path}[{i}]")
    return found


@functools.lru_cache(maxsize=None)
def crd_model(api_version: str, kind: str) -> type[pydantic.BaseModel]:
    module, cls = CRD_MODELS[(api_version, kind)]
    return getattr(__import__(module, fromlist=[cls]), cls)


def validate_custom(doc: dict, errors: Errors, where: str) -> None:
    model = crd_model(doc["apiVersion"], doc["kind"])
    try:
        obj = model.model_validate(doc, strict=True)
    except pydantic.ValidationError as e:
        for err in e.errors():
            path = ".".join(str(p) for p in err["loc"])
            errors.add(f"{where}: {name_of(doc)}", f"CRD schema: {path}: {err['msg']}")
        return
    kept = obj.model_dump(mode="json", by_alias=True, exclude_unset=True)
    for path in unknown_fields(doc, kept, ""):
        errors.add(f"{where}: {name_of(doc)}", f"CRD schema: {path}: not a field of {doc['kind']}")


def validate_schemas(manifests: dict[str, list[dict]], errors: Errors, where: str) -> int:
    count = 0
    for path, docs in manifests.items():
        for doc in docs:
            count += 1
            if (doc.get("apiVersion"), doc.get("kind")) in CRD_MODELS:
                validate_custom(doc, errors, f"{where}: {path}")
            else:
                validate_builtin(doc, errors, f"{where}: {path}")
    return count


# --- 3. how the pieces fit -------------------------------------------------------------------


def cargo_bins(path: Path) -> set[str]:
    """Names of the [[bin]] targets of a Cargo manifest."""
    return set(re.findall(r'^\[\[bin\]\]\s*\n\s*name\s*=\s*"([^"]+)"', path.read_text(), re.M)) if path.exists() else set()


def matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_wiring(manifests: dict[str, list[dict]], values: dict, errors: Errors, where: str, defaults: bool) -> None:
    docs = [d for ds in manifests.values() for d in ds]
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    seen = set()
    for d in docs:
        key = (d["kind"], d["metadata"]["name"])
        if key in seen:
            errors.add(where, f"two {d['kind']}s named {key[1]}")
        seen.add(key)
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", key[1]) or (
            d["kind"] in ("Service", "Deployment") and len(key[1]) > 63
        ):
            errors.add(where, f"{d['kind']} name {key[1]!r} is not a valid DNS name")

    config_maps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    secrets = {d["metadata"]["name"] for d in by_kind.get("Secret", [])}
    external_secrets = {values.get("existingSecret")} | {
        (e.get("secretRef") or {}).get("name") for e in values.get("extraEnvFrom") or []
    }
    external_maps = {(e.get("configMapRef") or {}).get("name") for e in values.get("extraEnvFrom") or []}
    config = next((c["data"] for c in config_maps.values() if "SEDIMENT_SHUTDOWN_DEADLINE_MS" in (c.get("data") or {})), None)
    if config is None:
        errors.add(where, "no ConfigMap carries SEDIMENT_SHUTDOWN_DEADLINE_MS")
        return
    deadline_ms = int(config["SEDIMENT_SHUTDOWN_DEADLINE_MS"])
    prefix = config.get("SEDIMENT_AMQP_PREFIX", "sediment")

    deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
    workspace_bins = cargo_bins(WORKERS_CARGO) | cargo_bins(API_CARGO)
    for name, dep in deployments.items():
        at = f"{where}: Deployment/{name}"
        pod = dep["spec"]["template"]
        if not matches(dep["spec"]["selector"]["matchLabels"], pod["metadata"].get("labels", {})):
            errors.add(at, "selector does not match its own pod labels")
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        if grace * 1000 <= deadline_ms:
            errors.add(at, f"terminationGracePeriodSeconds {grace} s does not exceed the {deadline_ms} ms drain deadline")
        for c in pod["spec"]["containers"]:
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            for probe in ("livenessProbe", "readinessProbe"):
                if probe not in c:
                    errors.add(at, f"container {c['name']} has no {probe}")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                port = (c.get(probe, {}).get("httpGet") or {}).get("port")
                if isinstance(port, str) and port not in ports:
                    errors.add(at, f"{probe} uses port {port!r}, which the container does not declare")
            listen = env.get("SEDIMENT_LISTEN") or env.get("SEDIMENT_WORKER_HEALTH_LISTEN")
            if not listen or not listen.startswith("0.0.0.0:") or int(listen.rsplit(":", 1)[1]) not in ports.values():
                errors.add(at, f"listen address {listen!r} is not 0.0.0.0 on a declared container port")
            for source in c.get("envFrom", []):
                if "configMapRef" in source and source["configMapRef"]["name"] not in set(config_maps) | external_maps:
                    errors.add(at, f"envFrom ConfigMap {source['configMapRef']['name']} is neither rendered nor given")
                if "secretRef" in source and source["secretRef"]["name"] not in secrets | external_secrets:
                    errors.add(at, f"envFrom Secret {source['secretRef']['name']} is neither rendered nor given")
            if defaults and c["command"][0] not in workspace_bins:
                errors.add(at, f"runs {c['command'][0]!r}, which is no [[bin]] of api/ or workers/")

    # Workers: the queue KEDA reads must be the one the worker consumes.
    worker_kind = {n: d["metadata"]["labels"].get("sediment.io/worker") for n, d in deployments.items()}
    autoscaled: dict[str, str] = {}
    for so in by_kind.get("ScaledObject", []):
        target = so["spec"]["scaleTargetRef"]["name"]
        at = f"{where}: ScaledObject/{so['metadata']['name']}"
        if target not in deployments:
            errors.add(at, f"scales {target}, which is not rendered")
            continue
        for trigger in so["spec"]["triggers"]:
            want = f"{prefix}.{worker_kind[target]}"
            if trigger["type"] == "rabbitmq" and trigger["metadata"].get("queueName") != want:
                errors.add(at, f"reads queue {trigger['metadata'].get('queueName')!r}, the worker consumes {want!r}")
        autoscaled.setdefault(target, at)
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        target = hpa["spec"]["scaleTargetRef"]["name"]
        at = f"{where}: HorizontalPodAutoscaler/{hpa['metadata']['name']}"
        if target not in deployments:
            errors.add(at, f"scales {target}, which is not rendered")
        elif target in autoscaled:
            errors.add(at, f"{target} is also scaled by {autoscaled[target]}")
        autoscaled.setdefault(target, at)
    for target in autoscaled:
        if target in deployments and "replicas" in deployments[target]["spec"]:
            errors.add(f"{where}: Deployment/{target}", "sets replicas although an autoscaler owns them")

    pod_labels = {n: d["spec"]["template"]["metadata"].get("labels", {}) for n, d in deployments.items()}
    for pdb in by_kind.get("PodDisruptionBudget", []):
        hits = [n for n, labels in pod_labels.items() if matches(pdb["spec"]["selector"]["matchLabels"], labels)]
        if len(hits) != 1:
            errors.add(f"{where}: PodDisruptionBudget/{pdb['metadata']['name']}", f"selects {len(hits)} Deployments, not 1")
    services = by_kind.get("Service", [])
    for svc in services:
        hits = [n for n, labels in pod_labels.items() if matches(svc["spec"]["selector"], labels)]
        if not hits:
            errors.add(f"{where}: Service/{svc['metadata']['name']}", "selects no pods")
    for sm in by_kind.get("ServiceMonitor", []):
        at = f"{where}: ServiceMonitor/{sm['metadata']['name']}"
        selected = [s for s in services if matches(sm["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
        if not selected:
            errors.add(at, "selects no Service")
        for endpoint in sm["spec"]["endpoints"]:
            for s in selected:
                if endpoint["port"] not in {p.get("name") for p in s["spec"]["ports"]}:
                    errors.add(at, f"scrapes port {endpoint['port']!r}, which Service/{s['metadata']['name']} lacks")

    if values.get("migrations", {}).get("enabled", True):
        jobs = [j for j in by_kind.get("Job", []) if "migrate" in j["spec"]["template"]["spec"]["containers"][0]["command"]]
        if len(jobs) != 1:
            errors.add(where, f"{len(jobs)} migration Jobs rendered, not 1")
        for job in jobs:
            hooks = set(job["metadata"].get("annotations", {}).get("helm.sh/hook", "").split(","))
            if hooks != {"pre-install", "pre-upgrade"}:
                errors.add(f"{where}: Job/{job['metadata']['name']}", f"hooks are {sorted(hooks)}, not pre-install,pre-upgrade")


# --- 4. dashboard and alerts -----------------------------------------------------------------


def defined_metrics() -> set[str]:
    return set(re.findall(r'pub const \w+: &str = "(sediment_[a-z0-9_]+)"', METRICS_RS.read_text()))


GRAFANA_VARS = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
}


def check_promql(expr: str, known: set[str], errors: Errors, where: str) -> set[str]:
    """Parses `expr` (Grafana variables substituted) and checks the sediment_* names it reads."""
    text = expr
    for var, value in GRAFANA_VARS.items():
        text = text.replace(var, value)
    text = re.sub(r"\$\{?(\w+)\}?", "x", text)
    try:
        promql_parser.parse(text)
    except (ValueError, Exception) as e:  # the parser raises ValueError; be safe with the binding
        errors.add(where, f"PromQL does not parse ({e}): {expr}")
    used = set()
    for name in re.findall(r"\bsediment_[a-z0-9_]+", text):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in known and base not in known:
            errors.add(where, f"metric {name} is not defined in shared/src/metrics.rs")
        used.add(name if name in known else base)
    return used


def check_dashboard(path: Path, known: set[str], errors: Errors) -> set[str]:
    where = f"dashboard {path.relative_to(REPO)}"
    sys.path.insert(0, str(HERE))
    sys.dont_write_bytecode = True  # no __pycache__ in the work tree
    import dashboard  # helm/ci/dashboard.py, the dashboard's source

    if not path.exists() or path.read_text() != dashboard.render():
        errors.add(where, "is not what helm/ci/dashboard.py writes: edit that, run it, commit both")
    try:
        dashboard = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        errors.add(where, f"not JSON: {e}")
        return set()
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in dashboard:
            errors.add(where, f"no {key!r}")
    used: set[str] = set()
    ids = set()

    def panels(items: list[dict]):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        at = f"{where}: panel {panel.get('title')!r}"
        if panel.get("id") in ids:
            errors.add(at, f"duplicate id {panel.get('id')}")
        ids.add(panel.get("id"))
        if panel.get("type") == "row":
            continue
        targets = panel.get("targets") or []
        if not targets:
            errors.add(at, "no queries")
        for t in targets:
            if not t.get("expr"):
                errors.add(at, "a query without expr")
                continue
            used |= check_promql(t["expr"], known, errors, at)
    return used


def check_rules(manifests: dict[str, list[dict]], known: set[str], errors: Errors, where: str) -> tuple[int, set[str]]:
    count, used = 0, set()
    for docs in manifests.values():
        for doc in docs:
            if doc["kind"] != "PrometheusRule":
                continue
            for group in doc["spec"]["groups"]:
                for rule in group["rules"]:
                    count += 1
                    at = f"{where}: PrometheusRule {group['name']}/{rule.get('alert') or rule.get('record')}"
                    used |= check_promql(rule["expr"], known, errors, at)
                    if "alert" in rule:
                        if rule.get("labels", {}).get("severity") not in ("info", "warning", "critical"):
                            errors.add(at, "severity label is not info, warning or critical")
                        if not rule.get("annotations", {}).get("summary"):
                            errors.add(at, "no summary annotation")
    return count, used


# --- 5. values documentation -------------------------------------------------------------------


def value_paths(values: Any, prefix: str = "") -> list[str]:
    """Leaf paths of values.yaml; an empty map or a list is a leaf."""
    if isinstance(values, dict) and values:
        out = []
        for key, value in values.items():
            out += value_paths(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    return [prefix]


def readme_keys(text: str) -> set[str]:
    """Keys in the first column of the table under the README's `## Values`: `a.b`, `a.<kind>.c`."""
    section = re.search(r"^## Values\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    keys = set()
    for line in (section.group(1) if section else "").splitlines():
        m = re.match(r"^\|\s*((?:`[^`]+`[,\s]*)+)\|", line)
        if m:
            keys |= set(re.findall(r"`([^`]+)`", m.group(1)))
    return keys


def key_pattern(key: str) -> re.Pattern:
    return re.compile("^" + r"\.".join("[^.]+" if re.fullmatch(r"<\w+>", s) else re.escape(s) for s in key.split(".")) + "$")


def check_docs(values: dict, readme: str, errors: Errors) -> int:
    documented = readme_keys(readme)
    patterns = [key_pattern(k) for k in documented]
    paths = value_paths(values)
    for path in paths:
        parts = path.split(".")
        ancestors = [".".join(parts[: i + 1]) for i in range(len(parts))]
        if not any(p.match(a) for a in ancestors for p in patterns):
            errors.add("helm/README.md", f"values key {path} is not in the values table")
    all_prefixes = {".".join(p.split(".")[: i + 1]) for p in paths for i in range(len(p.split(".")))}
    for key in documented:
        if "<" in key:
            continue
        if key not in all_prefixes:
            errors.add("helm/README.md", f"documents {key}, which values.yaml does not have")
    return len(paths)


# --- driver -------------------------------------------------------------------------------------


def check_scenario(name: str, values: dict, errors: Errors, defaults: bool = False) -> tuple[dict, int]:
    lint(values, errors, name)
    manifests = render(values, errors, name)
    count = validate_schemas(manifests, errors, name)
    if manifests:
        merged = deep_merge(load_yaml(CHART / "values.yaml"), values)
        check_wiring(manifests, merged, errors, name, defaults)
    return manifests, count


def self_test(all_options: dict, known: set[str], verbose: bool) -> list[str]:
    """Broken inputs that must be rejected; returns the ones that were not."""
    keda_on = deep_merge(all_options, {"keda": {"enabled": True}})

    def scenario(values: dict) -> Callable[[Errors], None]:
        return lambda errors: check_scenario("self-test", values, errors)

    def custom(doc: dict) -> Callable[[Errors], None]:
        return lambda errors: validate_custom(doc, errors, "self-test")

    def rule(expr: str) -> Callable[[Errors], None]:
        return lambda errors: check_promql(expr, known, errors, "self-test")

    cases: list[tuple[str, Callable[[Errors], None], str]] = [
        ('api.replicas: "three"', scenario({"api": {"replicas": "three"}}), "spec.replicas"),
        ('workers.index.replicas: "three"', scenario({"workers": {"index": {"replicas": "three"}}}), "spec.replicas"),
        (
            "a misspelt probe field (periodSecond)",
            scenario({"api": {"livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSecond": 10}}}),
            "periodSecond",
        ),
        ("a probe on an undeclared port", scenario({"api": {"readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}}}}), "does not declare"),
        (
            'KEDA maxReplicaCount: "ten"',
            scenario(deep_merge(keda_on, {"workerDefaults": {"autoscaling": {"maxReplicas": "ten"}}})),
            "maxReplicaCount",
        ),
        (
            "a ScaledObject field KEDA does not have",
            custom({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
                    "spec": {"scaleTargetRef": {"name": "x"}, "minReplicas": 1, "triggers": []}}),
            "spec.minReplicas",
        ),
        (
            "a grace period under the drain deadline",
            scenario({"workers": {"index": {"terminationGracePeriodSeconds": 5}}}),
            "must exceed shutdownDeadlineMs",
        ),
        ("a chart-managed setting in config", scenario({"config": {"SEDIMENT_LISTEN": "0.0.0.0:1"}}), "the chart sets"),
        ("no qdrant.url", scenario({"qdrant": {"url": ""}}), "qdrant.url is required"),
        ("a metric that does not exist", rule("rate(sediment_no_such_metric_total[5m])"), "not defined"),
        ("PromQL that does not parse", rule("sum(rate(sediment_recalls_total[5m])"), "does not parse"),
        ("an undocumented value", lambda errors: check_docs({"api": {"brandNewKnob": 1}}, README.read_text(), errors), "brandNewKnob"),
    ]
    missed = []
    for title, run, fragment in cases:
        errors = Errors()
        try:
            run(errors)
        except Exception as e:  # a crash is not a rejection
            errors = Errors()
            errors.add("self-test", f"crashed: {e!r}")
        caught = any(fragment in e for e in errors)
        if verbose or not caught:
            print(f"  self-test {'rejected' if caught else 'NOT REJECTED'}: {title}")
            for e in errors[:3]:
                print(f"      {e}")
        if not caught:
            missed.append(title)
    print(f"self-test: {len(cases) - len(missed)} of {len(cases)} broken inputs rejected")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-self-test", action="store_true", help="skip the broken-input self-test")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    print(
        f"helm-python-sdk {helm.__version__} (Helm {helm.helm_sdk_version()}), "
        f"kubernetes-validate {kubernetes_validate.__version__} (Kubernetes {', '.join(KUBE_VERSIONS)}), "
        f"promql-parser, cloudcoil CRD models"
    )

    errors = Errors()
    all_options = load_yaml(HERE / "all-options.yaml")
    scenarios = [
        ("defaults", {}, True),
        ("all-options", all_options, False),
        ("all-options, keda off", deep_merge(all_options, {"keda": {"enabled": False}}), False),
    ]
    known = defined_metrics()
    used: set[str] = set()
    rendered_all = {}
    rendered_templates: set[str] = set()
    total = 0
    for name, values, defaults in scenarios:
        before = len(errors)
        manifests, count = check_scenario(name, values, errors, defaults)
        total += count
        if name == "all-options":
            rendered_all = manifests
        rendered_templates |= {path.split("/templates/", 1)[-1] for path, docs in manifests.items() if docs}
        kinds = sorted({d["kind"] for ds in manifests.values() for d in ds})
        print(f"{name}: {count} manifests ({', '.join(kinds)}), {len(errors) - before} errors")

    # Between them, the scenarios must render every template (all-options switches each on).
    templates = {str(p.relative_to(CHART / "templates")) for p in (CHART / "templates").rglob("*.yaml")}
    for t in sorted(templates - rendered_templates):
        errors.add("scenarios", f"templates/{t} renders nothing: switch its option on in helm/ci/all-options.yaml")

    used |= check_dashboard(DASHBOARD, known, errors)
    rules, rule_metrics = check_rules(rendered_all, known, errors, "all-options")
    used |= rule_metrics
    print(f"dashboard and {rules} alert rules: {len(used)} metrics read, all checked against shared/src/metrics.rs")
    if args.verbose:
        print(f"  metrics no panel or rule reads: {', '.join(sorted(known - used)) or 'none'}")

    documented = check_docs(load_yaml(CHART / "values.yaml"), README.read_text(), errors)
    print(f"values documentation: {documented} keys of values.yaml checked against helm/README.md")

    missed = [] if args.no_self_test else self_test(all_options, known, args.verbose)

    for e in errors:
        print(f"ERROR {e}")
    for m in missed:
        print(f"ERROR self-test: {m} was not rejected")
    seconds = time.monotonic() - started
    if errors or missed:
        print(f"chart validation FAILED: {len(errors)} errors, {len(missed)} self-test misses ({seconds:.1f} s)")
        return 1
    print(f"chart validation ok: {len(scenarios)} renders, {total} manifests ({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
