"""`forgepatch audit --dir` on real CUDA shared objects (tests/fixtures/cuda/, built with nvcc
13.0 on an H200 by build.sh there), checked against NVIDIA's own tool and the GPU itself:

- the targets the reader finds equal what ``cuobjdump --list-elf --list-ptx`` listed for the same
  files on the H200 (docs/gpu-runs/2026-12-01-audit/cuobjdump-fixtures.txt);
- the sm90 verdicts equal what happened when each library's kernels were launched on the H200
  (h200-launch.json there: 0 ran, 209 no kernel image);
- the verdicts for every registry arch equal NVIDIA's rules applied by hand to the build flags.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from pathlib import Path

import pytest

from forgepatch.arch import ARCHES, get_arch
from forgepatch.images.audit import audit_dir
from forgepatch.images.fatbin import FATBIN_MAGIC, read_fatbins
from support.cli import assert_one_line_error, forgepatch

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "cuda"
GPU_RUN = ROOT / "docs" / "gpu-runs" / "2026-12-01-audit"
LIBS = sorted(p.name for p in FIXTURES.glob("libfp_*.so"))

# What build.sh asked nvcc for (SASS and PTX targets), per library.
BUILT = {
    "libfp_sm90a.so": {"sm_90a"},
    "libfp_sm100f_ptx.so": {"sm_100f", "compute_100"},
    "libfp_sm120.so": {"sm_120"},
    "libfp_sm100a.so": {"sm_100a", "compute_100a"},
    "libfp_zstd.so": {"sm_90a", "sm_120a"},
    "libfp_lz4.so": {"sm_103f", "sm_121"},
    "libfp_nocompress.so": {"sm_120", "compute_90"},
    "libfp_mixed.so": {"sm_90a", "sm_120"},
}
# NVIDIA's rules applied by hand: sm_XYa only on X.Y, sm_XYf and sm_XY on X.Y' with Y' >= Y,
# compute_XY (PTX) JIT-compiled on anything >= X.Y, compute_XYa only on X.Y.
EXPECTED = {
    "sm90": {"libfp_sm90a.so": "sass", "libfp_sm100f_ptx.so": "none", "libfp_sm120.so": "none",
             "libfp_sm100a.so": "none", "libfp_zstd.so": "sass", "libfp_lz4.so": "none",
             "libfp_nocompress.so": "ptx-jit", "libfp_mixed.so": "partial"},
    "sm100": {"libfp_sm90a.so": "none", "libfp_sm100f_ptx.so": "sass", "libfp_sm120.so": "none",
              "libfp_sm100a.so": "sass", "libfp_zstd.so": "none", "libfp_lz4.so": "none",
              "libfp_nocompress.so": "ptx-jit", "libfp_mixed.so": "none"},
    "sm103": {"libfp_sm90a.so": "none", "libfp_sm100f_ptx.so": "sass", "libfp_sm120.so": "none",
              "libfp_sm100a.so": "none", "libfp_zstd.so": "none", "libfp_lz4.so": "sass",
              "libfp_nocompress.so": "ptx-jit", "libfp_mixed.so": "none"},
    "sm120": {"libfp_sm90a.so": "none", "libfp_sm100f_ptx.so": "ptx-jit", "libfp_sm120.so": "sass",
              "libfp_sm100a.so": "none", "libfp_zstd.so": "sass", "libfp_lz4.so": "none",
              "libfp_nocompress.so": "sass", "libfp_mixed.so": "partial"},
    "sm121": {"libfp_sm90a.so": "none", "libfp_sm100f_ptx.so": "ptx-jit", "libfp_sm120.so": "sass",
              "libfp_sm100a.so": "none", "libfp_zstd.so": "none", "libfp_lz4.so": "sass",
              "libfp_nocompress.so": "sass", "libfp_mixed.so": "partial"},
}


def test_fixture_set_is_the_built_one():
    assert set(LIBS) == set(BUILT) and set(EXPECTED) == set(ARCHES)
    assert "release 13.0" in (FIXTURES / "NVCC_VERSION").read_text()


def _cuobjdump_counts() -> dict[str, dict[str, int]]:
    """{library: {"cubin sm_90a": 2, "ptx sm_100": 1}} from the H200's cuobjdump listing."""
    out: dict[str, dict[str, int]] = {}
    lib = None
    for line in (GPU_RUN / "cuobjdump-fixtures.txt").read_text().splitlines():
        if line.startswith("## "):
            lib = line[3:].strip()
            out[lib] = {}
        m = re.match(r"(ELF|PTX) file\s+\d+: .*\.(sm_\d+a?)\.(cubin|ptx)$", line)
        if m:
            key = f"{m.group(3)} {m.group(2)}"
            out[lib][key] = out[lib].get(key, 0) + 1
    return out


