"""Global CLI options and the shared helpers commands use to load config and print."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class State:
    config_path: Path | None = None
    patches_dir: Path | None = None
    debug: bool = False

    def patches(self):
        """The patch library: the shipped patches plus ``--patches DIR`` (else ``./patches``),
        whose patches add to the shipped ones and override them by id."""
        from forgepatch.patching.library import cli_library

        return cli_library(self.patches_dir)

    def matrix(self, check_patches: bool = True):
        """THE matrix loader of every command: ``--config``, else ./matrix.toml, else the
        shipped one, validated; ``check_patches`` also checks the patch names against the
        patch dir (commands that read no patches skip it)."""
        from forgepatch.config import load_matrix
        from forgepatch.config import default_config

        return load_matrix(default_config(self.config_path), self.patches() if check_patches else None)


STATE = State()


def print_json(doc: Any) -> None:
    """THE way a command prints ``--json``: one document on stdout. An object carries
    ``forgepatch_version`` (which forgepatch wrote it) unless it has one; the two array
    documents (``pin list``, ``patch list``) keep their shape."""
    if isinstance(doc, dict) and "forgepatch_version" not in doc:
        import forgepatch

        doc = {"forgepatch_version": forgepatch.__version__, **doc}
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")


def console(stderr: bool = False):
    """The console every command prints with (``cli/_ui.py``: no wrapping off a terminal,
    ``NO_COLOR`` respected)."""
    from forgepatch.cli._ui import make_console

    return make_console(stderr=stderr)
