"""``gates --arch A --rejecting``: what still keeps arch A out, grouped by feature and file.

A gate keeps A out when its verdict says so for its role (:mod:`forgepatch.gates.classify`):
a gate that enables a feature or selects a value (or does both) never passes on A; a gate
that rejects (guards a ``raise``, an ``assert``) can fire on A (not ``never``) while some
other arch never trips it, so the arch is what decides; an ``assert`` fails on A when its
condition is ``never`` there. Each row carries the ``patch new`` command that starts a patch
for it (the gate's function, read from the same source).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from forgepatch.gates.classify import REJECTS
from forgepatch.gates.model import NEVER, Gate, Inventory


@dataclass
class Row:
    feature: str
    gate: Gate
    command: str

    def to_json(self) -> dict[str, Any]:
        return {"feature": self.feature, "file": self.gate.file, "line": self.gate.line, "function": self.gate.function,
                "role": self.gate.role, "kind": self.gate.kind, "expr": self.gate.expr, "arches": self.gate.arches,
                "patch_new": self.command}


def keeps_out(gate: Gate, arch: str) -> bool:
    verdict = gate.verdicts.get(arch)
    if gate.kind == "assert":
        return verdict == NEVER
    if gate.role == REJECTS:
        return verdict != NEVER and NEVER in gate.verdicts.values()
    return verdict == NEVER


def feature_of(gate: Gate) -> str:
    """What the gate guards, in a word: its first marker, else its function."""
    return gate.markers[0] if gate.markers else gate.function.rsplit(".", 1)[-1]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "gate"


def patch_new(gate: Gate, arch: str, source: str) -> str:
    function = gate.function.rsplit(".", 1)[-1]
    pid = f"{arch}-{_slug(feature_of(gate))}"
    return (f"forgepatch patch new {pid} --arch {arch} --from {source} --function {function} "
            f"--module {gate.file}")


def rejecting(inv: Inventory, arch: str) -> list[Row]:
    """The rows, grouped by (feature, file) in order of first appearance, then by line."""
    source = inv.source or (f"pypi:{inv.version}" if inv.version else "")
    rows = [Row(feature_of(g), g, patch_new(g, arch, source)) for g in inv.gates
            if g.function != "<module>" and keeps_out(g, arch)]
    order: dict[tuple[str, str], int] = {}
    for r in rows:
        order.setdefault((r.feature, r.gate.file), len(order))
    return sorted(rows, key=lambda r: (order[(r.feature, r.gate.file)], r.gate.line))


def groups(rows: list[Row]) -> list[tuple[str, str, list[Row]]]:
    out: list[tuple[str, str, list[Row]]] = []
    for r in rows:
        if out and out[-1][0] == r.feature and out[-1][1] == r.gate.file:
            out[-1][2].append(r)
        else:
            out.append((r.feature, r.gate.file, [r]))
    return out
