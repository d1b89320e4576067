"""The CLI starts without importing libcst, git or docker (lazy imports)."""

from __future__ import annotations

import subprocess
import sys


def test_help_does_not_import_heavy_modules():
    code = ("import sys\nfrom forgepatch.cli import main\n"
            "rc = main(['--help'])\n"
            "heavy = sorted(m for m in ('libcst', 'git', 'docker', 'pydantic') if m in sys.modules)\n"
            "print(rc, heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 []"


def test_probe_module_imports_without_cli_dependencies():
    code = ("import sys\nimport forgepatch.arch, forgepatch.errors\n"
            "print(sorted(m for m in ('typer', 'libcst', 'git', 'docker', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
