"""The ``forgepatch`` command line: thin typer commands over the services.

Each ``cli/<area>.py`` defines its commands as plain functions and registers them in
``register(app)``. ``COMMANDS`` below is the command table (as pip's): the module of each
command, loaded only when that command runs or its help is shown, and the line
``forgepatch --help`` lists it with. It is the one place of laziness for ``--help``: a
command module imports its services at module level, heavy ones (libcst, git, docker,
pydantic) included. Every command loads matrix.toml through ``_state.STATE.matrix()``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, MutableMapping
from importlib import import_module
from pathlib import Path
from typing import Optional

import typer
import typer.core
import typer.main

import forgepatch
from forgepatch import envsettings, progress
from forgepatch.cli import _state, _ui
from forgepatch.errors import ForgepatchError
from forgepatch.infra import supervisor

# Shown at the end of every command's --help (docs/architecture.md, Statuses). "\b"
# keeps click from re-flowing the lines.
EXIT_CODES = ("\b\nExit codes:\n"
              "  0  ok\n"
              "  1  drift, failed check, failed smoke, refused release\n"
              "  2  bad input (usage, config, unreadable or unparseable file): one line on stderr\n"
              "     (--debug shows the traceback)")

# The command table: name -> (the module under forgepatch/cli/ that registers it, the line
# `forgepatch --help` lists it with: the first sentence of the command's own help, checked
# by tests/test_cli_startup.py). In the order --help lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "apply": ("apply", "Apply the arch's patch series to an SGLang source; it checks itself before writing."),
    "lint": ("apply", "After patching (in memory), list gates of the same feature that still reject the arch."),
    "build": ("build", "Build the per-arch image: every patched package (SGLang, FlashInfer ...) + probe on the base image."),
    "bake": ("build", "Write docker-bake.json: one BuildKit target per arch x pin (args, tags, labels, context)."),
    "fork": ("fork", "Create or refresh branch forgepatch/ARCH/PIN: REV plus one commit per applied patch."),
    "drift": ("fork", "Health of every patch of ARCH at many revisions, read from git objects."),
    "init": ("fork", "Scaffold matrix.toml, patches/ and dockerfiles/ (never overwrites a file)."),
    "probe": ("probe", "Capture and replay CUDA graphs (bf16 bmm, an MLP block, NCCL all-reduce) and compare with "
                       "eager mode."),
    "smoke": ("smoke", "Launch arch x pin x profile smoke jobs; triage failures by phase and signature."),
    "triage": ("smoke", "Find the last phase reached and the failure signature in an existing log."),
    "matrix": ("smoke", "Emit the smoke job list as a GitHub Actions matrix (for fan-out across runners)."),
    "release": ("release", "Tag validated combinations: annotated git tag, `validated` image tag, ledger entry."),
    "verify": ("release", "Re-check a release: ledger, tag, branch commit, image and results must agree."),
    "status": ("release", "The compatibility table of released (validated) combinations: pin x arch x profiles."),
    "audit": ("audit", "Can the CUDA kernels of every shared object run on ARCH? Exit 1 lists those that cannot."),
    "gates": ("gates", "Inventory every arch gate (predicate, capability comparison) with the arches that pass it."),
    "pin": ("fork", "Record SGLang pins (PyPI releases or git revisions) in matrix.toml."),
    "results": ("results", "Work with smoke results files."),
    "patch": ("patch", "Write, test and list patches."),
    "cache": ("cache", "See and prune forgepatch's cache (wheels, trees, contexts, logs, memos)."),
}


def load_commands(module: str) -> dict[str, typer.core.TyperGroup]:
    """The click commands (and groups) ``cli/<module>.py`` registers, with the exit codes
    at the end of each one's help."""
    scratch = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    import_module(f"forgepatch.cli.{module}").register(scratch)
    _add_epilogs(scratch)
    return dict(typer.main.get_group(scratch).commands)


class _Table(MutableMapping):
    """The root group's commands: every name of ``COMMANDS``, each loaded on first use
    (click asks for a command by name; listing the names loads nothing)."""

    def __init__(self) -> None:
        self._loaded: dict = {}

    def __getitem__(self, name: str):
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            self._loaded.update(load_commands(COMMANDS[name][0]))
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)

    def __setitem__(self, name: str, command) -> None:
        raise TypeError(f"forgepatch commands are registered in cli.COMMANDS, not added ({name})")

    def __delitem__(self, name: str) -> None:
        raise TypeError(name)


class _Root(typer.core.TyperGroup):
    """The root command: its commands come from the table, loaded as they run."""

    def __init__(self, **attrs) -> None:
        super().__init__(**attrs)
        self.commands = _Table()

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx, formatter) -> None:
        """The command list of ``forgepatch --help`` from the table (no module loaded), cut
        to the terminal as click cuts a command's own help."""
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(name, _click_module("utils").make_default_short_help(line, limit)) for name, (_, line) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    cls=_Root,
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


def _add_epilogs(group: typer.Typer) -> None:
    """Every command's --help ends with the exit codes."""
    for info in group.registered_commands:
        info.epilog = info.epilog or EXIT_CODES
    for sub in group.registered_groups:
        sub.typer_instance.info.epilog = sub.typer_instance.info.epilog or EXIT_CODES
        _add_epilogs(sub.typer_instance)



def _click_module(name: str):
    """click's ``exceptions`` or ``utils``: typer >= 0.25 vendors click, older typer uses it."""
    try:
        return import_module(f"typer._click.{name}")
    except ImportError:  # pragma: no cover - older typer on real click
        return import_module(f"click.{name}")


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
    cexc = _click_module("exceptions")
    args = hoist_globals(list(argv if argv is not None else sys.argv[1:]))
    argv = args
    debug = "--debug" in args
    if progress.wanted(args, sys.stderr) and not {"-q", "--quiet"} & set(args):  # -q: no progress either
        progress.enable(True, _ui.make_console(stderr=True))
    else:
        progress.enable(False)
    try:
        if not {"-h", "--help", "--version"} & set(args):
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
    sys.exit(supervisor.run(main, debug="--debug" in args))
