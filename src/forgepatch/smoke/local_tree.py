"""The pin's patched SGLang for ``forgepatch smoke --runner local``.

In a container the image IS the pin patched for the arch. On this host the local runner
has to make it so: for every (arch, pin) whose jobs run SGLang, it builds the pin's package
patched by the arch's series (the same ``load_series`` / ``run_series`` as apply, fork and
build), as a complete package (every file of the wheel or git tree, not only sources), and
puts it first on the job's ``PYTHONPATH``. Before any job starts it checks that
``import sglang`` with that environment finds exactly that tree (an import hook or another
installation taking precedence is refused), and it refuses, before launching anything, a pin
the series does not hold on (drift or incomplete: there is nothing right to run).

A job runs SGLang when it is a server job whose launch command names ``sglang`` (the default
``python3 -m sglang.launch_server``) or a command job whose command names it; the probe, and
a stand-in server, run as they are. Each job's log says which tree it ran on.

Trees are cached by (source identity, patchset, engine), under the cache dir
(``smoke/local-trees``, safe to delete), built beside their final place and renamed in.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from forgepatch.errors import BadInput, Failure

LOG_PREFIX = "[forgepatch] local runner:"


@dataclass(frozen=True)
class LocalTree:
    arch: str
    pin: str
    root: Path  # the directory holding sglang/ (what goes on PYTHONPATH)
    source: str  # the pin's source label (pypi:0.5.23, git:...@sha)
    patchset: str
    changed: tuple[str, ...]  # package-relative files the series changed

    @property
    def package(self) -> Path:
        return self.root / "sglang"

    def log_line(self) -> str:
        return (f"{LOG_PREFIX} sglang = {self.package} ({self.source} patched for {self.arch}, patchset "
                f"{self.patchset}, {len(self.changed)} file(s) changed)")


def launch_command(spec) -> list[str]:
    """What the job launches that may import SGLang: the server's ``--launch`` command, or a
    command job's own command."""
    import shlex

    if spec.kind == "server":
        cmd = list(spec.command)
        if "--launch" in cmd and cmd.index("--launch") + 1 < len(cmd):
            return shlex.split(cmd[cmd.index("--launch") + 1])
        return []
    if spec.kind == "command":
        return list(spec.command)
    return []


def runs_sglang(spec) -> bool:
    """Does this job run SGLang (so it must run on the pin's patched tree)?"""
    return any("sglang" in token for token in launch_command(spec))


def job_python(spec, env: dict[str, str]) -> str:
    """The interpreter the job's SGLang runs under: the launch command's own when it starts
    with a Python (``python3 -m sglang.launch_server`` runs the ``python3`` on PATH, which need
    not be forgepatch's), else forgepatch's."""
    argv = launch_command(spec)
    if spec.kind == "command" and argv and argv[0] in ("python3", "python"):
        return sys.executable  # the local runner runs a command's bare python as its own
    if argv and Path(argv[0]).name.startswith("python"):
        found = shutil.which(argv[0], path=env.get("PATH"))
        if found:
            return found
    return sys.executable


def _key(source, patchset: str) -> str:
    from forgepatch.patching.identity import engine_digest

    ident = f"{source.label}\0{source.revision or ''}\0{patchset}\0{engine_digest()}"
    return hashlib.sha256(ident.encode()).hexdigest()[:20]


def _full_package(source, dest: Path) -> None:
    """Every file of the pin's package into ``dest/sglang``: the cached sources the engine read,
    plus the rest of the wheel or git tree (``sources.copy_non_py``: configs, kernels, data)."""
    from forgepatch.sources import copy_non_py

    target = dest / "sglang"
    shutil.copytree(source.package, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    copy_non_py(source, target)


def prepare(matrix, patches, arch: str, pin: str) -> LocalTree:
    """The pin's package patched for ``arch``, built once and cached. Failure (exit 1) when the
    series does not hold on the pin: no job is launched on a tree that is not the patched pin."""
    from forgepatch.patching.series import load_series, run_series
    from forgepatch.patching.trees import DirTree
    from forgepatch.paths import cache_dir
    from forgepatch.sources import resolve_source

    pin_name, pin_cfg = matrix.pin(pin)
    from forgepatch.patching.series import sglang_only

    series = sglang_only(load_series(matrix, arch, patches), "smoke --runner local")
    source = resolve_source(pin_cfg.source, matrix)
    root = cache_dir("smoke", "local-trees") / f"{arch}-{pin_name}-{_key(source, series.hash)}"
    done = root / ".complete"
    if done.is_file():
        changed = tuple(line for line in done.read_text(encoding="utf-8").splitlines()[1:] if line)
        return LocalTree(arch, pin_name, root, source.label, series.hash, changed)
    result = run_series(series, DirTree(source.package, pristine=source.pristine), source.version)
    if result.drift:
        bad = ", ".join(f"{p.patch_id} {p.status.value}" for p in result.patches if p.status.failed)
        raise Failure(f"smoke --runner local: the {arch} patch series does not hold on pin {pin_name} "
                      f"({source.label}: {bad}); no job launched (see `forgepatch apply --arch {arch} "
                      f"--source {pin_cfg.source}`)")
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        _full_package(source, staging)
        for rel, data in result.changed_bytes().items():
            (staging / "sglang" / rel).write_bytes(data)
        (staging / ".complete").write_text("\n".join([series.hash, *sorted(result.changed)]) + "\n", encoding="utf-8")
        try:
            os.replace(staging, root)
        except OSError:
            if not done.is_file():  # not another process finishing the same tree first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return LocalTree(arch, pin_name, root, source.label, series.hash, tuple(sorted(result.changed)))


def env_with(tree: LocalTree | None, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the tree first on PYTHONPATH."""
    if tree is None:
        return env
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree.root), env.get("PYTHONPATH")) if p)
    return out


def check_import(tree: LocalTree, env: dict[str, str], python: str = sys.executable) -> None:
    """Refuse (BadInput) unless ``import sglang`` in ``env`` finds ``tree``'s package: without
    importing it (find_spec of a top-level package runs none of its code)."""
    code = ("import importlib.util as u; s = u.find_spec('sglang'); "
            "print((s.submodule_search_locations or [''])[0] if s else '')")
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    found = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    want = tree.package.resolve()
    if proc.returncode != 0 or not found or Path(found).resolve() != want:
        what = found or (proc.stderr.strip().splitlines() or ["nothing"])[-1]
        raise BadInput(f"smoke --runner local: `import sglang` in the job's environment finds {what}, not "
                       f"the pin's patched tree {want} (an import hook or .pth takes precedence); no job launched")
