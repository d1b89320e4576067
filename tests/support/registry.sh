#!/usr/bin/env bash
# A real registry for the tests: Debian's docker-registry (the CNCF Distribution registry,
# v2 API) on 127.0.0.1:<free port>, its storage under DIR (a temp dir the caller owns).
#
#   registry.sh install                  install docker-registry + apache2-utils if missing
#   registry.sh start DIR [USER PASS]    start one (with htpasswd auth when USER/PASS are given);
#                                        prints "PID PORT"; stop it with `kill PID`
#
# Docker treats 127.0.0.1:PORT registries as insecure-allowed: the engine needs no config.
set -euo pipefail

install() {
  if ! command -v docker-registry >/dev/null || ! command -v htpasswd >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq docker-registry apache2-utils >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null
      apt-get install -y -qq docker-registry apache2-utils >/dev/null
    }
  fi
}

case "${1:-}" in
  install) install ;;
  start)
    dir=${2:?usage: registry.sh start DIR [USER PASS]}
    install
    mkdir -p "$dir/storage"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    auth=""
    if [ -n "${3:-}" ]; then
      htpasswd -Bbn "$3" "${4:?password}" > "$dir/htpasswd"
      auth="auth:
  htpasswd:
    realm: forgepatch-test
    path: $dir/htpasswd"
    fi
    cat > "$dir/config.yml" <<CONFIG
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
$auth
CONFIG
    setsid docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 < /dev/null &
    pid=$!
    for _ in $(seq 1 100); do
      code=$(python3 - "$port" <<'PY' 2>/dev/null || true
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/", timeout=1).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
PY
)
      if [ "$code" = 200 ] || [ "$code" = 401 ]; then echo "$pid $port"; exit 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    echo "docker-registry did not start; see $dir/registry.log" >&2
    exit 1
    ;;
  *) echo "usage: registry.sh install | start DIR [USER PASS]" >&2; exit 2 ;;
esac
