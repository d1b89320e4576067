"""Services behind ``forgepatch apply``, ``lint`` and ``patch test`` (the CLI stays thin)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from forgepatch import progress
from forgepatch.arch import get_arch
from forgepatch.errors import BadInput
from forgepatch.infra.journal import open_tree
from forgepatch.packages import get
from forgepatch.patching import editlock, outdir, undo
from forgepatch.patching.fulltree import PackageTree
from forgepatch.patching.model import FALLBACK_HELPER, SELF_CHECK_SITE, ApplyResult, Status
from forgepatch.patching.series import for_package, load_series, only_patches, packages_of, run_series
from forgepatch.patching.trees import MemoryTree
from forgepatch.patching.writer import recover_out, unified_diff, write_in_place, write_out
from forgepatch.sources import copy_non_py, pin_source, resolve_source


@dataclass
class ApplyRun:
    result: ApplyResult
    source: object  # SourceTree
    written: Path | None = None
    diff: bytes = b""
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        doc = self.result.to_json()
        doc["source"] = self.source.label
        doc["upstream_revision"] = self.source.revision
        doc["written"] = str(self.written) if self.written else None
        doc["package"] = getattr(self.source, "package_name", "sglang")
        if "files_written" in self.extra:
            doc["files_written"] = self.extra["files_written"]
        return doc


def run_arch(arch: str, source: str | None, matrix, patches_dir: Path, src=None, only: list[str] | None = None):
    """Resolve the source (unless given) and run the arch's patch series (or the part of
    it ``only`` names) in memory: the part of it that patches this source's package."""
    series = only_patches(load_series(matrix, arch, patches_dir), only)
    src = resolve_source(source, matrix) if src is None else src
    series = for_package(series, src.package_name, matrix)  # this source's package's part of the series
    tree = PackageTree(src.package, pristine=src.pristine, wheel=src.origin if src.kind == "pypi" else None)
    with progress.task(f"patching {src.label} for {series.arch.name} ({len(tree.paths())} files)"):
        result = run_series(series, tree, src.version)
    return result, src, tree, list(series.patches)


@contextmanager
def _tree_lock(src, what: str, write: bool):
    """A local directory is locked while it is read (shared) or patched in place
    (exclusive); cached PyPI and git trees are forgepatch's own and never change."""
    if src.kind != "dir":
        yield
        return

    with open_tree(src.package, what, write=write):
        yield


def apply_arch(arch: str, source: str | None, out: Path | None, matrix, patches_dir: Path,
               in_place: bool = False, check: bool = False, diff: bool = False, force: bool = False,
               accept: bool = False, only: list[str] | None = None) -> ApplyRun:
    """Run the series; unless checking, write the result (``--out`` copy or ``--in-place``).

    ``--out DIR`` gets a complete package (the source's ``.py`` files, patched, and its other
    files: configs, data, compiled extensions) and a record of what was written; a directory
    forgepatch did not write is refused before any work unless ``force`` (``outdir``).
    An in-place run holds the tree's lock from before it reads the tree until its journal
    is gone, so a concurrent run waits (or fails with one line) and then sees the result.
    ``accept`` records each patch's edit set in its lock (``editlock``) before anything is
    written, unless the series fails for another reason than ``review``."""
    src = resolve_source(source, matrix)
    out, name = out_for(out, src, matrix)
    if out is not None and not (check or diff or in_place):
        # a killed --out run's copy is finished or undone first, then DIR is checked (under its lock)
        recover_out(out, check=lambda: outdir.check(out, force, name), name=name)
    if in_place and src.kind != "dir":
        raise BadInput("--in-place: only a local directory source can be patched in place")
    write = in_place and not check
    with _tree_lock(src, "apply --in-place" if write else "apply", write=write):
        result, src, _tree, _patches = run_arch(arch, source, matrix, patches_dir, src=src, only=only)
        run = ApplyRun(result, src)
        if accept:
            run.extra["accepted"] = accept_edits(result, _patches)
        if diff:
            run.diff = unified_diff(result.original_bytes(), result.changed_bytes(), prefix=src.package.name)
        if check or result.drift:
            return run  # drift: nothing is written
        if in_place:
            write_in_place(src.package, result.changed_bytes(), _undo_meta(result))
            run.written = src.package
        elif out is not None:
            meta = {"arch": result.arch, "source": src.label, "version": result.version,
                    "patchset": result.patchset_hash, "changed": sorted(result.changed)}
            # the copy and its record are swapped in together (crash-safe: writer.write_out)
            run.written = write_out(src.package, result.changed_bytes(), out, fill=lambda tree: copy_non_py(src, tree),
                                    marker=lambda tree: outdir.record_data(tree, meta),
                                    # again, under DIR's lock: it may have changed while the series ran
                                    check=lambda: outdir.check(out, force, name), name=name)
            run.extra["files_written"] = outdir.recorded(out)
    return run


