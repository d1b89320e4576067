"""A series beyond the sglang package (issue 23): FlashInfer's JIT arch lists (major-list),
its CUDA launcher (a text patch), added Triton configs, and one apply over both packages.

Real parts: the flashinfer-python 0.7.2 and 0.6.1 wheels and the SGLang 0.5.23 / 0.5.3
wheels from PyPI (cached), the real CLI in a subprocess, strace for the kill test.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, forgepatch

FIXTURE = Path(__file__).parent / "fixtures" / "packages"
FI_NEW, FI_OLD = "0.7.2", "0.6.1"
CU = "data/csrc/trtllm_fused_moe_kernel_launcher.cu"
CONFIG_DIR = "srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0"
CONFIG = "E=128,N=768,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"


def fi(version: str):
    from forgepatch.packages import KNOWN
    from forgepatch.sources import pypi_tree

    return pypi_tree(version, KNOWN["flashinfer"])


def wheel_file(src, rel: str) -> bytes:
    with zipfile.ZipFile(src.origin) as zf:
        return zf.read(f"{src.package.name}/{rel}")


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the fixture project (matrix.toml + patches/) to run the CLI in."""
    dest = tmp_path / "proj"
    shutil.copytree(FIXTURE, dest)
    return dest


def patch_file(project: Path, name: str, text: str) -> Path:
    path = project / "patches" / name
    path.write_text(text)
    return path


def majors(text: str, function: str) -> list[list[int]]:
    tree = ast.parse(text)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    return [ast.literal_eval(k.value) for k in ast.walk(fn) if isinstance(k, ast.keyword)
            and k.arg == "supported_major_versions"]


# -- major-list ---------------------------------------------------------------------------
def test_major_list_admits_12_on_06_verified_idempotent_and_absorbed_on_07(project, tmp_path):
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_OLD}", "--out", out,
                     "--json", cwd=project)
    assert run.rc == 0, run.err
    doc = run.json()
    assert doc["package"] == "flashinfer" and doc["verified"] and doc["version"] == FI_OLD
    sites = {s["site"]: s for p in doc["patches"] for s in p["sites"]}
    assert sites["trtllm-allreduce"]["status"] == "applied"
    assert sites["trtllm-gen-fused-moe"]["status"] == "applied"
    assert "=[10]` -> [10, 12]" in sites["trtllm-gen-fused-moe"]["detail"]  # it listed only 10
    pkg = out / "flashinfer-python" / "flashinfer"
    assert majors((pkg / "jit/comm.py").read_text(), "gen_trtllm_comm_module") == [[9, 10, 12]]
    assert majors((pkg / "jit/fused_moe.py").read_text(), "gen_trtllm_gen_fused_moe_sm100_module") == [[10, 12]]
    # every other byte of the module is upstream's
    orig = wheel_file(fi(FI_OLD), "jit/comm.py")
    assert (pkg / "jit/comm.py").read_bytes() == orig.replace(b"supported_major_versions=[9, 10]\n    )\n    return gen_jit_spec(\n        \"trtllm_comm\"",
                                                              b"supported_major_versions=[9, 10, 12]\n    )\n    return gen_jit_spec(\n        \"trtllm_comm\"")
    # the output is a complete package (non-.py files from the wheel too) ...
    assert (pkg / CU).is_file()
    # ... in the patched state: a second run is already-applied and changes nothing
    again = forgepatch("apply", "--arch", "sm120", "--source", pkg, "--check", "--json", cwd=project)
    assert again.rc == 0, again.err
    statuses = {s["site"]: s["status"] for p in again.json()["patches"] for s in p["sites"]}
    assert statuses == {"trtllm-allreduce": "already-applied", "trtllm-gen-fused-moe": "already-applied",
                        "launcher-major-check": "already-applied"}
    # 0.7.2 lists 12 upstream in both builders: absorbed-upstream, nothing to change
    new = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_NEW}", "--check", "--json",
                     cwd=project)
    assert new.rc == 0, new.err
    assert {s["status"] for p in new.json()["patches"] for s in p["sites"]} == {"absorbed-upstream"}


