"""`forgepatch gates --package flashinfer` (issue 23, item 4): FlashInfer's JIT arch lists
(`supported_major_versions=[...]`), each evaluated for the arch's major, on the real
flashinfer-python 0.6.1 and 0.7.2 wheels and on 0.6.1 after the fixture series patched it; a
list that cannot be evaluated is `unverified` with file:line and exit 1."""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from forgepatch.gates.jitlists import ADMITS, REJECTS, UNVERIFIED, read_lists
from support.cli import forgepatch

FIXTURE = Path(__file__).parent / "fixtures" / "packages"
TRTLLM = ("jit/comm.py", "gen_trtllm_comm_module")
MOE = ("jit/fused_moe.py", "gen_trtllm_gen_fused_moe_sm100_module")


def verdicts(doc) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for j in doc["lists"]:
        out.setdefault((j["file"], j["function"]), []).append(j["verdict"])
    return out


def test_lists_of_06_reject_sm120_until_patched_and_07_admits_it(tmp_path):
    proj = tmp_path / "proj"
    shutil.copytree(FIXTURE, proj)
    old = forgepatch("gates", "--package", "flashinfer", "--source", "pypi:flashinfer-python==0.6.1", "--arch",
                     "sm120", "--json", cwd=proj)
    assert old.rc == 0, old.err
    doc = old.json()
    assert (doc["major"], doc["counts"]) == (12, {"admits": 14, "rejects": 5})
    v = verdicts(doc)
    assert v[TRTLLM] == [REJECTS] and v[MOE] == [REJECTS]
    comm = next(j for j in doc["lists"] if (j["file"], j["function"]) == TRTLLM)
    assert (comm["line"], comm["majors"], comm["code"]) == (61, [9, 10], "[9, 10]")
    # `supported_major_versions=None` filters nothing in FlashInfer: every arch
    assert any(j["majors"] == [] and j["code"] == "None" and j["verdict"] == ADMITS for j in doc["lists"])
    # sm100 keeps them: major 10 is listed
    sm100 = forgepatch("gates", "--package", "flashinfer", "--source", "pypi:flashinfer-python==0.6.1", "--arch",
                       "sm100", "--json", cwd=proj)
    assert verdicts(sm100.json())[TRTLLM] == [ADMITS]

    # after the fixture series (fi-jit-majors) patched 0.6.1: those two admit sm120, the rest is as it was
    out = tmp_path / "out"
    applied = forgepatch("apply", "--arch", "sm120", "--source", "pypi:flashinfer-python==0.6.1", "--out", out, cwd=proj)
    assert applied.rc == 0, applied.err
    patched = forgepatch("gates", "--package", "flashinfer", "--source", out / "flashinfer-python", "--arch", "sm120",
                         "--json", cwd=proj)
    assert patched.rc == 0, patched.err
    pv = verdicts(patched.json())
    assert pv[TRTLLM] == [ADMITS] and pv[MOE] == [ADMITS]
    assert {k: x for k, x in pv.items() if k not in (TRTLLM, MOE)} == {k: x for k, x in v.items() if k not in (TRTLLM, MOE)}

    # 0.7.2 lists 12 in both builders upstream; its module constants (`list(SUPPORTED_MAJOR_VERSIONS)`,
    # `BGMV_MOE_SUPPORTED_MAJOR_VERSIONS`) are read through their one assignment: nothing unverified
    new = forgepatch("gates", "--package", "flashinfer", "--source", "pypi:flashinfer-python==0.7.2", "--arch",
                     "sm120", "--json", cwd=proj)
    assert new.rc == 0, new.err
    nv = verdicts(new.json())
    assert nv[TRTLLM] == [ADMITS] and nv[MOE] == [ADMITS] and UNVERIFIED not in new.json()["counts"]
    assert nv[("jit/bgmv_moe.py", "gen_bgmv_moe_module")] == [ADMITS]
    # the default: the default pin's [pins."v0.5.23".packages.flashinfer] (0.7.2 in the fixture)
    pinned = forgepatch("gates", "--package", "flashinfer", "--arch", "sm120", "--json", cwd=proj)
    assert pinned.rc == 0 and pinned.json()["source"] == "pypi:flashinfer-python==0.7.2", pinned.err