def _undo_meta(result: ApplyResult) -> dict:
    """What the record of an in-place apply says about it (``patching/undo.py``)."""
    return {"arch": result.arch, "version": result.version, "patchset": result.patchset_hash,
            "patches": [p.patch_id for p in result.patches]}


@dataclass
class ReverseRun:
    """``apply --reverse`` over one or more local trees: each one's reverse (planned, and
    written unless checking) and its diff."""

    reverses: list
    written: bool
    diff: bytes = b""

    def to_json(self) -> dict:
        return {"status": "reversed" if self.written else "would-reverse", "trees": [r.to_json() for r in self.reverses]}


def reverse_arch(arch: str, sources: list[str | None], matrix, check: bool = False, diff: bool = False) -> ReverseRun:
    """Undo the newest ``apply --in-place`` on each source tree (``--reverse``): every tree
    is checked first (it holds exactly what that apply wrote), under its lock; only then is
    any tree written, each through its journal. ``check``/``diff`` write nothing."""
    from contextlib import ExitStack

    srcs = []
    for spec in sources:
        # (checked before resolving: a PyPI or git source, or a pin, is never fetched for this)
        src = resolve_source(spec, matrix) if spec is not None and Path(spec).is_dir() else None
        if src is None or src.kind != "dir":
            raise BadInput(f"--reverse: {spec or 'the default pin'!s} is not a local directory: only a tree patched "
                           f"with --in-place can be reversed (give it as --source DIR)")
        srcs.append(src)
    write = not (check or diff)
    with ExitStack() as stack:
        for src in srcs:
            stack.enter_context(_tree_lock(src, "apply --reverse" if write else "apply --reverse --check", write=write))
        plans = [undo.plan(src.package, arch, drop=write) for src in srcs]
        out = ReverseRun(plans, written=write)
        if diff:
            out.diff = b"".join(unified_diff(p.originals(), {**p.restore, **dict.fromkeys(p.remove)},
                                             prefix=p.package.name) for p in plans)
        if write:
            for p in plans:
                undo.reverse(p)
    return out


def series_sources(arch: str, sources: list[str] | None, pin: str | None, matrix, patches_dir) -> list[str | None]:
    """The sources one ``apply``/``lint`` runs on: the ``--source`` flags as given (one per
    package); else the pin (``--pin``, default the default pin) and, for each other package
    the arch's series patches, the pin's ``[pins.NAME.packages.PKG]`` version of it."""
    if sources:
        if pin is not None:
            raise BadInput("--pin and --source are exclusive: --pin NAME means the pin's source")
        return list(sources)
    if matrix is None:
        return [None]

    base = None if pin is None else pin_source(pin, matrix)  # (what --pin means everywhere)

    name, pinned = matrix.pin(pin)
    wanted = [p for p in packages_of(load_series(matrix, arch, patches_dir)) if p != "sglang"]
    extra = []
    for pkg in wanted:
        pp = pinned.packages.get(pkg)
        if pp is not None:
            info = get(pkg, matrix)
            extra.append(pp.source(info.dist, info.repo))
    return [base] + extra


def not_run(arch: str, matrix, patches_dir, ran: list[str]) -> list[str]:
    """Packages the arch's series patches that this run had no source for."""
    return [p for p in packages_of(load_series(matrix, arch, patches_dir)) if p not in ran]


