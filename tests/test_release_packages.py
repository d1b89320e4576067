"""`forgepatch release` of a series that patches SGLang and FlashInfer (issue 23): the release
judges every package's fork branch — SGLang's in the fork repository, FlashInfer's in its
checkout (`[pins.PIN.packages.flashinfer] repo`, where `fork` made it) — each against the
patchset of that package's part of the series and the pin's revision of that package. A
missing, re-based or stale FlashInfer branch refuses the release with a reason naming the
package and its checkout; with both branches right the combination is released, the tag
message naming the FlashInfer branch too. A series over SGLang alone releases as before
(tests/test_release_flow.py and the other release tests).

Real parts: a git repository of the real SGLang 0.5.23 release with the fork branches made by
the real `forgepatch fork`, a git checkout of the real flashinfer-python 0.6.1 release (every
file of its wheel's package), the fixture patches (a major-list codemod and a text patch on
the .cu launcher), images built by the real `forgepatch build` on the test base (FlashInfer
from that git revision), smoke results of the real `forgepatch smoke` (docker runner).
"""

from __future__ import annotations

import json
import shutil

import pytest

from support.release_world import ARCH, BRANCH, PIN, RUN_ID, TAG, PackagesWorld, fi_upstream, git, reasons

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def fi_template(tmp_path_factory):
    return fi_upstream(tmp_path_factory.mktemp("fi-template") / "flashinfer")


@pytest.fixture
def pworld(tmp_path, template_repo, docker_client, base_image, release_images, fi_template):
    upstream, release, later = fi_template
    fi = tmp_path / "flashinfer"
    git(tmp_path, "clone", "-q", str(upstream), str(fi))
    w = PackagesWorld(tmp_path, template_repo, docker_client, base_image, RUN_ID, fi, release)
    w.later = later
    yield w
    release_images.update(w.built)


def refused(w, results) -> dict[str, list[str]]:
    r = w.release(results, "--json")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert w.tags() == [] and w.ledger_bytes() is None
    return reasons(r)


def test_released_only_when_the_flashinfer_branch_is_there_and_right(pworld):
    w = pworld
    forked = w.fork()
    [fdoc] = forked["packages"]
    assert (fdoc["package"], fdoc["status"], fdoc["upstream"]) == ("flashinfer", "created", w.fi_rev)
    image = w.build()
    results = w.smoke()
    labels = w.client.api.inspect_image(image)["Config"]["Labels"]
    assert f"flashinfer=git:0.6.1:{w.fi_rev}:{fdoc['patchset']}" in labels["forgepatch.packages"]

    # the flashinfer branch is gone (a checkout that never had it): refused, naming package and checkout
    head = git(w.fi, "rev-parse", BRANCH)
    git(w.fi, "branch", "-D", BRANCH)
    got = refused(w, results)
    assert list(got) == ["no-branch"], got
    (msg,) = got["no-branch"]
    assert msg.startswith(f"flashinfer: no fork branch {BRANCH} in {w.fi}, local or remote-tracking"), msg

    # a remote-tracking branch counts (a CI checkout fetches it): the release passes
    git(w.fi, "update-ref", f"refs/remotes/origin/{BRANCH}", head)
    r = w.release(results, "--json")
    assert r.returncode == 0, (r.stdout, r.stderr)
    comb = json.loads(r.stdout)["combinations"][0]
    assert comb["status"] == "released"
    [branch] = comb["combination"]["packages"]
    assert (branch["package"], branch["repo"], branch["branch"], branch["head"], branch["upstream"],
            branch["patchset"]) == ("flashinfer", str(w.fi), BRANCH, head, w.fi_rev, fdoc["patchset"])
    message = git(w.repo, "tag", "-l", "--format=%(contents)", TAG)
    assert (f"flashinfer fork branch {BRANCH} at {head} ({w.fi}), upstream {w.fi_rev}, patchset {fdoc['patchset']}"
            in message)
    assert f"Forgepatch-Patchset: {w.patchset}" in message


def test_a_flashinfer_patch_edited_after_fork_refuses_the_release(pworld):
    """Image and results are made again with the edited patch (so they are right): only the
    FlashInfer branch, made with the old patch files, holds the release back; forking again
    releases it."""
    w = pworld
    forked = w.fork()
    made_with = forked["packages"][0]["patchset"]
    sg_head = git(w.repo, "rev-parse", BRANCH)
    patch = w.patches / "fi-moe-launcher.toml"
    patch.write_text(patch.read_text().replace('summary = "FlashInfer fused-MoE launcher: accept SM12x',
                                               'summary = "FlashInfer fused-MoE launcher (edited): accept SM12x'))
    w.build()
    results = w.smoke()
    got = refused(w, results)
    assert list(got) == ["patchset-changed"], got
    (msg,) = got["patchset-changed"]
    from support.release_world import FI_PATCHES, patchset_of

    now = patchset_of(w.patches, FI_PATCHES)
    assert msg == (f"flashinfer: patchset changed since branch {BRANCH} in {w.fi} was made: it was made with "
                   f"patchset {made_with}, the flashinfer patch files now hash to {now} (re-run "
                   f"`forgepatch fork --arch {ARCH} --pin {PIN}`)"), msg
    again = w.fork()
    assert (again["status"], again["packages"][0]["status"]) == ("unchanged", "updated")  # sglang's part is the same
    assert git(w.repo, "rev-parse", BRANCH) == sg_head
    r = w.release(results, "--json")
    assert r.returncode == 0, (r.stdout, r.stderr)


def test_a_flashinfer_branch_of_another_revision_or_a_pypi_pin_is_refused(pworld):
    w = pworld
    w.fork()
    w.build()
    results = w.smoke()
    # the pin moves to a later FlashInfer commit: its branch (and the image) are of the old one
    config = w.config.read_text()
    w.config.write_text(config.replace(w.fi_rev, w.later))
    got = refused(w, results)
    assert sorted(got) == ["branch-upstream", "image-packages"], got
    (msg,) = got["branch-upstream"]
    assert msg.startswith(f"flashinfer: branch {BRANCH} in {w.fi} was made from git {w.fi_rev[:12]}"), msg
    assert msg.endswith(f"but pin {PIN} names flashinfer at git {w.later[:12]} (re-run `forgepatch fork --arch "
                        f"{ARCH} --pin {PIN}`)"), msg
    # the pin names FlashInfer by its PyPI release: no branch of it can be made, none is checked
    w.config.write_text(config.replace(f'rev = "{w.fi_rev}"\nrepo = "{w.fi}"', 'pypi = "0.6.1"'))
    got = refused(w, results)
    (msg,) = got["no-branch"]
    assert msg.startswith(f"flashinfer: its fork branch {BRANCH} cannot be checked: the {ARCH} series patches "
                          "flashinfer too (patch fi-jit-majors)"), msg
    assert "names it by its PyPI release 0.6.1" in msg
    # its checkout gone: refused, naming where it was looked for
    w.config.write_text(config)
    shutil.rmtree(w.fi)
    got = refused(w, results)
    (msg,) = got["no-branch"]
    assert msg == (f"flashinfer: its fork branch {BRANCH} cannot be checked: flashinfer's repository '{w.fi}' is not "
                   f"a local git checkout (set [pins.\"{PIN}\".packages.flashinfer] repo, or [packages.flashinfer] "
                   "repo, to one)"), msg
