"""The ``forgepatch`` command line: thin typer commands over the services.

Each ``cli/<area>.py`` defines its commands as plain functions and registers them in
``register(app)``; command bodies import their services lazily so ``forgepatch --help`` never
loads libcst, git, docker or pydantic. Every command loads matrix.toml through
``_state.STATE.matrix()``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from forgepatch.cli import _state

# Shown at the end of every command's --help (docs/architecture.md, Statuses). "\b"
# keeps click from re-flowing the lines.
EXIT_CODES = ("\b\nExit codes:\n"
              "  0  ok\n"
              "  1  drift, failed check, failed smoke, refused release\n"
              "  2  bad input (usage, config, unreadable or unparseable file): one line on stderr\n"
              "     (--debug shows the traceback)")

app = typer.Typer(
    rich_markup_mode=None,
    name="forgepatch",
    help="Carry architecture patches for SGLang forks as codemods; build, smoke-test and release them.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        import forgepatch

        typer.echo(f"forgepatch {forgepatch.__version__}")
        raise typer.Exit(0)


@app.callback()
def _globals(
    config: Optional[Path] = typer.Option(None, "--config", help="matrix.toml (default ./matrix.toml, else the shipped one)."),
    patches: Optional[Path] = typer.Option(None, "--patches", help="Your patch directory (default ./patches): its patches add to the shipped ones, and override a shipped patch of the same id."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Also say which matrix.toml and patches/ were found (stderr). Works after the command too."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only errors and --json/--diff documents. Works after the command too."),
    color: str = typer.Option("auto", "--color", metavar="auto|always|never",
                              help="Colour: auto (a terminal, unless NO_COLOR; FORCE_COLOR forces it), always, never."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    from forgepatch.cli import _ui

    if color not in _ui.COLOR_MODES:
        raise typer.BadParameter(f"{color!r} is not one of auto, always, never", param_hint="--color")
    if verbose and quiet:
        raise typer.BadParameter("give -q or -v, not both", param_hint="-q/-v")
    _state.STATE.config_path = config
    _state.STATE.patches_dir = patches
    _state.STATE.debug = debug
    _state.STATE.verbosity = 1 if verbose else -1 if quiet else 0
    _state.STATE._said = False
    _ui.SETTINGS.update(color=color, quiet=quiet)


def _register() -> None:
    from forgepatch.cli import apply as _apply
    from forgepatch.cli import audit as _audit
    from forgepatch.cli import build as _build
    from forgepatch.cli import cache as _cache
    from forgepatch.cli import fork as _fork
    from forgepatch.cli import gates as _gates
    from forgepatch.cli import patch as _patch
    from forgepatch.cli import probe as _probe
    from forgepatch.cli import release as _release
    from forgepatch.cli import results as _results
    from forgepatch.cli import smoke as _smoke

    for module in (_apply, _build, _fork, _probe, _smoke, _results, _release, _audit, _gates, _patch, _cache):
        module.register(app)
    _add_epilogs(app)


def _add_epilogs(group: typer.Typer) -> None:
    """Every command's --help ends with the exit codes."""
    for info in group.registered_commands:
        info.epilog = info.epilog or EXIT_CODES
    for sub in group.registered_groups:
        sub.typer_instance.info.epilog = sub.typer_instance.info.epilog or EXIT_CODES
        _add_epilogs(sub.typer_instance)


_register()


def _click_exceptions():
    try:  # typer >= 0.25 vendors click
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older typer on real click
        from click import exceptions
    return exceptions


GLOBAL_FLAGS = ("-v", "--verbose", "-q", "--quiet")


def hoist_globals(args: list[str]) -> list[str]:
    """``-q``/``-v``/``--color`` are global options that work on every command, also after
    it (``forgepatch apply -v ...``, as ruff and pre-commit take them): moved to the front
    before parsing. Nothing after ``--`` moves."""
    front, rest, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i:]
            break
        if a in GLOBAL_FLAGS or a.startswith("--color="):
            front.append(a)
        elif a == "--color" and i + 1 < len(args):
            front += [a, args[i + 1]]
            i += 1
        else:
            rest.append(a)
        i += 1
    return front + rest


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps errors onto exit codes with one-line messages."""
    from forgepatch.errors import ForgepatchError

    cexc = _click_exceptions()
    args = hoist_globals(list(argv if argv is not None else sys.argv[1:]))
    argv = args
    debug = "--debug" in args
    from forgepatch import progress

    if progress.wanted(args, sys.stderr) and not {"-q", "--quiet"} & set(args):  # -q: no progress either
        from forgepatch.cli._ui import make_console

        progress.enable(True, make_console(stderr=True))
    else:
        progress.enable(False)
    try:
        if not {"-h", "--help", "--version"} & set(args):
            from forgepatch import envsettings

            envsettings.check_all()  # a bad setting fails every command alike (exit 2, one line)
        # non-standalone typer returns the code of typer.Exit / Ctrl-C (130) instead of raising
        try:
            code = app(args=argv, prog_name="forgepatch", standalone_mode=False)
        finally:  # an error leaves no progress line drawing over its message
            progress.stop_all()
        if isinstance(code, int) and code:
            if code == 130:
                print("forgepatch: interrupted", file=sys.stderr)
            return code
        return 0
    except ForgepatchError as exc:
        if debug:
            raise
        print(f"forgepatch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("forgepatch: aborted", file=sys.stderr)
        return 130
    except cexc.UsageError as exc:
        if debug:
            raise
        if exc.__class__.__name__ == "NoArgsIsHelpError":
            return 2  # the help text was printed already
        where = f" ({exc.ctx.command_path})" if exc.ctx else ""
        message = " ".join(exc.format_message().split())
        print(f"forgepatch: error{where}: {message}", file=sys.stderr)
        return 2
    except cexc.ClickException as exc:
        if debug:
            raise
        print(f"forgepatch: error: {' '.join(exc.format_message().split())}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("forgepatch: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:  # the last resort: never a traceback without --debug
        if debug or isinstance(exc, (SystemExit, GeneratorExit)):
            raise
        print(f"forgepatch: error: {last_resort(exc)}", file=sys.stderr)
        return 2


def last_resort(exc: BaseException) -> str:
    """One line for an exception no service turned into a ForgepatchError: a file-system
    error names its path, anything else its type (``--debug`` shows the traceback)."""
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename is not None else ""
        what = exc.strerror or str(exc) or type(exc).__name__
        return " ".join(f"{where}{what}".split())[:500]
    if isinstance(exc, RecursionError):
        return "input nested too deeply to process (rerun with --debug for the traceback)"
    text = " ".join(str(exc).split())[:300]
    return f"internal error: {type(exc).__name__}" + (f": {text}" if text else "") + " (rerun with --debug for the traceback)"


def entry() -> None:  # pragma: no cover - console script shim
    """The ``forgepatch`` process: each command runs in a forked worker, so a crash in native
    code is one line and exit 2 (infra/supervisor.py); --help and --version run here."""
    args = sys.argv[1:]
    if not args or {"-h", "--help", "--version"} & set(args):
        sys.exit(main())
    from forgepatch.infra import supervisor

    sys.exit(supervisor.run(main, debug="--debug" in args))