def out_for(out: Path | None, src, matrix) -> tuple[Path | None, str]:
    """Where ``--out DIR`` puts a source's package: ``DIR/sglang`` for SGLang, and
    ``DIR/<dist>/<import>`` for another package (``DIR/flashinfer-python/flashinfer``: its own
    output directory and record; put ``DIR/<dist>`` on PYTHONPATH next to ``DIR``)."""
    name = getattr(src, "package_name", "sglang")
    if name == "sglang" or out is None:
        return out, "sglang"

    pkg = get(name, matrix)
    return Path(out) / pkg.dist, pkg.import_name


def apply_many(arch: str, sources: list[str], out: Path | None, matrix, patches_dir: Path, in_place: bool = False,
               check: bool = False, diff: bool = False, force: bool = False, accept: bool = False,
               only: list[str] | None = None) -> list[ApplyRun]:
    """One ``apply`` over several packages (one source each): every package's part of the
    series runs in memory first; only when none drifts is anything written (each package
    crash-safely, like a single-package run). A package named twice is refused."""
    from contextlib import ExitStack

    srcs = [resolve_source(s, matrix) for s in sources]
    seen: dict[str, str] = {}
    for spec, src in zip(sources, srcs):
        if src.package_name in seen:
            raise BadInput(f"--source: {spec!r} and {seen[src.package_name]!r} are both {src.package_name}: "
                           f"one source per package")
        seen[src.package_name] = spec
        if in_place and src.kind != "dir":
            raise BadInput(f"--in-place: {spec!r}: only a local directory source can be patched in place")
    targets = [out_for(out, src, matrix) for src in srcs]
    if out is not None and not (check or diff or in_place):
        for where, name in targets:
            # a killed --out run's copy is finished or undone first, then DIR is checked (under its lock)
            recover_out(where, check=lambda w=where, n=name: outdir.check(w, force, n), name=name)
    write = in_place and not check
    runs = []
    with ExitStack() as stack:
        for src in srcs:
            stack.enter_context(_tree_lock(src, "apply --in-place" if write else "apply", write=write))
        for src in srcs:
            result, _src, _tree, _patches = run_arch(arch, None, matrix, patches_dir, src=src, only=only)
            run = ApplyRun(result, src)
            if accept:
                run.extra["accepted"] = accept_edits(result, _patches)
            if diff:
                run.diff = unified_diff(result.original_bytes(), result.changed_bytes(), prefix=src.package.name)
            runs.append(run)
        if check or any(r.result.drift for r in runs):
            return runs  # one package drifts: no package is written
        for run, (where, name) in zip(runs, targets):
            src, result = run.source, run.result
            if in_place:
                write_in_place(src.package, result.changed_bytes(), _undo_meta(result))
                run.written = src.package
            elif where is not None:
                meta = {"arch": result.arch, "source": src.label, "version": result.version,
                        "patchset": result.patchset_hash, "changed": sorted(result.changed),
                        "package": src.package_name}
                run.written = write_out(src.package, result.changed_bytes(), where,
                                        fill=lambda tree, s=src: copy_non_py(s, tree),
                                        marker=lambda tree, m=meta: outdir.record_data(tree, m),
                                        # again, under DIR's lock: it may have changed while the series ran
                                        check=lambda w=where, n=name: outdir.check(w, force, n), name=name)
                run.extra["files_written"] = outdir.recorded(where)
    return runs


def accept_edits(result: ApplyResult, patches) -> list[dict]:
    """``--accept``: the run's edit sets go into the patches' locks, unless a patch fails
    for a reason other than ``review`` (then nothing is accepted). Returns what was accepted
    (patch, lock, edits) for the output."""
    if any(Status.worst([s.status for s in p.sites if s.site != editlock.EDIT_LOCK_SITE]).failed
           for p in result.patches):
        return []
    edits = {p.patch_id: p.edits for p in result.patches}
    written = editlock.accept(result, patches)
    by_path = {str(editlock.lock_path(p)): p.id for p in patches}
    return [{"patch": by_path.get(str(path)), "lock": str(path),
             "edits": [e.to_doc() for e in edits.get(by_path.get(str(path)), [])]} for path in written]


