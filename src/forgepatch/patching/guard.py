"""Custom ``.py`` patches run inside a guard.

A patch file is user code. Importing it runs in a worker thread with a time limit
(``$FORGEPATCH_PATCH_IMPORT_TIMEOUT`` seconds, default 10): a patch that blocks at import
(``time.sleep(3600)``, waiting on input) is refused instead of hanging the run. Any
exception, ``SystemExit`` or ``KeyboardInterrupt`` raised by the patch's own code, at import
or while its codemod runs, becomes one line of bad input (exit 2) naming the patch file and
the line in it that raised; so does a ``Codemod`` that is not a ``SiteCodemod`` subclass
with its own ``edit_function``, and a codemod that returns something other than a
``FunctionDef`` (or None) from ``edit_function`` or a ``Module`` from ``finalize_module``.
Declarative (TOML) patches run forgepatch's own codemods and are not wrapped.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Callable

from forgepatch import envsettings
from forgepatch.errors import BadInput, ForgepatchError, located
from forgepatch.patching.isolate import frame_line, guard_thread, run_isolated, runs_in

TIMEOUT_ENV = envsettings.PATCH_IMPORT_TIMEOUT.name
EDIT_LIMIT_S = 120.0  # one call of a custom codemod (killed past it)
DEFAULT_TIMEOUT_S = envsettings.PATCH_IMPORT_TIMEOUT.default


def import_timeout() -> float:
    return envsettings.PATCH_IMPORT_TIMEOUT.read()


def line_in(path: Path, tb: TracebackType | None) -> int | None:
    """The line of the deepest frame of ``tb`` that runs code of ``path``."""
    ours = runs_in(path)  # a RecursionError's traceback is 20000 frames of one file
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if ours(frame.f_code.co_filename):
            line = lineno
    return line


def describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"calls sys.exit({exc.code!r})"
    if isinstance(exc, KeyboardInterrupt):
        return "raises KeyboardInterrupt"
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return f"raises {type(exc).__name__}" + (f": {text}" if text else "")


def import_patch(path: Path) -> ModuleType:
    """Execute a ``.py`` patch file as a fresh module, guarded and time-limited: first in a
    child process (``isolate``: an ``os._exit``, a signal, a C-level loop or a memory bomb at
    import ends the child, one line naming the patch), then, when that import was clean, here."""
    limit = import_timeout()
    run_isolated(path, "importing the patch", lambda: (_import_here(path), None)[1], limit=limit + 1.0,
                 on_timeout=lambda: f"a patch must not block at import; ${TIMEOUT_ENV} sets the limit")
    return _import_here(path)


def _import_here(path: Path) -> ModuleType:
    name = "forgepatch_patch_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadInput(located(path, None, "cannot load patch: not a Python file"))
    module = importlib.util.module_from_spec(spec)
    limit = import_timeout()
    box: dict[str, BaseException] = {}

    def run() -> None:
        release = guard_thread()  # the parent runs the patch's module code read-only too
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - everything the patch raises is reported
            box["error"] = exc
        finally:
            release()

    worker = threading.Thread(target=run, name=f"forgepatch-import-{path.stem}", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        frame = sys._current_frames().get(worker.ident)
        raise BadInput(located(path, frame_line(path, frame),
                               f"importing the patch took more than {limit:g} s (a patch must not block at import; "
                               f"${TIMEOUT_ENV} sets the limit)"))
    exc = box.get("error")
    if exc is None:
        return module
    if isinstance(exc, SyntaxError) and exc.filename and os.path.realpath(exc.filename) == os.path.realpath(path):
        raise BadInput(located(path, exc.lineno, f"syntax error: {exc.msg}"))
    if isinstance(exc, ForgepatchError):
        raise exc
    line = line_in(path, exc.__traceback__)
    if line is None and isinstance(exc, (RecursionError, MemoryError)):  # raised by the compiler
        line = deepest_line(path)
    raise BadInput(located(path, line, f"patch {describe(exc)} at import"))


def deepest_line(path: Path) -> int | None:
    """The line where brackets nest deepest (strings and comments roughly skipped)."""
    import re

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    depth, best, where = 0, 0, None
    for no, line in enumerate(text.splitlines(), 1):
        for ch in re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', "", line.split("#", 1)[0]):
            if ch in "([{":
                depth += 1
                if depth > best:
                    best, where = depth, no
            elif ch in ")]}":
                depth = max(0, depth - 1)
    return where


def check_codemod(codemod: Any, path: Path, line: int | None) -> None:
    """``Codemod`` must be a SiteCodemod subclass that implements ``edit_function``."""
    from forgepatch.patching.codemods.base import SiteCodemod  # heavy: libcst

    if not isinstance(codemod, type):
        raise BadInput(located(path, line, f"Codemod must be a class (a SiteCodemod subclass), not {type(codemod).__name__}"))
    if not issubclass(codemod, SiteCodemod):
        raise BadInput(located(path, line, f"Codemod ({codemod.__name__}) must subclass forgepatch.patching.SiteCodemod"))
    if codemod.edit_function is SiteCodemod.edit_function:
        raise BadInput(located(path, line, f"Codemod ({codemod.__name__}) does not define edit_function"))
    for hook in ("edit_function", "finalize_module"):
        if not callable(getattr(codemod, hook, None)):
            raise BadInput(located(path, line, f"Codemod.{hook} is not a method"))


def call(patch: Any, what: str, fn: Callable[..., Any], *args: Any, line: int | None = None) -> Any:
    """Run a custom patch's code; anything it raises is one line naming the patch file:line
    (the line that raised, else ``line``)."""
    try:
        return fn(*args)
    except ForgepatchError:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from patch code too
        if isinstance(exc, KeyboardInterrupt) and line_in(patch.path, exc.__traceback__) is None:
            raise  # a real Ctrl-C, not the patch's own doing
        line = line_in(patch.path, exc.__traceback__) or line or getattr(patch, "codemod_line", None)
        raise BadInput(located(patch.path, line, f"patch {patch.id}: {what} {describe(exc)}")) from None


def _portable(attrs: dict, patch: Any) -> tuple[dict, list[str]]:
    """A codemod's attributes to carry out of its process: the patch itself stays behind
    (the parent has it; its Codemod class cannot be pickled by name)."""
    return {k: v for k, v in attrs.items() if v is not patch}, [k for k, v in attrs.items() if v is patch]


def _restore(inner: Any, carried: tuple[dict, list[str]], patch: Any) -> None:
    attrs, patch_keys = carried
    vars(inner).update(attrs)
    for key in patch_keys:
        setattr(inner, key, patch)


class GuardedCodemod:
    """A custom patch's codemod, held to the SiteCodemod contract (see the module docstring).
    Its code runs only in child processes (``isolate``): each call gets the codemod's state
    (its attributes, ``ctx.state``) and gives back its result, findings and new state."""

    def __init__(self, patch: Any) -> None:
        self.patch = patch
        state = run_isolated(patch.path, f"patch {patch.id}: Codemod(patch)",
                             lambda: _portable(vars(call(patch, "Codemod(patch)", patch.codemod, patch)), patch),
                             limit=EDIT_LIMIT_S, line=getattr(patch, "codemod_line", None))
        self.inner = patch.codemod.__new__(patch.codemod)
        _restore(self.inner, state, patch)

    def _line(self, method: str) -> int | None:
        """The line of the patch's own ``def method`` (else of its Codemod class)."""
        code = getattr(getattr(getattr(self.inner, method, None), "__func__", None), "__code__", None)
        if code is not None and os.path.realpath(code.co_filename) == os.path.realpath(self.patch.path):
            return code.co_firstlineno
        return getattr(self.patch, "codemod_line", None)

    def _bad(self, what: str, got: Any, want: str) -> BadInput:
        return BadInput(located(self.patch.path, self._line(what),
                                f"patch {self.patch.id}: {what} returned {type(got).__name__}, not {want}"))

    def _isolated(self, method: str, ctx, run: Callable[[], Any], given: Any) -> Any:
        """``run()`` in a child; the parent takes back its result and what it changed."""
        before = len(ctx.findings)

        def child():
            out = run()
            return (out is given, None if out is given else out, ctx.findings[before:], list(ctx.provided),
                    ctx.state, _portable(vars(self.inner), self.patch))

        same, out, findings, provided, state, inner = run_isolated(
            self.patch.path, f"patch {self.patch.id}: {method}", child, limit=EDIT_LIMIT_S, line=self._line(method))
        ctx.findings.extend(findings)
        ctx.provided[:] = provided
        ctx.state.clear()
        ctx.state.update(state)
        vars(self.inner).clear()
        _restore(self.inner, inner, self.patch)
        return given if same else out

    def edit_function(self, func, site, symbol, ctx):
        def run():
            import libcst as cst

            out = call(self.patch, "edit_function", self.inner.edit_function, func, site, symbol, ctx)
            if out is None:
                return None
            if not isinstance(out, cst.FunctionDef):
                raise self._bad("edit_function", out, "a libcst FunctionDef or None")
            if out is not func:  # the node must generate code
                call(self.patch, "edit_function's result", lambda: cst.Module(body=[out]).code,
                     line=self._line("edit_function"))
            return out

        return self._isolated("edit_function", ctx, run, func)

    def finalize_module(self, module, ctx):
        def run():
            import libcst as cst

            out = call(self.patch, "finalize_module", self.inner.finalize_module, module, ctx)
            if not isinstance(out, cst.Module):
                raise self._bad("finalize_module", out, "a libcst Module")
            if out is not module:
                call(self.patch, "finalize_module's result", lambda: out.code, line=self._line("finalize_module"))
            return out

        return self._isolated("finalize_module", ctx, run, module)


def is_custom(patch: Any) -> bool:
    """A custom codemod (a ``.py`` patch), not one of the shipped edit kinds (``.toml``)."""
    return patch.path is not None and Path(patch.path).suffix == ".py"


def codemod_for(patch: Any) -> Any:
    """The codemod instance the engine runs: custom (``.py``) patches guarded."""
    if is_custom(patch):
        return GuardedCodemod(patch)
    return patch.codemod(patch)
