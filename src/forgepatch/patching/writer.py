"""Writing results transactionally: all files are replaced, or none are."""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from pathlib import Path

from forgepatch.errors import BadInput
from forgepatch.infra.atomic import uninterrupted
from forgepatch.infra.journal import STATE_DIR, commit, notify, open_tree
from forgepatch.patching import undo
from forgepatch.patching.outdir import MARKER, STAGING_PREFIX, STAGING_SUFFIX


def unified_diff(originals: dict[str, bytes], changed: dict[str, bytes | None], prefix: str = "sglang") -> bytes:
    """A unified diff of the files' bytes (their own encoding and line ends), so it applies
    with ``patch``/``git apply`` and shows every byte that changes."""
    out: list[bytes] = []
    for rel in sorted(changed):
        old = originals.get(rel)  # None: a file the series adds (``--- /dev/null``)
        new = changed[rel]  # None: a file removed (``apply --reverse`` of an added file: ``+++ /dev/null``)
        out += difflib.diff_bytes(
            difflib.unified_diff, (old or b"").splitlines(keepends=True), (new or b"").splitlines(keepends=True),
            fromfile=b"/dev/null" if old is None else f"a/{prefix}/{rel}".encode(),
            tofile=b"/dev/null" if new is None else f"b/{prefix}/{rel}".encode(),
        )
        if out and not out[-1].endswith((b"\n", b"\r")):
            out[-1] += b"\n\\ No newline at end of file\n"
    return b"".join(out)


def write_in_place(package: Path, changed: dict[str, bytes], meta: dict | None = None) -> None:
    """Replace the changed files of ``package``, all or none, even across a crash: staged
    copies and a journal first, then the renames (``forgepatch.infra.journal``). The caller holds
    the package's lock (``journal.open_tree``). What is replaced is recorded first, with
    ``meta`` (arch, version, patchset), for ``apply --reverse`` (``patching/undo.py``)."""
    undo.save(package, changed, meta or {})
    commit(package, changed, "apply --in-place")


