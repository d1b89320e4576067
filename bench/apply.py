"""Benchmark: `forgepatch apply --arch sm120` on the full newest-release tree, in one run:

- the engine with its self-check (gate coverage + changed == reported) and without it,
  interleaved, same process: the self-check must cost at most 1.5x (issue 11);
- the CLI wall time (`apply --check`, start-up included) and `forgepatch --help`;
- parsing every file with libcst (the baseline a naive codemod pays);
- a two-package series (sglang + flashinfer: tests/fixtures/packages, major-list, a .cu
  text patch and an added config) in ONE `apply --check` over VERSION and flashinfer-python
  FLASHINFER, interleaved with the sglang-only series on the same sglang tree (issue 23).
- the per-arch evaluation (issue 21: every gate of the feature under every arch, before and
  after) on and off, interleaved in this process, and, with ``--baseline-src DIR`` (e.g. the
  main checkout's ``src``), the previous engine run from that code in a subprocess,
  interleaved with this one: goal <= 1.2x.
- series of N patches (``--series 2,12,30``, issue 22): the real sm120 patches (the shipped
  one and docs/examples/patches), then copies of them under new ids, every one of which runs
  (a copy finds its gates already widened: locate, edit, self-check and evaluation all run),
  the engine with its self-check and evaluation, interleaved: goal N=12 within 1.3x of N=2;
  and the same series through the CLI (`apply --check`, locks written first), interleaved;
  and the whole example series (every example patch and the shipped ones: 11, most not for
  sm120 or not for this release) next to the 2-patch one. N=5 is the five real patches once
  each (no copy): what a longer series of them cannot share, its floor.

    python bench/apply.py [--version 0.5.23] [--flashinfer 0.7.2] [--runs 5] [--baseline-runs 1]
                          [--series 2,5,12,30]

Prints medians and ratios as JSON. Goals: apply <= 1.0 s wall including start-up, >= 100x
faster than parse-all; self-check <= 1.5x; `forgepatch --help` <= 0.25 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=False, capture_output=True)
    return time.perf_counter() - t


def parse_all(package: Path) -> tuple[float, int]:
    import libcst as cst

    files = sorted(package.rglob("*.py"))
    t = time.perf_counter()
    for f in files:
        try:
            cst.parse_module(f.read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - the baseline only pays the cost
            pass
    return time.perf_counter() - t, len(files)


def series_of_n(tree, version: str, lengths: list[int], runs: int) -> dict:
    """The engine on series of each length in ``lengths`` (see the module doc), interleaved."""
    import tempfile
    import tomllib

    from forgepatch.arch import get_arch
    from forgepatch.patching import astview, headers, parselimits
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patch
    from forgepatch.patching.trees import DirTree
    from forgepatch.paths import SHIPPED_PATCHES

    examples = sorted((Path(__file__).resolve().parents[1] / "docs" / "examples" / "patches").glob("*.toml"))
    shipped = sorted(SHIPPED_PATCHES.glob("*.toml")) + sorted(SHIPPED_PATCHES.glob("*.py"))
    fusion = SHIPPED_PATCHES / "sm120-flashinfer-allreduce-fusion.toml"
    real = [fusion] + [p for p in examples if "sm120" in tomllib.loads(p.read_text())["arches"]]
    where = Path(tempfile.mkdtemp(prefix="bench-series-"))

    def series(n: int) -> list:
        out, k = [], 0
        while len(out) < n:
            for path in real[: n - len(out)]:
                text = path.read_text()
                pid = tomllib.loads(text)["id"]
                new = f"{pid}-copy{k}" if k else pid
                (where / f"{new}.toml").write_text(text.replace(f'id = "{pid}"', f'id = "{new}"', 1))
                out.append(load_patch(where / f"{new}.toml"))
            k += 1
        return out

    arch = get_arch("sm120")
    made = {n: series(n) for n in lengths}
    made["examples"] = [load_patch(p) for p in [fusion] + examples + [q for q in shipped if q != fusion]]

    def engine(patches) -> float:
        astview.view.cache_clear()
        headers.defs_of.cache_clear()
        parselimits.cache_clear()
        t, c = time.perf_counter(), time.process_time()
        res = run_patches(DirTree(tree.package, True), patches, arch, version)
        assert res.verified and not res.drift, res.to_json()
        return time.perf_counter() - t, time.process_time() - c

    times: dict = {n: [] for n in made}
    cpus: dict = {n: [] for n in made}
    for _ in range(runs):
        for n, patches in made.items():
            wall_s, cpu_s = engine(patches)
            times[n].append(wall_s)
            cpus[n].append(cpu_s)
    med = {n: statistics.median(v) for n, v in times.items()}
    cpu = {n: statistics.median(v) for n, v in cpus.items()}  # the engine is one thread: CPU time is
    first = lengths[0]                                        # what load on a shared machine leaves alone
    doc = {f"series_{n}_engine_s_median": round(med[n], 3) for n in lengths}
    doc.update({f"series_{n}_vs_{first}_ratio": round(med[n] / med[first], 2) for n in lengths[1:]})
    doc.update({f"series_{n}_engine_cpu_s_median": round(cpu[n], 3) for n in lengths})
    doc.update({f"series_{n}_vs_{first}_cpu_ratio": round(cpu[n] / cpu[first], 2) for n in lengths[1:]})
    doc["series_examples_patches"] = len(made["examples"])
    doc["series_examples_engine_s_median"] = round(med["examples"], 3)
    doc[f"series_examples_vs_{first}_ratio"] = round(med["examples"] / med[first], 2)
    if 12 in med and 2 in med:
        doc["series_12_within_1_3x_of_2"] = med[12] <= 1.3 * med[2]
    doc.update(series_cli(tree, version, where, {n: made[n] for n in lengths}, runs))
    if len(real) in med:  # the real patches once each, no copy: the distinct work of a longer series
        doc["series_distinct_patches"] = len(real)
    return doc


def series_cli(tree, version: str, where: Path, made: dict, runs: int) -> dict:
    """`forgepatch apply --arch sm120 --check` of each series as a user runs it (start-up,
    reading the tree, the engine, the report), interleaved: the series' patch files in
    ``where``, a matrix naming them, their edit locks written first by `patch lock` (so each
    run is a reviewed series: status `changed`, verified; `--check` exits 1 for "would change")."""
    exe = [sys.executable, "-m", "forgepatch"]
    cmds = {}
    for n, patches in made.items():
        config = where / f"matrix-{n}.toml"
        ids = ", ".join(f'"{p.id}"' for p in patches)
        config.write_text(f'default_pin = "p"\n[pins.p]\npypi = "{version}"\n[arches.sm120]\npatches = [{ids}]\n')
        base = exe + ["--config", str(config), "--patches", str(where)]
        subprocess.run(base + ["patch", "lock", "--arch", "sm120", "--source", f"pypi:{version}"],
                       check=True, capture_output=True)
        cmds[n] = base + ["apply", "--arch", "sm120", "--source", f"pypi:{version}", "--check"]
        done = subprocess.run(cmds[n] + ["--json"], capture_output=True, text=True)
        report = json.loads(done.stdout or "{}")  # --check exits 1 when the series would change files
        assert done.returncode == 1 and report.get("status") == "changed" and report.get("verified"), \
            (n, done.stdout[-2000:], done.stderr[-2000:])
    times: dict = {n: [] for n in cmds}
    for _ in range(runs):
        for n, cmd in cmds.items():
            times[n].append(wall(cmd))
    med = {n: statistics.median(v) for n, v in times.items()}
    first = min(med)
    doc = {f"series_{n}_cli_wall_s_median": round(med[n], 3) for n in med}
    doc.update({f"series_{n}_vs_{first}_cli_ratio": round(med[n] / med[first], 2) for n in med if n != first})
    return doc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline-runs", type=int, default=1, help="parse-all runs (0: skip)")
    ap.add_argument("--flashinfer", default="0.7.2")
    ap.add_argument("--baseline-src", default=None, help="the previous engine's src/ (PYTHONPATH)")
    ap.add_argument("--series", default="2,5,12,30", help="series lengths to time (the first is the baseline)")
    args = ap.parse_args()

    from forgepatch.sources import pypi_tree

    tree = pypi_tree(args.version)
    exe = [sys.executable, "-m", "forgepatch"]
    apply_cmd = exe + ["apply", "--arch", "sm120", "--source", f"pypi:{args.version}", "--check"]
    wall(apply_cmd)  # warm the page cache
    applies = [wall(apply_cmd) for _ in range(args.runs)]
    helps = [wall(exe + ["--help"]) for _ in range(args.runs)]

    # the two-package series side by side with the sglang-only one, interleaved
    from forgepatch.packages import KNOWN

    pypi_tree(args.flashinfer, KNOWN["flashinfer"])  # downloaded and unpacked once, before timing
    project = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "packages"
    two_cmd = exe + ["--config", str(project / "matrix.toml"), "--patches", str(project / "patches"), "apply",
                     "--arch", "sm120", "--source", f"pypi:{args.version}", "--source",
                     f"pypi:flashinfer-python=={args.flashinfer}", "--check"]
    wall(two_cmd)
    one_package, two_packages = [], []
    for _ in range(args.runs):
        one_package.append(wall(apply_cmd))
        two_packages.append(wall(two_cmd))

    from forgepatch.arch import get_arch
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.patchset import load_patches
    from forgepatch.paths import SHIPPED_PATCHES
    from forgepatch.patching.trees import DirTree

    patches = load_patches(SHIPPED_PATCHES, ["sm120-flashinfer-allreduce-fusion"])
    arch = get_arch("sm120")

    from forgepatch.patching import astview, headers, parselimits

    def engine(self_check: bool, evaluate: bool = True) -> float:
        astview.view.cache_clear()  # per-text parse memos: every run starts cold, like a CLI run
        headers.defs_of.cache_clear()
        parselimits.cache_clear()
        t = time.perf_counter()
        res = run_patches(DirTree(tree.package, True), patches, arch, args.version, self_check=self_check,
                          evaluate=evaluate)
        assert res.verified is self_check and not res.drift
        return time.perf_counter() - t

    previous_code = (
        "import time,sys\n"
        "from forgepatch.arch import get_arch\nfrom forgepatch.patching.engine import run_patches\n"
        "from forgepatch.patching.patchset import load_patches\nfrom forgepatch.paths import SHIPPED_PATCHES\n"
        "from forgepatch.patching.trees import DirTree\nfrom pathlib import Path\n"
        "p = load_patches(SHIPPED_PATCHES, ['sm120-flashinfer-allreduce-fusion'])\n"
        "run_patches(DirTree(Path(sys.argv[1]), True), p, get_arch('sm120'), sys.argv[2])\n"
        "t = time.perf_counter()\n"
        "res = run_patches(DirTree(Path(sys.argv[1]), True), p, get_arch('sm120'), sys.argv[2])\n"
        "print(time.perf_counter() - t)\n")

    def previous() -> float:
        import os

        env = dict(os.environ, PYTHONPATH=args.baseline_src)
        out = subprocess.run([sys.executable, "-c", previous_code, str(tree.package), args.version],
                             env=env, capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])

    def current() -> float:
        import os

        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
        out = subprocess.run([sys.executable, "-c", previous_code, str(tree.package), args.version],
                             env=env, capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])

    engine(True)  # warm imports and the page cache
    checked, unchecked, no_eval, prev, cur = [], [], [], [], []
    for _ in range(args.runs):  # interleaved, so load on the machine hits both alike
        checked.append(engine(True))
        unchecked.append(engine(False))
        no_eval.append(engine(True, evaluate=False))
        if args.baseline_src:
            prev.append(previous())
            cur.append(current())
    series_doc = series_of_n(tree, args.version, [int(n) for n in args.series.split(",")], args.runs)
    baseline = [parse_all(tree.package) for _ in range(args.baseline_runs)]  # 0: skip the slow baseline
    base = statistics.median(b[0] for b in baseline) if baseline else None
    doc = {
        "version": args.version,
        "files": baseline[0][1] if baseline else None,
        "apply_cli_wall_s_median": round(statistics.median(applies), 3),
        "apply_engine_s_median": round(statistics.median(checked), 3),
        "apply_engine_without_self_check_s_median": round(statistics.median(unchecked), 3),
        "self_check_ratio": round(statistics.median(checked) / statistics.median(unchecked), 2),
        "self_check_within_1_5x": statistics.median(checked) <= 1.5 * statistics.median(unchecked),
        "apply_engine_without_evaluation_s_median": round(statistics.median(no_eval), 3),
        "evaluation_ratio": round(statistics.median(checked) / statistics.median(no_eval), 2),
        **({"previous_engine_s_median": round(statistics.median(prev), 3),
            "this_engine_subprocess_s_median": round(statistics.median(cur), 3),
            "vs_previous_ratio": round(statistics.median(cur) / statistics.median(prev), 2),
            "vs_previous_within_1_2x": statistics.median(cur) <= 1.2 * statistics.median(prev)} if prev else {}),
        "parse_all_baseline_s_median": round(base, 2) if base else None,
        "speedup_cli_vs_parse_all": round(base / statistics.median(applies), 1) if base else None,
        "speedup_engine_vs_parse_all": round(base / statistics.median(checked), 1) if base else None,
        "help_wall_s_median": round(statistics.median(helps), 3),
        "flashinfer": args.flashinfer,
        "sglang_only_series_cli_wall_s_median": round(statistics.median(one_package), 3),
        "two_package_series_cli_wall_s_median": round(statistics.median(two_packages), 3),
        "two_package_vs_sglang_only_ratio": round(statistics.median(two_packages) / statistics.median(one_package), 2),
        **series_doc,
        "runs": args.runs,
        "baseline_runs": args.baseline_runs,
    }
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
