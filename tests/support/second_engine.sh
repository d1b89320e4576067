#!/usr/bin/env bash
# A second Docker engine on this machine (a stand-in "GPU host" with its own image store):
# its own --data-root, --exec-root, --pidfile and unix socket under DIR. Prints "PID SOCKET";
# stop it with `kill PID`. Needs docker.io (tests/support/docker_engine.sh installs it).
set -euo pipefail
dir=${1:?usage: second_engine.sh DIR}
mkdir -p "$dir/data" "$dir/exec"
sock="$dir/docker.sock"
setsid dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
  --host "unix://$sock" --iptables=false --ip6tables=false --bridge=none \
  >"$dir/dockerd.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 120); do
  if DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1; then echo "$pid $sock"; exit 0; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.25
done
kill "$pid" 2>/dev/null || true
echo "the second dockerd did not start; see $dir/dockerd.log" >&2
exit 1
