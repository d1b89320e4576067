#!/usr/bin/env bash
# The test command: installs what the tests need (package, test extras, a Docker engine and
# a local base image), then runs the whole suite. Works on a fresh machine; CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[test]'
export FORGEPATCH_TEST_BASE_IMAGE=$(bash tests/support/docker_engine.sh)
export FORGEPATCH_REQUIRE_DOCKER=1   # docker tests fail, not skip, when the engine is missing
exec python3 -m pytest "$@"
