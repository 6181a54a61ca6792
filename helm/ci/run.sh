#!/usr/bin/env bash
# Validates the Helm chart (see validate.py). Installs the tools into a virtualenv outside the
# clone, and reuses it while requirements.txt is unchanged. Arguments go to validate.py.
set -euo pipefail
cd "$(dirname "$0")"

venv="${SEDIMENT_VENV:-${HOME:-/root}/.cache/sediment-venv}"
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  echo "helm/ci: installing the chart tools into $venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$want" > "$venv/.requirements.sha256"
fi
exec "$venv/bin/python" validate.py "$@"
