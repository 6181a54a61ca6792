#!/usr/bin/env python3
"""Lints, renders and validates the sediment Helm chart offline; exits non-zero on any error.

What it checks, for each scenario (the default values plus an S3 bucket, which the default scene
and persona workers require; the default values with layers.enabled=false, which need none;
helm/ci/all-options.yaml; the same with keda.enabled=false, which takes the HPA path; the same
without an S3 bucket, which takes the local file store):
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
     Every enabled worker kind gets its Deployment, PodDisruptionBudget, metrics Service and
     autoscaler, and no other kind does (scene and persona only while layers.enabled). The API,
     the scene and persona workers and the migration Job see one and the same file store (S3,
     or a local directory only with files.allowLocal), the layer and S3 values reach the
     variables they name, and no ConfigMap carries a secret.
Once per run:
  4. The Grafana dashboard and the alert rules: every PromQL expression parses (promql-parser)
     and every sediment_* metric it reads is defined in shared/src/metrics.rs.
  5. helm/README.md documents every key of values.yaml, and names no key that does not exist.
  6. A self-test: broken inputs (replicas: "three", a misspelt field, a KEDA field of the wrong
     type, a grace period under the drain deadline, the scene worker without S3, an unknown
     metric, bad PromQL, an undocumented value, hand-broken manifests, ...) must each be
     rejected, so the checks above are known to bite.

Usage: validate.py [--no-self-test] [-v]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import hashlib
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

# Worker kinds that build the memory layers: deployed only while layers.enabled, and users of
# the shared file store (like the API and, for its settings check, the migration Job).
LAYER_KINDS = {"scene", "persona"}
# Environment variable -> the value that sets it.
LAYER_ENV = {
    "SEDIMENT_LAYERS": ("layers", "enabled"),
    "SEDIMENT_SCENE_CAP": ("layers", "scene", "cap"),
    "SEDIMENT_SCENE_AFTER_L1_MS": ("layers", "scene", "afterL1Ms"),
    "SEDIMENT_SCENE_MIN_GAP_MS": ("layers", "scene", "minGapMs"),
    "SEDIMENT_SCENE_MAX_WAIT_MS": ("layers", "scene", "maxWaitMs"),
    "SEDIMENT_SCENE_MAX_STEPS": ("layers", "scene", "maxSteps"),
    "SEDIMENT_SCENE_MAX_MEMORIES": ("layers", "scene", "maxMemories"),
    "SEDIMENT_SCENE_LEASE_MS": ("layers", "scene", "leaseMs"),
    "SEDIMENT_SCENE_RETRY_MS": ("layers", "scene", "retryMs"),
    "SEDIMENT_PERSONA_MEMORY_THRESHOLD": ("layers", "persona", "memoryThreshold"),
    "SEDIMENT_PERSONA_LEASE_MS": ("layers", "persona", "leaseMs"),
}
S3_ENV = {
    "SEDIMENT_S3_BUCKET": ("files", "s3", "bucket"),
    "SEDIMENT_S3_ENDPOINT": ("files", "s3", "endpoint"),
    "SEDIMENT_S3_REGION": ("files", "s3", "region"),
    "SEDIMENT_S3_PATH_STYLE": ("files", "s3", "pathStyle"),
    "SEDIMENT_S3_PREFIX": ("files", "s3", "prefix"),
}
S3_KEYS = ("SEDIMENT_S3_ACCESS_KEY_ID", "SEDIMENT_S3_SECRET_ACCESS_KEY")
# Set only while auth.jwt names a JWKS (jwksUrl or jwksFile); empty values are left out.
JWT_ENV = {
    "SEDIMENT_AUTH_JWKS_URL": ("auth", "jwt", "jwksUrl"),
    "SEDIMENT_AUTH_JWKS_FILE": ("auth", "jwt", "jwksFile"),
    "SEDIMENT_AUTH_JWKS_REFRESH_MS": ("auth", "jwt", "jwksRefreshMs"),
    "SEDIMENT_AUTH_JWT_ISSUER": ("auth", "jwt", "issuer"),
    "SEDIMENT_AUTH_JWT_AUDIENCE": ("auth", "jwt", "audience"),
    "SEDIMENT_AUTH_JWT_DEFAULT_PERMISSION": ("auth", "jwt", "defaultPermission"),
    "SEDIMENT_AUTH_JWT_TEAM_CLAIM": ("auth", "jwt", "claims", "team"),
    "SEDIMENT_AUTH_JWT_AGENT_CLAIM": ("auth", "jwt", "claims", "agent"),
    "SEDIMENT_AUTH_JWT_USER_CLAIM": ("auth", "jwt", "claims", "user"),
    "SEDIMENT_AUTH_JWT_PERMISSION_CLAIM": ("auth", "jwt", "claims", "permission"),
}
# Set only while the limit they belong to is above 0 (0 is off, and sediment's own default).
LIMIT_ENV = {
    "SEDIMENT_RATE_LIMIT_RPS": (("limits", "rateLimitRps"), ("limits", "rateLimitRps")),
    "SEDIMENT_RATE_LIMIT_BURST": (("limits", "rateLimitBurst"), ("limits", "rateLimitRps"), ("limits", "rateLimitBurst")),
    "SEDIMENT_QUOTA_TURNS": (("limits", "quotaTurns"), ("limits", "quotaTurns")),
    "SEDIMENT_QUOTA_REFRESH_MS": (("limits", "quotaRefreshMs"), ("limits", "quotaTurns")),
}
# The least the default values need: an S3 bucket for the scene and persona workers.
WITH_S3 = {"files": {"s3": {"bucket": "sediment", "endpoint": "http://minio:9000", "accessKeyId": "minio", "secretAccessKey": "s3-secret"}}}
# Variables that hold secrets: never in a ConfigMap.
SECRET_ENV = re.compile(r"^SEDIMENT_(DATABASE_URL|AMQP_URL|\w*(_KEY|_KEY_ID|_TOKEN|_PASSWORD|_SECRET))$")

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

    check_workers(by_kind, values, errors, where)
    check_files(by_kind, values, errors, where)
    check_settings(by_kind, config, values, errors, where)


def value_at(values: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        values = (values or {}).get(key)
    return values


def effective_workers(values: dict) -> dict[str, dict]:
    """Each worker kind's settings as the chart computes them: workerDefaults overlaid by its
    entry (maps merged one level deep), enabled by default, layer kinds off with the layers."""
    out = {}
    for kind, entry in (values.get("workers") or {}).items():
        w = copy.deepcopy(values.get("workerDefaults") or {})
        for key, value in (entry or {}).items():
            if isinstance(value, dict) and isinstance(w.get(key), dict):
                w[key].update(copy.deepcopy(value))
            else:
                w[key] = copy.deepcopy(value)
        w.setdefault("enabled", True)
        if kind in LAYER_KINDS and not value_at(values, ("layers", "enabled")):
            w["enabled"] = False
        out[kind] = w
    return out


def check_workers(by_kind: dict[str, list[dict]], values: dict, errors: Errors, where: str) -> None:
    """One entry of `workers` is all a kind takes: its Deployment, PodDisruptionBudget, metrics
    Service and autoscaler follow from it, and nothing runs for a disabled kind."""
    workers = effective_workers(values)
    deployments = {}
    for d in by_kind.get("Deployment", []):
        kind = d["metadata"].get("labels", {}).get("sediment.io/worker")
        if kind:
            deployments[kind] = d
    for kind, w in sorted(workers.items()):
        at = f"{where}: workers.{kind}"
        dep = deployments.get(kind)
        if not w["enabled"]:
            if dep is not None:
                why = " (layers.enabled is false)" if kind in LAYER_KINDS and (values.get("workers", {}).get(kind) or {}).get("enabled", True) else ""
                errors.add(at, f"is disabled{why}, yet Deployment/{dep['metadata']['name']} runs it")
            continue
        if dep is None:
            errors.add(at, "is enabled, yet no Deployment runs it")
            continue
        name = dep["metadata"]["name"]
        pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
        command = dep["spec"]["template"]["spec"]["containers"][0]["command"]
        if command != (w.get("command") or [f"sediment-{kind}"]):
            errors.add(at, f"runs {command}, not {w.get('command') or [f'sediment-{kind}']}")
        pdbs = [b for b in by_kind.get("PodDisruptionBudget", []) if matches(b["spec"]["selector"]["matchLabels"], pod_labels)]
        if bool(pdbs) != bool(w["pdb"]["enabled"]):
            errors.add(at, f"pdb.enabled is {json.dumps(w['pdb']['enabled'])}, and {len(pdbs)} PodDisruptionBudgets cover Deployment/{name}")
        if value_at(values, ("metrics", "serviceMonitor", "enabled")):
            scraped = [
                svc for svc in by_kind.get("Service", [])
                if svc["metadata"].get("labels", {}).get("sediment.io/metrics") == "worker" and matches(svc["spec"]["selector"], pod_labels)
            ]
            if len(scraped) != 1:
                errors.add(at, f"{len(scraped)} metrics Services select Deployment/{name}, not 1")
        scalers = [
            o for k in ("ScaledObject", "HorizontalPodAutoscaler") for o in by_kind.get(k, [])
            if o["spec"]["scaleTargetRef"]["name"] == name
        ]
        want = ("ScaledObject" if values.get("keda", {}).get("enabled") else "HorizontalPodAutoscaler") if w["autoscaling"]["enabled"] else None
        if [o["kind"] for o in scalers] != ([want] if want else []):
            errors.add(at, f"autoscaling.enabled is {json.dumps(w['autoscaling']['enabled'])}, yet Deployment/{name} is scaled by {[o['kind'] for o in scalers] or 'nothing'}")
    for kind, dep in deployments.items():
        if kind not in workers:
            errors.add(where, f"Deployment/{dep['metadata']['name']} runs worker {kind!r}, which values.workers does not have")


def resolved_env(container: dict, by_kind: dict[str, list[dict]]) -> dict[str, str]:
    """A container's environment as far as the rendered objects tell: envFrom of rendered
    ConfigMaps and Secrets, then `env` (value, or `secret:<name>/<key>` for a secretKeyRef).
    Secrets are given as a digest, so that error messages never print one."""
    maps = {d["metadata"]["name"]: d.get("data") or {} for d in by_kind.get("ConfigMap", [])}
    secrets = {d["metadata"]["name"]: d.get("stringData") or d.get("data") or {} for d in by_kind.get("Secret", [])}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(maps.get(source["configMapRef"]["name"], {}))
        if "secretRef" in source:
            for key, value in secrets.get(source["secretRef"]["name"], {}).items():
                env[key] = f"<secret sha256:{hashlib.sha256(str(value).encode()).hexdigest()[:12]}>" if SECRET_ENV.match(key) else value
    for e in container.get("env", []):
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        env[e["name"]] = f"secret:{ref['name']}/{ref['key']}" if ref else e.get("value", "")
    return env


def check_files(by_kind: dict[str, list[dict]], values: dict, errors: Errors, where: str) -> None:
    """The API, the scene and persona workers and the migration Job see one file store, shared
    (S3) unless files.allowLocal; no ConfigMap holds a secret; secretKeyRefs name real Secrets."""
    users = []
    for d in by_kind.get("Deployment", []):
        labels = d["metadata"].get("labels", {})
        if labels.get("app.kubernetes.io/component") == "api" or labels.get("sediment.io/worker") in LAYER_KINDS:
            users.append(d)
    users += [j for j in by_kind.get("Job", []) if "migrate" in j["spec"]["template"]["spec"]["containers"][0]["command"]]
    layer_workers = [d for d in users if d["metadata"].get("labels", {}).get("sediment.io/worker") in LAYER_KINDS]
    stores = {}
    for obj in users:
        at = f"{where}: {obj['kind']}/{obj['metadata']['name']}"
        env = resolved_env(obj["spec"]["template"]["spec"]["containers"][0], by_kind)
        bucket, local = env.get("SEDIMENT_S3_BUCKET"), env.get("SEDIMENT_FILES_DIR")
        if not bucket and not local:
            errors.add(at, "has neither SEDIMENT_S3_BUCKET nor SEDIMENT_FILES_DIR: no file store")
        keys = [k for k in S3_KEYS if k in env]
        if bucket and len(keys) == 1:
            errors.add(at, f"has {keys[0]} without its partner")
        stores[at] = tuple(env.get(k) for k in (*S3_ENV, *S3_KEYS, "SEDIMENT_FILES_DIR"))
    if len(set(stores.values())) > 1:
        errors.add(where, "the API, the layer workers and the migration Job see different file stores: " + "; ".join(f"{k} {v}" for k, v in stores.items()))
    for d in layer_workers:
        env = resolved_env(d["spec"]["template"]["spec"]["containers"][0], by_kind)
        if not env.get("SEDIMENT_S3_BUCKET") and not value_at(values, ("files", "allowLocal")):
            errors.add(f"{where}: Deployment/{d['metadata']['name']}", "keeps scene and persona documents in a per-pod directory without files.allowLocal")

    secret_values = {
        v for v in (
            value_at(values, ("database", "url")), value_at(values, ("rabbitmq", "url")),
            value_at(values, ("qdrant", "apiKey")), value_at(values, ("embedding", "apiKey")), value_at(values, ("llm", "apiKey")),
            value_at(values, ("files", "s3", "accessKeyId")), value_at(values, ("files", "s3", "secretAccessKey")),
            *(values.get("secretEnv") or {}).values(),
        ) if isinstance(v, str) and v
    }
    for cm in by_kind.get("ConfigMap", []):
        for key, value in (cm.get("data") or {}).items():
            if SECRET_ENV.match(key) or value in secret_values:
                errors.add(f"{where}: ConfigMap/{cm['metadata']['name']}", f"holds the secret {key}: secrets go in a Secret")

    given = {values.get("existingSecret"), value_at(values, ("files", "s3", "existingSecret"))} | {
        (e.get("secretRef") or {}).get("name") for e in values.get("extraEnvFrom") or []
    }
    rendered = {d["metadata"]["name"] for d in by_kind.get("Secret", [])}
    for kind in ("Deployment", "Job"):
        for obj in by_kind.get(kind, []):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                for e in c.get("env", []):
                    ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                    if ref and ref["name"] not in rendered | given:
                        errors.add(f"{where}: {kind}/{obj['metadata']['name']}", f"env {e['name']} reads Secret {ref['name']}, which is neither rendered nor given")


def check_settings(by_kind: dict[str, list[dict]], config: dict, values: dict, errors: Errors, where: str) -> None:
    """Each layer and S3 value reaches the variable it names, in the pods' ConfigMap."""
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    want = {env: text(value_at(values, path)) for env, path in LAYER_ENV.items()}
    # Without the extract worker, extraction is off everywhere (the API then routes it no events).
    want["SEDIMENT_EXTRACT"] = text(bool(value_at(values, ("workers", "extract", "enabled"))))
    if value_at(values, ("files", "s3", "bucket")):
        want |= {env: text(value_at(values, path)) for env, path in S3_ENV.items() if value_at(values, path) not in ("", None)}
        for env in S3_ENV:
            if env not in want and env in config:
                errors.add(f"{where}: ConfigMap", f"sets {env}, whose value is empty")
    else:
        want["SEDIMENT_FILES_DIR"] = text(value_at(values, ("files", "localDir")))
        for env in S3_ENV:
            if env in config:
                errors.add(f"{where}: ConfigMap", f"sets {env} without files.s3.bucket")
    jwt_on = value_at(values, ("auth", "jwt", "jwksUrl")) or value_at(values, ("auth", "jwt", "jwksFile"))
    for env, path in JWT_ENV.items():
        if jwt_on and value_at(values, path) not in ("", None):
            want[env] = text(value_at(values, path))
        elif env in config:
            errors.add(f"{where}: ConfigMap", f"sets {env}, which the values leave unset")
    for env, (path, *gates) in LIMIT_ENV.items():
        if all(int(value_at(values, gate) or 0) > 0 for gate in gates):
            want[env] = text(value_at(values, path))
        elif env in config:
            errors.add(f"{where}: ConfigMap", f"sets {env}, which the values turn off")
    for env, value in want.items():
        if config.get(env) != value:
            errors.add(f"{where}: ConfigMap", f"{env} is {config.get(env)!r}, the values say {value!r}")


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

    def scenario(values: dict, base: dict = WITH_S3) -> Callable[[Errors], None]:
        return lambda errors: check_scenario("self-test", deep_merge(base, values), errors)

    # Hand-broken manifests: a good render (the defaults with S3), changed by `breaks`, checked
    # against the values `values` (merged over values.yaml).
    good: dict[str, list[dict]] = {}

    def wiring(breaks: Callable[[dict[str, list[dict]]], None], values: dict = WITH_S3) -> Callable[[Errors], None]:
        def run(errors: Errors) -> None:
            if not good:
                good.update(render(WITH_S3, errors, "self-test"))
            manifests = copy.deepcopy(good)
            breaks(manifests)
            check_wiring(manifests, deep_merge(load_yaml(CHART / "values.yaml"), values), errors, "self-test", False)
        return run

    def objects(manifests: dict[str, list[dict]], kind: str) -> list[dict]:
        return [d for ds in manifests.values() for d in ds if d["kind"] == kind]

    def config_map(manifests: dict[str, list[dict]]) -> dict:
        return next(c["data"] for c in objects(manifests, "ConfigMap") if "SEDIMENT_SHUTDOWN_DEADLINE_MS" in c["data"])

    def drop_worker(kind: str) -> Callable[[dict[str, list[dict]]], None]:
        def run(manifests: dict[str, list[dict]]) -> None:
            for path in manifests:
                manifests[path] = [
                    d for d in manifests[path]
                    if not (d["kind"] == "Deployment" and d["metadata"]["labels"].get("sediment.io/worker") == kind)
                ]
        return run

    def drop_env(name: str) -> Callable[[dict[str, list[dict]]], None]:
        def run(manifests: dict[str, list[dict]]) -> None:
            dep = next(d for d in objects(manifests, "Deployment") if d["metadata"]["labels"].get("sediment.io/worker") == "scene")
            dep["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": name, "value": "/tmp/own"})
        return run

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
        # The file store and the memory layers.
        ("the scene and persona workers without S3", scenario({}, base={}), "files.s3.bucket is required while workers.persona and workers.scene are enabled"),
        ("the persona worker alone without S3", scenario({"workers": {"scene": {"enabled": False}}}, base={}), "files.s3.bucket is required while workers.persona is"),
        ("all options without S3 nor allowLocal", scenario({"files": {"s3": {"bucket": "", "endpoint": "", "prefix": ""}, "allowLocal": False}}, base=all_options), "files.s3.bucket is required"),
        ("an S3 access key without its secret", scenario({"files": {"s3": {"secretAccessKey": ""}}}), "set both or neither"),
        ("an S3 endpoint without a scheme", scenario({"files": {"s3": {"endpoint": "minio:9000"}}}), "files.s3.endpoint must start"),
        ("an S3 endpoint without a bucket", scenario({"files": {"s3": {"endpoint": "http://minio:9000"}}, "layers": {"enabled": False}}, base={}), "need files.s3.bucket"),
        ("a bucket name S3 refuses", scenario({"files": {"s3": {"bucket": "My_Bucket"}}}), "must be an S3 bucket name"),
        ('files.s3.pathStyle: "yes"', scenario({"files": {"s3": {"pathStyle": "yes"}}}), "files.s3.pathStyle must be true or false"),
        ("a relative files.localDir", scenario({"files": {"allowLocal": True, "localDir": "data/files"}}, base={}), "files.localDir must be an absolute path"),
        ("an S3 setting in config", scenario({"config": {"SEDIMENT_S3_BUCKET": "other"}}), "the chart sets"),
        ("a layer setting in config", scenario({"config": {"SEDIMENT_SCENE_CAP": 20}}), "the chart sets"),
        ("extraction in config", scenario({"config": {"SEDIMENT_EXTRACT": "false"}}), "the chart sets"),
        ("the extract worker off with the layers on", scenario({"workers": {"extract": {"enabled": False}}}), "layers.enabled needs L1 extraction"),
        ("an S3 key in secretEnv as well", scenario({"secretEnv": {"SEDIMENT_S3_ACCESS_KEY_ID": "AKID2"}}), "the chart already sets SEDIMENT_S3_ACCESS_KEY_ID"),
        ("a secret in config", scenario({"config": {"SEDIMENT_OPS_TOKEN": "0123456789abcdef"}}), "looks like a secret"),
        ("layers.scene.cap: 0", scenario({"layers": {"scene": {"cap": 0}}}), "layers.scene.cap (SEDIMENT_SCENE_CAP) must be a whole number above 0"),
        ('layers.scene.leaseMs: "ten minutes"', scenario({"layers": {"scene": {"leaseMs": "ten minutes"}}}), "layers.scene.leaseMs"),
        ("layers.persona.memoryThreshold: 2.5", scenario({"layers": {"persona": {"memoryThreshold": 2.5}}}), "layers.persona.memoryThreshold"),
        ('layers.enabled: "false"', scenario({"layers": {"enabled": "false"}}), "layers.enabled must be true or false"),
        ("a short auth.adminKey", scenario({"auth": {"adminKey": "short"}}), "auth.adminKey must be at least 32 characters"),
        ('auth.enabled: "no"', scenario({"auth": {"enabled": "no"}}), "auth.enabled must be true or false"),
        ("the admin key in config", scenario({"config": {"SEDIMENT_AUTH": "off"}}), "the chart sets"),
        ("both a JWKS URL and a file", scenario({"auth": {"jwt": {"jwksUrl": "https://idp/jwks", "jwksFile": "/etc/jwks.json"}}}), "not both"),
        ("a JWKS URL that is not http", scenario({"auth": {"jwt": {"jwksUrl": "idp/jwks"}}}), "auth.jwt.jwksUrl must start with"),
        ("tokens with auth off", scenario({"auth": {"enabled": False, "jwt": {"jwksFile": "/etc/jwks.json"}}}), "with auth off no token is checked"),
        ('auth.jwt.defaultPermission: "owner"', scenario({"auth": {"jwt": {"defaultPermission": "owner"}}}), "auth.jwt.defaultPermission must be read, write or admin"),
        ("an empty claim name", scenario({"auth": {"jwt": {"claims": {"team": ""}}}}), "auth.jwt.claims.team must name a claim"),
        ("limits.rateLimitRps: -1", scenario({"limits": {"rateLimitRps": -1}}), "limits.rateLimitRps must be a whole number"),
        ("limits.quotaRefreshMs: 0", scenario({"limits": {"quotaRefreshMs": 0}}), "limits.quotaRefreshMs"),
        ("a rate limit in config", scenario({"config": {"SEDIMENT_RATE_LIMIT_RPS": 5}}), "the chart sets"),
        ("a limit the values turned off", wiring(lambda m: config_map(m).update(SEDIMENT_QUOTA_TURNS="100")), "SEDIMENT_QUOTA_TURNS, which the values turn off"),
        # The wiring checks, on hand-broken manifests.
        ("an enabled worker with no Deployment", wiring(drop_worker("persona")), "workers.persona: is enabled, yet no Deployment"),
        ("a scene worker deployed with the layers off", wiring(lambda m: None, deep_merge(WITH_S3, {"layers": {"enabled": False}})), "layers.enabled is false"),
        ("a PodDisruptionBudget the values turned off", wiring(lambda m: None, deep_merge(WITH_S3, {"workers": {"scene": {"pdb": {"enabled": False}}}})), "pdb.enabled is false"),
        ("a worker with its own file store", wiring(drop_env("SEDIMENT_FILES_DIR")), "see different file stores"),
        ("a secret in the ConfigMap", wiring(lambda m: config_map(m).update(SEDIMENT_S3_SECRET_ACCESS_KEY="x")), "holds the secret SEDIMENT_S3_SECRET_ACCESS_KEY"),
        ("a secret value in the ConfigMap", wiring(lambda m: config_map(m).update(SEDIMENT_NOTE="s3-secret")), "holds the secret SEDIMENT_NOTE"),
        ("a layer value on the wrong variable", wiring(lambda m: config_map(m).update(SEDIMENT_SCENE_MIN_GAP_MS="3600000")), "SEDIMENT_SCENE_MIN_GAP_MS is '3600000'"),
        ("a Secret that does not exist", wiring(lambda m: objects(m, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"].append(
            {"name": "SEDIMENT_X", "valueFrom": {"secretKeyRef": {"name": "nowhere", "key": "x"}}})), "reads Secret nowhere"),
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
        ("defaults + S3", WITH_S3, True),
        ("defaults, layers off", {"layers": {"enabled": False}}, True),
        ("defaults, extraction off", {"layers": {"enabled": False}, "workers": {"extract": {"enabled": False}}}, True),
        ("all-options", all_options, False),
        ("all-options, keda off", deep_merge(all_options, {"keda": {"enabled": False}}), False),
        ("all-options, local files", deep_merge(all_options, {"files": {"s3": {"bucket": "", "endpoint": "", "prefix": ""}}}), False),
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
