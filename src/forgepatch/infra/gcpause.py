"""Cyclic garbage collection paused around a pass that builds many short-lived trees."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside: a pass that parses sources (libcst and ast nodes by the
    hundred thousand, freed by reference counting) otherwise triggers collections that walk
    every live node again, more so the more the pass holds (a series' parsed modules and
    memos): on 0.5.23 ~0.1 s of a 2-patch series and ~0.2 s of a 12-patch one
    (bench/apply.py). Collection resumes, as it was, when the pass ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
