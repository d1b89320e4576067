"""``forgepatch status``: the compatibility table of validated combinations, from the ledger.

One row per pin, one column per arch (matrix.toml order, then any others the ledger holds);
a cell lists the profiles validated by the newest release of that pin and arch, with its
tag, or ``-`` when nothing was released.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forgepatch.combination.ledger import LedgerEntry


@dataclass
class Cell:
    tag: str
    profiles: list[str]
    image: str
    commit: str
    released_at: str

    def text(self) -> str:
        return f"{', '.join(self.profiles)} ({self.tag})"

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "profiles": self.profiles, "image": self.image, "commit": self.commit,
                "released_at": self.released_at}


@dataclass
class Table:
    pins: list[str]
    arches: list[str]
    cells: dict[tuple[str, str], Cell]  # (pin, arch) -> newest release

    def to_json(self) -> dict[str, Any]:
        return {"pins": self.pins, "arches": self.arches,
                "combinations": [{"pin": p, "arch": a, **c.to_json()} for (p, a), c in self.cells.items()]}

    def to_markdown(self) -> str:
        lines = ["| pin | " + " | ".join(self.arches) + " |", "|---|" + "---|" * len(self.arches)]
        for pin in self.pins:
            row = []
            for arch in self.arches:
                cell = self.cells.get((pin, arch))
                row.append("-" if cell is None else f"{', '.join(cell.profiles)} (`{cell.tag}`)".replace("|", "\\|"))
            lines.append(f"| {pin} | " + " | ".join(row) + " |")
        return "\n".join(lines) + "\n"


def table(entries: list[LedgerEntry], matrix=None) -> Table:
    cells: dict[tuple[str, str], Cell] = {}
    for e in entries:  # ledger order: a later release of the same pin/arch wins
        cells[(e.pin, e.arch)] = Cell(e.tag, sorted(e.profiles), e.image.id or "", e.commit, e.released_at or "")
    pins = list(matrix.pins) if matrix is not None else []
    arches = list(matrix.arches) if matrix is not None else []
    pins += sorted({p for p, _ in cells} - set(pins))
    arches += sorted({a for _, a in cells} - set(arches))
    return Table(pins, arches, cells)


def checked(entries: list[LedgerEntry], matrix=None, repo=None):
    """(table, chain report): the chain is verified before anything is shown — the hash
    chain always, each entry against its release tag when ``repo`` (the fork) is given."""
    from forgepatch.release import integrity  # heavy: pydantic (the typed ledger)
    from forgepatch.release.ledger import chain_problem  # heavy: pydantic (the typed ledger)

    if repo is not None:
        release = getattr(matrix, "release", None)
        report = integrity.check_chain(entries, repo, tag_template=getattr(release, "tag_template", None),
                                       require_signed=bool(getattr(release, "require_signed_tags", False)))
    else:
        report = integrity.ChainReport(len(entries), chain_problem(entries))
        report.notes.append("tags not checked (no fork repository: pass --repo)")
    return table(entries, matrix), report
