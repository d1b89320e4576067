"""Finding where a site lives: a byte prefilter (cheap, every file) before any parsing,
and ranked candidates when a required site has drifted away."""

from __future__ import annotations

import difflib
import fnmatch
import re
from dataclasses import dataclass
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
# code that reads an arch fact (a predicate, the capability): one regex, for the engine's
# "a site function that reads the arch" and for ranking candidates
ARCH_WORDS = re.compile(r"is_sm\d|capabilit|get_device_sm|is_blackwell|is_hopper|\.major\b|major_version")
_ARCH_BYTES = re.compile(ARCH_WORDS.pattern.encode())


def reads_arch(code: str) -> bool:
    """Does a function's code read an arch fact (a predicate, the capability)?"""
    return ARCH_WORDS.search(code) is not None


@dataclass(frozen=True)
class Candidate:
    """A function that may be where a drifted site went, with why it is ranked where it is.

    Ranked by meaning before name: a function another site of the patch names comes after
    every other (it is that site's gate, not this one renamed); then, first, a function in
    the site's modules whose own code holds the site's markers and reads the arch (the same
    gate shape), then such a function elsewhere (moved), more markers before fewer; then the
    other functions of the site's modules before those elsewhere, each by the markers its
    code holds, then whether it reads the arch, and only then by the closeness of its name to
    the site's function names."""

    module: str  # sglang.srt.layers.x
    qual: str  # Class.method or function
    name: str
    file: str
    line: int
    markers: tuple[str, ...]  # the site's markers its own code names
    reads_arch: bool
    in_modules: bool
    similarity: float  # of its name to the closest site function name (0..1)
    other_site: bool = False  # another site of the same patch names it

    def key(self) -> tuple:
        return (not self.other_site, self.looks_renamed and self.in_modules, self.looks_renamed, self.in_modules,
                len(self.markers), self.reads_arch, self.similarity)

    def render(self) -> str:
        return f"{self.module}.{self.qual} ({self.file}:{self.line})"

    @property
    def looks_renamed(self) -> bool:
        """Strong enough to name as the renamed site function: it holds a marker and reads the arch."""
        return bool(self.markers) and self.reads_arch


def _block_end(data: bytes, start: int, indent: int) -> int:
    end = re.compile(rb"^[ \t]{0,%d}(?:async[ \t]+def|def|class|@)\b" % indent, re.M).search(data, start)
    return end.start() if end else len(data)


def ranked(paths: list[str], read: Callable[[str], bytes], site: Site, limit: int = 5,
           others: frozenset[str] = frozenset()) -> list[Candidate]:
    """Up to ``limit`` functions that may be where the site went, best first (``Candidate.key``).
    Looks in hinted modules and in files naming a marker or a site function; ``others``: the
    function names the patch's other sites name."""
    found: list[Candidate] = []
    needles = [m.encode() for m in site.markers] + [fn.encode() for fn in site.functions]
    words = [(m, re.compile(rb"(?<!\w)" + re.escape(m.encode()) + rb"(?!\w)")) for m in site.markers]
    for rel in paths:
        data = read(rel)
        in_hint = hinted(rel, site)
        if not in_hint and not any(n in data for n in needles):
            continue
        classes = [(m.start(), len(m.group(1)), m.group(2).decode()) for m in _CLASS.finditer(data)]
        module = "sglang." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        for m in _DEF.finditer(data):
            name = m.group(2).decode()
            indent = len(m.group(1))
            owner = [c for pos, ind, c in classes if pos < m.start() and ind < indent]
            qual = f"{owner[-1]}.{name}" if owner else name
            body = data[m.end() : _block_end(data, m.end(), indent)]  # its own code, not the next function's
            held = tuple(marker for marker, rx in words if rx.search(body))
            sim = max(difflib.SequenceMatcher(None, name, fn).ratio() for fn in site.functions)
            line = data.count(b"\n", 0, m.start()) + 1
            found.append(Candidate(module, qual, name, rel, line, held, _ARCH_BYTES.search(body) is not None,
                                   in_hint, sim, name in others))
    found.sort(key=lambda c: tuple(-k for k in c.key()))
    return found[:limit]


def candidates(paths: list[str], read: Callable[[str], bytes], site: Site, limit: int = 5) -> list[str]:
    """``ranked``, each as ``sglang.module.func (file:line)``."""
    return [c.render() for c in ranked(paths, read, site, limit)]


def rename_hint(site: Site, best: Candidate) -> str:
    """The edit to make when ``best`` looks like the site function renamed (and maybe moved
    out of the site's modules): the patch's ``functions`` (and ``modules``) with it added."""
    functions = ", ".join(f'"{f}"' for f in (*site.functions, best.name))
    text = (f"it looks renamed to {best.name} ({best.file}:{best.line}: holds the markers "
            f"{', '.join(best.markers)} and reads the arch): set functions = [{functions}]")
    if site.modules and not site.anywhere and not best.in_modules:
        modules = ", ".join(f'"{m}"' for m in (*site.modules, best.file))
        text += f" and modules = [{modules}]"
    return text
