"""Shared fixtures: real SGLang release sources (downloaded once, cached) and Docker."""

from __future__ import annotations

import os
import signal

import pytest

# A suite started as a background job of a shell without job control (`nohup ... &`, some CI
# launchers) inherits SIGINT ignored, and so would every forgepatch the tests start: the
# Ctrl-C tests would then wait on a process that cannot be interrupted. The tests play a
# terminal's Ctrl-C, so their processes get SIGINT's default (a Python handler becomes the
# default in a child at exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Releases whose gate layouts span docs/architecture.md (Facts) (0.5.3 inline, 0.5.10 function + server_args,
# 0.5.15 arg_groups + backend check, 0.5.20 get_platform(), 0.5.23 layer_boundary).
RELEASES = ["0.5.3", "0.5.6", "0.5.10", "0.5.15", "0.5.20", "0.5.23"]


@pytest.fixture(scope="session")
def docker_client():
    """A real Docker engine (tests/support/docker_engine.sh starts one)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # engine absent
        if os.environ.get("FORGEPATCH_REQUIRE_DOCKER"):
            pytest.fail(f"Docker engine required but not reachable: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    """A local base image with python3 (made by mmdebstrap + docker import)."""
    name = os.environ.get("FORGEPATCH_TEST_BASE_IMAGE", "forgepatch-test/base:bookworm")
    try:
        docker_client.images.get(name)
    except Exception:
        if os.environ.get("FORGEPATCH_REQUIRE_DOCKER"):
            pytest.fail(f"base image {name} missing: run tests/support/docker_engine.sh")
        pytest.skip(f"base image {name} missing")
    return name


# -- fork / drift: a git repository of real SGLang releases standing in for nightlies -----
@pytest.fixture(scope="session")
def nightlies_repo(tmp_path_factory):
    """Session-wide repo (read-only for tests): branch main = one commit per release in
    ``support.nightlies.NIGHTLY_RELEASES``, tagged ``v<version>``. Clone it to mutate."""
    from support.nightlies import build_nightlies_repo

    return build_nightlies_repo(tmp_path_factory.mktemp("nightlies") / "sglang")


@pytest.fixture
def nightly_clone(nightlies_repo, tmp_path):
    """A private clone of the nightlies repo a test may change."""
    from support.nightlies import clone_repo

    return clone_repo(nightlies_repo, tmp_path / "fork")


# -- release: a real fork repo, images and results (tests/support/release_world.py) ----------
@pytest.fixture(scope="session")
def release_images(docker_client):
    """Image IDs the release worlds made or reused; removed by ID, with the untagged step
    images under them, when the session ends (until then later worlds get cache hits)."""
    from support.release_world import remove_images

    built: set[str] = set()
    yield built
    assert remove_images(docker_client, built) == []


@pytest.fixture(scope="module")
def template_repo(tmp_path_factory):
    """The upstream repo with the fork branch made once (copied by every world)."""
    from support.release_world import fork_template

    return fork_template(tmp_path_factory.mktemp("release-template"))


@pytest.fixture
def world(tmp_path, template_repo, docker_client, base_image, release_images):
    """One test's release world: repo, matrix, patches, ledger and images."""
    from support.release_world import RUN_ID, World

    w = World(tmp_path, template_repo, docker_client, base_image, RUN_ID)
    yield w
    release_images.update(w.built)



# -- registry and a second engine (tests/support/local_registry.py) ----------------------------
@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """A real registry (Debian docker-registry) on 127.0.0.1:<port>, no auth; stopped by pid."""
    from support.local_registry import start_registry

    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory):
    """A real registry with htpasswd auth (user ``forgepatch``); stopped by pid."""
    import uuid

    from support.local_registry import start_registry

    reg = start_registry(tmp_path_factory.mktemp("auth-registry"), "forgepatch", uuid.uuid4().hex)
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def second_engine(docker_client):
    """A second Docker engine with its own image store (a stand-in GPU host); stopped by pid."""
    import shutil
    import tempfile
    from pathlib import Path

    from support.local_registry import start_engine

    root = tempfile.mkdtemp(prefix="fp-engine-")  # short: the engine's sockets live under it
    engine = start_engine(Path(root))
    yield engine
    engine.stop()
    shutil.rmtree(root, ignore_errors=True)


# -- parallel runs (pytest-xdist, tests/run.sh: -n auto --dist loadgroup) ---------------------
# The fixtures that reach the Docker engine or a registry: a test module using one (or marked
# `docker`) runs with every other such module on ONE worker, in order, as without xdist: the
# engine's images and build cache are one shared state, and the hygiene check below compares
# it whole. Every other module runs whole on some worker (its module fixtures made once).
ENGINE_FIXTURES = frozenset({"docker_client", "base_image", "registry", "auth_registry", "second_engine",
                             "release_images"})


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    engine_modules = {item.path for item in items
                      if item.get_closest_marker("docker") or ENGINE_FIXTURES & set(item.fixturenames)}
    for item in items:
        item.add_marker(pytest.mark.xdist_group("engine" if item.path in engine_modules else item.path.name))


def _xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


# -- engine hygiene (tests/support/engine_hygiene.py): the suite leaves no image behind ------
# Checked once, around the whole run: by the controller under xdist, never by a worker (it
# would see what the engine worker holds mid-run)
def pytest_sessionstart(session):
    from support import engine_hygiene

    if engine_hygiene.enabled() and not _xdist_worker(session.config):
        client = engine_hygiene.connect()
        if client is not None:
            session.config._forgepatch_engine = (client, engine_hygiene.snapshot(client))


def pytest_sessionfinish(session, exitstatus):
    state = getattr(session.config, "_forgepatch_engine", None)
    if state is None:
        return
    from support import engine_hygiene

    client, before = state
    base = os.environ.get("FORGEPATCH_TEST_BASE_IMAGE", "forgepatch-test/base:bookworm")
    left = engine_hygiene.leaks(client, before, keep={base})
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if left:
        lines = [f"engine hygiene: {len(left)} image(s)/container(s) left in the engine by this session:"] + \
                [f"  {line}" for line in left]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        else:
            print("\n".join(lines))
        session.exitstatus = 1
    elif reporter is not None:
        reporter.write_line(f"engine hygiene: the engine holds no image or container it did not hold before "
                            f"({len(before.images)} images)", green=True)
