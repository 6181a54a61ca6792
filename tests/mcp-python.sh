#!/usr/bin/env bash
# The MCP server against the official Python SDK (`mcp`, pinned, from PyPI): tests/mcp_python.py
# connects over Streamable HTTP (`/mcp`, with team keys) and over stdio (`sediment mcp --url`),
# lists the tools, calls each one and checks the answers and the errors.
#
#   bash tests/mcp-python.sh     # needs `cargo build -p api --bin sediment` first
set -euo pipefail
cd "$(dirname "$0")/.."

MCP_VERSION=2.3.0
bin="${CARGO_TARGET_DIR:-/root/.cache/sediment-target}/debug/sediment"
# Outside the clone, so CI and developers install it once per machine.
venv="${SEDIMENT_MCP_VENV:-${HOME:-/root}/.cache/sediment-mcp-venv}"

[ -x "$bin" ] || { echo "mcp-python: $bin is missing: run cargo build -p api --bin sediment" >&2; exit 1; }
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_VERSION')" 2>/dev/null; then
  echo "mcp-python: installing mcp $MCP_VERSION into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_VERSION"
fi

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
admin_key="$(python3 -c 'import secrets; print(secrets.token_hex(24))')"

# Only the settings below: a developer's SEDIMENT_* (a cluster URL, say) must not leak in.
mapfile -t inherited < <(compgen -e | grep '^SEDIMENT_' || true)
env "${inherited[@]/#/--unset=}" \
  SEDIMENT_LISTEN="127.0.0.1:$port" \
  SEDIMENT_DATA_DIR="$work/data" \
  SEDIMENT_ADMIN_KEY="$admin_key" \
  SEDIMENT_EMBEDDING=none \
  SEDIMENT_EXTRACT_IDLE_FLUSH_MS=300 \
  "$bin" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 120); do
  curl -sf "$base/healthz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { tail -n 30 "$work/server.log" >&2; echo "mcp-python: sediment exited" >&2; exit 1; }
  sleep 0.5
done
curl -sf "$base/healthz" >/dev/null || { tail -n 30 "$work/server.log" >&2; echo "mcp-python: no /healthz" >&2; exit 1; }

key() { # permission
  curl -sf -H "authorization: Bearer $admin_key" -H content-type:application/json "$base/v1/admin/keys" \
    -d "{\"team_id\":\"mcp-python\",\"permission\":\"$1\"}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])'
}

set +e
mapfile -t inherited < <(compgen -e | grep '^SEDIMENT_' || true)
env "${inherited[@]/#/--unset=}" \
  SEDIMENT_MCP_BASE="$base" SEDIMENT_MCP_KEY="$(key write)" SEDIMENT_MCP_READER="$(key read)" SEDIMENT_MCP_BIN="$bin" \
  timeout --kill-after=10 300 "$venv/bin/python" tests/mcp_python.py
status=$?
set -e
if [ "$status" -ne 0 ]; then
  grep -E ' (ERROR|WARN) ' "$work/server.log" | tail -n 20 >&2 || true
fi
exit "$status"
