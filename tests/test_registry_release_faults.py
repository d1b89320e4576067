"""`release` with a registry that fails mid-way (issue 27): the registry tags are set after the
ledger entry (the commit point) from a pending record, so a failed manifest PUT leaves a
release the next `release` completes, saying so in one line — never a `-validated` tag
without its git tag and ledger entry. The registry is the real one (Debian docker-registry)
behind a fault-injecting proxy on 127.0.0.1 (tests/support/faulty_proxy.py)."""

from __future__ import annotations

import json
import uuid

import pytest

from forgepatch.infra.refs import parse
from support.cli import Run, assert_one_line_error
from support.release_world import ARCH, PIN, TAG

pytestmark = pytest.mark.docker
RELEASE_TAG = "forgepatch-p23-sm120"


@pytest.fixture
def proxy(registry):
    from support.faulty_proxy import FaultyProxy

    p = FaultyProxy(registry.host)
    yield p
    p.stop()


def test_the_second_manifest_put_failing_is_completed_by_the_next_release(world, proxy, tmp_path):
    from forgepatch.infra import registry as remote

    world.image_repo = proxy.repo(f"forgepatch-test/faulty-{uuid.uuid4().hex[:8]}")
    world.write_matrix()
    record = tmp_path / "builds.json"
    built = world.on("build", "--arch", ARCH, "--pin", PIN, "--context-dir", world.root / "context", "--push",
                     "--record", record, "--json")
    assert built.rc == 0, built.err
    world.built.add(built.json()["image_id"])
    digest = built.json()["digest"]
    manifest = digest.partition("@")[2]
    results = world.smoke("--builds", str(record))
    reg = remote.Registry(parse(world.image_repo))
    validated, release_tag = (parse(f"{world.image_repo}:{t}") for t in (f"{PIN}-{ARCH}-validated", RELEASE_TAG))

    proxy.fail_manifest_put(2)  # the validated tag goes through, the release tag's PUT answers 500
    r = world.release(results)
    assert_one_line_error(Run(r.returncode, r.stdout, r.stderr), 1, "released (its ledger entry is written)",
                          "answered 500", "the next `forgepatch release` sets them")
    assert proxy.failed and world.tags() == [TAG]  # committed: the git tag and the ledger entry
    assert [e["tag"] for e in json.loads(world.ledger.read_text())["releases"]] == [TAG]
    assert reg.head(release_tag) is None

    proxy.fail_manifest_put(None)
    again = world.release(results, "--json")
    assert again.returncode == 0, again.stderr
    notes = [ln for ln in again.stderr.splitlines() if ln.strip()]
    assert len(notes) == 1 and f"completed an interrupted release of {TAG}" in notes[0], again.stderr
    (comb,) = json.loads(again.stdout)["combinations"]
    assert comb["status"] == "unchanged"
    assert reg.head(validated) == manifest and reg.head(release_tag) == manifest
    v = world.verify()
    assert v.returncode == 0, v.stderr
    # and a third run has nothing left to complete
    third = world.release(results)
    assert third.returncode == 0 and "interrupted" not in third.stderr, third.stderr
