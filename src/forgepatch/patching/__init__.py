"""The patch engine: patches located by symbol and marker, applied as libcst codemods.

The public API for patch authors (what a custom ``patches/<id>.py`` imports)::

    from forgepatch.patching import SiteCodemod, FileContext, Status, insert_definition

Names are resolved on first use (libcst loads then, not when ``forgepatch`` starts).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# public name -> the module defining it
_PUBLIC = {
    "SiteCodemod": "forgepatch.patching.codemods.base",
    "FileContext": "forgepatch.patching.codemods.base",
    "Finding": "forgepatch.patching.codemods.base",
    "insert_definition": "forgepatch.patching.codemods.base",
    "first_non_import_index": "forgepatch.patching.codemods.base",
    "Status": "forgepatch.patching.model",
    "Site": "forgepatch.patching.patchset",
    "Patch": "forgepatch.patching.patchset",
    "load_series": "forgepatch.patching.series",
    "run_series": "forgepatch.patching.series",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'forgepatch.patching' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
