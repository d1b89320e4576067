"""Byte-exact sources: a patched file differs from its original only in the edited lines.

Files are read as bytes and decoded the way Python decodes them (BOM, PEP 263 cookie, else
UTF-8); line ends, form feeds and every byte outside the edits are written back unchanged
(``tests/support/bytecheck.py`` checks the written bytes without forgepatch's decoding). On
every release of the corpus, and on release files rewritten with Latin-1 comments and a
coding cookie, a BOM, CRLF line ends and form feeds. A file that does not decode is kept
byte for byte when untouched and refused (``file:line: not UTF-8``, exit 2) when it must be
edited.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forgepatch.sources import pypi_tree
from tests.support import bytecheck
from tests.support.cli import assert_one_line_error, forgepatch
from tests.support.releases import CORPUS

GATE = re.compile(rb"is_sm(90|100)")  # the only lines the sm120 patch may rewrite
VERSION = "0.5.23"


def editable(line: bytes) -> bool:
    return GATE.search(line) is not None


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def series():
    from forgepatch.config import load_matrix
    from forgepatch.paths import SHIPPED_MATRIX, SHIPPED_PATCHES
    from forgepatch.patching.series import load_series

    matrix = load_matrix(SHIPPED_MATRIX)
    return {arch: load_series(matrix, arch, SHIPPED_PATCHES) for arch in ("sm120", "sm103")}


@pytest.mark.slow
@pytest.mark.parametrize("version", CORPUS)
def test_every_release_keeps_every_byte_outside_the_edits(version, series):
    from forgepatch.patching.series import run_series
    from forgepatch.patching.trees import DirTree

    src = pypi_tree(version)
    for arch, s in series.items():
        res = run_series(s, DirTree(src.package, pristine=True), version)
        assert not res.drift, (arch, res.to_json())
        new = res.changed_bytes()
        assert new, (arch, version)
        edits = sum(1 for p in res.patches for site in p.sites for loc in site.locations
                    if loc.status.value == "applied" and loc.line)
        for rel, data in new.items():
            orig = (src.package / rel).read_bytes()  # the file as it is on disk
            bytecheck.assert_preserved(orig, data, editable, max_replaced=edits, name=f"{arch} {version} {rel}")
        # and the result is a fixed point: written back and re-read, nothing changes
        assert res.original_bytes() == {rel: (src.package / rel).read_bytes() for rel in new}


# -- crafted files --------------------------------------------------------------------------
def latin1(data: bytes) -> bytes:
    """A coding cookie, and a Latin-1 comment before every gate line and at the end."""
    out = [b"# -*- coding: latin-1 -*-\n"]
    for line in bytecheck.lines(data.decode("utf-8").encode("latin-1", "xmlcharrefreplace")):
        if editable(line):
            out.append(re.match(rb"[ \t]*", line).group(0) + b"# caf\xe9 na\xefve \xa7 gate below\n")
        out.append(line)
    return b"".join(out) + b"# fin \xe9t\xe9\n"


def bom(data: bytes) -> bytes:
    return codecs.BOM_UTF8 + data


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def form_feeds(data: bytes) -> bytes:
    """A form feed line before every top-level def/class (PEP 8 allows it; Python too)."""
    return re.sub(rb"(?m)^(?=(?:def|class|async def) )", b"\x0c\n", data)


VARIANTS = {
    "latin1": latin1,
    "bom": bom,
    "crlf": crlf,
    "form-feeds": form_feeds,
    "latin1+crlf+form-feeds": lambda d: crlf(form_feeds(latin1(d))),
    "bom+crlf": lambda d: bom(crlf(d)),
}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The release tree and its sm120-patched copy (the reference)."""
    root = tmp_path_factory.mktemp("plain")
    orig = root / "orig"
    shutil.copytree(pypi_tree(VERSION).package, orig / "sglang")
    patched = root / "patched"
    shutil.copytree(orig, patched)
    run = forgepatch("apply", "--arch", "sm120", "--source", patched, "--in-place", "--json")
    assert run.rc == 0, run.err
    return orig, patched, run.json()["changed_files"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_crafted_encodings_line_ends_and_form_feeds_survive(variant, plain, tmp_path):
    orig, patched, changed = plain
    make = VARIANTS[variant]
    tree = tmp_path / "tree"
    shutil.copytree(orig, tree)
    before = {}
    for rel in changed:
        path = tree / "sglang" / rel
        path.write_bytes(make(path.read_bytes()))
        before[rel] = path.read_bytes()
    untouched = digest(tree)
    diff = subprocess.run([sys.executable, "-m", "forgepatch", "apply", "--arch", "sm120", "--source", str(tree), "--diff"],
                          capture_output=True)
    assert diff.returncode == 0, diff.stderr
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place", "--json")
    assert run.rc == 0, run.err
    assert sorted(run.json()["changed_files"]) == sorted(changed)
    for rel in changed:
        new = (tree / "sglang" / rel).read_bytes()
        bytecheck.assert_preserved(before[rel], new, editable, max_replaced=2, name=f"{variant} {rel}")
        # the same edits as on the plain file: the variant of the patched file, exactly
        assert new == make((patched / "sglang" / rel).read_bytes()), rel
    after = digest(tree)
    assert {k for k in after if after[k] != untouched[k]} == {f"sglang/{rel}" for rel in changed}
    # --diff is a diff of the bytes: the file's encoding and line ends, applicable as is
    assert b"\xef\xbf\xbd" not in diff.stdout
    if "latin1" in variant:
        assert b"caf\xe9" in diff.stdout  # context lines in the file's own encoding
    copy = tmp_path / "by-diff"
    shutil.copytree(tmp_path / "tree", copy)
    for rel in changed:
        (copy / "sglang" / rel).write_bytes(before[rel])
    applied = subprocess.run(["patch", "-p1", "--binary", "-s", "-d", str(copy)], input=diff.stdout, capture_output=True)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert digest(copy) == after


def test_an_undecodable_file_a_patch_must_edit_is_refused(plain, tmp_path):
    orig, _, changed = plain
    tree = tmp_path / "tree"
    shutil.copytree(orig, tree)
    rel = sorted(changed)[0]
    path = tree / "sglang" / rel
    lines = bytecheck.lines(path.read_bytes())
    lines.insert(5, b"# caf\xe9 (Latin-1, no cookie)\n")
    path.write_bytes(b"".join(lines))
    snapshot = digest(tree)
    for args in (["--in-place"], ["--out", tmp_path / "out"], ["--check"], ["--diff"]):
        run = forgepatch("apply", "--arch", "sm120", "--source", tree, *args)
        assert_one_line_error(run, 2, f"{path}:6: not UTF-8")
    assert digest(tree) == snapshot and not (tmp_path / "out" / "sglang").exists()


def test_an_undecodable_file_left_untouched_keeps_its_bytes(plain, tmp_path):
    orig, patched, changed = plain
    tree = tmp_path / "tree"
    shutil.copytree(orig, tree)
    other = tree / "sglang" / "srt" / "utils" / "__init__.py"
    if not other.is_file():
        other = tree / "sglang" / "version.py"
    assert str(other.relative_to(tree / "sglang")) not in changed
    odd = other.read_bytes() + b"# caf\xe9 \xff\xfe stray bytes\r\n\x0c\n"
    other.write_bytes(odd)
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--out", out)
    assert run.rc == 0, run.err
    assert (out / "sglang" / other.relative_to(tree / "sglang")).read_bytes() == odd
    run = forgepatch("apply", "--arch", "sm120", "--source", tree, "--in-place")
    assert run.rc == 0, run.err
    assert other.read_bytes() == odd
    for rel in changed:
        assert (tree / "sglang" / rel).read_bytes() == (patched / "sglang" / rel).read_bytes()
