"""Rules of the image audit's reading of `.pth` files (images/image_files.py: where python3
imports from, for the kernel and the JIT audit alike) and of the run-time
package comparison (combination.results.imported_problems), over many shapes (hypothesis).
The image-level behaviour is in tests/test_images_audit_jit.py and tests/test_smoke_imported.py."""

from __future__ import annotations

import posixpath

from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.combination import LABEL, PackageIdentity, Upstream
from forgepatch.combination.results import ImportedPackage, imported_problems
from forgepatch.images.image_files import pth_dirs

ROOT = "/usr/lib/python3/dist-packages"
names = st.text("abcxyz_-.", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
line = st.one_of(
    st.tuples(st.just("comment"), names), st.tuples(st.just("blank"), st.just("")),
    st.tuples(st.just("import"), names), st.tuples(st.just("rel"), names), st.tuples(st.just("abs"), names),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(line, max_size=6), min_size=1, max_size=3))
def test_pth_lines_are_read_as_site_reads_them(files):
    """Comments and blank lines are skipped, `import` lines run code (named, not followed), every
    other line is a directory, relative to the site dir; files in name order, first seen wins."""
    kept: dict[str, bytes | None] = {}
    want_dirs, want_code = [], []
    for i, lines in enumerate(files):
        path = f"{ROOT}/{i:02d}.pth"
        text = []
        for kind, value in lines:
            text.append({"comment": f"# {value}", "blank": "  ", "import": f"import {value}",
                         "rel": f"{value}/lib", "abs": f"/opt/{value}"}[kind])
            if kind == "rel":
                want_dirs.append(posixpath.normpath(f"{ROOT}/{value}/lib"))
            elif kind == "abs":
                want_dirs.append(f"/opt/{value}")
            elif kind == "import" and path not in want_code:
                want_code.append(path)
        kept[path] = "\n".join(text).encode()
    kept[f"{ROOT}/sub/nested.pth"] = b"/opt/never\n"  # not at the site dir's top: site ignores it
    kept[f"{ROOT}/zz-unread.pth"] = None  # too large to read: it may run code, named as such
    want_code.append(f"{ROOT}/zz-unread.pth")
    dirs, code = pth_dirs(kept, [ROOT])
    assert dirs == list(dict.fromkeys(want_dirs)) and code == want_code


versions = st.sampled_from(["0.6.1", "0.7.2", "0.7.2.post1", None])


@settings(max_examples=200, deadline=None)
@given(label=st.sampled_from(["0.6.1", "0.7.2"]), got=st.one_of(st.none(), versions),
       reported=st.booleans(), found=st.booleans())
def test_a_job_is_held_to_the_label_only_where_it_reported(label, got, reported, found):
    labels = {LABEL["packages"]: "; ".join(i.to_label() for i in (
        PackageIdentity("sglang", Upstream("pypi", "0.5.23", "a" * 64), "p"),
        PackageIdentity("flashinfer", Upstream("pypi", label, "b" * 64), "q")))}
    imported = None
    if reported:
        imported = {"sglang": ImportedPackage(version="0.5.23", dir="/s/sglang", imported=True),
                    "flashinfer": ImportedPackage(version=got, dir="/f/flashinfer") if found else None}
    problems = imported_problems(labels, imported)
    if not reported:
        assert problems == []
    elif not found:
        assert problems == [f"flashinfer: the job's process found none, the image's label names pypi:{label}"]
    elif got == label:
        assert problems == []
    else:  # another version, or one that could not be read: never taken for the label's
        assert len(problems) == 1 and problems[0].startswith("flashinfer: the job ran with ")
        assert problems[0].endswith(f"the image's label names pypi:{label}")
