"""Settings read from the environment (time limits), checked the same way everywhere: a bad
value is one line of bad input naming the variable."""

from __future__ import annotations

import math
import os

from forgepatch.errors import BadInput


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
