"""bench/ in quick mode: each benchmark once, on a small input, through its own command line.
This asserts that every benchmark still runs against the code as it is and prints its JSON
report (bench scripts import internals, so a refactor that breaks one fails here); it asserts
nothing about timings, which CI's shared machine cannot judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

QUICK = {
    "gates.py": ["--rounds", "1"],
    "journal.py": ["--rounds", "1"],
    "git_layer.py": ["--first", "22", "--last", "23", "--rounds", "1"],
    "drift.py": ["--first", "22", "--last", "23", "--nightlies-per-release", "1", "--project", "2"],
    "audit.py": ["--dir", str(ROOT / "tests" / "fixtures" / "cuda"), "--rounds", "1"],
    "build.py": ["--rounds", "1", "--json"],
    "apply.py": ["--runs", "1", "--baseline-runs", "0", "--series", "2,3"],
    "edit_lock.py": ["--runs", "1"],
    "triage.py": ["--rounds", "1"],
}
NEEDS_DOCKER = {"build.py", "monitor_latency.py"}
GOAL_EXIT = {"build.py"}
TEXT_REPORT = {"triage.py"}  # exit 1 = a timing goal missed


def test_every_bench_has_a_quick_mode():
    have = {p.name for p in (ROOT / "bench").glob("*.py")}
    assert have == set(QUICK) | {"monitor_latency.py"}, "a new bench needs a quick-mode entry here"


def run_bench(name: str, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"),
                                                         os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=900)


@pytest.mark.parametrize("name", sorted(QUICK))
def test_bench_runs_in_quick_mode(name, request):
    if name in NEEDS_DOCKER:
        request.getfixturevalue("base_image")
    run = run_bench(name, QUICK[name])
    # build.py's exit code is its timing goals: the report must be there, the goals are not judged
    assert run.returncode == 0 or (name in GOAL_EXIT and run.returncode == 1), run.stderr[-3000:]
    if name in TEXT_REPORT:  # a line per input, not JSON
        assert name.removesuffix(".py") in run.stdout and "ratio" in run.stdout, run.stdout
        return
    start = run.stdout.index("{")
    doc = json.loads(run.stdout[start:])
    assert doc, run.stdout


def test_monitor_latency_runs_in_quick_mode(base_image):
    run = run_bench("monitor_latency.py", ["--lines", "5", "--image", base_image])
    # its exit code is its latency goal (a timing): here only that all three paths ran
    assert run.returncode in (0, 1), run.stderr[-3000:]
    assert "skipped" not in run.stderr, run.stderr[-2000:]
    rows = {line.split()[0] for line in run.stdout.splitlines() if line.strip()}
    assert {"pipe-baseline", "local", "docker", "goal"} <= rows, run.stdout
