"""Every package of a combination (issue 23, items 4-5): the ``forgepatch.packages`` label and
the build record name each package's upstream and patchset; labels and records written
before packages were recorded still read (as SGLang alone). No engine."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.combination import (
    LABEL, PackageIdentity, Upstream, packages_label, packages_mismatch, packages_of_labels,
)
from forgepatch.combination.records import Build, BuildRecord

SHA = "3" * 64
FI_SHA = "4" * 64

# the labels of an image `forgepatch build` made before the packages label existed (sm120, 0.5.23)
OLD_LABELS = {
    "org.opencontainers.image.version": "0.5.23", "org.opencontainers.image.revision": SHA,
    "forgepatch.arch": "sm120", "forgepatch.pin": "v0.5.23", "forgepatch.upstream": "pypi:0.5.23",
    "forgepatch.patchset": "9f" * 32, "forgepatch.patches": "sm120-flashinfer-allreduce-fusion",
    "forgepatch.engine": "0.1.0+1a2b3c4d5e6f", "forgepatch.context-hash": "ab" * 32,
}
# a build record entry as `build --record` wrote it before packages were recorded
OLD_RECORD = {"schema": "forgepatch.build-record/1", "builds": [{
    "arch": "sm120", "pin": "v0.5.23", "image_id": "sha256:" + "1" * 64, "tag": "r/x:v0.5.23-sm120-abc",
    "content_hash": "abc", "digest": None, "uploaded": None, "patchset": "9f" * 32, "upstream": "pypi:0.5.23",
    "engine": "0.1.0+1a2b3c4d5e6f", "base_image": "b", "audit": None, "built_at": "2026-12-01T10:00:00Z"}]}


def test_labels_written_before_name_sglang_alone():
    ids = packages_of_labels(OLD_LABELS)
    assert ids == {"sglang": PackageIdentity("sglang", Upstream("pypi", "0.5.23", SHA), "9f" * 32)}
    assert packages_of_labels({"forgepatch.arch": "sm120"}) == {}  # no identity recorded at all


def test_a_record_written_before_names_sglang_alone_and_a_new_one_every_package(tmp_path):
    old = BuildRecord.parse("old.json", json.dumps(OLD_RECORD).encode()).builds[0]
    assert old.package_ids() == {"sglang": PackageIdentity("sglang", Upstream("pypi", "0.5.23"), "9f" * 32)}
    from forgepatch.combination.records import PackageBuild

    both = [PackageIdentity("sglang", Upstream("pypi", "0.5.23", SHA), "aa"),
            PackageIdentity("flashinfer", Upstream("pypi", "0.6.1", FI_SHA), "bb")]
    path = tmp_path / "b.json"
    BuildRecord(builds=[Build(**{**OLD_RECORD["builds"][0], "packages": [PackageBuild.of(p) for p in both]})]).write(path)
    back = BuildRecord.load(path).builds[0]
    assert back.package_ids() == {p.name: p for p in both}


def test_the_label_names_each_package_and_a_malformed_one_is_refused():
    both = (PackageIdentity("sglang", Upstream("pypi", "0.5.23", SHA), "aa"),
            PackageIdentity("flashinfer", Upstream("git", "0.7.0", "c" * 40), ""))
    labels = {**OLD_LABELS, LABEL["packages"]: packages_label(both)}
    assert labels[LABEL["packages"]] == f"sglang=pypi:0.5.23:{SHA}:aa; flashinfer=git:0.7.0:{'c' * 40}:"
    assert packages_of_labels(labels) == {p.name: p for p in both}  # the label wins over the old ones
    for junk in ("sglang", "sglang=pypi:0.5.23", "sglang=zip:1:2:3", "a b=pypi:1::x"):
        with pytest.raises(ValueError):
            packages_of_labels({LABEL["packages"]: junk})


_names = st.from_regex(r"[a-z][a-z0-9_-]{0,15}", fullmatch=True)
_versions = st.none() | st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}(\.post[0-9]|rc[0-9]|\+cu[0-9]{3})?", fullmatch=True)
_hex = st.none() | st.from_regex(r"[0-9a-f]{12,64}", fullmatch=True)
_ids = st.builds(PackageIdentity, _names, st.builds(Upstream, st.sampled_from(["pypi", "git", "dir"]), _versions, _hex),
                 st.from_regex(r"[0-9a-f]{0,64}", fullmatch=True))


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(_ids, max_size=4, unique_by=lambda p: p.name))
def test_any_packages_survive_the_label(ids):
    assert packages_of_labels({LABEL["packages"]: packages_label(ids)}) == {p.name: p for p in ids}


@settings(max_examples=100, deadline=None)
@given(a=_ids, b=_ids)
def test_a_mismatch_is_found_exactly_when_upstream_or_patchset_differ(a, b):
    b = PackageIdentity(a.name, b.upstream, b.patchset)
    why = packages_mismatch({a.name: a}, {b.name: b})
    if a == b and a.upstream.kind != "dir":
        assert why == []
    if a.patchset != b.patchset or a.upstream.kind == "dir" or (
            b.upstream.kind == "pypi" and a.upstream.version != b.upstream.version):
        assert why and why[0].startswith(f"{a.name}: ")


def test_a_package_on_one_side_only_is_a_mismatch():
    sg = PackageIdentity("sglang", Upstream("pypi", "0.5.23", SHA), "aa")
    fi = PackageIdentity("flashinfer", Upstream("pypi", "0.6.1", FI_SHA), "bb")
    assert packages_mismatch({"sglang": sg}, {"sglang": sg, "flashinfer": fi}) == [
        f"flashinfer: not in the image (validated with {fi.to_label()})"]
    assert packages_mismatch({"sglang": sg, "flashinfer": fi}, {"sglang": sg})[0].startswith("flashinfer: the image carries it")


def test_an_image_lacking_a_patched_package_or_a_pin_without_it_is_not_the_combination():
    """Release and smoke admission (``packages_problems``): an image labelled before packages
    were labelled carries SGLang alone; a pin naming no version of the package matches nothing."""
    from forgepatch.combination import packages_problems

    fi = PackageIdentity("flashinfer", Upstream("pypi", "0.6.1", FI_SHA), "bb")
    assert packages_problems(OLD_LABELS, {"flashinfer": fi}) == [
        "flashinfer: the image does not carry it patched (label forgepatch.packages names sglang)"]
    labels = {**OLD_LABELS, LABEL["packages"]: packages_label([fi])}
    assert packages_problems(labels, {"flashinfer": fi}) == []
    other_patchset = PackageIdentity("flashinfer", fi.upstream, "cc")
    assert packages_problems(labels, {"flashinfer": other_patchset}) == ["flashinfer: patchset bb vs cc"]
    other_wheel = PackageIdentity("flashinfer", Upstream("pypi", "0.6.1", "5" * 64), "bb")
    assert packages_problems(labels, {"flashinfer": other_wheel})[0].startswith(
        "flashinfer: a different wheel of that version")
    unpinned = PackageIdentity("flashinfer", Upstream("none"), "bb")
    assert packages_problems(labels, {"flashinfer": unpinned})[0].startswith("flashinfer: the pin names no version")
    assert packages_problems({LABEL["packages"]: "junk"}, {"flashinfer": fi})[0].startswith("label forgepatch.packages:")
