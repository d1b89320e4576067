"""The pin's patched packages for ``forgepatch smoke --runner local``.

In a container the image IS the pin patched for the arch. On this host the local runner
has to make it so: for every (arch, pin) whose jobs run a package the series patches, it builds
each package of the series (SGLang, and FlashInfer when the series patches it too: the pin's
``[pins.PIN.packages.NAME]`` release) patched by its part of the series (the same
``load_series`` / ``run_series`` as apply, fork and build), as a complete package (every file
of the wheel or git tree, not only sources), side by side in one directory it puts first on the
job's ``PYTHONPATH``. Before any job starts it checks that importing each package with that
environment finds exactly that tree (an import hook or another installation taking precedence
is refused), and it refuses, before launching anything, a pin the series does not hold on
(drift or incomplete in any package: there is nothing right to run).

A job runs a package when it is a server job whose launch command names it (the default
``python3 -m sglang.launch_server``) or a command job whose command names it; the probe, and
a stand-in server, run as they are. Each job's log says which trees it ran on.

Trees are cached by (every package's source identity, patchset, engine), under the cache dir
(``smoke/local-trees``, safe to delete), built beside their final place and renamed in.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from forgepatch.errors import BadInput, Failure
from forgepatch.packages import get
from forgepatch.patching.identity import engine_digest
from forgepatch.patching.series import load_series, package_patchsets, packages_of, pin_package_tree
from forgepatch.patching.service import run_arch
from forgepatch.paths import cache_dir
from forgepatch.sources import copy_non_py, resolve_source

LOG_PREFIX = "[forgepatch] local runner:"


@dataclass(frozen=True)
class OtherTree:
    """A package besides sglang in the local tree (``root/IMPORT``)."""

    name: str  # forgepatch's name (flashinfer)
    import_name: str
    source: str  # its source label (pypi:flashinfer-python==0.6.1)
    patchset: str  # of its part of the series
    changed: tuple[str, ...]


@dataclass(frozen=True)
class LocalTree:
    arch: str
    pin: str
    root: Path  # the directory holding sglang/ and every other package (what goes on PYTHONPATH)
    source: str  # the pin's source label (pypi:0.5.23, git:...@sha)
    patchset: str
    changed: tuple[str, ...]  # package-relative files the series changed
    others: tuple[OtherTree, ...] = ()  # the other packages the series patches

    @property
    def package(self) -> Path:
        return self.root / "sglang"

    def imports(self) -> dict[str, Path]:
        """import name -> the directory ``import NAME`` must find."""
        return {"sglang": self.package, **{o.import_name: self.root / o.import_name for o in self.others}}

    def log_line(self) -> str:
        line = (f"{LOG_PREFIX} sglang = {self.package} ({self.source} patched for {self.arch}, patchset "
                f"{self.patchset}, {len(self.changed)} file(s) changed)")
        for o in self.others:
            line += (f"; {o.import_name} = {self.root / o.import_name} ({o.source} patched for {self.arch}, "
                     f"patchset {o.patchset}, {len(o.changed)} file(s) changed)")
        return line


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


def runs_sglang(spec, names: tuple[str, ...] = ("sglang",)) -> bool:
    """Does this job run SGLang, or another of ``names`` (the import names of the packages the
    series patches), so it must run on the pin's patched trees?"""
    return any(name in token for token in launch_command(spec) for name in names)


def patched_imports(matrix, patches, arch: str) -> tuple[str, ...]:
    """The import names of the packages the arch's series patches (sglang always)."""
    names = ["sglang"] + [get(n, matrix).import_name for n in packages_of(load_series(matrix, arch, patches))
                          if n != "sglang" and get(n, matrix) is not None]
    return tuple(dict.fromkeys(names))


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


def _key(sources, patchset: str) -> str:
    ident = "\0".join(f"{s.label}\0{s.revision or ''}" for s in sources) + f"\0{patchset}\0{engine_digest()}"
    return hashlib.sha256(ident.encode()).hexdigest()[:20]