@pytest.mark.parametrize("lib", LIBS)
def test_targets_match_cuobjdump_on_the_h200(lib):
    """Same entries, same counts. cuobjdump 13.0 prints family targets without their ``f``
    (sm_100f as sm_100) and PTX as sm_XY; the header flag the reader uses keeps it."""
    with (FIXTURES / lib).open("rb") as fh:
        scan = read_fatbins(fh)
    ours: dict[str, int] = {}
    for module in scan.modules:
        for e in module.entries:
            key = f"{'cubin' if e.kind == 'sass' else 'ptx'} sm_{e.sm}{'a' if e.variant == 'a' else ''}"
            ours[key] = ours.get(key, 0) + 1
    assert ours == _cuobjdump_counts()[lib]
    targets = {e.target for m in scan.modules for e in m.entries}
    assert targets == BUILT[lib]  # including the f variants nvcc was asked for


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_verdicts_follow_nvidias_rules(arch):
    report = audit_dir(FIXTURES, get_arch(arch))
    got = {lib.path: lib.status for lib in report.libraries}
    assert got == EXPECTED[arch]
    assert report.stats["shared_objects"] == len(LIBS) + 1  # libplain.so: ELF, no CUDA, not listed
    assert report.ok is False
    assert sorted(lib.path for lib in report.failing) == sorted(k for k, v in EXPECTED[arch].items() if v == "none")


def test_sm90_verdicts_are_what_the_h200_did():
    """The audit says a library's kernels run on sm90 exactly when they launched on the H200."""
    launched = json.loads((GPU_RUN / "h200-launch.json").read_text())
    report = audit_dir(FIXTURES, get_arch("sm90"))
    for lib in report.libraries:
        codes = [v[0] for v in launched[lib.path].values()]
        if lib.status in ("sass", "ptx-jit"):
            assert codes == [0], lib.path
        elif lib.status == "none":
            assert codes == [209], lib.path  # cudaErrorNoKernelImageForDevice
        else:  # partial: kernels.cu (sm_90a) ran, kernels_b.cu (sm_120) had no image
            assert lib.path == "libfp_mixed.so" and launched[lib.path] == {
                "fp_run": [0, "cudaSuccess"], "fp_run_b": [209, "cudaErrorNoKernelImageForDevice"]}
    # the PTX-only path really JIT-compiled: no sm_90 SASS in it, yet it ran
    assert "sm_90" not in " ".join(BUILT["libfp_nocompress.so"]) and launched["libfp_nocompress.so"]["fp_run"][0] == 0


def test_compression_is_identified_without_decompressing():
    def entries(lib):
        with (FIXTURES / lib).open("rb") as fh:
            return [e for m in read_fatbins(fh).modules for e in m.entries]

    assert {e.compression for e in entries("libfp_zstd.so")} == {"zstd"}
    assert {e.compression for e in entries("libfp_lz4.so")} == {"lz4"}
    assert {e.compression for e in entries("libfp_nocompress.so")} == {None}
    default = entries("libfp_sm100f_ptx.so")  # nvcc 13 compresses PTX by default, not SASS
    assert {e.kind: e.compression for e in default} == {"sass": None, "ptx": "zstd"}
    assert [e.isa for e in default if e.kind == "ptx"] == ["9.0"]


