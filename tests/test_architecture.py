"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) pass on
the tree, and fail when an upward or cross-stage import is added (checked on a copy of the
package with one planted import, so the contract is shown to bite, not only to pass)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint) if lint.exists() else "lint-imports", "--config", str(config), "--no-cache"],
                          capture_output=True, text=True, env=env, cwd=src.parent, timeout=300)


def test_the_layer_contracts_hold_on_the_tree():
    run = lint_imports(SRC, ROOT / "pyproject.toml")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


@pytest.mark.parametrize("module, planted, broken", [
    # the contract imports the engine (upward)
    ("combination/__init__.py", "from forgepatch.patching import series", "forgepatch.combination is not allowed to import forgepatch.patching"),
    # one stage imports another (stages are independent)
    ("release/check.py", "from forgepatch.fork import fork", "forgepatch.release is not allowed to import forgepatch.fork"),
    # infra reaches up into the contract
    ("infra/gitrepo.py", "from forgepatch import combination", "forgepatch.infra is not allowed to import forgepatch.combination"),
    # code that runs inside images imports the host side
    ("inimage/monitor.py", "from forgepatch import config", "forgepatch.inimage is not allowed to import forgepatch.config"),
])
def test_a_planted_upward_import_breaks_the_contract(tmp_path, module, planted, broken):
    src = tmp_path / "src"
    shutil.copytree(SRC / "forgepatch", src / "forgepatch", ignore=shutil.ignore_patterns("__pycache__", "data"))
    target = src / "forgepatch" / module
    text = target.read_text()
    # after the module docstring and `from __future__`, where a real import would go
    anchor = re.search(r"^from __future__ import annotations\n", text, re.M)
    at = anchor.end() if anchor else 0
    target.write_text(text[:at] + planted + "\n" + text[at:])
    config = tmp_path / "pyproject.toml"
    shutil.copy(ROOT / "pyproject.toml", config)
    run = lint_imports(src, config)
    assert run.returncode == 1, run.stdout[-2000:]
    assert broken in run.stdout, run.stdout[-3000:]


def _layout_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Layout"):]
    return section[section.index("```"):section.index("```", section.index("```") + 3)]


def test_the_readme_layout_names_every_package_and_module():
    """README's Layout section is checked against the tree: a module added or moved without
    a word there fails here."""
    block = _layout_block()
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", block))
    package = SRC / "forgepatch"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if "data" in rel.parts or path.name in ("__init__.py", "__main__.py"):
            continue
        if path.stem not in words and path.stem.lstrip("_") not in words:
            missing.append(str(rel))
    for sub in sorted(p for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        if f"{sub.name}/" not in block:
            missing.append(f"{sub.name}/")
    assert not missing, f"README Layout does not name: {missing}"
