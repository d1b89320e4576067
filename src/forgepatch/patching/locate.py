"""Finding where a site lives: a byte prefilter (cheap, every file) before any parsing,
and ranked candidates when a required site has drifted away."""

from __future__ import annotations

import difflib
import fnmatch
import re
from typing import Callable, Iterable

from forgepatch.patching.patchset import Site


def def_pattern(sites: Iterable[Site]) -> re.Pattern[bytes]:
    """One byte regex matching ``def NAME(`` for every function any of ``sites`` names:
    a single C-speed scan per file decides whether it needs a closer look."""
    names = sorted({fn for s in sites for fn in s.functions})
    return re.compile(rb"def (?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")\(")


def function_blocks(data: bytes, names: Iterable[str]) -> list[bytes]:
    """The bytes of each ``def NAME(`` block, from the ``def`` to the next ``def``/``class``/
    decorator at the same or a lower indentation. Conservative: a block may run past the
    function's end (never short of it, but for a ``def`` at column 0 inside a string)."""
    blocks = []
    for name in names:
        for m in re.finditer(rb"^([ \t]*)(?:async[ \t]+)?def[ \t]+" + re.escape(name.encode()) + rb"[ \t]*\(", data, re.M):
            indent = len(m.group(1))
            end = re.compile(rb"^[ \t]{0,%d}(?:async[ \t]+def|def|class|@)\b" % indent, re.M).search(data, m.end())
            blocks.append(data[m.start() : end.start() if end else len(data)])
    return blocks


def is_candidate(data: bytes, site: Site) -> bool:
    """Can this file hold the site? One of its functions is defined here and, if the site
    has markers, one of them appears inside such a function (bytes only: the engine then
    asks for a marker among the function's code tokens)."""
    if not any(f"def {fn}(".encode() in data for fn in site.functions):
        return False
    if not site.markers:
        return True
    needles = [m.encode() for m in site.markers]
    return any(n in block for block in function_blocks(data, site.functions) for n in needles)


def hinted(rel: str, site: Site) -> bool:
    return any(fnmatch.fnmatch(rel, pat) for pat in site.modules)


def in_site_modules(rel: str, site: Site) -> bool:
    """May ``rel`` hold the site? A site's modules bind, unless it says ``anywhere``."""
    return not site.modules or site.anywhere or hinted(rel, site)


_DEF = re.compile(rb"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_CLASS = re.compile(rb"^([ \t]*)class[ \t]+(\w+)", re.M)


def candidates(paths: list[str], read: Callable[[str], bytes], site: Site, limit: int = 5) -> list[str]:
    """Up to ``limit`` functions that may be where the site went, best first, as
    ``sglang.module.func (file:line)``. Looks in hinted modules and files naming a marker."""
    scored: list[tuple[float, str]] = []
    needles = [m.encode() for m in site.markers] + [fn.encode() for fn in site.functions]
    for rel in paths:
        data = read(rel)
        in_hint = hinted(rel, site)
        marker_hits = sum(1 for n in needles if n in data)
        if not in_hint and not marker_hits:
            continue
        classes = [(m.start(), len(m.group(1)), m.group(2).decode()) for m in _CLASS.finditer(data)]
        module = "sglang." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        for m in _DEF.finditer(data):
            name = m.group(2).decode()
            indent = len(m.group(1))
            owner = [c for pos, ind, c in classes if pos < m.start() and ind < indent]
            qual = f"{owner[-1]}.{name}" if owner else name
            sim = max(difflib.SequenceMatcher(None, name, fn).ratio() for fn in site.functions)
            body = data[m.end() : m.end() + 4000]
            bonus = 0.3 * any(n in body for n in needles) + 0.2 * in_hint
            line = data.count(b"\n", 0, m.start()) + 1
            scored.append((sim + bonus, f"{module}.{qual} ({rel}:{line})"))
    scored.sort(key=lambda t: -t[0])
    return [s for _, s in scored[:limit]]