DRIFTING = '''id = "fi-more-majors"
summary = "more JIT lists"
package = "flashinfer"
codemod = "major-list"
arches = ["sm120"]
[[sites]]
name = "moe-utils"
functions = ["gen_moe_utils_module"]
modules = ["jit/moe_utils.py"]
'''


def test_major_list_drifts_honestly_where_the_list_moved(project, tmp_path):
    patch_file(project, "fi-more-majors.toml", DRIFTING)
    (project / "matrix.toml").write_text((project / "matrix.toml").read_text().replace(
        '"fi-jit-majors",', '"fi-jit-majors", "fi-more-majors",'))
    out = tmp_path / "out"
    # 0.7.2 has gen_moe_utils_module with [9, 10]: widened
    ok = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_NEW}", "--check", "--json",
                    "--accept", cwd=project)  # a new patch: its edit accepted as it is made
    assert ok.rc == 1 and json.loads(ok.out)["status"] == "changed", ok.err  # --check: it would change a file
    site = next(s for p in ok.json()["patches"] for s in p["sites"] if s["site"] == "moe-utils")
    assert site["status"] == "applied" and site["file"] == "jit/moe_utils.py"
    # 0.6.1 has no such builder: drift, with the package's lists closest in name, nothing written
    old = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_OLD}", "--out", out,
                     "--json", cwd=project)
    assert old.rc == 1
    site = next(s for p in old.json()["patches"] for s in p["sites"] if s["site"] == "moe-utils")
    assert site["status"] == "drift" and "no function gen_moe_utils_module" in site["detail"]
    assert site["candidates"] and all("supported_major_versions=" in c for c in site["candidates"])
    assert not out.exists()


def test_a_list_that_is_not_literal_cannot_be_verified(project):
    patch_file(project, "fi-more-majors.toml", DRIFTING.replace("gen_moe_utils_module", "gen_bgmv_moe_module")
               .replace("jit/moe_utils.py", "jit/bgmv_moe.py"))
    (project / "matrix.toml").write_text((project / "matrix.toml").read_text().replace(
        '"fi-jit-majors",', '"fi-more-majors",'))
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_NEW}", "--check", "--json",
                     cwd=project)
    assert run.rc == 1
    site = next(s for p in run.json()["patches"] for s in p["sites"] if s["site"] == "moe-utils")
    assert site["status"] == "drift" and "not a literal list of majors" in site["detail"]
    assert "BGMV_MOE_SUPPORTED_MAJOR_VERSIONS" in site["detail"]


# -- text patches -------------------------------------------------------------------------
def test_text_patch_on_the_cu_launcher_applies_on_06_and_is_absorbed_on_07(project, tmp_path):
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_OLD}", "--out", out,
                     "--json", cwd=project)
    assert run.rc == 0, run.err
    site = next(s for p in run.json()["patches"] for s in p["sites"] if s["site"] == "launcher-major-check")
    assert site["status"] == "applied" and site["file"] == CU and site["line"] == 386
    orig = wheel_file(fi(FI_OLD), CU)
    got = (out / "flashinfer-python" / "flashinfer" / CU).read_bytes()
    assert got == orig.replace(b"TVM_FFI_ICHECK_EQ(major, 10) << \"MoE kernel",
                               b"TVM_FFI_ICHECK(major == 10 || major == 12) << \"MoE kernel")
    assert got != orig
    # FlashInfer 0.7.2 made this very change upstream: absorbed-upstream (line 1677)
    new = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_NEW}", "--check", "--json",
                     cwd=project)
    site = next(s for p in new.json()["patches"] for s in p["sites"] if s["site"] == "launcher-major-check")
    assert site["status"] == "absorbed-upstream" and site["line"] == 1677


