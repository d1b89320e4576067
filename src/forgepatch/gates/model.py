"""What a gate inventory holds: gates with their per-arch verdicts, the tree's predicates, and
the inventory itself (JSON in and out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forgepatch.arch import ARCHES

ALWAYS, CONDITIONAL, NEVER = "always", "conditional", "never"


@dataclass
class Gate:
    file: str
    line: int
    function: str  # "Class.method", "function" or "<module>"
    kind: str  # if | elif | while | assert | ifexp | return | assign | argument | keyword | comprehension
    expr: str  # the condition, as source
    atoms: list[str]  # the arch reads in it
    markers: list[str]  # identifiers of the statement: what the gate guards
    verdicts: dict[str, str]  # arch -> always | conditional | never
    unresolved: list[str] = field(default_factory=list)  # atoms unknown on every arch
    names: list[str] = field(default_factory=list)  # identifiers of the condition (not strings)
    end_line: int = 0  # last line of the condition
    role: str = ""  # enables | selects | rejects | mixed (gates.classify)

    @property
    def arches(self) -> list[str]:
        return [a for a, v in self.verdicts.items() if v != NEVER]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        doc = dict(self.__dict__)
        doc["arches"] = self.arches
        return doc


@dataclass
class Predicate:
    name: str
    file: str
    line: int
    verdicts: dict[str, str]

    @property
    def arches(self) -> list[str]:
        return [a for a, v in self.verdicts.items() if v != NEVER]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.file, "line": self.line, "arches": self.arches,
                "verdicts": self.verdicts}


def gate_from_json(doc: dict[str, Any]) -> Gate:
    return Gate(**{k: v for k, v in doc.items() if k != "arches"})


@dataclass
class Inventory:
    source: str  # the source label (pypi:0.5.23, git:...@sha, dir:...)
    version: str | None
    gates: list[Gate] = field(default_factory=list)
    predicates: list[Predicate] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Inventory":
        return cls(doc["source"], doc["version"], [gate_from_json(g) for g in doc["gates"]],
                   [Predicate(p["name"], p["file"], p["line"], p["verdicts"]) for p in doc["predicates"]],
                   doc.get("stats", {}))

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "version": self.version, "arches": list(ARCHES),
                "predicates": [p.to_json() for p in self.predicates],
                "gates": [g.to_json() for g in self.gates], "stats": self.stats}


# -- building ---------------------------------------------------------------------------