def test_reads_headers_not_whole_files(tmp_path):
    """A 64 MiB shared object (a fixture with trailing bytes, still a valid ELF) costs the
    same few KiB as the small one."""
    big = tmp_path / "libbig.so"
    shutil.copy(FIXTURES / "libfp_zstd.so", big)
    with big.open("ab") as fh:
        fh.truncate(64 << 20)
    report = audit_dir(tmp_path, get_arch("sm120"))
    assert [lib.status for lib in report.libraries] == ["sass"]
    assert report.stats["bytes_total"] == 64 << 20
    assert report.stats["bytes_read"] < 64 << 10


def _first_fatbin_offset(path: Path) -> int:
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as fh:
        return ELFFile(fh).get_section_by_name(".nv_fatbin")["sh_offset"]


@pytest.mark.parametrize("damage", ["magic", "entry-size", "truncated"])
def test_damaged_fatbin_is_unreadable_and_fails(tmp_path, damage):
    """Never a pass for bytes the reader does not understand."""
    lib = tmp_path / "libfp_sm90a.so"
    shutil.copy(FIXTURES / "libfp_sm90a.so", lib)
    offset = _first_fatbin_offset(lib)
    data = bytearray(lib.read_bytes())
    assert struct.unpack_from("<I", data, offset)[0] == FATBIN_MAGIC
    if damage == "magic":
        struct.pack_into("<I", data, offset, 0x12345678)
    elif damage == "entry-size":  # first entry's payload size runs past its fatbin
        struct.pack_into("<Q", data, offset + 16 + 8, 1 << 40)
    else:
        del data[offset + 40:]
    lib.write_bytes(bytes(data))
    out = forgepatch("audit", "--arch", "sm90", "--dir", str(tmp_path), "--json")
    assert out.rc == 1, out.err
    doc = json.loads(out.out)
    assert [(lib["path"], lib["status"]) for lib in doc["libraries"]] == [("libfp_sm90a.so", "unreadable")]
    assert doc["verdict"] == "fail" and doc["failing"] == ["libfp_sm90a.so"]


def test_links_are_read_once_and_non_elf_is_skipped(tmp_path):
    shutil.copy(FIXTURES / "libfp_sm120.so", tmp_path / "libfp_sm120.so")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "libfp_sm120.so", tmp_path / "sub" / "libalias.so")
    os.link(tmp_path / "libfp_sm120.so", tmp_path / "sub" / "libhard.so.1")
    (tmp_path / "libtext.so").write_text("/* GNU ld script */ INPUT(libc.so.6)\n")
    report = audit_dir(tmp_path, get_arch("sm120"))
    assert [lib.path for lib in report.libraries] == ["libfp_sm120.so"]
    assert report.ok and report.stats["shared_objects"] == 1


def test_strict_fails_partial_libraries(tmp_path):
    shutil.copy(FIXTURES / "libfp_mixed.so", tmp_path)
    assert audit_dir(tmp_path, get_arch("sm120")).ok
    strict = audit_dir(tmp_path, get_arch("sm120"), strict=True)
    assert not strict.ok and [lib.path for lib in strict.failing] == ["libfp_mixed.so"]
    assert strict.libraries[0].reason == "1 of 3 fatbins have no code for sm_120 (they carry sm_90a)"


