"""The kill matrix (issue 27): run a writer once under strace to list its syscalls that change
the file system, then kill it (SIGKILL) and interrupt it (SIGINT) at each of them in turn, in
a fresh copy of its world each time, and check that the next command finds the original or
the finished state, nothing else, saying what it recovered in at most one line.

strace ``-e inject=CALL:signal=SIG:when=N`` counts N per process: the ordinal among the
worker's own calls (infra/supervisor.py forks one per command) is the N that stops it there.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
FS_CALLS = ("rename", "renameat", "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "link", "linkat")
CALL_LINE = re.compile(r"^(\d+) +(\w+)\(")


def _strace() -> str:
    path = shutil.which("strace")
    if path is None:
        if os.environ.get("FORGEPATCH_STRICT"):
            pytest.fail("strace is required (tests/run.sh installs it)")
        pytest.skip("strace not installed")
    return path


def digest(root: Path) -> dict[str, str]:
    """Every file and directory under root (hidden state, temp files and all)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _cli(args, cwd, prefix=(), env=None) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "forgepatch", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=env or ENV, timeout=600)




FORK_LINE = re.compile(r"^(\d+) +(?:<\.\.\. )?(?:clone3?|fork|vfork)\b.* = (\d+)$")


def _outside(line: str, roots: tuple[Path, ...]) -> bool:
    """Whether a traced call changes only paths outside ``roots`` (absolute, elsewhere: a
    temp dir under /tmp); a call relative to another directory's fd counts as inside."""
    args = line.split("(", 1)[1]
    if re.match(r"\d+,", args):
        return False
    paths = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
    return bool(paths) and all(p.startswith("/") and not any(p.startswith(f"{r}/") or p == str(r) for r in roots)
                               for p in paths)


def fs_calls(strace: str, args, cwd: Path, log: Path, creates: bool = False,
             inside: bool | tuple[Path, ...] = False, env: dict | None = None,
             effective: bool = False) -> list[tuple[str, int]]:
    """(syscall, its ordinal among the worker's calls of that name) for each call of FS_CALLS
    the run makes, in order (``creates``: also each ``openat``/``creat`` that may create a
    file, O_CREAT). The worker is the CLI's first child (infra/supervisor.py: the
    ``forgepatch`` process waits while a forked worker runs the command); git and the
    others it spawns are left out. strace counts ``when=N`` per process, so the ordinal
    among the worker's own calls is the N that kills it there. ``inside``: only the calls
    that touch ``cwd`` (a scratch file in /tmp is not the writer's state), or, a tuple,
    ``cwd`` and those directories. ``effective``: only the calls that succeeded (a mkdir
    of a directory that exists, an unlink of a file already renamed change nothing: a kill
    there is a kill at the next call)."""
    roots = (cwd.resolve(), *(() if isinstance(inside, bool) else inside))
    calls = (*FS_CALLS, *(("openat", "creat") if creates else ()))
    trace = "trace=" + ",".join((*calls, "clone", "clone3", "fork", "vfork"))
    run = _cli(args, cwd, (strace, "-f", "--seccomp-bpf", "-qq", "-o", str(log), "-e", trace), env)
    assert run.returncode == 0, run.stderr
    seen: dict[str, int] = {}
    out, cli, main = [], None, None
    for line in log.read_text().splitlines():
        cli = cli or line.split(" ", 1)[0]  # strace's first tracee is the CLI itself
        fork = FORK_LINE.match(line)
        if fork and main is None and fork.group(1) == cli:
            main = fork.group(2)
            continue
        m = CALL_LINE.match(line)
        if not m:
            continue
        changes = m.group(2) in FS_CALLS or m.group(2) == "creat" or (m.group(2) == "openat" and "O_CREAT" in line)
        assert m.group(1) != cli or not changes, f"the waiting CLI changed the file system: {line}"
        if m.group(1) == main and m.group(2) in calls:
            seen[m.group(2)] = seen.get(m.group(2), 0) + 1
            failed = bool(re.search(r"\) += -1 E[A-Z]+", line))
            if changes and not (inside and _outside(line, roots)) and not (effective and failed):
                out.append((m.group(2), seen[m.group(2)]))
    return out


def distinct(calls: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The first and the last call of each run of one syscall kind (a run of 40 unlinks is
    killed at its ends, not 40 times): every kind at every position it takes between other
    kinds."""
    out = []
    for i, (call, n) in enumerate(calls):
        first = i == 0 or calls[i - 1][0] != call
        last = i == len(calls) - 1 or calls[i + 1][0] != call
        if first or last:
            out.append((call, n))
    return out


def crash_matrix(tmp_path: Path, world, args, after, original: dict, finished: dict, recovered: str,
                 creates: bool = False, view=None, inside: bool | tuple[Path, ...] = False, env: dict | None = None,
                 sample=None, extra=(), workers: int = 3, also_ok: tuple[str, ...] = (),
                 effective: bool = False) -> dict:
    """Kill (KILL, INT) ``args`` run in a fresh ``world(dir)`` at each of its file-system
    syscalls (``creates``: each O_CREAT open too; ``sample``: a function picking some of the
    calls, e.g. ``distinct``); ``extra``: (name, f(dir, signal) -> strace options) cases
    killing a child process (``-P PATH -e inject=...``); ``after(dir)`` is the next
    command (its one note says it rolled back, completed the interrupted ``recovered``, or
    one of ``also_ok`` with the state finished); ``view(dir)`` the state compared (default: every file under dir). Returns
    {(call, n, signal): state}."""
    strace = _strace()
    view = view or digest
    calls = fs_calls(strace, args, world(tmp_path / "count"), tmp_path / "calls.log", creates, inside, env, effective)
    assert calls, "the run changed nothing?"
    if sample is not None:
        calls = sample(calls)

    def one(case) -> tuple:
        (call, n), sig = case
        d = world(tmp_path / f"{call}-{n if isinstance(n, int) else 'child'}-{sig}")
        if isinstance(n, int):
            opts = ["-e", f"inject={call}:signal={sig}:when={n}"]
        else:  # an extra case
            opts = n(d, sig)
        run = _cli(args, d, (strace, "-f", "--seccomp-bpf", "-qq", *opts), env)
        assert "Traceback" not in run.stderr, run.stderr
        assert isinstance(n, int) or run.returncode != 0, (call, sig, "the child was never reached")
        nxt = after(d)
        assert nxt.returncode == 0 and "Traceback" not in nxt.stderr, (call, n, sig, nxt.stderr)
        notes = [ln for ln in nxt.stderr.splitlines() if ln.strip()]
        assert len(notes) <= 1, (call, n, sig, notes)
        now = view(d)
        if now == original:
            state = "original"
        else:
            assert now == finished, (call, n, sig, sorted(set(now) ^ set(finished)) or now)
            state = "finished"
        if notes:
            finishing = (f"completed an interrupted {recovered}", *also_ok)
            assert ("rolled back" in notes[0] and state == "original") or (
                any(p in notes[0] for p in finishing) and state == "finished"), (call, n, sig, notes)
        shutil.rmtree(d)
        return (call, n if isinstance(n, int) else "child", sig), state

    cases = [(c, sig) for c in [*calls, *extra] for sig in ("KILL", "INT")]
    with ThreadPoolExecutor(workers) as pool:  # the traced runs spend most of their time stopped
        return dict(pool.map(one, cases))
