"""The ``forgepatch`` command line: thin typer commands over the services.

Each ``cli/<area>.py`` registers its commands; command bodies import their services lazily
so ``forgepatch --help`` never loads libcst, git or docker.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from forgepatch.cli import _state

app = typer.Typer(
    name="forgepatch",
    help="Carry architecture patches for SGLang forks as codemods; build, smoke-test and release them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _globals(
    config: Optional[Path] = typer.Option(None, "--config", help="matrix.toml (default ./matrix.toml, else the shipped one)."),
    patches: Optional[Path] = typer.Option(None, "--patches", help="Patch directory (default ./patches, else the shipped ones)."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    _state.STATE.config_path = config
    _state.STATE.patches_dir = patches
    _state.STATE.debug = debug


def _register() -> None:
    from forgepatch.cli import apply as _apply
    from forgepatch.cli import build as _build

    for module in (_apply, _build):
        module.register(app)


_register()


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps errors onto exit codes with one-line messages."""
    import click

    from forgepatch.errors import ForgepatchError

    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        app(args=argv, prog_name="forgepatch", standalone_mode=False)
    except ForgepatchError as exc:
        if debug:
            raise
        print(f"forgepatch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        print("forgepatch: aborted", file=sys.stderr)
        return 130
    except click.UsageError as exc:
        if debug:
            raise
        where = f" ({exc.ctx.command_path})" if exc.ctx else ""
        print(f"forgepatch: error{where}: {exc.format_message()}", file=sys.stderr)
        return 2
    except click.ClickException as exc:
        print(f"forgepatch: error: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("forgepatch: interrupted", file=sys.stderr)
        return 130
    return 0


def entry() -> None:  # pragma: no cover - console script shim
    sys.exit(main())
