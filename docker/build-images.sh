#!/usr/bin/env bash
# Build the images, from nothing if need be:
#   debian:bookworm-slim  pulled where a registry answers, else made by make-base-image.sh
#   podium:latest         docker/Dockerfile with the host-built target/release/podium
#   redis-ref:latest      docker/Dockerfile.redis-ref: Debian's redis-server 7.0 (and
#                         redis-sentinel) packaged the same way, the reference for the tests
#   podium-compose-app:latest  tests/compose/app: python3 + redis-py, redis-tools and
#                         prometheus-redis-exporter from Debian, the tests' client
#
#   docker/build-images.sh [--podium-only]
# PODIUM_BIN overrides the binary (default target/release/podium, built by `make build`).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build-images: $*" >&2; exit 1; }
command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the Docker Engine does not answer (docker info failed)"

BIN=${PODIUM_BIN:-target/release/podium}
[ -x "$BIN" ] || die "$BIN is missing: run 'cargo build --release' (make build) first"

start=$(date +%s)
if ! docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  if ! timeout 120 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
    echo "build-images: debian:bookworm-slim cannot be pulled here; making it from Debian's packages"
    docker/make-base-image.sh
  fi
fi

ctx=target/docker-context
rm -rf "$ctx"
mkdir -p "$ctx"
# Debug info off (46 MB -> 8 MB); the symbol table stays, so backtraces still name functions.
if command -v strip >/dev/null; then
  strip --strip-debug -o "$ctx/podium" "$BIN"
else
  cp "$BIN" "$ctx/podium"
fi
cp docker/docker-entrypoint.sh "$ctx/"
chmod 0755 "$ctx/podium" "$ctx/docker-entrypoint.sh"

build() { # tag dockerfile context
  local t0
  t0=$(date +%s)
  local log=target/docker-build-${1%%:*}.log
  docker build -t "$1" -f "$2" "$3" >"$log" 2>&1 || { tail -40 "$log" >&2; die "docker build of $1 failed (log: $log)"; }
  echo "build-images: $1 built in $(( $(date +%s) - t0 )) s, $(docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.1f MB", $1/1e6}')"
}

if [ "${1:-}" = --podium-only ]; then
  build podium:latest docker/Dockerfile "$ctx"
else
  # At once: each mostly waits on Debian's mirror.
  pids=()
  build podium:latest docker/Dockerfile "$ctx" & pids+=($!)
  build redis-ref:latest docker/Dockerfile.redis-ref "$ctx" & pids+=($!)
  build podium-compose-app:latest tests/compose/app/Dockerfile tests/compose/app & pids+=($!)
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  [ $rc = 0 ] || die "an image failed to build"
fi
echo "build-images: done in $(( $(date +%s) - start )) s"
