#!/usr/bin/env bash
# Query embedding, sediment against the numpy reference (tests/embed_reference.py), side by side:
# rounds alternate between the two over the same 200 questions, each embedded alone on one
# thread, and the reference checks sediment's vectors (worst cosine).
#
#   cargo build --release -p integration-tests --bin bench_embed && bash tests/embed-reference.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-3}"
bin="${CARGO_TARGET_DIR:-/root/.cache/sediment-target}/release/bench_embed"
venv="${SEDIMENT_EMBED_REFERENCE_VENV:-${HOME:-/root}/.cache/sediment-embed-reference-venv}"
packages=(numpy==2.4.6 tokenizers==0.23.3 safetensors==0.8.0)

[ -x "$bin" ] || { echo "embed-reference: $bin is missing: run cargo build --release -p integration-tests --bin bench_embed" >&2; exit 1; }
if ! "$venv/bin/python" -c "import numpy, tokenizers, safetensors" 2>/dev/null; then
  echo "embed-reference: installing ${packages[*]} into $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"
fi

questions="$(mktemp)"
trap 'rm -f "$questions"' EXIT
# One thread for numpy's BLAS, as sediment runs a query: the target is a query on one core.
export OPENBLAS_NUM_THREADS=1
for round in $(seq "$rounds"); do
  echo "round $round"
  "$bin" --queries 200 --dump "$questions" | grep '^queries'
  "$venv/bin/python" tests/embed_reference.py "$questions"
done
