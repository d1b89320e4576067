#!/usr/bin/env bash
# Make a Docker engine and a local base image available (no registry is reachable here).
# Idempotent: reuses a running engine, an installed docker.io and a cached base tarball.
# Exports nothing; prints the base image name. Used by tests/run.sh.
set -euo pipefail
BASE_IMAGE=${FORGEPATCH_TEST_BASE_IMAGE:-forgepatch-test/base:bookworm}
CACHE=${FORGEPATCH_CACHE_DIR:-$HOME/.cache/forgepatch}
mkdir -p "$CACHE"

if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io mmdebstrap >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  (setsid dockerd --iptables=false --ip6tables=false --bridge=none >"$CACHE/dockerd.log" 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see $CACHE/dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  tarball="$CACHE/base-bookworm.tar"
  if [ ! -s "$tarball" ]; then
    partial="$CACHE/base-bookworm.partial.tar"   # mmdebstrap picks the format by extension
    rm -rf "$partial"
    mmdebstrap --quiet --variant=apt --include=python3,python3-pip bookworm "$partial" >/dev/null
    mv "$partial" "$tarball"
  fi
  docker import "$tarball" "$BASE_IMAGE" >/dev/null
fi
echo "$BASE_IMAGE"
