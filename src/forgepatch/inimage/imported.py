"""The packages a process actually imports: SGLang and FlashInfer, each with its version and
the directory it was imported from (``module.__file__``), as this interpreter resolves them.

The image's labels say which release of each package ``build`` put there; this says what a
job ran with (another installation earlier on ``sys.path``, a stale ``.pth`` or a
``PYTHONPATH`` can win). The version is read from the distribution's metadata beside the
imported directory (``DIST-VERSION.dist-info``), else the module's ``__version__``, else a
``__version__ = "X"`` literal in its generated version file, else ``importlib.metadata``
(the first distribution on ``sys.path``, perhaps another installation); ``version_from`` says
which. A package that
fails to import is still located (``importlib.util.find_spec``: where the import looked) and
its error kept. Standard library only.

    python3 -m forgepatch.inimage.imported                    # one line: [forgepatch-imported] {...}
    python3 -m forgepatch.inimage.imported --json             # the JSON document alone
    python3 -m forgepatch.inimage.imported --run-module sglang.launch_server -- ARGS...
    python3 -m forgepatch.inimage.imported --run-path launcher.py -- ARGS...

``--run-*``: imports the packages in this process, prints the line, then runs the launcher in
the same process (``runpy``, as ``python -m`` / ``python FILE`` would): the server tier's
record of what the server process itself imported.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
from typing import Any

from forgepatch.inimage.toolchain import doc_line, parse_doc_line, report

IMPORTED_PREFIX = "[forgepatch-imported]"
# forgepatch's name -> (import package, distributions that carry it)
PACKAGES = {"sglang": ("sglang", ("sglang",)), "flashinfer": ("flashinfer", ("flashinfer-python", "flashinfer"))}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _beside(package_dir: str, dists: tuple[str, ...]) -> str | None:
    """The version of the dist-info next to ``package_dir`` naming one of ``dists``."""
    parent = os.path.dirname(package_dir)
    want = {_norm(d) for d in dists}
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return None
    for name in names:
        if name.endswith(".dist-info") and "-" in name[:-10]:
            dist, _, version = name[:-10].rpartition("-")
            if _norm(dist) in want:
                return version
    return None


_VERSION_LITERAL = re.compile(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", re.M)


def _literal(package_dir: str) -> str | None:
    """A ``__version__ = "X"`` literal in the package's generated version file (a package that
    fails to import, or a source install without metadata)."""
    for name in ("_version.py", "_build_meta.py", "version.py"):
        try:
            with open(os.path.join(package_dir, name), encoding="utf-8") as fh:
                m = _VERSION_LITERAL.search(fh.read())
        except (OSError, UnicodeDecodeError):
            continue
        if m:
            return m.group(1)
    return None


def one(import_name: str, dists: tuple[str, ...]) -> dict[str, Any] | None:
    """``{"version", "version_from", "dir", "imported", "error"}`` for one package; None when
    this interpreter cannot find it at all."""
    error = None
    try:
        module = importlib.import_module(import_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, never raised
        module = None
        error = f"{type(exc).__name__}: {exc}"[:300]
    if module is not None:
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", []) or []), None)
    else:
        try:
            spec = importlib.util.find_spec(import_name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return None
        where = spec.origin if spec.origin and spec.origin != "namespace" else next(
            iter(spec.submodule_search_locations or []), None)
    package_dir = os.path.dirname(where) if where and where.endswith(".py") else where
    version, source = (_beside(package_dir, dists), "dist-info") if package_dir else (None, "")
    if version is None and module is not None and isinstance(getattr(module, "__version__", None), str):
        version, source = module.__version__, "__version__"
    if version is None and package_dir:
        version, source = _literal(package_dir), "source"
    if version is None:
        for dist in dists:
            try:
                version, source = importlib.metadata.version(dist), "metadata"
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return {"version": version, "version_from": source if version else None,
            "dir": os.path.realpath(package_dir) if package_dir else None,
            "imported": module is not None, "error": error}


def collect(names: tuple[str, ...] = tuple(PACKAGES)) -> dict[str, Any]:
    """name -> ``one(...)`` for each package (None: not found by this interpreter)."""
    return {name: one(*PACKAGES[name]) for name in names}


def line(doc: dict[str, Any] | None = None) -> str:
    return doc_line(IMPORTED_PREFIX, collect() if doc is None else doc)


def parse_line(text: str) -> dict[str, Any] | None:
    """The document of a ``[forgepatch-imported] {...}`` log line (None if it is not one)."""
    return parse_doc_line(IMPORTED_PREFIX, text)


def wrap(argv: list[str]) -> list[str]:
    """A launch command ``PYTHON -m MODULE ARGS`` / ``PYTHON FILE.py ARGS`` run through this
    module (same interpreter, same process); any other command is returned as it is."""
    if len(argv) >= 2 and os.path.basename(argv[0]).startswith("python"):
        if argv[1] == "-m" and len(argv) >= 3:
            return [argv[0], "-m", __name__, "--run-module", argv[2], "--", *argv[3:]]
        if argv[1].endswith(".py"):
            return [argv[0], "-m", __name__, "--run-path", argv[1], "--", *argv[2:]]
    return list(argv)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if report(IMPORTED_PREFIX, collect, args):
        return 0
    if args[:1] in (["--run-module"], ["--run-path"]) and len(args) >= 2:
        import runpy

        rest = args[3:] if args[2:3] == ["--"] else args[2:]
        sys.argv = [args[1], *rest]
        if args[0] == "--run-module":
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(args[1]))  # as `python FILE` sets it
            runpy.run_path(args[1], run_name="__main__")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