ROUTING = '''id = "fi-routing-major"
summary = "fused multi-tile routing: admit SM12x"
package = "flashinfer"
codemod = "text"
arches = ["sm120"]
[[sites]]
name = "routing-major"
file = "data/csrc/trtllm_fused_moe_kernel_launcher.cu"
anchor = 'TVM_FFI_ICHECK_EQ(major, 10) << "fused multi-tile routing requires SM10.x'
old = "TVM_FFI_ICHECK_EQ(major, 10)"
new = "TVM_FFI_ICHECK(major == 10 || major == 12)"
'''


def test_text_patch_drifts_with_the_closest_lines_when_the_anchor_is_gone(project):
    patch_file(project, "fi-routing-major.toml", ROUTING)
    (project / "matrix.toml").write_text((project / "matrix.toml").read_text().replace(
        '"fi-moe-launcher",', '"fi-routing-major",'))
    new = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_NEW}", "--check", "--json",
                     cwd=project)
    site = next(s for p in new.json()["patches"] for s in p["sites"] if s["site"] == "routing-major")
    assert site["status"] == "applied" and site["line"] == 765
    old = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_OLD}", "--check", cwd=project)
    assert old.rc == 1 and "Traceback" not in old.err
    assert "anchor `TVM_FFI_ICHECK_EQ(major, 10) << \"fused multi-tile routing" in old.err
    # the candidate is 0.6.1's own major check, at its line
    assert f"{CU}:386: TVM_FFI_ICHECK_EQ(major, 10)" in old.err
    # an anchor matching more lines than the patch expects is drift too, never a guess
    patch_file(project, "fi-routing-major.toml", ROUTING.replace(
        'anchor = \'TVM_FFI_ICHECK_EQ(major, 10) << "fused multi-tile routing requires SM10.x\'',
        'anchor = "TVM_FFI_ICHECK_EQ(major, 10)"'))
    two = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_NEW}", "--check", "--json",
                     cwd=project)
    site = next(s for p in two.json()["patches"] for s in p["sites"] if s["site"] == "routing-major")
    assert two.rc == 1 and site["status"] == "drift"


def small_flashinfer(dest: Path, crlf_junk: bool = False) -> Path:
    """A directory source holding flashinfer/ with the three files the fixture patches touch
    (from the real 0.6.1 wheel); optionally the .cu with CRLF line ends and a latin-1 byte."""
    src = fi(FI_OLD)
    pkg = dest / "flashinfer"
    for rel in ("__init__.py", "jit/comm.py", "jit/fused_moe.py", CU):
        target = pkg / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        data = wheel_file(src, rel)
        if crlf_junk and rel == CU:
            data = data.replace(b"\n", b"\r\n").replace(b"// Check devicearchitecture", b"// Check device\xe9architecture")
        target.write_bytes(data)
    return pkg


def test_text_patch_in_place_is_byte_exact_on_crlf_and_non_utf8_bytes(project, tmp_path):
    pkg = small_flashinfer(tmp_path / "fi", crlf_junk=True)
    before = (pkg / CU).read_bytes()
    run = forgepatch("apply", "--arch", "sm120", "--source", pkg.parent, "--in-place", cwd=project)
    assert run.rc == 0, run.err
    after = (pkg / CU).read_bytes()
    assert after == before.replace(b"TVM_FFI_ICHECK_EQ(major, 10) << \"MoE", b"TVM_FFI_ICHECK(major == 10 || major == 12) << \"MoE")
    assert after.count(b"\r\n") == before.count(b"\r\n") and b"\xe9" in after
    check = forgepatch("apply", "--arch", "sm120", "--source", pkg.parent, "--check", cwd=project)
    assert check.rc == 0 and "already patched" in check.out


