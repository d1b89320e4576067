"""Codemods patches use. Declarative (TOML) patches name one of these by key."""

from __future__ import annotations


def declarative_codemod(name: str):
    """The codemod class for a declarative patch's ``codemod = "..."`` (default arch-gate)."""
    if name == "arch-gate":
        from forgepatch.patching.codemods.arch_gate import ArchGateCodemod

        return ArchGateCodemod
    raise ValueError(f"codemod: unknown declarative codemod {name!r} (known: arch-gate, major-list, text, add-files)")
