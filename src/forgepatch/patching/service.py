"""Services behind ``forgepatch apply``, ``lint`` and ``patch test`` (the CLI stays thin)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from forgepatch.arch import get_arch
from forgepatch.errors import BadInput
from forgepatch.patching.model import ApplyResult


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


def run_arch(arch: str, source: str | None, matrix, patches_dir: Path, src=None):
    """Resolve the source (unless given) and run the arch's patch series in memory."""
    from forgepatch.patching.fulltree import PackageTree
    from forgepatch.patching.series import for_package, load_series, run_series
    from forgepatch.sources import resolve_source

    from forgepatch import progress

    series = load_series(matrix, arch, patches_dir)
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
    from forgepatch.infra.journal import open_tree

    with open_tree(src.package, what, write=write):
        yield


def apply_arch(arch: str, source: str | None, out: Path | None, matrix, patches_dir: Path,
               in_place: bool = False, check: bool = False, diff: bool = False, force: bool = False) -> ApplyRun:
    """Run the series; unless checking, write the result (``--out`` copy or ``--in-place``).

    ``--out DIR`` gets a complete package (the source's ``.py`` files, patched, and its other
    files: configs, data, compiled extensions) and a record of what was written; a directory
    forgepatch did not write is refused before any work unless ``force`` (``outdir``).
    An in-place run holds the tree's lock from before it reads the tree until its journal
    is gone, so a concurrent run waits (or fails with one line) and then sees the result."""
    from forgepatch.patching import outdir
    from forgepatch.patching.writer import unified_diff, write_in_place, write_out
    from forgepatch.sources import resolve_source

    src = resolve_source(source, matrix)
    out, name = out_for(out, src, matrix)
    if out is not None and not (check or diff or in_place):
        from forgepatch.patching.writer import recover_out

        # a killed --out run's copy is finished or undone first, then DIR is checked (under its lock)
        recover_out(out, check=lambda: outdir.check(out, force, name), name=name)
    if in_place and src.kind != "dir":
        raise BadInput("--in-place: only a local directory source can be patched in place")
    write = in_place and not check
    with _tree_lock(src, "apply --in-place" if write else "apply", write=write):
        result, src, _tree, _patches = run_arch(arch, source, matrix, patches_dir, src=src)
        run = ApplyRun(result, src)
        if diff:
            run.diff = unified_diff(result.original_bytes(), result.changed_bytes(), prefix=src.package.name)
        if check or result.drift:
            return run  # drift: nothing is written
        if in_place:
            write_in_place(src.package, result.changed_bytes())
            run.written = src.package
        elif out is not None:
            from forgepatch.sources import copy_non_py

            meta = {"arch": result.arch, "source": src.label, "version": result.version,
                    "patchset": result.patchset_hash, "changed": sorted(result.changed)}
            # the copy and its record are swapped in together (crash-safe: writer.write_out)
            run.written = write_out(src.package, result.changed_bytes(), out, fill=lambda tree: copy_non_py(src, tree),
                                    marker=lambda tree: outdir.record_data(tree, meta),
                                    # again, under DIR's lock: it may have changed while the series ran
                                    check=lambda: outdir.check(out, force, name), name=name)
            run.extra["files_written"] = outdir.recorded(out)
    return run


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
    base = None if pin is None else matrix.pin(pin)[1].source  # (what --pin means everywhere)
    from forgepatch.packages import get
    from forgepatch.patching.series import load_series, packages_of

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
    from forgepatch.patching.series import load_series, packages_of

    return [p for p in packages_of(load_series(matrix, arch, patches_dir)) if p not in ran]


def out_for(out: Path | None, src, matrix) -> tuple[Path | None, str]:
    """Where ``--out DIR`` puts a source's package: ``DIR/sglang`` for SGLang, and
    ``DIR/<dist>/<import>`` for another package (``DIR/flashinfer-python/flashinfer``: its own
    output directory and record; put ``DIR/<dist>`` on PYTHONPATH next to ``DIR``)."""
    name = getattr(src, "package_name", "sglang")
    if name == "sglang" or out is None:
        return out, "sglang"
    from forgepatch.packages import get

    pkg = get(name, matrix)
    return Path(out) / pkg.dist, pkg.import_name


def apply_many(arch: str, sources: list[str], out: Path | None, matrix, patches_dir: Path, in_place: bool = False,
               check: bool = False, diff: bool = False, force: bool = False) -> list[ApplyRun]:
    """One ``apply`` over several packages (one source each): every package's part of the
    series runs in memory first; only when none drifts is anything written (each package
    crash-safely, like a single-package run). A package named twice is refused."""
    from contextlib import ExitStack

    from forgepatch.patching import outdir
    from forgepatch.patching.writer import recover_out, unified_diff, write_in_place, write_out
    from forgepatch.sources import copy_non_py, resolve_source

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
            result, _src, _tree, _patches = run_arch(arch, None, matrix, patches_dir, src=src)
            run = ApplyRun(result, src)
            if diff:
                run.diff = unified_diff(result.original_bytes(), result.changed_bytes(), prefix=src.package.name)
            runs.append(run)
        if check or any(r.result.drift for r in runs):
            return runs  # one package drifts: no package is written
        for run, (where, name) in zip(runs, targets):
            src, result = run.source, run.result
            if in_place:
                write_in_place(src.package, result.changed_bytes())
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


def lint_arch(arch: str, source: str | None, matrix, patches_dir: Path):
    """Patch in memory; the series' self-check lists the feature's gates that still reject
    the arch (incomplete) and the ones a patch knowingly leaves (ignored)."""
    from forgepatch.sources import resolve_source

    src = resolve_source(source, matrix)
    with _tree_lock(src, "lint", write=False):
        result, src, _tree, _patches = run_arch(arch, source, matrix, patches_dir, src=src)
    return result, src, self_check_locations(result)


def self_check_locations(result: ApplyResult):
    """(patch id, location) for every finding of the series' self-check, in series order."""
    from forgepatch.patching.model import SELF_CHECK_SITE

    return [(p.patch_id, loc) for p in result.patches for s in p.sites if s.site == SELF_CHECK_SITE
            for loc in s.locations]


def run_examples(patches) -> list[tuple[str, str, str | None]]:
    """Run every patch's examples; returns (patch id, example name, failure or None).

    An example's tree is ``path`` (holding ``before``) plus its ``context`` files. ``before``
    must become ``after`` (a fixed point), or stay unchanged when there is no ``after``; an
    arch-gate run that falls back to a local helper (no file of the tree provides the new
    predicate) must be declared with ``fallback = true``, and one that declares it must take it."""
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.trees import MemoryTree

    out = []
    for patch in patches:
        for ex in patch.examples:
            files = dict(ex.context)
            files[ex.path] = ex.before
            arch = get_arch(ex.arch)
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
            out.append((patch.id, ex.name, error))
    return out


def _example_error(ex, res, got: str) -> str | None:
    from forgepatch.patching.codemods.arch_gate import FALLBACK_HELPER

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