def test_diff_of_text_patches_and_added_files_applies_with_git(project, tmp_path):
    # an sglang directory holding the configs directory, and the small flashinfer
    sg = tmp_path / "sg" / "sglang"
    (sg / CONFIG_DIR).mkdir(parents=True)
    (sg / "__init__.py").write_text("")
    (sg / CONFIG_DIR / "README").write_text("configs\n")
    fip = small_flashinfer(tmp_path / "fi")
    matrix = project / "matrix.toml"  # (this small sglang tree has no fusion gates)
    matrix.write_text(matrix.read_text().replace('"sm120-flashinfer-allreduce-fusion", ', ""))
    run = forgepatch("apply", "--arch", "sm120", "--source", sg.parent, "--source", fip.parent, "--diff", cwd=project)
    assert run.rc == 0, run.err
    assert "--- /dev/null\n+++ b/sglang/" + CONFIG_DIR + "/" + CONFIG in run.out
    assert f"+++ b/flashinfer/{CU}" in run.out
    # the diff applies to copies of the trees and gives the bytes `--in-place` writes
    work = tmp_path / "work"
    shutil.copytree(sg, work / "sglang")
    shutil.copytree(fip, work / "flashinfer")
    (tmp_path / "d.patch").write_text(run.out)
    subprocess.run(["git", "apply", "--unsafe-paths", "--directory=", str(tmp_path / "d.patch")], cwd=work,
                   check=True, capture_output=True)
    for src in (sg.parent, fip.parent):
        done = forgepatch("apply", "--arch", "sm120", "--source", src, "--in-place", cwd=project)
        assert done.rc == 0, done.err
    for name, root in (("sglang", sg), ("flashinfer", fip)):
        for p in root.rglob("*"):
            if p.is_file() and ".forgepatch" not in str(p):
                assert (work / name / p.relative_to(root)).read_bytes() == p.read_bytes(), p


# -- added files --------------------------------------------------------------------------
def test_added_config_identical_absorbed_different_refused_moved_drifts(project, tmp_path):
    from forgepatch.sources import pypi_tree

    files = project / "patches" / "moe-configs-rtx-pro-6000.files"
    ours = (files / CONFIG).read_bytes()
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--out", out, "--json", cwd=project)
    assert run.rc == 0, run.err
    assert (out / "sglang" / CONFIG_DIR / CONFIG).read_bytes() == ours
    site = next(s for p in run.json()["patches"] for s in p["sites"] if s["site"] == "triton-3.6-configs")
    assert site["status"] == "applied"
    again = forgepatch("apply", "--arch", "sm120", "--source", out, "--check", "--json", cwd=project)
    assert again.rc == 0, again.err
    site = next(s for p in again.json()["patches"] for s in p["sites"] if s["site"] == "triton-3.6-configs")
    assert site["status"] == "already-applied"
    # a file upstream ships: the same bytes are absorbed upstream; other bytes are refused
    upstream_name = "E=256,N=512,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json"
    upstream = wheel_file(pypi_tree("0.5.23"), f"{CONFIG_DIR}/{upstream_name}")
    (files / CONFIG).unlink()
    (files / upstream_name).write_bytes(upstream)
    same = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check", "--json", cwd=project)
    site = next(s for p in same.json()["patches"] for s in p["sites"] if s["site"] == "triton-3.6-configs")
    assert site["status"] == "absorbed-upstream"
    (files / upstream_name).write_bytes(upstream.replace(b'"num_stages": 3', b'"num_stages": 4', 1))
    out2 = tmp_path / "out2"
    diff = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--out", out2, cwd=project)
    assert diff.rc == 1 and not out2.exists()
    assert "upstream ships a different" in diff.err and "Traceback" not in diff.err
    assert "review" in diff.out
    # 0.5.3 keeps its configs under fused_moe_triton/: the directory is gone, drift with candidates
    (files / upstream_name).write_bytes(ours)
    moved = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.3", "--check", "--json", cwd=project)
    assert moved.rc == 1
    site = next(s for p in moved.json()["patches"] for s in p["sites"] if s["site"] == "triton-3.6-configs")
    assert site["status"] == "drift" and any("configs" in c for c in site["candidates"])


