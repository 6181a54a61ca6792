#!/usr/bin/env bash
# Fuzzes the API against its own OpenAPI document: schemathesis (pinned, from PyPI) generates
# requests from `/openapi.json` of the embedded `sediment` binary and fails on any 5xx and on any
# response the document does not describe. The checks and the tenant it sends are set in
# tests/schemathesis.toml.
#
#   bash tests/schemathesis.sh     # needs `cargo build -p api --bin sediment` first
#
# The run is reproducible and bounded: a fixed seed (SEDIMENT_FUZZ_SEED to try another), at most
# SEDIMENT_FUZZ_MAX_EXAMPLES cases per operation and phase (about two minutes in all), and a run
# past SEDIMENT_FUZZ_TIMEOUT seconds fails. Auth is on, as in any deployment that is not a developer's loopback: the
# server gets an admin key, and the harness makes the team key that the tenant routes use.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
seed="${SEDIMENT_FUZZ_SEED:-20261205}"
max_examples="${SEDIMENT_FUZZ_MAX_EXAMPLES:-200}"
timeout_s="${SEDIMENT_FUZZ_TIMEOUT:-420}"
bin="${CARGO_TARGET_DIR:-/root/.cache/sediment-target}/debug/sediment"
# Outside the clone, so CI and developers install it once per machine.
venv="${SEDIMENT_SCHEMATHESIS_VENV:-${HOME:-/root}/.cache/sediment-schemathesis-venv}"

[ -x "$bin" ] || { echo "fuzz: $bin is missing: run cargo build -p api --bin sediment" >&2; exit 1; }
if [ "$("$venv/bin/schemathesis" --version 2>/dev/null)" != "schemathesis, version $SCHEMATHESIS_VERSION" ]; then
  echo "fuzz: installing schemathesis $SCHEMATHESIS_VERSION into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
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
ops_token="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"

# Only the settings below: a developer's SEDIMENT_* (a cluster URL, say) must not leak in.
mapfile -t inherited < <(compgen -e | grep '^SEDIMENT_' || true)
env "${inherited[@]/#/--unset=}" \
  SEDIMENT_LISTEN="127.0.0.1:$port" \
  SEDIMENT_DATA_DIR="$work/data" \
  SEDIMENT_ADMIN_KEY="$admin_key" \
  SEDIMENT_OPS_TOKEN="$ops_token" \
  "$bin" >"$work/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 1 120); do
  curl -sf "$base/healthz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { tail -n 30 "$work/server.log" >&2; echo "fuzz: sediment exited" >&2; exit 1; }
  sleep 0.5
done
curl -sf "$base/healthz" >/dev/null || { tail -n 30 "$work/server.log" >&2; echo "fuzz: no /healthz" >&2; exit 1; }

# An `admin` key reaches every tenant route, prompt overrides and the audit log included.
team_key="$(curl -sf -H "authorization: Bearer $admin_key" -H content-type:application/json \
  "$base/v1/admin/keys" -d '{"team_id":"fuzz","permission":"admin","name":"schemathesis"}' |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])')"

# Data for the fuzzer to find: one session of facts, and the memories the rules extractor makes
# of them (within a few seconds; without any, memory ids are simply all unknown).
as_team=(-H "authorization: Bearer $team_key" -H x-sediment-agent:fuzz-agent -H x-sediment-user:fuzz-user
  -H content-type:application/json)
curl -sf "${as_team[@]}" "$base/v1/sessions/fuzz-session/messages" -o /dev/null -d '{"messages": [
  {"role": "user", "content": "I am the DBA of the orders database; it runs PostgreSQL 16 in Frankfurt."},
  {"role": "assistant", "content": "Noted: you run the orders database on PostgreSQL 16."},
  {"role": "user", "content": "Always answer me in English, and keep it short."},
  {"role": "assistant", "content": "Understood."},
  {"role": "user", "content": "My name is Ann and I prefer tea over coffee."},
  {"role": "assistant", "content": "Tea it is, Ann."},
  {"role": "user", "content": "Next week I migrate the orders table to a partitioned layout."},
  {"role": "assistant", "content": "Good luck with the migration."},
  {"role": "user", "content": "I work from Berlin and my team is called payments."},
  {"role": "assistant", "content": "Payments team in Berlin, noted."}]}'
memories=""
for _ in $(seq 1 20); do
  memories="$(curl -sf "${as_team[@]}" "$base/v1/memories" |
    python3 -c 'import json, sys; print("\n".join(m["id"] for m in json.load(sys.stdin)["items"]))')"
  [ -n "$memories" ] && break
  sleep 0.5
done
# The config reads its dictionaries beside itself.
cp tests/schemathesis.toml "$work/schemathesis.toml"
# And the hooks module (a serializer for the import's NDJSON body), importable from there.
cp tests/schemathesis_hooks.py "$work/schemathesis_hooks.py"
{ printf '"%s"\n' $memories; echo '"00000000-0000-4000-8000-000000000000"'; } >"$work/memories.dict"
echo "fuzz: seeded 1 session and $(echo "$memories" | grep -c . || true) memories"

echo "fuzz: schemathesis $SCHEMATHESIS_VERSION against $base/openapi.json, seed $seed, at most $max_examples cases per operation"
set +e
(
  cd "$work" # schemathesis writes its example database and reports beside it: never the clone
  SEDIMENT_FUZZ_ADMIN_KEY="$admin_key" SEDIMENT_FUZZ_TEAM_KEY="$team_key" SEDIMENT_FUZZ_OPS_TOKEN="$ops_token" \
    SCHEMATHESIS_HOOKS=schemathesis_hooks PYTHONPATH="$work" \
    timeout --signal=INT --kill-after=30 "$timeout_s" \
    "$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" --no-color run "$base/openapi.json" \
    --seed "$seed" --max-examples "$max_examples" --workers 1 --generation-database none
) 2>&1 | tee "$work/fuzz.log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 124 ]; then echo "fuzz: over the ${timeout_s}s bound" >&2; fi
if [ "$status" -ne 0 ]; then
  # The server's side of a 5xx (its message is never in the response).
  grep -E ' (ERROR|WARN) ' "$work/server.log" | tail -n 20 >&2 || true
fi
cases="$(grep -Eo '^ +[0-9]+ generated' "$work/fuzz.log" | grep -Eo '[0-9]+' || echo '?')"
echo "fuzz: $cases cases, seed $seed, at most $max_examples per operation, exit $status"
exit "$status"