def write_out(package: Path, changed: dict[str, bytes], out_dir: Path, fill=None, marker=None, check=None,
              name: str = "sglang") -> Path:
    """Write a patched copy as ``out_dir/sglang``, built beside it and renamed into place;
    ``fill(tree)`` adds files the source tree lacks (a wheel's non-``.py`` files) first, and
    ``marker(tree)`` gives the record (``outdir.MARKER``) written with it.

    Crash-safe, under ``out_dir``'s lock: the copy is built in a staging directory
    ``out_dir/.sglang.*.forgepatch`` with its record; then the old copy moves into the
    staging directory, the new one into place (the commit point), the record after it. The
    next run finds a staging directory a killed run left and finishes it (the copy was
    swapped in: its record follows) or undoes it (it was not: the old copy stays).
    ``check()`` runs under the lock, after that recovery (``outdir.check``: a concurrent run
    into the same new DIR waits for this one instead of seeing its staging). The swap holds
    off Ctrl-C (``atomic.uninterrupted``); an interrupt before it removes only the staged
    copy, record first (what is left reads as "not swapped in": rolled back)."""
    out_dir = Path(out_dir)
    src = package.resolve()
    dest_parent = out_dir.resolve()
    if dest_parent == src or src in dest_parent.parents:
        raise BadInput(f"--out: {out_dir} is inside the source package {package}")
    try:
        dest_parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out: cannot write to {out_dir}: {exc.strerror}") from None
    final = dest_parent / name  # the import package's directory (sglang, flashinfer)
    with open_tree(dest_parent, "apply --out", write=True):
        for left in sorted(dest_parent.glob(f"{STAGING_PREFIX}*{STAGING_SUFFIX}")):
            notify(_recover_out(left, final, dest_parent / MARKER))
        if check is not None:
            check()
        try:
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, suffix=STAGING_SUFFIX, dir=dest_parent))
        except OSError as exc:
            raise BadInput(f"--out: cannot write to {out_dir}: {exc.strerror}") from None
        swapped = False
        try:
            tree = staging / "sglang"  # the staged copy (named so whatever the package)
            check_links(Path(src))  # a link loop or a link out of the tree is never followed
            shutil.copytree(src, tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", STATE_DIR))
            if fill is not None:
                fill(tree)
            for rel, text in changed.items():
                (tree / rel).write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
            if marker is not None:
                (staging / "marker").write_bytes(marker(tree))
            old = staging / "previous"
            with uninterrupted():
                if final.exists():
                    os.replace(final, old)
                try:
                    os.replace(tree, final)  # the commit point
                except OSError:
                    if old.exists():
                        os.replace(old, final)  # put the previous copy back
                    raise
                swapped = True
                if marker is not None:
                    os.replace(staging / "marker", dest_parent / MARKER)
                shutil.rmtree(staging, ignore_errors=True)
        except OSError as exc:
            raise BadInput(f"--out: cannot write to {out_dir}: {_reason(exc)}") from None
        finally:
            if not swapped:  # the record first: a staged copy without one reads as not swapped in
                (staging / "marker").unlink(missing_ok=True)
                shutil.rmtree(staging, ignore_errors=True)
    return final


def _reason(exc: OSError) -> str:
    return f"{exc.strerror} ({exc.filename})" if exc.filename else str(exc.strerror or exc)


def recover_out(out_dir: Path, check=None, name: str = "sglang") -> None:
    """Finish or undo a killed ``--out`` run's write into ``out_dir`` (before anything looks
    at what is there), then ``check()`` it, under its lock: a run writing there meanwhile is
    waited for, never seen half-swapped."""
    dest = Path(out_dir)
    if not dest.is_dir():  # a new DIR (or not a directory: check says so)
        if check is not None:
            check()
        return
    if check is None and not any(dest.glob(f"{STAGING_PREFIX}*{STAGING_SUFFIX}")):
        return
    with open_tree(dest, "apply --out", write=True):
        for left in sorted(dest.glob(f"{STAGING_PREFIX}*{STAGING_SUFFIX}")):
            notify(_recover_out(left, dest / name, dest / MARKER))
        if check is not None:
            check()


def _recover_out(staging: Path, final: Path, marker: Path) -> str:
    """Finish or undo what a killed ``--out`` run left in ``staging``; returns the notice."""
    if (staging / "sglang").exists():  # not swapped in: the old copy stays (or comes back)
        if not final.exists() and (staging / "previous").exists():
            os.replace(staging / "previous", final)
        shutil.rmtree(staging, ignore_errors=True)
        return f"{final.parent}: rolled back an interrupted apply --out (its copy had not replaced {final.name}/)"
    if (staging / "marker").exists():
        os.replace(staging / "marker", marker)
    shutil.rmtree(staging, ignore_errors=True)
    return f"{final.parent}: completed an interrupted apply --out (its copy was in place; its record is written now)"


def check_links(root: Path) -> None:
    """BadInput (one line) for a symbolic link under ``root`` that a copy would follow out of
    the tree (its target is outside ``root``) or round in a loop (a directory link to one of
    its own ancestors, or a link that cannot be resolved)."""
    top = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False: links are not entered
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", STATE_DIR)]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                continue
            try:
                target = os.path.realpath(path, strict=True)
            except OSError as exc:
                if os.path.isdir(path) or getattr(exc, "errno", None) == 40:
                    raise BadInput(f"source tree: {path}: symbolic link loop (not copied into --out)") from None
                continue  # a dangling file link: copytree reports it as it always did
            if os.path.commonpath([top, target]) != top:
                raise BadInput(f"source tree: {path} is a symbolic link to {target}, outside the tree "
                               f"(not copied into --out)")
            if os.path.isdir(target) and os.path.commonpath([target, os.path.realpath(dirpath)]) == target:
                raise BadInput(f"source tree: {path}: symbolic link loop (a link to {target}, its own ancestor)")
