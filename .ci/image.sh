#!/usr/bin/env bash
# Builds the container image from the root Dockerfile with podman and smoke-tests it: the embedded
# default (health, ingest, search), the cluster (the API and each worker from the image, against
# the host's Postgres, RabbitMQ and S3 server: a turn through L1 and recall), SIGTERM within the
# shutdown deadline, non-root with a read-only root filesystem. Called by .ci/run; runnable alone.
#
# No registry is reachable here, so the Debian base is made once with debootstrap and imported
# under the name the Dockerfile uses (cached by podman outside the clone). The image is built
# from binaries made outside it (the Dockerfile's `runtime-prebuilt` target):
#   SEDIMENT_IMAGE_BINARY   the `sediment` binary to ship (default: the release build, else debug)
#   SEDIMENT_IMAGE_MAX_MB   size budget without the model (default 200; checked for release builds)
#   SEDIMENT_IMAGE_BASE_ONLY=1  only install the tools and make the base image
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="${CARGO_TARGET_DIR:-target}"
image="${SEDIMENT_IMAGE:-sediment:0.1.0}"
base="docker.io/library/debian:bookworm-slim"
max_mb="${SEDIMENT_IMAGE_MAX_MB:-200}"
log() { echo "image: $*"; }

# --- tools: podman with runc (crun fails on these hosts' hybrid cgroups) ---
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
  log "installing podman, buildah, runc, debootstrap"
  install_log="$(mktemp)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs \
         || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs; }; } \
         >"$install_log" 2>&1; then
    tail -n 20 "$install_log" >&2
    exit 1
  fi
  rm -f "$install_log"
fi
# Ulimits within the host's (open files at most 20000, processes at most 32768).
conf="${CONTAINERS_CONF:-/etc/containers/containers.conf}"
if ! grep -q 'sediment: runc and ulimits' "$conf" 2>/dev/null; then
  mkdir -p "$(dirname "$conf")"
  cat >>"$conf" <<'EOF'
# sediment: runc and ulimits within the host's (.ci/image.sh)
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
fi

# --- the base image, once per machine ---
if ! podman image exists "$base"; then
  log "making $base with debootstrap (about 75 s, once)"
  rootfs="$(mktemp -d)"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  # What debian:bookworm-slim leaves out: the downloaded packages, apt lists, docs, man pages
  # and translations.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$rootfs"
fi
[ "${SEDIMENT_IMAGE_BASE_ONLY:-0}" = 1 ] && { log "base image ready"; exit 0; }

# --- the image ---
binary="${SEDIMENT_IMAGE_BINARY:-}"
if [ -z "$binary" ]; then
  if [ -x "$target_dir/release/sediment" ]; then binary="$target_dir/release/sediment"; else binary="$target_dir/debug/sediment"; fi
fi
[ -x "$binary" ] || { echo "image: no sediment binary at $binary (cargo build --release -p api --bin sediment)" >&2; exit 1; }
# The build context is the repository (the .dockerignore keeps it small) plus the binary.
mkdir -p .image-bin
cp "$binary" .image-bin/sediment
# Debug info is most of the file (the release profile's line tables: a 684 MB release build is
# 96 MB without): left out, as the builder stage does too. Symbols stay, so a backtrace still
# names its functions.
strip --strip-debug .image-bin/sediment
trap 'rm -rf .image-bin' EXIT
log "building $image from $binary"
podman build --pull=never --network=host --format docker --target runtime-prebuilt -t "$image" . >/tmp/sediment-image-build.log 2>&1 \
  || { tail -n 30 /tmp/sediment-image-build.log >&2; exit 1; }