@dataclass
class LockRow:
    arch: str
    source: str
    version: str | None
    patch: str
    status: str  # the patch's status on that pin (before accepting)
    edit_set: str | None
    lock: str | None  # the lock file written, if it changed
    detail: str = ""

    def to_json(self) -> dict:
        return dict(self.__dict__)


def lock_patches(arches: list[str], sources: list[str | None], matrix, patches_dir, ids: list[str] | None = None
                 ) -> list[LockRow]:
    """``forgepatch patch lock``: run each arch's series on each source and record every
    patch's edit set in its lock (created if missing, the pin moved to its current set).
    A pin on which the series fails for another reason than ``review`` records nothing
    (its rows say why). Every run comes first: a bad arch or source of the command line is
    bad input before any lock is written."""
    runs = [(arch, run_arch(arch, source, matrix, patches_dir)) for arch in arches for source in sources]
    rows: list[LockRow] = []
    for arch, (result, src, _tree, patches) in runs:
        chosen = [p for p in patches if ids is None or p.id in ids]
        before = {p.patch_id: (p.status.value, p.edit_set,
                               "; ".join(s.detail for s in p.sites if s.status.failed)) for p in result.patches}
        blocked = any(Status.worst([s.status for s in p.sites if s.site != editlock.EDIT_LOCK_SITE]).failed
                      for p in result.patches)
        written = {} if blocked else {str(path): path for path in editlock.accept(result, chosen)}
        for patch in chosen:
            status, edit_set, detail = before.get(patch.id, ("not-applicable", None, ""))
            path = str(editlock.lock_path(patch))
            rows.append(LockRow(arch, src.label, result.version, patch.id, status, edit_set,
                                path if path in written else None,
                                (detail or "another patch of the series fails on this pin") if blocked else ""))
    return rows


def lint_arch(arch: str, source: str | None, matrix, patches_dir: Path):
    """Patch in memory; the series' self-check lists the feature's gates that still reject
    the arch (incomplete) and the ones a patch knowingly leaves (ignored)."""
    src = resolve_source(source, matrix)
    with _tree_lock(src, "lint", write=False):
        result, src, _tree, _patches = run_arch(arch, source, matrix, patches_dir, src=src)
    return result, src, self_check_locations(result)


def self_check_locations(result: ApplyResult):
    """(patch id, location) for every finding of the series' self-check, in series order."""
    return [(p.patch_id, loc) for p in result.patches for s in p.sites if s.site == SELF_CHECK_SITE
            for loc in s.locations]


@dataclass
class ExampleRun:
    """One example of one patch, run: ``error`` None when it passed; ``got`` the output
    (None when the run raised)."""

    patch: object  # patchset.Patch
    index: int  # position in the patch's examples
    name: str
    error: str | None
    got: str | None

    def to_json(self) -> dict:
        return {"patch": self.patch.id, "example": self.name, "index": self.index,
                "status": "passed" if self.error is None else "failed", "error": self.error}


def run_examples(patches) -> list[tuple[str, str, str | None]]:
    """Run every patch's examples; returns (patch id, example name, failure or None)."""
    return [(r.patch.id, r.name, r.error) for r in example_runs(patches)]


def example_runs(patches) -> list[ExampleRun]:
    """Run every patch's examples (see :func:`run_examples`), keeping each output.

    An example's tree is ``path`` (holding ``before``) plus its ``context`` files. ``before``
    must become ``after`` (a fixed point), or stay unchanged when there is no ``after``; an
    arch-gate run that falls back to a local helper (no file of the tree provides the new
    predicate) must be declared with ``fallback = true``, and one that declares it must take it."""
    from forgepatch.patching.engine import run_patches  # heavy: libcst (the engine)

    out = []
    for patch in patches:
        for i, ex in enumerate(patch.examples):
            files = dict(ex.context)
            files[ex.path] = ex.before
            arch = get_arch(ex.arch)
            got = None
            try:
                res = run_patches(MemoryTree(files, pristine=ex.upstream), [patch], arch, None)
                got = res.changed.get(ex.path, ex.before)
                error = _example_error(ex, res, got)
                if error is None:  # the result is a fixed point (idempotence)
                    files[ex.path] = got
                    again = run_patches(MemoryTree(files), [patch], arch, None)
                    if again.changed:
                        error = "not idempotent: a second run changes the output again"
            except Exception as exc:  # noqa: BLE001 - report, don't crash the runner
                error = f"{type(exc).__name__}: {exc}"
            out.append(ExampleRun(patch, i, ex.name, error, got))
    return out