def _full_package(source, dest: Path, import_name: str = "sglang") -> None:
    """Every file of the pin's package into ``dest/IMPORT``: the cached sources the engine read,
    plus the rest of the wheel or git tree (``sources.copy_non_py``: configs, kernels, data)."""
    target = dest / import_name
    shutil.copytree(source.package, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    copy_non_py(source, target)


def prepare(matrix, patches, arch: str, pin: str) -> LocalTree:
    """The pin's packages patched for ``arch``, built once and cached. Failure (exit 1) when the
    series does not hold on the pin (any package): no job is launched on a tree that is not the
    patched pin; BadInput when the pin names no release of a package the series patches."""
    pin_name, pin_cfg = matrix.pin(pin)
    series = load_series(matrix, arch, patches)
    source = resolve_source(pin_cfg.source, matrix)
    what = "smoke --runner local"
    others = [(name, pin_package_tree(matrix, pin_name, series, name, what))
              for name in packages_of(series) if name != "sglang"]
    parts = [("sglang", source)] + others
    root = cache_dir("smoke", "local-trees") / f"{arch}-{pin_name}-{_key([s for _, s in parts], series.hash)}"
    done = root / ".complete"
    patchsets = package_patchsets(series)

    def tree(changed: dict[str, tuple[str, ...]]) -> LocalTree:
        return LocalTree(arch, pin_name, root, source.label, series.hash, changed.get("sglang", ()),
                         tuple(OtherTree(name, get(name, matrix).import_name, src.label, patchsets.get(name, ""),
                                         changed.get(name, ())) for name, src in others))

    if done.is_file():
        changed: dict[str, list[str]] = {}
        for line in done.read_text(encoding="utf-8").splitlines()[1:]:
            if line:
                name, _, rel = line.rpartition("\t")
                changed.setdefault(name or "sglang", []).append(rel)
        return tree({k: tuple(v) for k, v in changed.items()})
    results = []
    for name, src in parts:
        result = run_arch(arch, None, matrix, patches, src=src)[0]  # as apply and build: every file of the package
        if result.drift:
            bad = ", ".join(f"{p.patch_id} {p.status.value}" for p in result.patches if p.status.failed)
            raise Failure(f"{what}: the {arch} patch series does not hold on pin {pin_name} "
                          f"({src.label}: {bad}); no job launched (see `forgepatch apply --arch {arch} "
                          f"--source {pin_cfg.source if src is source else src.label}`)")
        results.append((name, src, result))
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        lines = [series.hash]
        for name, src, result in results:
            import_name = get(name, matrix).import_name
            _full_package(src, staging, import_name)
            for rel, data in result.changed_bytes().items():
                (staging / import_name / rel).parent.mkdir(parents=True, exist_ok=True)
                (staging / import_name / rel).write_bytes(data)
            lines += [rel if name == "sglang" else f"{name}\t{rel}" for rel in sorted(result.changed)]
        (staging / ".complete").write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            os.replace(staging, root)
        except OSError:
            if not done.is_file():  # not another process finishing the same tree first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tree({name: tuple(sorted(result.changed)) for name, _, result in results})


def env_with(tree: LocalTree | None, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the tree first on PYTHONPATH."""
    if tree is None:
        return env
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree.root), env.get("PYTHONPATH")) if p)
    return out


def check_import(tree: LocalTree, env: dict[str, str], python: str = sys.executable) -> None:
    """Refuse (BadInput) unless importing each package of ``tree`` in ``env`` finds ``tree``'s
    copy: without importing it (find_spec of a top-level package runs none of its code)."""
    names = list(tree.imports())
    code = ("import importlib.util as u, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    s = u.find_spec(n)\n"
            "    out[n] = (s.submodule_search_locations or [''])[0] if s else ''\n"
            "print(json.dumps(out))")
    proc = subprocess.run([python, "-c", code, *names], env=env, capture_output=True, text=True, timeout=120)
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else {}
    except ValueError:
        found = {}
    for name, want in tree.imports().items():
        got = found.get(name) or ""
        if not got or Path(got).resolve() != want.resolve():
            what = got or (proc.stderr.strip().splitlines() or ["nothing"])[-1]
            raise BadInput(f"smoke --runner local: `import {name}` in the job's environment finds {what}, not "
                           f"the pin's patched tree {want.resolve()} (an import hook or .pth takes precedence); "
                           "no job launched")
