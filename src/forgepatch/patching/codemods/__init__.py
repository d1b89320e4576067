"""Codemods patches use. Declarative (TOML) patches name one of these by key."""

from __future__ import annotations


def declarative_codemod(name: str):
    """The codemod class for a declarative patch's ``codemod = "..."`` (default arch-gate)."""
    if name in ("arch-gate", "widen"):
        from forgepatch.patching.codemods.arch_gate import ArchGateCodemod  # heavy: libcst

        return ArchGateCodemod
    if name in KINDS:
        from importlib import import_module

        module, cls = KINDS[name]
        return getattr(import_module(f"forgepatch.patching.codemods.{module}"), cls)
    raise ValueError(f"codemod: unknown declarative codemod {name!r} (known: arch-gate, widen, {', '.join(KINDS)}, major-list, text, add-files)")


# the edit kinds beside arch-gate (``widen``): name -> (module, class)
KINDS = {"narrow": ("narrow", "NarrowCodemod"), "value": ("value", "ValueCodemod"), "guard": ("guard", "GuardCodemod")}
