"""Writing results transactionally: all files are replaced, or none are."""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from pathlib import Path

from forgepatch.errors import BadInput
from forgepatch.journal import STATE_DIR


def unified_diff(originals: dict[str, bytes], changed: dict[str, bytes], prefix: str = "sglang") -> bytes:
    """A unified diff of the files' bytes (their own encoding and line ends), so it applies
    with ``patch``/``git apply`` and shows every byte that changes."""
    out: list[bytes] = []
    for rel in sorted(changed):
        out += difflib.diff_bytes(
            difflib.unified_diff, originals[rel].splitlines(keepends=True), changed[rel].splitlines(keepends=True),
            fromfile=f"a/{prefix}/{rel}".encode(), tofile=f"b/{prefix}/{rel}".encode(),
        )
        if out and not out[-1].endswith((b"\n", b"\r")):
            out[-1] += b"\n\\ No newline at end of file\n"
    return b"".join(out)


def write_in_place(package: Path, changed: dict[str, bytes]) -> None:
    """Replace the changed files of ``package``, all or none, even across a crash: staged
    copies and a journal first, then the renames (``forgepatch.journal``). The caller holds
    the package's lock (``journal.open_tree``)."""
    from forgepatch.journal import commit

    commit(package, changed, "apply --in-place")


def write_out(package: Path, changed: dict[str, bytes], out_dir: Path, fill=None) -> Path:
    """Write a patched copy as ``out_dir/sglang``, built beside it and renamed into place;
    ``fill(tree)`` adds files the source tree lacks (a wheel's non-``.py`` files) first."""
    out_dir = Path(out_dir)
    src = package.resolve()
    dest_parent = out_dir.resolve()
    if dest_parent == src or src in dest_parent.parents:
        raise BadInput(f"--out: {out_dir} is inside the source package {package}")
    try:
        dest_parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".sglang.", suffix=".forgepatch", dir=dest_parent))
    except OSError as exc:
        raise BadInput(f"--out: cannot write to {out_dir}: {exc.strerror}") from None
    try:
        tree = staging / "sglang"
        shutil.copytree(src, tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", STATE_DIR))
        if fill is not None:
            fill(tree)
        for rel, text in changed.items():
            (tree / rel).write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        final = dest_parent / "sglang"
        old = staging / "previous"
        if final.exists():
            os.replace(final, old)
        try:
            os.replace(tree, final)
        except OSError:
            if old.exists():
                os.replace(old, final)  # put the previous copy back
            raise
    except OSError as exc:
        raise BadInput(f"--out: cannot write to {out_dir}: {exc.strerror}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
