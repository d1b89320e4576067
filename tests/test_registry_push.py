"""`forgepatch build --push` on a real registry (Debian's docker-registry on 127.0.0.1): the
content-addressed tag is pushed and its digest recorded; a second push of the same content is
a remote no-op (no upload session, no new blob: read from the registry's own log and
storage); an unreachable registry and refused or missing credentials are one-line bad input
before anything is built; `--audit` fails the build (nothing pushed) when a CUDA library has
no code for the arch."""

from __future__ import annotations

import json
import socket
import uuid

import pytest

from forgepatch.combination.records import BuildRecord
from support.cli import Run, assert_one_line_error
from support.release_world import ARCH, PIN, cli_env

pytestmark = pytest.mark.docker


def _run(world, *args, env=None) -> Run:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "forgepatch", "--config", str(world.config), "--patches",
                           str(world.patches), *map(str, args)], capture_output=True, text=True,
                          env=env or cli_env(), timeout=600)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def _use_repo(world, repo: str) -> None:
    world.image_repo = repo
    world.write_matrix()


def _build(world, *args, env=None) -> Run:
    r = _run(world, "build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "context", *args, env=env)
    if r.rc == 0 and "--json" in args:
        world.built.add(r.json()["image_id"])
    return r


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _local_images(world) -> list[str]:
    return [i.id for i in world.client.images.list(name=world.image_repo)]


def test_push_records_the_digest_and_a_second_push_uploads_nothing(world, registry, tmp_path):
    from forgepatch.infra import registry as remote
    from forgepatch.infra.refs import parse

    _use_repo(world, registry.repo(f"forgepatch-test/push-{uuid.uuid4().hex[:8]}"))
    record = tmp_path / "builds.json"
    first = _build(world, "--push", "--record", record, "--json")
    assert first.rc == 0, first.err
    doc = first.json()
    repo = world.image_repo
    assert doc["uploaded"] is True
    assert doc["digest"].startswith(f"{repo}@sha256:")
    # the registry itself resolves the content tag to that digest, and names the same image
    found = remote.remote_image(parse(doc["tag"]))
    assert found is not None and found.digest_ref == doc["digest"] and found.image_id == doc["image_id"]
    assert found.labels["forgepatch.context-hash"] == doc["content_hash"]
    rec = BuildRecord.load(record).find(ARCH, PIN)
    assert rec is not None and rec.digest == doc["digest"] and rec.image_id == doc["image_id"] and rec.uploaded
    assert rec.tag == doc["tag"] and rec.patchset == world.patchset

    blobs, uploads, puts = registry.blobs(), registry.upload_sessions(), registry.manifest_puts()
    assert uploads > 0 and puts > 0  # the first push did upload (the log is read right)
    second = _build(world, "--push", "--record", record, "--json")
    assert second.rc == 0, second.err
    again = second.json()
    assert again["cache_hit"] is True and again["uploaded"] is False
    assert again["digest"] == doc["digest"]
    assert again["push_seconds"] < 1.0
    assert registry.blobs() == blobs
    assert registry.upload_sessions() == uploads and registry.manifest_puts() == puts
    assert BuildRecord.load(record).find(ARCH, PIN).uploaded is False

    # the human rendering says so too
    text = _build(world, "--push")
    assert text.rc == 0, text.err
    assert "already in the registry, nothing uploaded" in text.out and doc["digest"] in text.out


def test_unreachable_registry_is_bad_input_before_building(world):
    _use_repo(world, f"127.0.0.1:{_free_port()}/forgepatch-test/nowhere-{uuid.uuid4().hex[:8]}")
    r = _build(world, "--push", "--json")
    assert_one_line_error(r, 2, "cannot reach registry 127.0.0.1:", "connection refused")
    assert _local_images(world) == []  # nothing was built or tagged


def test_wrong_or_missing_credentials_are_bad_input_and_nothing_is_tagged(world, auth_registry, tmp_path):
    _use_repo(world, auth_registry.repo(f"forgepatch-test/auth-{uuid.uuid4().hex[:8]}"))
    blobs = auth_registry.blobs()
    wrong = auth_registry.docker_config(tmp_path / "wrong", password="not-the-password")
    r = _build(world, "--push", env=dict(cli_env(), DOCKER_CONFIG=str(wrong)))
    assert_one_line_error(r, 2, f"registry {auth_registry.host} refused the credentials of user 'forgepatch'")
    assert "not-the-password" not in r.err + r.out
    none = auth_registry.docker_config(tmp_path / "none", user=None)
    r = _build(world, "--push", env=dict(cli_env(), DOCKER_CONFIG=str(none)))
    assert_one_line_error(r, 2, f"registry {auth_registry.host} needs credentials", "docker login")
    assert _local_images(world) == [] and auth_registry.blobs() == blobs


def test_push_with_the_right_credentials(world, auth_registry, tmp_path):
    _use_repo(world, auth_registry.repo(f"forgepatch-test/auth-{uuid.uuid4().hex[:8]}"))
    config = auth_registry.docker_config(tmp_path / "docker")
    r = _build(world, "--push", "--json", env=dict(cli_env(), DOCKER_CONFIG=str(config)))
    assert r.rc == 0, r.err
    assert r.json()["digest"].startswith(world.image_repo + "@sha256:")
    assert auth_registry.password not in r.err + r.out


def test_audit_failure_fails_the_build_and_pushes_nothing(world, registry, tmp_path):
    from test_images_audit import kernel_wheel

    _use_repo(world, registry.repo(f"forgepatch-test/audit-{uuid.uuid4().hex[:8]}"))
    wheel = kernel_wheel(tmp_path / "wheels")
    text = world.config.read_text().replace(f"[arches.{ARCH}]\n", f"[arches.{ARCH}]\naudit = true\nextra_wheels = [{json.dumps(str(wheel))}]\n", 1)
    world.config.write_text(text)
    record = tmp_path / "builds.json"
    blobs = registry.blobs()
    r = _build(world, "--push", "--record", record)
    for image in world.client.images.list(name=world.image_repo):
        world.built.add(image.id)
    assert_one_line_error(r, 1, f"kernel audit of {world.image_repo}:", f"no code for {ARCH}", "libfp_sm90a.so", "not pushed")
    assert registry.blobs() == blobs and not record.exists()


def test_audit_pass_is_recorded(world, tmp_path):
    record = tmp_path / "builds.json"
    r = _build(world, "--audit", "--record", record, "--json")
    assert r.rc == 0, r.err
    assert r.json()["audit"]["verdict"] == "pass"
    rec = BuildRecord.load(record).find(ARCH, PIN)
    assert rec.audit is not None and rec.audit.verdict == "pass" and rec.audit.arch == ARCH
    assert rec.digest is None and rec.uploaded is None  # not pushed