# -- one apply over both packages ---------------------------------------------------------
def test_one_apply_run_patches_sglang_and_flashinfer_from_the_pin(project, tmp_path):
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--out", out, "--json", cwd=project)  # the default pin names both
    assert run.rc == 0, run.err
    doc = run.json()
    assert [p["package"] for p in doc["packages"]] == ["sglang", "flashinfer"] and doc["not_run"] == []
    assert doc["packages"][1]["source"] == f"pypi:flashinfer-python=={FI_NEW}"
    assert (out / "sglang" / CONFIG_DIR / CONFIG).is_file()
    assert (out / "flashinfer-python" / "flashinfer" / "jit" / "comm.py").is_file()
    # each package is importable from the output: sglang from OUT, flashinfer from OUT/flashinfer-python
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('sglang').origin);"
                            "print(u.find_spec('flashinfer').origin)"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": f"{out}:{out / 'flashinfer-python'}"})
    assert str(out / "sglang") in probe.stdout and str(out / "flashinfer-python" / "flashinfer") in probe.stdout


def test_a_drift_in_one_package_writes_no_package(project, tmp_path):
    patch_file(project, "fi-more-majors.toml", DRIFTING)
    (project / "matrix.toml").write_text((project / "matrix.toml").read_text().replace(
        '"fi-jit-majors",', '"fi-jit-majors", "fi-more-majors",'))
    out = tmp_path / "out"
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--source",
                     f"pypi:flashinfer-python=={FI_OLD}", "--out", out, cwd=project)
    assert run.rc == 1 and "nothing written, in any package" in run.err
    assert not out.exists()


# -- bad input: one line, file:line, exit 2 -----------------------------------------------
@pytest.mark.parametrize("text,needle", [
    (ROUTING.replace("anchor = ", "anchor_regex = '(' #"), "fi-routing-major.toml:"),
    (ROUTING.replace('file = "data/csrc/trtllm_fused_moe_kernel_launcher.cu"', 'file = "jit/comm.py"'),
     "fi-routing-major.toml:8: sites[0].file: jit/comm.py is Python"),
    (ROUTING.replace('file = "data/csrc/', 'file = "../'), "must be a package-relative path"),
    (ROUTING.replace('new = "TVM_FFI_ICHECK(major == 10 || major == 12)"', 'new = "TVM_FFI_ICHECK_EQ(major, 10)"'),
     "the same as old"),
    (ROUTING.replace('name = "routing-major"', 'name = "routing-major"\ncount = 0'), "count: expected an integer >= 1"),
    (ROUTING.replace('package = "flashinfer"', 'package = "nosuch"'), "unknown package 'nosuch'"),
    (ROUTING.replace("old = ", "olde = "), "fi-routing-major.toml:10: sites[0].olde: unknown key"),
], ids=["bad-regex", "python-file", "dotdot", "new-is-old", "count-0", "unknown-package", "unknown-key"])
def test_bad_text_patches_are_one_line_errors(project, text, needle):
    patch_file(project, "fi-routing-major.toml", text)
    (project / "matrix.toml").write_text((project / "matrix.toml").read_text().replace(
        '"fi-moe-launcher",', '"fi-routing-major",'))
    run = forgepatch("apply", "--arch", "sm120", "--source", f"pypi:flashinfer-python=={FI_NEW}", "--check", cwd=project)
    assert_one_line_error(run, 2, needle)


def test_bad_sources_and_config_files_are_one_line_errors(project):
    files = project / "patches" / "moe-configs-rtx-pro-6000.files"
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", "pypi:nosuch-dist==1.0", "--check",
                                     cwd=project), 2, "no package has the PyPI name 'nosuch-dist'")
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--source", "pypi:0.5.20",
                                     "--check", cwd=project), 2, "one source per package")
    (files / "broken.json").write_text('{\n  "1": {\n    "BLOCK_SIZE_M": 16,,\n  }\n}\n')
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check", cwd=project),
                          2, "broken.json:3: invalid JSON")
    (files / "broken.json").unlink()
    matrix = project / "matrix.toml"
    matrix.write_text(matrix.read_text().replace("[pins.\"v0.5.23\".packages.flashinfer]",
                                                 "[pins.\"v0.5.23\".packages.flashinfr]"))
    assert_one_line_error(forgepatch("apply", "--arch", "sm120", "--check", cwd=project), 2,
                          "matrix.toml:12: pins.v0.5.23.packages.flashinfr: unknown package 'flashinfr'")


