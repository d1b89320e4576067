"""Run the forgepatch CLI in-process (fast) or as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

def _src() -> Path:
    """Where the forgepatch under test is imported from (subprocesses use the same)."""
    import forgepatch

    return Path(forgepatch.__file__).resolve().parents[1]


def run_inprocess(capsys, *args: str) -> tuple[int, str, str]:
    from forgepatch.cli import main

    capsys.readouterr()
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def run_subprocess(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": str(_src()) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    code = "import sys; from forgepatch.cli import main; sys.exit(main())"
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=cwd, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


MATRIX = """\
# test matrix: the shipped sm120 patch for sm120
default_pin = "v0_5_23"

[pins.v0_5_23]
pypi = "0.5.23"   # the newest release

[arches.sm120]
patches = ["sm120-flashinfer-allreduce-fusion"]

# trailing comment block that introduces the profiles
[profiles.probe]
flags = []
"""


def write_matrix(directory: Path) -> Path:
    path = directory / "matrix.toml"
    path.write_text(MATRIX, encoding="utf-8")
    return path
