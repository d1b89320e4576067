"""Writing results transactionally: all files are replaced, or none are."""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from pathlib import Path

from forgepatch.errors import BadInput


def unified_diff(originals: dict[str, str], changed: dict[str, str], prefix: str = "sglang") -> str:
    out = []
    for rel in sorted(changed):
        out += difflib.unified_diff(
            originals[rel].splitlines(keepends=True), changed[rel].splitlines(keepends=True),
            fromfile=f"a/{prefix}/{rel}", tofile=f"b/{prefix}/{rel}",
        )
    return "".join(out)


def write_in_place(package: Path, originals: dict[str, str], changed: dict[str, str]) -> None:
    """Replace the changed files of ``package``: temp files first, then renames; if any
    rename fails, the files already replaced are restored."""
    staged: list[tuple[Path, Path]] = []
    try:
        for rel, text in sorted(changed.items()):
            target = package / rel
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".forgepatch", dir=target.parent)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            os.chmod(tmp, target.stat().st_mode & 0o7777)
            staged.append((Path(tmp), target))
    except OSError as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise BadInput(f"{package}: cannot write: {exc.strerror} ({exc.filename})") from None
    done: list[Path] = []
    try:
        for tmp, target in staged:
            os.replace(tmp, target)
            done.append(target)
    except OSError as exc:
        for target in done:  # roll back
            target.write_text(originals[str(target.relative_to(package))], encoding="utf-8")
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise BadInput(f"{package}: cannot write: {exc.strerror}; nothing changed") from None


def write_out(package: Path, changed: dict[str, str], out_dir: Path, fill=None) -> Path:
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
        shutil.copytree(src, tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if fill is not None:
            fill(tree)
        for rel, text in changed.items():
            (tree / rel).write_text(text, encoding="utf-8")
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
