"""Helpers for smoke tests: a matrix.toml whose server profiles launch the stand-in server
(tests/support/fake_sglang_server.py, a labelled TEST DOUBLE), and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "support" / "fake_sglang_server.py"
CLI = [sys.executable, "-c", "import sys; from forgepatch.cli import main; sys.exit(main())"]

BASE = """
default_pin = "p23"

[pins.p23]
pypi = "0.5.23"

[pins.p20]
pypi = "0.5.20"

[arches.sm103]
profiles = {sm103}

[arches.sm120]
profiles = {sm120}
pins = ["p23"]

[smoke]
model = "/models/fake"
server_command = "{python} {fake}"
{smoke_extra}
"""


def profile(name: str, flags=(), gpus=0, timeout_s=30, env=None, kind=None, command=None, required=True) -> str:
    lines = [f"[profiles.{name}]", f"flags = {list(flags)!r}".replace("'", '"'), f"gpus = {gpus}", f"timeout_s = {timeout_s}"]
    if kind:
        lines.append(f'kind = "{kind}"')
    if command:
        lines.append(f"command = {command!r}")
    if not required:
        lines.append("required = false")
    if env:
        lines.append("[profiles.%s.env]" % name)
        lines += [f'{k} = "{v}"' for k, v in env.items()]
    return "\n".join(lines) + "\n"


def write_matrix(path: Path, profiles: dict[str, str], sm103=(), sm120=(), smoke_extra: str = "",
                 python: str | None = None) -> Path:
    text = BASE.format(sm103=list(sm103), sm120=list(sm120), python=python or sys.executable, fake=FAKE,
                       smoke_extra=smoke_extra).replace("'", '"')
    text += "\n" + "\n".join(profiles.values())
    path.write_text(text)
    return path


def run_cli(*args, cwd=None, env=None, timeout=300, stdin=None, pythonpath=()) -> subprocess.CompletedProcess:
    path = os.pathsep.join(str(p) for p in (ROOT / "src", *pythonpath))
    full_env = dict(os.environ, PYTHONPATH=path, FAKE_SGLANG_STEP="0", **(env or {}))
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=full_env, cwd=cwd or ROOT,
                          timeout=timeout, input=stdin)


# One id per test run, inherited by every stand-in server the run starts: stray-process checks
# look for this run's children only (another run on the same machine has its own id).
RUN_ID = os.environ.setdefault("FORGEPATCH_TEST_RUN", uuid.uuid4().hex[:8])
SCHEDULER = f"fake-sglang-scheduler-{RUN_ID}"


def processes_with(token: str) -> list[str]:
    """Command lines of live processes mentioning ``token`` (stray-process checks)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmd and state != "Z":
            out.append(f"{entry.name}: {cmd}")
    return out
