"""matrix.toml is found like ruff's and pre-commit's config: here or in the nearest parent, up
to the repository root; its patches/ beside it is the fork's patch directory, and custom .py
patches are imported from there only (a patches/ of the directory you stand in is not run).
`-v` says what was found. Plus the output conventions: -q, --color with FORCE_COLOR/NO_COLOR,
an empty `status` before the first release."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.cli import forgepatch

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")

MATRIX = """\
default_pin = "fork-pin"

[pins.fork-pin]
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

# a custom patch whose import leaves a mark: which directory's .py files were imported
MARKING = """\
from pathlib import Path
from forgepatch.patching import SiteCodemod
import os, sys
# the witness of an import: a line on stderr (a patch's code may not write files, patching.isolate)
if os.environ.get("FORGEPATCH_TEST_IMPORT_WITNESS"):
    print("imported " + {mark!r}, file=sys.stderr)
class Codemod(SiteCodemod):
    def edit_function(self, func, site, symbol, ctx):
        return None
PATCH = {{"id": {pid!r}, "summary": "marks its import", "arches": ["sm120"],
          "sites": [{{"name": "s", "functions": ["f"], "markers": ["m"]}}]}}
"""


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    out["PYTHONPATH"] = SRC
    out.update(extra)
    return out


def fork_tree(tmp_path: Path) -> Path:
    """A git repository with matrix.toml and patches/ (one marking patch) at its root."""
    repo = tmp_path / "fork"
    (repo / "patches").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "matrix.toml").write_text(MATRIX)
    (repo / "patches" / "fork-mark.py").write_text(MARKING.format(mark=str(tmp_path / "fork-mark"), pid="fork-mark"))
    return repo


def test_found_in_the_nearest_parent_with_its_patches_beside_it(tmp_path):
    repo = fork_tree(tmp_path)
    deep = repo / "docs" / "notes"
    deep.mkdir(parents=True)
    # a stray patches/ where the user stands: never imported
    (deep / "patches").mkdir()
    (deep / "patches" / "stray.py").write_text(MARKING.format(mark=str(tmp_path / "stray-mark"), pid="stray"))
    pins = forgepatch("pin", "list", "--json", "-v", cwd=deep, env=env())  # -v after the command
    assert pins.rc == 0, pins.err
    assert [p["name"] for p in pins.json()] == ["fork-pin"]  # the fork's matrix, not the shipped one
    assert f"forgepatch: config: {repo / 'matrix.toml'} (found)" in pins.err.splitlines()
    listed = forgepatch("-v", "patch", "list", "--json", cwd=deep, env=env(FORGEPATCH_TEST_IMPORT_WITNESS="1"))
    assert listed.rc == 0, listed.err
    ids = {p["id"]: p["origin"] for p in listed.json()}
    assert ids["fork-mark"] == "user" and "stray" not in ids and "sm103-ep-cuda-graph-guard" in ids
    assert f"forgepatch: patches: shipped + {repo / 'patches'}" in listed.err
    assert f"imported {tmp_path / 'fork-mark'}" in listed.err and "stray-mark" not in listed.err
    # without -v nothing is said
    quiet = forgepatch("pin", "list", "--json", cwd=deep, env=env())
    assert quiet.err == ""


def test_discovery_stops_at_the_repository_root(tmp_path):
    (tmp_path / "matrix.toml").write_text(MATRIX)  # above the repository: not this repo's config
    repo = tmp_path / "other"
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    r = forgepatch("-v", "pin", "list", "--json", cwd=repo / "sub", env=env())
    assert r.rc == 0, r.err
    assert "fork-pin" not in {p["name"] for p in r.json()}
    assert "(shipped: no matrix.toml here or in a parent, up to the repository root)" in r.err
    # outside any repository only the current directory counts
    lone = tmp_path / "lone" / "sub"
    lone.mkdir(parents=True)
    (tmp_path / "lone" / "matrix.toml").write_text(MATRIX)
    if not any((d / ".git").exists() for d in lone.parents):
        r = forgepatch("pin", "list", "--json", cwd=lone, env=env())
        assert "fork-pin" not in {p["name"] for p in r.json()}
        r = forgepatch("pin", "list", "--json", cwd=lone.parent, env=env())
        assert "fork-pin" in {p["name"] for p in r.json()}


def test_explicit_config_takes_its_own_patches(tmp_path):
    repo = fork_tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "patches").mkdir(parents=True)
    (elsewhere / "patches" / "stray.py").write_text(MARKING.format(mark=str(tmp_path / "stray-mark"), pid="stray"))
    r = forgepatch("--config", repo / "matrix.toml", "patch", "list", "--json", cwd=elsewhere,
                   env=env(FORGEPATCH_TEST_IMPORT_WITNESS="1"))
    assert r.rc == 0, r.err
    ids = {p["id"] for p in r.json()}
    assert "fork-mark" in ids and "stray" not in ids
    assert f"imported {tmp_path / 'fork-mark'}" in r.err and "stray-mark" not in r.err


def test_color_rules_and_quiet(tmp_path):
    repo = fork_tree(tmp_path)
    esc = "\x1b["
    cases = [((), {}, False), (("--color", "always"), {}, True), (("--color=never",), {"FORCE_COLOR": "1"}, False),
             ((), {"FORCE_COLOR": "1"}, True), ((), {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),
             (("--color", "always"), {"NO_COLOR": "1"}, True), ((), {"FORCE_COLOR": "0"}, False)]
    for flags, extra, coloured in cases:
        r = forgepatch("pin", "list", *flags, cwd=repo, env=env(**extra))  # stdout is a pipe
        assert r.rc == 0, r.err
        assert (esc in r.out) is coloured, (flags, extra, r.out[:200])
        assert "fork-pin" in r.out
    q = forgepatch("pin", "list", "-q", cwd=repo, env=env())
    assert q.rc == 0 and q.out == "" and q.err == ""
    qj = forgepatch("-q", "pin", "list", "--json", cwd=repo, env=env())  # a document is still printed
    assert qj.rc == 0 and qj.json()[0]["name"] == "fork-pin"
    bad = forgepatch("--color", "sometimes", "pin", "list", cwd=repo, env=env())
    assert bad.rc == 2 and "--color" in bad.err and len(bad.err.strip().splitlines()) == 1
    both = forgepatch("-q", "-v", "pin", "list", cwd=repo, env=env())
    assert both.rc == 2 and len(both.err.strip().splitlines()) == 1


def test_status_before_the_first_release_is_empty_not_bad_input(tmp_path):
    repo = fork_tree(tmp_path)
    r = forgepatch("status", cwd=repo, env=env())
    assert r.rc == 0, r.err
    assert "no releases yet" in " ".join(r.out.split())
    j = forgepatch("status", "--json", cwd=repo, env=env())
    assert j.rc == 0 and j.json()["combinations"] == [] and j.json()["chain"]["ok"] is True