def test_a_patch_hash_covers_its_added_files(project):
    from forgepatch.patching.patchset import load_patch

    path = project / "patches" / "moe-configs-rtx-pro-6000.toml"
    first = load_patch(path).hash
    cfg = project / "patches" / "moe-configs-rtx-pro-6000.files" / CONFIG
    cfg.write_bytes(cfg.read_bytes().replace(b'"num_stages": 3', b'"num_stages": 2', 1))
    assert load_patch(path).hash != first


# -- crash safety -------------------------------------------------------------------------
def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def test_kill_at_every_rename_of_a_text_and_major_list_in_place_write(project, tmp_path):
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is required (tests/run.sh installs it)")
    orig = tmp_path / "orig"
    small_flashinfer(orig)
    patched = tmp_path / "patched"
    shutil.copytree(orig, patched)
    assert forgepatch("apply", "--arch", "sm120", "--source", patched, "--in-place", cwd=project).rc == 0
    want_orig, want_patched = _digest(orig), _digest(patched)
    assert want_orig != want_patched and set(want_orig) == set(want_patched)
    cmd = [sys.executable, "-m", "forgepatch", "apply", "--arch", "sm120", "--in-place", "--source"]
    log = tmp_path / "renames.log"
    count = tmp_path / "count"
    shutil.copytree(orig, count)
    subprocess.run([strace, "-f", "--seccomp-bpf", "-qq", "-o", str(log), "-e", "trace=rename", *cmd, str(count)],
                   cwd=project, check=True, capture_output=True)
    n = sum(1 for line in log.read_text().splitlines() if re.search(r"\brename\(", line))
    assert n >= 4  # the journal and three files
    states = set()
    for i in range(1, n + 1):
        tree = tmp_path / f"kill-{i}"
        shutil.copytree(orig, tree)
        proc = subprocess.run([strace, "-f", "--seccomp-bpf", "-qq", "-e", f"inject=rename:signal=KILL:when={i}",
                               *cmd, str(tree)], cwd=project, capture_output=True, text=True)
        assert proc.returncode != 0
        nxt = forgepatch("apply", "--arch", "sm120", "--source", tree, "--check", cwd=project)
        now = _digest(tree)
        assert not [p for p in now if ".forgepatch" in p], now
        assert now in (want_orig, want_patched), f"half-patched tree after rename #{i}"
        states.add("patched" if now == want_patched else "original")
        assert nxt.rc == (0 if now == want_patched else 1), nxt.err
    assert states == {"original", "patched"}


def test_a_run_over_one_package_of_a_mixed_series_says_what_it_did_not_run(project):
    run = forgepatch("apply", "--arch", "sm120", "--source", "pypi:0.5.23", "--check", "--json", cwd=project)
    assert run.json()["not_run"] == ["flashinfer"] and run.json()["package"] == "sglang"
    assert "also patches flashinfer: not run here" in run.err
    # build carries every package of the series (tests/test_images_packages.py): a pin that names
    # no version of one is refused instead of building the image without that package's patches
    text = (project / "matrix.toml").read_text()
    (project / "matrix.toml").write_text(text.replace('[pins."v0.5.23".packages.flashinfer]\npypi = "0.7.2"\n', ""))
    build = forgepatch("build", "--arch", "sm120", "--pin", "v0.5.23", "--base-image", "forgepatch-test/base:bookworm",
                       cwd=project)
    last = build.err.strip().splitlines()[-1]  # (after the moving-tag warning about the base)
    assert build.rc == 2 and "Traceback" not in build.err, build.err
    assert "the sm120 series patches flashinfer (patch fi-jit-majors), and pin 'v0.5.23' names no version" in last
