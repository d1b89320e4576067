"""Options shared by the commands, so one flag means one thing and is read one way everywhere.

``--arch``: every command reads it with :func:`forgepatch.arch.get_arch` (case ignored,
``sm_120`` = ``sm120``, ``12.0`` / ``12.0a`` / ``sm_120a`` name their arch); a spelling other
than the registry name is accepted and said on stderr (``note: --arch 'SM_120' read as
sm120``), an unknown one is refused (exit 2) with the closest name as a suggestion. Commands
receive the registry name.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional

import typer

from forgepatch.arch import ARCHES, get_arch
from forgepatch.cli._ui import SETTINGS
from forgepatch.errors import BadInput
from forgepatch.sources import pin_source

ARCH_NAMES = ", ".join(ARCHES)  # the registry's arches, in its order
ARCH_HELP = f"Target arch: {ARCH_NAMES} (sm_120, SM120, 12.0 are read as sm120)."
SOURCE_HELP = "pypi:VERSION | git:PATH_OR_URL@REV | DIR | a pin name of matrix.toml (default: the default pin)."


def _note(text: str) -> None:
    if not SETTINGS["quiet"]:  # -q: errors only
        print(f"forgepatch: note: {text}", file=sys.stderr)


def canonical_arch(value: str) -> str:
    """The registry name of ``value`` (BadInput with a suggestion); says so when respelled."""
    name = get_arch(value).name
    if value != name:
        _note(f"--arch {value!r} read as {name}")
    return name


def _arch_callback(ctx: Any, value: Optional[str]) -> Optional[str]:
    if value is None or ctx.resilient_parsing:
        return value
    return canonical_arch(value)


def _arch_list_callback(ctx: Any, value: Optional[List[str]]) -> Optional[List[str]]:
    if not value or ctx.resilient_parsing:
        return value
    return [canonical_arch(v) for v in value]


def complete_arch(incomplete: str) -> list[str]:
    """Shell completion of ``--arch``: the registry names."""
    return [name for name in ARCHES if name.startswith(incomplete.lower())]


def arch_option(default: Any = ..., help: str = ARCH_HELP) -> Any:  # noqa: A002 - typer's name
    """``--arch ARCH`` (required unless a default is given), normalised as above."""
    return typer.Option(default, "--arch", help=help, callback=_arch_callback, autocompletion=complete_arch)


def arch_list_option(help: str) -> Any:  # noqa: A002
    """A repeatable ``--arch``, each one normalised as above."""
    return typer.Option(None, "--arch", help=help, callback=_arch_list_callback, autocompletion=complete_arch)


def source_option(help: str = SOURCE_HELP) -> Any:  # noqa: A002
    return typer.Option(None, "--source", help=help)


# -- one flag, one meaning: every command takes these from here ---------------------------------

def json_option(help: str = "Print one JSON document on stdout.") -> Any:  # noqa: A002
    """``--json``: the command's result as one JSON document on stdout (a flag)."""
    return typer.Option(False, "--json", help=help)


def markdown_option(help: str = "Print Markdown (for a PR comment) instead of the table.") -> Any:  # noqa: A002
    """``--markdown``: print the result as Markdown on stdout (a flag, exclusive with --json)."""
    return typer.Option(False, "--markdown", help=help)


def markdown_out_option(help: str = "Also write the Markdown compatibility table to this file.") -> Any:  # noqa: A002
    """``--markdown-out FILE``: write Markdown to a file (``--markdown FILE`` before: hidden alias)."""
    return typer.Option(None, "--markdown-out", metavar="FILE", help=help)


def repo_option(default: Any = None, help: str = "The fork's git repository.") -> Any:  # noqa: A002
    """``--repo DIR``: a git repository (the fork's, unless the help says which)."""
    return typer.Option(default, "--repo", help=help)


def ledger_option() -> Any:
    """``--ledger FILE``: the release ledger."""
    return typer.Option(None, "--ledger", help="Ledger file (default: release.ledger of matrix.toml).")


def image_option(help: str) -> Any:  # noqa: A002
    """``--image REF``: the image the command acts on (a name, tag, ID or repo@sha256:...)."""
    return typer.Option(None, "--image", metavar="REF", help=help)


def pin_option(help: str = "A pin of matrix.toml.") -> Any:  # noqa: A002
    """``--pin NAME``: a pin of matrix.toml (``[pins.NAME]``) the command works on."""
    return typer.Option(None, "--pin", metavar="NAME", help=help)


def pin_list_option(help: str) -> Any:  # noqa: A002
    """A repeatable ``--pin NAME``."""
    return typer.Option(None, "--pin", metavar="NAME", help=help)


def old_spelling(flag: str) -> Any:
    """A flag's old spelling, kept hidden for one release (``renamed`` reads it)."""
    return typer.Option(None, flag, hidden=True)


def renamed(value: Any, old_value: Any, old: str, new: str) -> Any:
    """The value of ``new``, or of its old spelling ``old`` with a deprecation note on stderr;
    both given is bad input."""
    if old_value is None:
        return value
    if value is not None:
        raise BadInput(f"{old} is the old spelling of {new}: give {new} only")
    print(f"forgepatch: warning: {old} FILE is deprecated, use {new} FILE (the old spelling goes in the next release)",
          file=sys.stderr)
    return old_value


def source_or_pin(source: Optional[str], pin: Optional[str], matrix: Any) -> Optional[str]:
    """``--pin NAME`` as a SRC string (apply, lint); BadInput for an unknown pin or both flags."""
    if pin is None:
        return source
    if source is not None:
        raise BadInput("--pin and --source are exclusive: --pin NAME means the pin's source")

    return pin_source(pin, matrix)
