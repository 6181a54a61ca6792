#!/usr/bin/env bash
# Checks compose.yaml offline: no upstream image can be pulled here, so it is validated against
# the Compose Specification's JSON schema (check-jsonschema's vendored copy, from PyPI), then
# held to what sediment needs: health checks and depends-on ordering, named volumes only, the
# image's commands for the API, the migration and every worker, and only settings sediment
# knows. The sediment services themselves run from the image in .ci/image.sh, with the same
# commands, against the host's Postgres, RabbitMQ and S3 server.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${SEDIMENT_VENV:-${HOME:-/root}/.cache/sediment-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ ! -x "$venv/bin/check-jsonschema" ] || ! "$venv/bin/python" -c 'import yaml' 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'check-jsonschema==0.39.0' 'PyYAML>=6'
fi
SEDIMENT_ADMIN_KEY=compose-check "$venv/bin/check-jsonschema" --builtin-schema vendor.compose-spec compose.yaml

"$venv/bin/python" - <<'PY'
import re
import sys

import yaml

compose = yaml.safe_load(open(sys.argv[1] if len(sys.argv) > 1 else "compose.yaml"))
services = compose["services"]
named_volumes = set(compose.get("volumes") or {})
workers = re.search(r'WORKERS: \[&str; \d+\] = \[([^\]]*)\]', open("workers/src/lib.rs").read())
workers = re.findall(r'"(\w+)"', workers.group(1))
documented = set(re.findall(r"`(SEDIMENT_[A-Z0-9_]+)`", open("helm/README.md").read()))
problems = []

for name, svc in services.items():
    one_shot = svc.get("restart") == "no"
    # sediment's services carry the image's HEALTHCHECK.
    if not one_shot and "healthcheck" not in svc and not svc.get("image", "").startswith("sediment:"):
        problems.append(f"{name}: a long-running service without a healthcheck")
    for dep, cond in (svc.get("depends_on") or {}).items():
        if dep not in services:
            problems.append(f"{name}: depends on unknown service {dep}")
            continue
        want = "service_completed_successfully" if services[dep].get("restart") == "no" else "service_healthy"
        if cond.get("condition") != want:
            problems.append(f"{name}: should wait for {dep} with {want}, not {cond.get('condition')}")
    for vol in svc.get("volumes") or []:
        source = vol.split(":")[0]
        if source not in named_volumes:
            problems.append(f"{name}: volume {vol} is not a named volume")
    for key in (svc.get("environment") or {}):
        if key.startswith("SEDIMENT_") and key not in documented:
            problems.append(f"{name}: {key} is not a setting helm/README.md documents")

sediment = {n: s for n, s in services.items() if s.get("image", "").startswith("sediment:")}
commands = {n: s.get("command") for n, s in sediment.items()}
want = [["sediment"], ["sediment", "migrate"]] + [[f"sediment-{w}"] for w in workers]
for cmd in want:
    if list(commands.values()).count(cmd) != 1:
        problems.append(f"no single sediment service runs {' '.join(cmd)}")
for n, cmd in commands.items():
    if cmd not in want:
        problems.append(f"{n}: {cmd} is not a command of the image")
    if n != "migrate" and "migrate" not in (sediment[n].get("depends_on") or {}):
        problems.append(f"{n}: does not wait for the migration")

if problems:
    print("compose.yaml:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"compose.yaml ok: {len(services)} services ({len(sediment)} of sediment's image), "
      f"{len(named_volumes)} named volumes, schema valid")
PY
