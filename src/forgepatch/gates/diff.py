"""What changed in the arch gates between two pins: gates added, removed, moved (a file or a
function renamed, the same condition), and gates whose arch set changed — with the
predicates whose definition changed (``is_blackwell_supported`` now accepts sm120) and the
gates that use them.

Matching, in order: the same condition (predicate spellings normalised, so
``_is_sm100_supported``, ``is_sm100_supported()`` and ``get_platform().is_sm100`` are one) in
the same file and function; the same condition with the same markers in another file or
function (moved); then, among gates sharing an arch read, an edited condition in the same
function with the same markers, a near-identical long condition nearby, or one using mostly the
same identifiers (moved and edited). What is left is added or removed.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from forgepatch.gates.model import NEVER, Gate, Inventory, Predicate

_IDIOM = re.compile(r"\b(?:get_platform\(\)\.)?_?is_(\w+?)(?:_supported)?\b(?:\(\))?")
SIMILAR = 0.9  # condition similarity that makes a move without shared markers (long conditions)
SIMILAR_LONG = 40  # ... "long": this many characters
SHARED_WORDS = 0.7  # or this share of the words of condition and markers (of the smaller side) ...
MIN_WORDS = 4  # ... when both have this many
_STOP = {"is", "not", "and", "or", "in", "none", "true", "false", "self", "get", "platform", "supported", "if", "x"}


def normalise(expr: str) -> str:
    return _IDIOM.sub(lambda m: f"is_{m.group(1)}", " ".join(expr.split()))


def _words(gate: Gate) -> set[str]:
    """The words of the identifiers a gate's condition and markers use
    (``enable_flashinfer_allreduce_fusion`` -> enable, flashinfer, allreduce, fusion);
    string literals and predicate spellings left out."""
    idents = [n for n in gate.names + gate.markers if not _IDIOM.fullmatch(n)]
    return {w for ident in idents for w in ident.lower().split("_") if w and w not in _STOP and not w.isdigit()}


def _atom_keys(gate: Gate) -> set[str]:
    return {normalise(a) for a in gate.atoms}


@dataclass
class Change:
    status: str  # added | removed | moved | changed (arch set, maybe moved too)
    old: Gate | None
    new: Gate | None

    @property
    def moved(self) -> bool:
        return self.old is not None and self.new is not None and (
            self.old.file != self.new.file or self.old.function != self.new.function)

    def gained(self) -> list[str]:
        before = set(self.old.arches) if self.old else set()
        return [a for a in (self.new.arches if self.new else []) if a not in before]

    def lost(self) -> list[str]:
        after = set(self.new.arches) if self.new else set()
        return [a for a in (self.old.arches if self.old else []) if a not in after]

    def verdict_changed(self, arch: str) -> bool:
        old = self.old.verdicts.get(arch, NEVER) if self.old else None
        new = self.new.verdicts.get(arch, NEVER) if self.new else None
        if self.old is None or self.new is None:
            return (old or new) != NEVER
        return old != new

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "moved": self.moved, "gained": self.gained(), "lost": self.lost(),
                "old": self.old.to_json() if self.old else None, "new": self.new.to_json() if self.new else None}


@dataclass
class PredicateChange:
    name: str
    old: Predicate | None
    new: Predicate | None
    guards: list[Gate] = field(default_factory=list)  # gates of the new tree that use it

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "old_arches": self.old.arches if self.old else None,
                "new_arches": self.new.arches if self.new else None,
                "file": (self.new or self.old).file, "guards": [f"{g.where} {g.function}" for g in self.guards]}


@dataclass
class GateDiff:
    old: Inventory
    new: Inventory
    changes: list[Change]  # everything but unchanged gates
    predicates: list[PredicateChange]
    unchanged: int
    arch: str | None = None

    def selected(self) -> list[Change]:
        if self.arch is None:
            return self.changes
        return [c for c in self.changes if c.verdict_changed(self.arch)]

    def count(self, status: str) -> int:
        return sum(1 for c in self.selected() if c.status == status)

    def to_json(self) -> dict[str, Any]:
        return {"old": {"source": self.old.source, "version": self.old.version},
                "new": {"source": self.new.source, "version": self.new.version},
                "arch": self.arch, "unchanged": self.unchanged,
                "counts": {s: self.count(s) for s in ("changed", "moved", "added", "removed")},
                "predicates": [p.to_json() for p in self.predicates],
                "changes": [c.to_json() for c in self.selected()]}


def diff(old: Inventory, new: Inventory, arch: str | None = None) -> GateDiff:
    left, right = list(old.gates), list(new.gates)
    pairs: list[tuple[Gate, Gate]] = []

    def take(key) -> None:
        index: dict[Any, list[Gate]] = {}
        for g in right:
            index.setdefault(key(g), []).append(g)
        for g in list(left):
            bucket = index.get(key(g))
            if bucket:
                match = bucket.pop(0)
                pairs.append((g, match))
                left.remove(g)
                right.remove(match)

    def match_all(norm) -> None:
        take(lambda g: (g.file, g.function, g.kind, norm(g.expr)))
        take(lambda g: (g.file, g.function, norm(g.expr)))
        take(lambda g: (g.function, g.kind, norm(g.expr), tuple(g.markers)))  # the file moved
        take(lambda g: (g.file, g.kind, norm(g.expr), tuple(g.markers)))  # the function was renamed
        take(lambda g: (g.kind, norm(g.expr), tuple(g.markers)) if g.markers else id(g))  # both

    match_all(normalise)
    pairs += _similar(left, right)
    # a function renamed along the way renames its call sites too: match them again
    renames = _renames(pairs, old, new)
    if renames and left and right:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, renames)) + r")\b")

        def renamed(e: str) -> str:
            return pattern.sub(lambda m: renames[m.group(1)], normalise(e))

        match_all(renamed)
        pairs += _similar(left, right, renamed)
    changes = []
    unchanged = 0
    for a, b in pairs:
        if a.verdicts != b.verdicts:
            changes.append(Change("changed", a, b))
        elif a.file != b.file or a.function != b.function:
            changes.append(Change("moved", a, b))
        else:
            unchanged += 1
    changes += [Change("removed", g, None) for g in left] + [Change("added", None, g) for g in right]
    changes.sort(key=lambda c: ((c.new or c.old).file, (c.new or c.old).line))
    return GateDiff(old, new, changes, _predicate_changes(old, new), unchanged, arch)


def _renames(pairs, old: Inventory, new: Inventory) -> dict[str, str]:
    """Function names that disappeared while a gate moved to a new name: old -> new."""
    before = {g.function.rsplit(".", 1)[-1] for g in old.gates}
    after = {g.function.rsplit(".", 1)[-1] for g in new.gates}
    out = {}
    for a, b in pairs:
        x, y = a.function.rsplit(".", 1)[-1], b.function.rsplit(".", 1)[-1]
        if x != y and x not in after and y not in before and not x.startswith("<"):
            out[x] = y
    return out


def _similar(left: list[Gate], right: list[Gate], norm=normalise) -> list[tuple[Gate, Gate]]:
    """Greedy best pairs of similar conditions that share an arch read."""
    by_atom: dict[str, list[Gate]] = {}
    for g in right:
        for key in {norm(a) for a in g.atoms}:
            by_atom.setdefault(key, []).append(g)
    scored = []
    for a in left:
        seen: set[int] = set()
        for key in {norm(x) for x in a.atoms}:
            for b in by_atom.get(key, []):
                if id(b) in seen:
                    continue
                seen.add(id(b))
                ea, eb = norm(a.expr), norm(b.expr)
                sim = difflib.SequenceMatcher(None, ea, eb).ratio()
                wa, wb = _words(a), _words(b)
                # overlap coefficient: a condition rewritten with a few more or fewer terms still matches
                shared = len(wa & wb) / min(len(wa), len(wb)) if min(len(wa), len(wb)) >= MIN_WORDS else 0.0
                near = a.file == b.file or a.function.rsplit(".", 1)[-1] == b.function.rsplit(".", 1)[-1] \
                    or bool(set(a.markers) & set(b.markers))
                long_alike = sim >= SIMILAR and min(len(ea), len(eb)) >= SIMILAR_LONG and a.kind == b.kind and near
                in_place = a.file == b.file and a.function == b.function and a.markers == b.markers and bool(a.markers)
                if long_alike or shared >= SHARED_WORDS or in_place:
                    scored.append((sim + shared, a, b))
    scored.sort(key=lambda t: -t[0])
    used_a: set[int] = set()
    used_b: set[int] = set()
    out = []
    for _, a, b in scored:
        if id(a) not in used_a and id(b) not in used_b:
            used_a.add(id(a))
            used_b.add(id(b))
            out.append((a, b))
    for a, b in out:
        left.remove(a)
        right.remove(b)
    return out


def _predicate_changes(old: Inventory, new: Inventory) -> list[PredicateChange]:
    """Predicates of the same name (and file, when several) whose arch set changed."""
    def key(p: Predicate) -> tuple[str, str]:
        return (p.name, p.file)

    before = {key(p): p for p in old.predicates}
    after = {key(p): p for p in new.predicates}
    by_name_before: dict[str, list[Predicate]] = {}
    for p in old.predicates:
        by_name_before.setdefault(p.name, []).append(p)
    out = []
    for k, p in sorted(after.items()):
        q = before.get(k)
        if q is None and len(by_name_before.get(p.name, [])) == 1:
            q = by_name_before[p.name][0]  # the module holding it moved
        if q is not None and q.verdicts != p.verdicts:
            spelled = {normalise(p.name)}
            guards = [g for g in new.gates if spelled & _atom_keys(g) or any(p.name in a for a in g.atoms)]
            out.append(PredicateChange(p.name, q, p, guards))
    return out
