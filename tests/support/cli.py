"""Run the real ``forgepatch`` CLI in a subprocess (exit codes, stderr, no tracebacks)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass


# what a run waiting on another one's lock (a shared cache, a tree) says on stderr: a notice, not
# an error line (tests on parallel workers share the wheel cache)
WAIT_NOTICE = "forgepatch: waiting for "


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def forgepatch(*args: str, cwd=None, env=None, timeout: int = 600) -> Run:
    proc = subprocess.run([sys.executable, "-m", "forgepatch", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr)


WAIT_NOTICE = "forgepatch: waiting for another forgepatch run"


def assert_one_line_error(run: Run, rc: int = 2, *needles: str) -> None:
    assert run.rc == rc, (run.rc, run.out, run.err)
    # a lock-wait notice ("waiting for another forgepatch run ...") is progress of a concurrent
    # run sharing the cache (parallel test workers), not part of the error
    lines = [ln for ln in run.err.splitlines() if ln.strip() and not ln.startswith(WAIT_NOTICE)]
    assert len(lines) == 1, run.err
    assert "Traceback" not in run.err
    for n in needles:
        assert n in lines[0], (n, lines[0])
