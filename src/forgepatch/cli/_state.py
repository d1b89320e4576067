"""Global CLI options and the shared helpers commands use to load config and print."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import forgepatch
from forgepatch.cli._ui import make_console
from forgepatch.paths import SHIPPED_MATRIX


@dataclass
class State:
    config_path: Path | None = None
    patches_dir: Path | None = None
    debug: bool = False
    verbosity: int = 0  # -1 quiet (-q), 0, 1 verbose (-v)
    _said: bool = False

    def config(self) -> Path:
        """The matrix.toml in use: ``--config``, else the nearest one (``paths.find_config``;
        an interrupted init/pin add there is finished first:
        this directory or a parent, up to the repository root), else the shipped one."""
        from forgepatch.config import default_config  # heavy: pydantic, off --help's path

        return default_config(self.config_path)

    def patches(self):
        """The patch library: the shipped patches plus ``--patches DIR`` (else the
        ``patches/`` beside the matrix.toml in use), whose patches add to the shipped ones and
        override them by id."""
        from forgepatch.patching.library import cli_library  # cli-root: not on --help's path (the journal, ~10 ms)

        library = cli_library(self.patches_dir, self.config())
        self.say_found(library)
        return library

    def matrix(self, check_patches: bool = True):
        """THE matrix loader of every command: ``--config``, else the nearest matrix.toml,
        else the shipped one, validated; ``check_patches`` also checks the patch names against
        the patch dir (commands that read no patches skip it)."""
        from forgepatch.config import load_matrix  # heavy: pydantic, off --help's path

        path = self.config()
        library = self.patches() if check_patches else None
        self.say_found(library)
        return load_matrix(path, library)

    def say_found(self, library=None) -> None:
        """``-v``: which matrix.toml and patch directory were found, once, on stderr."""
        if self.verbosity < 1 or self._said:
            return

        path = self.config()
        how = ("--config" if self.config_path is not None
               else "shipped: no matrix.toml here or in a parent, up to the repository root"
               if path == SHIPPED_MATRIX else "found")
        note(f"config: {path.absolute() if path != SHIPPED_MATRIX else path} ({how})")
        if library is not None:
            self._said = True
            where = library.user_dir
            note(f"patches: shipped + {where.absolute()}" if where is not None else "patches: shipped only (no patches/ beside the config)")


STATE = State()


def print_json(doc: Any) -> None:
    """THE way a command prints ``--json``: one document on stdout. An object carries
    ``forgepatch_version`` (which forgepatch wrote it) unless it has one; the two array
    documents (``pin list``, ``patch list``) keep their shape."""
    if isinstance(doc, dict) and "forgepatch_version" not in doc:
        doc = {"forgepatch_version": forgepatch.__version__, **doc}
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")


def note(text: str) -> None:
    """A ``-v`` line on stderr (``forgepatch: TEXT``)."""
    sys.stderr.write(f"forgepatch: {text}\n")


def console(stderr: bool = False):
    """The console every command prints with (``cli/_ui.py``: no wrapping off a terminal,
    ``NO_COLOR`` respected)."""
    return make_console(stderr=stderr)
