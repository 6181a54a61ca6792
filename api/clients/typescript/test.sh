#!/usr/bin/env bash
# The TypeScript client's tests (node's test runner) against real embedded servers started from
# the built `sediment` binary. Installs the pinned dev dependencies (package-lock.json) first.
#
#   cargo build -p api --bin sediment && bash api/clients/typescript/test.sh
set -euo pipefail
cd "$(dirname "$0")"
bin="${SEDIMENT_BIN:-${CARGO_TARGET_DIR:-/root/.cache/sediment-target}/debug/sediment}"
[ -x "$bin" ] || { echo "typescript-client: $bin is missing: run cargo build -p api --bin sediment" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error
SEDIMENT_BIN="$bin" npm test --silent