def test_a_list_that_cannot_be_evaluated_is_unverified_with_file_and_line(tmp_path):
    pkg = tmp_path / "src" / "flashinfer"
    (pkg / "jit").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (pkg / "jit" / "x.py").write_text(
        "ONCE = (9, 12)\nTWICE = [10]\nTWICE = [10, 12]\n\n"
        "def gen_once():\n    return f(supported_major_versions=list(ONCE))\n\n"
        "def gen_twice():\n    return f(supported_major_versions=TWICE)\n\n"
        "def gen_call():\n    return f(supported_major_versions=majors())\n")
    r = forgepatch("gates", "--package", "flashinfer", "--source", tmp_path / "src", "--arch", "sm120", "--json",
                   cwd=tmp_path)
    assert r.rc == 1 and "Traceback" not in r.err
    assert "2 JIT list(s) of dir:" in r.err and "jit/x.py:9 gen_twice supported_major_versions=TWICE" in r.err
    assert [(j["function"], j["verdict"]) for j in r.json()["lists"]] == [
        ("gen_once", ADMITS), ("gen_twice", UNVERIFIED), ("gen_call", UNVERIFIED)]
    bad = forgepatch("gates", "--package", "nosuch", "--source", tmp_path / "src", cwd=tmp_path)
    assert bad.rc == 2 and "--package: 'nosuch'" in bad.err and "Traceback" not in bad.err


@settings(max_examples=100, deadline=None)
@given(majors=st.lists(st.integers(0, 20), max_size=5), major=st.integers(0, 20), tuple_=st.booleans())
def test_a_literal_list_admits_exactly_the_majors_it_lists(majors, major, tuple_):
    text = "(" + "".join(f"{m}, " for m in majors) + ")" if tuple_ else repr(majors)
    [found] = read_lists(f"def gen():\n    f(supported_major_versions={text})\n", "m.py")
    assert found.majors == tuple(majors) and found.function == "gen" and found.line == 2
    assert found.verdict(major) == (ADMITS if not majors or major in majors else REJECTS)


def test_a_file_naming_the_keyword_that_cannot_be_read_is_one_unverified_list(tmp_path):
    """A module that does not parse (or is not UTF-8) but names the keyword is not "no list
    here": one unverified list at its first mention, for `gates --package` and `audit` alike."""
    from forgepatch.gates.jitlists import lists_of_bytes, scan

    broken = b"def gen_x_module(:\n    pass\n\nspec = gen_jit_spec(supported_major_versions=[10])\n"
    [j] = lists_of_bytes(broken, "jit/x.py")
    assert (j.file, j.line, j.majors, j.verdict(12)) == ("jit/x.py", 4, None, UNVERIFIED)
    latin = "# caf\xe9\nspec = gen_jit_spec(supported_major_versions=[10, 12])\n".encode("latin-1")
    [k] = lists_of_bytes(latin, "jit/y.py")
    assert (k.line, k.verdict(12), k.code) == (2, UNVERIFIED, "<not UTF-8>")
    assert lists_of_bytes(b"\xff\xfe no keyword here", "jit/z.py") == []
    pkg = tmp_path / "flashinfer"
    (pkg / "jit").mkdir(parents=True)
    (pkg / "jit" / "x.py").write_bytes(broken)
    (pkg / "jit" / "y.py").write_bytes(latin)
    assert [(j.file, j.line, j.verdict(12)) for j in scan(pkg)] == [("jit/x.py", 4, UNVERIFIED), ("jit/y.py", 2, UNVERIFIED)]
