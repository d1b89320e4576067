"""Every arch gate of an SGLang tree, with the feature it guards and the arches it lets through.

A *gate* is a condition in the code — an ``if``/``elif``/``while``/``assert`` test, a
conditional expression, a boolean ``return``, an assignment or call argument inside a function
— that reads the GPU architecture: an arch predicate (``is_sm100_supported()``,
``_is_sm100_supported``, ``get_platform().is_sm100``, ``is_blackwell_supported()``, or any
function or constant of the tree built on them), or the compute capability itself
(``torch.cuda.get_device_capability()``, ``get_device_sm()``, ``major in (9, 10)``), or a
``supported_major_versions=[...]`` argument. Predicates are resolved from their definitions in
the same tree (:mod:`forgepatch.gates.evaluate`), so ``is_blackwell_supported`` passes sm120
exactly in the releases whose definition says so.

For each gate and each registry arch the verdict is ``always`` (the condition holds on that
arch whatever else is set), ``never`` (it fails on that arch) or ``conditional`` (it holds on
that arch only if the other conditions in it do). The gate's *arches* are those not ``never``.
Functions that *define* a predicate (``is_*``, ``*_supported``) and module-level assignments
are definitions, not gates: the places that use them are.
"""

from __future__ import annotations

import time
from pathlib import Path

from forgepatch.gates.index import Index
from forgepatch.gates.model import Inventory
from forgepatch.gates.reads import ArchReads
from forgepatch.gates.scan import TOKENS, SourceFile, candidates, parse_file, read_tree
from forgepatch.gates.walk import gates_of
from forgepatch.infra.gcpause import gc_paused


def inventory(package: Path, source: str = "", version: str | None = None) -> Inventory:
    """The gates of the ``sglang/`` package directory ``package``."""
    started = time.perf_counter()
    return inventory_files(read_tree(Path(package)), source, version, started)


def inventory_files(all_files: dict[str, bytes], source: str = "", version: str | None = None,
                    started: float | None = None) -> Inventory:
    """The gates of a package given as {path inside the package: bytes} (a directory, a
    wheel or a git tree read the same way)."""
    started = started if started is not None else time.perf_counter()
    with gc_paused():  # thousands of short-lived AST nodes: collection passes cost more than they free
        return _inventory_files(all_files, source, version, started)


def _inventory_files(all_files: dict[str, bytes], source: str, version: str | None, started: float) -> Inventory:
    files = {rel: data for rel, data in all_files.items() if not is_test(rel)}
    parsed = {rel: parse_file(rel, files[rel], TOKENS) for rel in candidates(files)}
    index = Index(list(parsed.values()))
    finder = ArchReads(index)
    # names built on arch reads that carry no token ("_use_fp8 = _is_sm90_supported and ..."):
    # a second, narrower pass finds the places that use them, as whole identifiers: public
    # module-level names anywhere, private ones and self attributes in their own file
    public, private = finder.derived_names()
    if public or private:
        more_keys: dict[str, set[bytes]] = {}
        fresh_public = tuple(n.encode() for n in public if not any(t in n.encode() for t in TOKENS))
        for rel in candidates(files, fresh_public, whole_words=True) if fresh_public else ():
            more_keys.setdefault(rel, set()).update(fresh_public)
        for rel, names in private.items():
            more_keys.setdefault(rel, set()).update(n.encode() for n in names if not any(t in n.encode() for t in TOKENS))
        for rel, keys in sorted(more_keys.items()):
            if not keys:
                continue
            more = parse_file(rel, files[rel], tuple(sorted(keys)), whole_words=True)
            src = parsed.setdefault(rel, SourceFile(rel, files[rel]))
            have = {(b.line_offset, b.nodes[0].lineno) for b in src.blocks if b.nodes}
            fresh = [b for b in more.blocks if b.nodes and (b.line_offset, b.nodes[0].lineno) not in have]
            src.blocks += fresh
            index.add(SourceFile(rel, files[rel], fresh))
        finder = ArchReads(index)
        public, private = finder.derived_names()
    inv = Inventory(source, version)
    shared = tuple(sorted(set(TOKENS) | {n.encode() for n in public} | {k.encode() for k in finder.arch_aliases()}))
    for rel in sorted(parsed):
        inv.gates += gates_of(finder, parsed[rel], shared, tuple(sorted(n.encode() for n in private.get(rel, ()))))
    inv.predicates = finder.predicates()
    inv.stats = {"files": len(files), "files_skipped": len(all_files) - len(files), "files_parsed": len(parsed),
                 "parse_errors": [s.error for s in parsed.values() if s.error],
                 "gates": len(inv.gates), "predicates": len(inv.predicates),
                 "seconds": round(time.perf_counter() - started, 3)}
    return inv


def is_test(rel: str) -> bool:
    """Code that is not part of what serves: tests (``test/``, ``tests/``, ``test_*.py``,
    ``*_test.py``), benchmarks (``benchmark/``) and tooling in dot-directories (``.claude/...``)."""
    parts = rel.split("/")
    name = parts[-1]
    return any(p in _NOT_SERVING or p.startswith(".") for p in parts[:-1]) or name.startswith("test_") \
        or name.endswith("_test.py") or name == "conftest.py"


_NOT_SERVING = {"test", "tests", "benchmark", "benchmarks"}


