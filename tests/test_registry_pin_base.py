"""`forgepatch pin base ARCH` against a real registry (Docker Hub is unreachable here, so the
local registry stands in for it): the configured tag is resolved to the digest the registry
has and recorded as `base_image = "repo@sha256:..."` with tomlkit (every comment and the rest
of the file kept); `build` warns once for a base given by a moving tag and builds on the
pinned digest without a warning."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from support.cli import Run, assert_one_line_error
from support.release_world import ARCH, PIN, cli_env

pytestmark = pytest.mark.docker


def run(world, *args) -> Run:
    proc = subprocess.run([sys.executable, "-m", "forgepatch", "--config", str(world.config), "--patches",
                           str(world.patches), *map(str, args)], capture_output=True, text=True, env=cli_env(), timeout=600)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def pushed_base(registry, docker_client, base_image):
    """The test base image in the registry as <registry>/forgepatch-test/base-<id>:bookworm."""
    repo = registry.repo(f"forgepatch-test/base-{uuid.uuid4().hex[:8]}")
    docker_client.api.tag(base_image, repo, "bookworm")
    digest = None
    for chunk in docker_client.api.push(repo, tag="bookworm", stream=True, decode=True):
        assert "error" not in chunk, chunk
        digest = (chunk.get("aux") or {}).get("Digest") or digest
    yield f"{repo}:bookworm", f"{repo}@{digest}"
    docker_client.api.remove_image(f"{repo}:bookworm", noprune=True)  # the tag only: the base stays


def test_pin_base_records_the_digest_and_keeps_the_file(world, pushed_base):
    tagged, digest = pushed_base
    world.write_matrix()
    text = world.config.read_text().replace(f'base_image = "{world.base}"', f'base_image = "{tagged}"  # the CUDA base', 1)
    text = "# my fork's matrix: keep this comment\n" + text
    world.config.write_text(text)

    r = run(world, "pin", "base", ARCH, "--json")
    assert r.rc == 0, r.err
    assert {k: r.json()[k] for k in ("arch", "was", "digest", "changed")} == {"arch": ARCH, "was": tagged, "digest": digest, "changed": True}
    after = world.config.read_text()
    assert f'base_image = "{digest}"' in after and "# my fork's matrix: keep this comment" in after
    # only that line changed
    before_lines, after_lines = text.splitlines(), after.splitlines()
    changed = [(a, b) for a, b in zip(before_lines, after_lines) if a != b]
    assert len(before_lines) == len(after_lines) and len(changed) == 1, changed
    assert f"pinned from {tagged}" in changed[0][1]
    # again: already pinned, file untouched
    r = run(world, "pin", "base", ARCH)
    assert r.rc == 0 and "pinned already" in r.out and world.config.read_text() == after

    # build on the pinned base: no moving-tag warning; on the tag: exactly one
    built = run(world, "build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "ctx", "--json")
    assert built.rc == 0, built.err
    world.built.add(built.json()["image_id"])
    assert "moving tag" not in built.err and built.json()["base_image"] == digest
    built = run(world, "build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "ctx", "--base-image", tagged, "--json")
    assert built.rc == 0, built.err
    world.built.add(built.json()["image_id"])
    assert built.err.count("moving tag") == 1 and "forgepatch pin base" in built.err


def test_pin_base_bad_input(world, registry, tmp_path):
    world.write_matrix()
    before = world.config.read_text()
    missing = registry.repo(f"forgepatch-test/none-{uuid.uuid4().hex[:8]}:latest")
    r = run(world, "pin", "base", ARCH, "--image", missing)
    assert_one_line_error(r, 2, f"registry {registry.host} has no {missing}")
    r = run(world, "pin", "base", ARCH, "--image", "127.0.0.1:9/x/y:z")
    assert_one_line_error(r, 2, "cannot reach registry 127.0.0.1:9")
    r = run(world, "pin", "base", ARCH, "--image", "Not A Ref")
    assert_one_line_error(r, 2, "--image")
    assert world.config.read_text() == before


def test_pin_base_killed_or_interrupted_at_each_syscall(world, pushed_base, tmp_path):
    """`pin base` writes matrix.toml through its directory's journal: killed (SIGKILL) or
    interrupted (SIGINT) at the first and last of each run of its file-system calls in the
    directory (O_CREAT opens too; the journal path is pin update's, killed at every call in
    tests/test_crash_writers.py), the next command (`pin list`) finds the tag or the digest,
    nothing else."""
    import shutil

    from support.killmatrix import _cli, crash_matrix, digest, distinct

    tagged, pinned = pushed_base
    world.write_matrix()
    text = world.config.read_text().replace(f'base_image = "{world.base}"', f'base_image = "{tagged}"', 1)

    def case(d):
        d.mkdir(parents=True)
        (d / "matrix.toml").write_text(text)
        return d

    done = case(tmp_path / "done")
    assert _cli(["pin", "base", ARCH], done, env=cli_env()).returncode == 0
    assert f'base_image = "{pinned}"' in (done / "matrix.toml").read_text()
    states = crash_matrix(tmp_path, case, ["pin", "base", ARCH], lambda d: _cli(["pin", "list"], d, env=cli_env()),
                          original=digest(case(tmp_path / "original")), finished=digest(done), recovered="pin base",
                          creates=True, inside=True, env=cli_env(), sample=distinct, effective=True)
    assert set(states.values()) == {"original", "finished"}
    shutil.rmtree(done)
