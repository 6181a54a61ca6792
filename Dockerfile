# sediment's container image: one `sediment` binary (the API, `sediment migrate`, and every
# worker through the `sediment-<kind>` links the Helm chart runs) on a slim Debian.
#
#   podman build -t sediment:0.1.0 .                       # compile inside (the `runtime` target)
#   podman build --build-arg MODEL=true -t sediment:0.1.0 . # bake in the local embedding model
#   podman build --target runtime-prebuilt -t sediment:0.1.0 .  # ship .image-bin/sediment, built
#                                                          # outside (what .ci/image.sh does)
#
# It runs as uid 65532 under tini, keeps its state in the /data volume and works with a
# read-only root filesystem. With no settings it is the embedded deployment on 0.0.0.0:8080,
# which refuses to start until SEDIMENT_ADMIN_KEY (auth on) or SEDIMENT_AUTH=off is given:
# a non-loopback address never serves unauthenticated by accident.

ARG DEBIAN=docker.io/library/debian:bookworm-slim
ARG RUST=docker.io/library/rust:1.95-slim-bookworm

FROM ${RUST} AS builder
WORKDIR /src
COPY . .
# Without debug info (the profile's line tables are most of the file); symbols stay.
RUN cargo build --release --locked -p api --bin sediment \
 && cp target/release/sediment /usr/local/bin/sediment \
 && strip --strip-debug /usr/local/bin/sediment

# The local embedding model (all-MiniLM-L6-v2, about 90 MB) for clusters with no way out;
# without MODEL=true it is left out and mounted or fetched at run time instead.
FROM ${DEBIAN} AS model
ARG MODEL=false
# Behind a proxy or mirror: pip's index and a CA bundle (mount it with --volume), if needed.
ARG PIP_INDEX_URL
ARG PIP_CERT
COPY api/fetch-model.sh /fetch-model.sh
RUN mkdir -p /opt/sediment \
 && if [ "$MODEL" = true ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends python3 python3-pip ca-certificates \
      && SEDIMENT_MODEL_DIR=/opt/sediment/model bash /fetch-model.sh; \
    fi

FROM ${DEBIAN} AS runtime-base
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* \
 && groupadd --gid 65532 sediment \
 && useradd --uid 65532 --gid 65532 --home-dir /data --no-create-home --shell /usr/sbin/nologin sediment \
 && mkdir -p /data && chown 65532:65532 /data \
 && for w in index extract compact scene persona; do ln -s sediment "/usr/local/bin/sediment-$w"; done
COPY --from=model /opt/sediment /opt/sediment
ENV SEDIMENT_DATA_DIR=/data \
    SEDIMENT_MODEL_DIR=/opt/sediment/model \
    SEDIMENT_LISTEN=0.0.0.0:8080 \
    SEDIMENT_WORKER_HEALTH_LISTEN=0.0.0.0:9090 \
    HOME=/data
VOLUME /data
EXPOSE 8080 9090
USER 65532:65532
WORKDIR /data
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="sediment" \
      org.opencontainers.image.description="Long-term memory for AI agents: the API, sediment migrate and every worker" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# The API's /healthz, else a worker's; (the image holds no curl: bash speaks the HTTP).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 CMD ["bash", "-c", "for a in \"${SEDIMENT_HEALTH_LISTEN:-$SEDIMENT_LISTEN}\" \"$SEDIMENT_WORKER_HEALTH_LISTEN\"; do (exec 3<>\"/dev/tcp/127.0.0.1/${a##*:}\" && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 ') 2>/dev/null && exit 0; done; exit 1"]
# tini reaps and forwards SIGTERM, so the graceful drain runs within SEDIMENT_SHUTDOWN_DEADLINE_MS.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["sediment"]

# The binary built outside, staged by .ci/image.sh as .image-bin/sediment (CI's build).
FROM runtime-base AS runtime-prebuilt
COPY .image-bin/sediment /usr/local/bin/sediment

# The default: built from source in the builder stage.
FROM runtime-base AS runtime
COPY --from=builder /usr/local/bin/sediment /usr/local/bin/sediment