def accept_examples(runs: list[ExampleRun]) -> list[tuple[ExampleRun, str]]:
    """``patch test --accept``: each failed example whose output differs from what it
    expects gets that output as its ``after`` (the patch's ``.toml`` is rewritten in place,
    comments and layout kept; atomically). Returns (example, diff of the old expectation
    against the new ``after``). A ``.py`` patch's examples are code: BadInput."""
    import os
    import tempfile

    import tomlkit

    todo = [r for r in runs if r.error is not None and r.got is not None
            and r.got != (r.patch.examples[r.index].after or r.patch.examples[r.index].before)]
    by_file: dict[Path, list[ExampleRun]] = {}
    for r in todo:
        path = Path(r.patch.path)
        if path.suffix != ".toml":
            raise BadInput(f"{path}: --accept rewrites .toml patches only; put the new `after` of example "
                           f"{r.name!r} in the file yourself")
        by_file.setdefault(path, []).append(r)
    done = []
    for path, rs in by_file.items():
        doc = tomlkit.parse(path.read_text(encoding="utf-8"))
        for r in rs:
            ex = r.patch.examples[r.index]
            table = doc["examples"][r.index]
            literal = "\'\'\'" not in r.got and "\r" not in r.got
            table["after"] = tomlkit.string(("\n" if r.got.startswith("\n") else "") + r.got,
                                            multiline=True, literal=literal)
            if _toml_value(doc, r.index) != r.got:  # what TOML reads back must be the output exactly
                table["after"] = tomlkit.string(r.got)
            done.append((r, _diff(ex.after if ex.after is not None else ex.before, r.got)))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(tomlkit.dumps(doc))
            os.chmod(tmp, path.stat().st_mode & 0o777)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return done


def _toml_value(doc, index: int):
    import tomllib

    import tomlkit

    return tomllib.loads(tomlkit.dumps(doc))["examples"][index].get("after")


def _example_error(ex, res, got: str) -> str | None:
    others = sorted(set(res.changed) - {ex.path})
    if others:
        return (f"the patch changed {', '.join(others)}, a `context` file, not only {ex.path} (the example's "
                f"`path`): only `path` is compared")
    failed = [p for p in res.patches if p.status.failed]
    want = ex.before if ex.after is None else ex.after
    diff = "" if got == want else "\n" + _diff(want, got)
    fell_back = any(FALLBACK_HELPER in loc.detail for p in res.patches for s in p.sites for loc in s.locations)
    if fell_back and not ex.fallback:
        return ("the run fell back to a local helper: no file of this example's tree provides the new predicate. "
                "Add the module the sibling predicate comes from to `context` (e.g. context = { \"srt/utils.py\" = "
                "\"def is_sm90_supported(): ...\\ndef is_sm120_supported(): ...\\n\" }), or set `fallback = true` "
                "if the local helper is what this example is about" + diff)
    if ex.fallback and not fell_back:
        return ("`fallback = true`, but the run did not fall back to a local helper (the tree provides the "
                "predicate)" + diff)
    if ex.after is None:
        if got != ex.before:
            return (f"expected no change (this example has no `after`: {ex.path} must stay as `before`), "
                    f"but the patch changed it:" + diff)
        return None  # (sites the example's small tree lacks report drift: only the output counts)
    if got != ex.after:
        if got == ex.before:
            why = _status_error(failed) if failed else "the patch changed nothing (no site found, or no gate in it)"
            return f"expected {ex.path} to become `after`, but {why}:" + diff
        return f"{ex.path} differs from `after` (- expected, + got):" + diff
    return None


def _status_error(failed) -> str:
    parts = []
    for p in failed:
        for s in p.sites:
            if s.status.failed:
                parts.append(f"{s.site}: {s.status.value}" + (f" ({s.detail})" if s.detail else ""))
    return "the run failed: " + "; ".join(parts or [f"{p.patch_id}: {p.status.value}" for p in failed])


def _diff(want: str, got: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "expected", "got"))
