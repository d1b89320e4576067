"""Gate changes that concern a patch series' features, between consecutive revisions (what
``forgepatch drift --gates`` reports): a nightly bump that changes the arch set of a gate in a
patched function, or of a gate naming a patch's markers, or of a predicate guarding one, is
flagged even when every patch still applies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forgepatch.gates.diff import Change, PredicateChange, diff
from forgepatch.gates.model import Gate


@dataclass
class Features:
    functions: set[str] = field(default_factory=set)
    markers: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, patches) -> "Features":
        f = cls()
        for patch in patches:
            for site in patch.sites:
                f.functions.update(site.functions)
                f.markers.update(site.markers)
        return f

    def touches(self, gate: Gate | None) -> bool:
        if gate is None:
            return False
        return gate.function.rsplit(".", 1)[-1] in self.functions or bool(
            self.markers & (set(gate.markers) | set(gate.names)))


@dataclass
class StepChanges:
    """The feature gate changes from one revision to the next."""

    old: str
    new: str
    changes: list[Change]
    predicates: list[PredicateChange]

    def to_json(self) -> dict[str, Any]:
        return {"from": self.old, "to": self.new, "changes": [c.to_json() for c in self.changes],
                "predicates": [p.to_json() for p in self.predicates]}


def feature_changes(inventories: list, features: Features) -> list[StepChanges]:
    """For each consecutive pair: gates of the features whose arch set changed, and the
    changed predicates guarding a gate of the features."""
    out = []
    for old, new in zip(inventories, inventories[1:]):
        d = diff(old, new)
        changes = [c for c in d.changes if c.status == "changed" and (features.touches(c.old) or features.touches(c.new))]
        preds = [p for p in d.predicates if any(features.touches(g) for g in p.guards)]
        if changes or preds:
            for p in preds:
                p.guards = [g for g in p.guards if features.touches(g)]
            out.append(StepChanges(old.source, new.source, changes, preds))
    return out