def test_cli_exit_codes_and_formats(tmp_path):
    ok_dir = tmp_path / "ok"
    ok_dir.mkdir()
    for lib in ("libfp_sm120.so", "libfp_nocompress.so", "libfp_sm100f_ptx.so"):
        shutil.copy(FIXTURES / lib, ok_dir)
    passed = forgepatch("audit", "--arch", "sm120", "--dir", str(ok_dir), "--json")
    assert passed.rc == 0, passed.err
    doc = json.loads(passed.out)
    assert doc["schema"] == "forgepatch-audit/1" and doc["verdict"] == "pass" and doc["cc"] == "12.0"
    by_path = {lib["path"]: lib for lib in doc["libraries"]}
    assert by_path["libfp_sm100f_ptx.so"]["ptx"] == ["compute_100 (ISA 9.0)"]
    assert by_path["libfp_sm120.so"]["entries"] == {"sm_120": 2}

    failed = forgepatch("audit", "--arch", "sm120", "--dir", str(FIXTURES), "--markdown")
    assert failed.rc == 1
    assert "| `libfp_sm90a.so` | **none** | sm_90a | - | 0/1 |" in failed.out
    assert failed.err.strip().endswith("have no code for sm120: libfp_lz4.so, libfp_sm100a.so, libfp_sm90a.so")
    table = forgepatch("audit", "--arch", "sm120", "--dir", str(FIXTURES))
    assert table.rc == 1 and "libfp_sm90a.so" in table.out

    for args, needle in [
        (["--arch", "sm999", "--dir", str(FIXTURES)], "--arch: unknown arch"),
        (["--arch", "sm120"], "exactly one of --image IMAGE or --dir DIR"),
        (["--arch", "sm120", "--dir", str(FIXTURES), "--image", "x"], "exactly one of"),
        (["--arch", "sm120", "--dir", str(tmp_path / "missing")], "is not a directory"),
        (["--arch", "sm120", "--dir", str(FIXTURES), "--json", "--markdown"], "exclusive"),
    ]:
        assert_one_line_error(forgepatch("audit", *args), 2, needle)


def test_h200_record_matches_cuobjdump_on_real_libraries():
    """On the H200 (docs/gpu-runs/2026-12-01-audit/): the audit's per-target entry counts for
    torch's and NVIDIA's multi-GB libraries equal cuobjdump's listing of the same files; torch's
    own arch list is covered; libcufft's one fatbin defines no kernel (its kernels live in
    .ldata), so it is not judged — and torch.fft ran there."""
    counts: dict[str, dict[str, int]] = {}
    lib = None
    for line in (GPU_RUN / "cuobjdump-counts.txt").read_text().splitlines():
        if line.startswith("## "):
            lib = line[3:].strip()
            counts[lib] = {}
        elif m := re.match(r"\s*(\d+) (cubin|ptx) (sm_\d+a?)$", line):
            counts[lib][f"{m.group(2)} {m.group(3)}"] = int(m.group(1))
    site = json.loads((GPU_RUN / "final" / "audit-site-sm90.json").read_text())
    by_name = {entry["path"].rsplit("/", 1)[-1]: entry for entry in site["libraries"]}
    compared = 0
    for name, expected in counts.items():
        if name == "libcufft.so.12":
            assert expected == {"cubin sm_75": 1} and name not in by_name
            continue
        ours: dict[str, int] = {}
        for target, n in by_name[name]["entries"].items():
            kind, _, num = target.partition("_")
            key = f"{'ptx' if kind == 'compute' else 'cubin'} sm_{num.rstrip('f')}"
            ours[key] = ours.get(key, 0) + n
        assert ours == expected, name
        compared += 1
    assert compared == 6
    log = (GPU_RUN / "run2-cufft-and-counts.log").read_text()
    assert "kernels (.text.*): 0" in (GPU_RUN / "final" / "run3.log").read_text() and "fft ok" in log
    torch = json.loads((GPU_RUN / "torch.json").read_text())
    sass = set(by_name["libtorch_cuda.so"]["sass"])
    assert set(torch["arch_list"]) <= sass  # torch's list, plus a few arch-specific kernels (sm_90a, sm_100a, ...)
    assert by_name["libtorch_cuda.so"]["entries"]["sm_90"] == by_name["libtorch_cuda.so"]["modules"] == 444
    assert site["verdict"] == "pass" and not site["failing"]