size_mb=$(( $(podman image inspect "$image" --format '{{.Size}}') / 1000000 ))
log "$image is $size_mb MB (binary $(( $(stat -c %s .image-bin/sediment) / 1000000 )) MB without debug info)"
case "$binary" in
  */release/*) if [ "$max_mb" -gt 0 ] && [ "$size_mb" -gt "$max_mb" ]; then
      echo "image: $size_mb MB is over the $max_mb MB budget" >&2; exit 1; fi ;;
  *) log "not a release binary: the $max_mb MB budget is not checked" ;;
esac

# --- smoke tests ---
run_id="sediment-smoke-$$"
cleanup() {
  podman ps -a --format '{{.Names}}' | grep "^$run_id" | xargs -r podman rm -f >/dev/null 2>&1 || true
  podman volume ls --format '{{.Name}}' | grep "^$run_id" | xargs -r podman volume rm -f >/dev/null 2>&1 || true
  psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS ${run_id//-/_}" >/dev/null 2>&1 || true
  rabbitmqctl -q list_queues name 2>/dev/null | grep "^$run_id" | xargs -r -n1 rabbitmqctl -q delete_queue >/dev/null 2>&1 || true
  rm -rf .image-bin
}
trap cleanup EXIT
fail() { echo "image: FAIL: $*" >&2; for c in $(podman ps -a --format '{{.Names}}' | grep "^$run_id"); do echo "--- logs of $c" >&2; podman logs --tail 30 "$c" >&2 || true; done; exit 1; }
# podman without systemd logs that it cannot run the HEALTHCHECK's timers: noise here, since
# the smoke tests run the check themselves (podman healthcheck run).
ctr() { podman "$@" 2> >(grep -v "systemd connection" >&2); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # url seconds
  for _ in $(seq 1 "$2"); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}
h=(-H 'content-type: application/json' -H 'x-sediment-team: smoke' -H 'x-sediment-agent: a' -H 'x-sediment-user: u')
turn='{"messages":[{"role":"user","content":"I prefer short answers, and our orders table lives in MySQL 8.0."}]}'
model_dir="${SEDIMENT_MODEL_DIR:-$HOME/.cache/sediment/models/all-MiniLM-L6-v2}"
[ -d "$model_dir" ] || bash api/fetch-model.sh >/dev/null
# The model stays outside the image here (the MODEL build argument bakes it in): mounted read-only.
common=(--network=host --read-only --user 65532:65532 -v "$model_dir:/opt/sediment/model:ro")

# 1. Embedded: non-root, read-only root, state on a volume; healthz, ingest, search.
port=$(free_port)
ctr run -d --name "$run_id-embedded" "${common[@]}" -v "$run_id-data:/data" \
  -e SEDIMENT_LISTEN="127.0.0.1:$port" "$image" >/dev/null
wait_http "http://127.0.0.1:$port/healthz" 60 || fail "embedded: /healthz did not answer"
[ "$(podman exec "$run_id-embedded" id -u)" = 65532 ] || fail "embedded: not running as uid 65532"
podman healthcheck run "$run_id-embedded" >/dev/null 2>&1 || fail "embedded: the image's HEALTHCHECK failed"
if podman exec "$run_id-embedded" touch /usr/local/bin/x 2>/dev/null; then fail "embedded: the root filesystem is writable"; fi
curl -fsS "${h[@]}" -d "$turn" "http://127.0.0.1:$port/v1/sessions/s1/messages" >/dev/null || fail "embedded: append"
found=""
for _ in $(seq 1 30); do
  if curl -fsS "${h[@]}" -d '{"query":"MySQL orders","strategy":"keyword"}' "http://127.0.0.1:$port/v1/conversations/search" | grep -q 'MySQL 8.0'; then found=1; break; fi
  sleep 1
done
[ -n "$found" ] || fail "embedded: search did not find the turn"
log "embedded: healthz, append and search ok (uid 65532, read-only root, /data volume)"

# SIGTERM stops a container cleanly within the shutdown deadline (SEDIMENT_SHUTDOWN_DEADLINE_MS, 8 s).
stop_and_check() { # container
  local start end code
  start=$(date +%s%N)
  ctr stop -t 30 "$1" >/dev/null
  end=$(date +%s%N)
  code=$(podman inspect "$1" --format '{{.State.ExitCode}}')
  [ "$code" = 0 ] || fail "$1 exited $code on SIGTERM"
  [ $(( (end - start) / 1000000 )) -lt 8000 ] || fail "$1 took $(( (end - start) / 1000000 )) ms to stop"
  log "${1#"$run_id-"} stopped on SIGTERM in $(( (end - start) / 1000000 )) ms, exit 0"
}
stop_and_check "$run_id-embedded"

# 2. Cluster: migrate, then the API and the workers from the image against the host's Postgres,
# RabbitMQ and S3 server. Without a Qdrant server (SEDIMENT_IMAGE_QDRANT_URL) the index is the
# API's Qdrant Edge, and the API runs the index and extract stages itself: the index and extract
# workers then must refuse to start, and do.
db="${run_id//-/_}"
psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $db" >/dev/null
s3_url="${SEDIMENT_TEST_S3_URL:-http://127.0.0.1:9000}"
curl -fsS -X PUT "$s3_url/$run_id" >/dev/null || fail "cannot create bucket $run_id on $s3_url"
admin_key="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cluster=("${common[@]}" -v "$run_id-edge:/data"
  -e SEDIMENT_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db"
  -e SEDIMENT_AMQP_URL="amqp://guest:guest@127.0.0.1:5672/%2f"
  -e SEDIMENT_AMQP_PREFIX="$run_id"
  -e SEDIMENT_S3_ENDPOINT="$s3_url" -e SEDIMENT_S3_BUCKET="$run_id" -e SEDIMENT_S3_PATH_STYLE=true
  -e SEDIMENT_S3_ACCESS_KEY_ID=test -e SEDIMENT_S3_SECRET_ACCESS_KEY=test -e SEDIMENT_S3_REGION=us-east-1
  -e SEDIMENT_ADMIN_KEY="$admin_key")
qdrant="${SEDIMENT_IMAGE_QDRANT_URL:-}"
[ -n "$qdrant" ] && cluster+=(-e SEDIMENT_QDRANT_URL="$qdrant" -e SEDIMENT_QDRANT_COLLECTION="$db")
ctr run --rm --name "$run_id-migrate" "${cluster[@]}" "$image" sediment migrate >/tmp/sediment-image-migrate.log 2>&1 \
  || { cat /tmp/sediment-image-migrate.log >&2; fail "cluster: sediment migrate"; }
api_port=$(free_port)
ctr run -d --name "$run_id-api" "${cluster[@]}" -e SEDIMENT_LISTEN="127.0.0.1:$api_port" "$image" >/dev/null
wait_http "http://127.0.0.1:$api_port/readyz" 60 || fail "cluster: the API's /readyz did not answer"
workers=(compact scene persona)
if [ -n "$qdrant" ]; then workers+=(index extract); else
  for kind in index extract; do
    if ctr run --rm "${cluster[@]}" -e SEDIMENT_WORKER_HEALTH_LISTEN="127.0.0.1:$(free_port)" "$image" "sediment-$kind" >/tmp/sediment-image-refuse.log 2>&1; then
      fail "cluster: the $kind worker started without a shared index"
    fi
    grep -q 'needs a shared index' /tmp/sediment-image-refuse.log || { cat /tmp/sediment-image-refuse.log >&2; fail "cluster: the $kind worker failed for another reason"; }
  done
  log "cluster: without a Qdrant server the index and extract workers refuse to start, as documented"
fi
for kind in "${workers[@]}"; do
  wport=$(free_port)
  ctr run -d --name "$run_id-$kind" "${cluster[@]}" -e SEDIMENT_WORKER_HEALTH_LISTEN="127.0.0.1:$wport" "$image" "sediment-$kind" >/dev/null
  wait_http "http://127.0.0.1:$wport/readyz" 60 || fail "cluster: the $kind worker's /readyz did not answer"
  podman healthcheck run "$run_id-$kind" >/dev/null 2>&1 || fail "cluster: the image's HEALTHCHECK failed in the $kind worker"
done
log "cluster: the API and the ${workers[*]} workers are ready"

api="http://127.0.0.1:$api_port"
code=$(curl -s -o /dev/null -w '%{http_code}' "${h[@]}" -d "$turn" "$api/v1/sessions/s1/messages")
[ "$code" = 401 ] || fail "cluster: a call without a key got $code, not 401"
key=$(curl -fsS -H "authorization: Bearer $admin_key" -H 'content-type: application/json' \
  -d '{"team_id":"smoke","permission":"write","name":"image smoke test"}' "$api/v1/admin/keys" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])') || fail "cluster: create an API key"
auth=("${h[@]}" -H "authorization: Bearer $key")
curl -fsS "${auth[@]}" -d "$turn" "$api/v1/sessions/s1/messages" >/dev/null || fail "cluster: append"
recalled=""
for _ in $(seq 1 60); do
  if curl -fsS "${auth[@]}" -d '{"query":"which database does the user run?"}' "$api/v1/recall" \
      | python3 -c 'import json,sys; r=json.load(sys.stdin); sys.exit(0 if any(i["kind"]=="memory" and "MySQL 8.0" in i["content"] for i in r["dynamic"]) else 1)' 2>/dev/null; then
    recalled=1; break
  fi
  sleep 1
done
[ -n "$recalled" ] || fail "cluster: recall did not return the memory extracted from the turn"
log "cluster: a turn went through L1 (extracted memory) and came back in recall"

for c in "${workers[@]}" api; do stop_and_check "$run_id-$c"; done
log "ok"
