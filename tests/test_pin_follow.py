"""`forgepatch pin follow`: the newest SGLang release (or --version) becomes a pin with its
wheel's sha256, every arch's patches are checked on it, and the report (Markdown for a pull
request, JSON) says what applies and what drifts (exit 1). On real PyPI wheels (cached) and
the real `pip index versions`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.version import Version

from support.cli import forgepatch

ROOT = Path(__file__).resolve().parents[1]
MATRIX = """\
default_pin = "p23"

[pins.p23]
pypi = "0.5.23"

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]
base_image = "example.invalid/sglang:latest"
profiles = ["ok"]

[profiles.ok]
kind = "command"
command = "true"
gpus = 0
"""


def fork(tmp_path: Path) -> Path:
    repo = tmp_path / "fork"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "matrix.toml").write_text(MATRIX)
    return repo


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def test_follow_adds_the_release_as_a_pin_and_reports(tmp_path):
    from forgepatch.sources import pypi_wheel

    repo = fork(tmp_path)
    r = forgepatch("pin", "follow", "--version", "0.5.20", "--report", "follow.md", "--json", cwd=repo, env=env())
    assert r.rc == 0, r.err
    doc = r.json()
    assert doc["pin"] == "v0.5.20" and doc["added"] is True and doc["drift"] is False
    assert doc["arches"][0]["patches"][0]["status"] == "applied"
    pins = tomllib.loads((repo / "matrix.toml").read_text())["pins"]
    digest = hashlib.sha256(pypi_wheel("0.5.20").read_bytes()).hexdigest()
    added = pins["v0.5.20"]
    # recorded like `pin add --pypi`: the version, this host's wheel and every wheel by tag
    assert {k: added[k] for k in ("pypi", "sha256")} == {"pypi": "0.5.20", "sha256": digest}
    assert set(added) == {"pypi", "sha256", "wheels"} and digest in added["wheels"].values()
    assert pins["p23"] == {"pypi": "0.5.23"}
    md = (repo / "follow.md").read_text()
    assert md.startswith("## forgepatch: pin SGLang 0.5.20 (v0.5.20): patches apply")
    assert "| sm120 | sm120-flashinfer-allreduce-fusion | applied |" in md
    again = forgepatch("pin", "follow", "--version", "0.5.20", "--json", cwd=repo, env=env())
    assert again.rc == 0 and again.json()["added"] is False  # named already: nothing added
    assert tomllib.loads((repo / "matrix.toml").read_text())["pins"].keys() == {"p23", "v0.5.20"}


def test_follow_reports_drift_and_exits_1(tmp_path):
    repo = fork(tmp_path)
    (repo / "patches").mkdir()
    shipped = (ROOT / "patches" / "sm120-flashinfer-allreduce-fusion.toml").read_text()
    broken = shipped.replace('functions = ["apply_flashinfer_allreduce_fusion", "flashinfer_ar_fusion_applies", '
                             '"_gather_hidden_states_and_residual"]', 'functions = ["no_such_function_here"]')
    assert broken != shipped
    (repo / "patches" / "sm120-flashinfer-allreduce-fusion.toml").write_text(broken)
    r = forgepatch("pin", "follow", "--version", "0.5.20", "--report", "follow.md", cwd=repo, env=env())
    assert r.rc == 1, r.err
    assert r.err.strip().splitlines()[-1] == "forgepatch: error: pin follow: v0.5.20 (sglang 0.5.20): patches drift on sm120"
    md = (repo / "follow.md").read_text()
    assert "patches need work" in md and "runtime-fusion-gate: drift" in md


def test_follow_finds_the_newest_release_on_the_index(tmp_path):
    repo = fork(tmp_path)
    listed = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True)
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("Available versions:"))
    newest = max((Version(v.strip()) for v in line.split(":", 1)[1].split(",")), key=lambda v: (not v.is_prerelease, v))
    r = forgepatch("pin", "follow", "--json", cwd=repo, env=env())
    assert r.rc in (0, 1), r.err
    doc = r.json()
    assert Version(doc["version"]) == newest >= Version("0.5.23")
    assert json.dumps(doc["arches"])  # checked on it
