"""Settings read from the environment (time limits), checked the same way everywhere: a bad
value is one line of bad input naming the variable.

Every setting is declared once in ``SETTINGS``; ``check_all`` reads them all at the start of
every command (``cli.main``), so a bad value fails every command the same way (exit 2, one
line) instead of being noticed only by the code paths that read it (or swallowed by a reader
that falls back on something else).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from forgepatch.errors import BadInput

DAY_S = 86400.0


@dataclass(frozen=True)
class Seconds:
    name: str
    default: float
    allow_zero: bool
    most: float

    def read(self) -> float:
        return seconds(self.name, self.default, allow_zero=self.allow_zero, most=self.most)


LOCK_TIMEOUT = Seconds("FORGEPATCH_LOCK_TIMEOUT", 30.0, allow_zero=True, most=DAY_S)
PATCH_IMPORT_TIMEOUT = Seconds("FORGEPATCH_PATCH_IMPORT_TIMEOUT", 10.0, allow_zero=False, most=3600.0)
SETTINGS = (LOCK_TIMEOUT, PATCH_IMPORT_TIMEOUT)


def check_all() -> None:
    """Read every setting once: the first bad one is BadInput (one line naming it)."""
    for setting in SETTINGS:
        setting.read()


def seconds(name: str, default: float, *, allow_zero: bool, most: float = math.inf) -> float:
    """``$name`` as a number of seconds (``default`` when unset or empty)."""
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"${name}: {raw[:40]!r} is not a number of seconds") from None
    least_ok = value >= 0 if allow_zero else value > 0
    if math.isnan(value) or not least_ok or value > most:
        lower = "0 or more" if allow_zero else "more than 0"
        upper = f" and at most {most:g}" if most != math.inf else ""
        raise BadInput(f"${name}: {raw[:40]!r} must be {lower} seconds{upper}")
    return value
