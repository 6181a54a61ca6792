#!/usr/bin/env bash
# The Python client's tests (pytest) against real embedded servers started from the built
# `sediment` binary. Installs the client and pytest into a virtualenv outside the clone, once.
#
#   cargo build -p api --bin sediment && bash api/clients/python/test.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${SEDIMENT_BIN:-${CARGO_TARGET_DIR:-/root/.cache/sediment-target}/debug/sediment}"
venv="${SEDIMENT_CLIENT_VENV:-${HOME:-/root}/.cache/sediment-client-venv}"

[ -x "$bin" ] || { echo "python-client: $bin is missing: run cargo build -p api --bin sediment" >&2; exit 1; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# Reinstalled every run (a few seconds): the tests must run the client in this checkout.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$here[test]"
cd "$here"
SEDIMENT_BIN="$bin" exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
