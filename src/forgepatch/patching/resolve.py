"""Does module M of THIS tree define name N? (regex over source, star-imports followed)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

ReadText = Callable[[str], "str | None"]  # package-relative path -> text, or None if absent


def module_to_paths(module: str, package: str = "sglang") -> list[str]:
    """``sglang.srt.utils`` -> candidate package-relative files."""
    parts = module.split(".")
    if parts[0] != package:
        return []
    base = "/".join(parts[1:])
    if not base:
        return ["__init__.py"]
    return [f"{base}.py", f"{base}/__init__.py"]


def absolute_module(current_rel: str, module: str, level: int, package: str = "sglang") -> str:
    """Resolve a (possibly relative) import in the file ``current_rel`` to a dotted name."""
    if level == 0:
        return module
    pkg_parts = [package] + current_rel.split("/")[:-1]
    if current_rel.endswith("__init__.py"):
        pass  # the package itself
    base = pkg_parts[: len(pkg_parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


_STAR = re.compile(r"^from\s+(\.*)([\w.]*)\s+import\s+\*", re.M)
_FROM = re.compile(r"^from\s+(\.*)([\w.]*)\s+import\s+(\([^)]*\)|[^\n]*)", re.M)


def find_definition(read: ReadText, module: str, name: str, _depth: int = 0) -> str | None:
    """The package-relative file that defines ``name`` as seen from ``module`` (following
    re-exports and star imports), or None if this tree does not provide it."""
    n = re.escape(name)
    for rel in module_to_paths(module):
        text = read(rel)
        if text is None:
            continue
        if re.search(rf"^(?:async\s+)?def\s+{n}\s*\(|^class\s+{n}\b|^{n}\s*(?::[^=\n]*)?=(?!=)", text, re.M):
            return rel
        for m in _FROM.finditer(text):
            names = re.findall(r"\b(\w+)(?:\s+as\s+(\w+))?", m.group(3).replace("(", " ").replace(")", " "))
            for orig, alias in names:
                if orig != "as" and (alias or orig) == name:
                    target = absolute_module(rel, m.group(2), len(m.group(1)))
                    found = find_definition(read, target, orig, _depth + 1) if _depth < 4 else None
                    return found or rel
        if _depth < 4:
            for m in _STAR.finditer(text):
                target = absolute_module(rel, m.group(2), len(m.group(1)))
                found = find_definition(read, target, name, _depth + 1)
                if found:
                    return found
        return None
    return None



# -- what a top-level name is bound to (read off the source, so a status scan can ask too) --
_BOOLISH = re.compile(r"^\s*(?:True|False|not\b|.*(?:\band\b|\bor\b|==|!=|<=|>=|[<>]|\bis\b|\bin\b))")


@lru_cache(maxsize=64)
def binding(text: str, name: str) -> tuple[str, str] | None:
    """How ``text`` binds ``name`` at its top level: ("function", "") for a ``def``,
    ("class", ""), ("bool", rhs) for an assignment of a condition, ("value", rhs) for any
    other assignment, ("import", "MODULE:ORIG") for ``from MODULE import ORIG [as name]``;
    None if unbound.
    The first binding in the file wins (what a codemod inserting after imports sees)."""
    n = re.escape(name)
    found: list[tuple[int, tuple[str, str]]] = []
    if m := re.search(rf"^(?:async[ \t]+)?def[ \t]+{n}[ \t]*\(", text, re.M):
        found.append((m.start(), ("function", "")))
    if m := re.search(rf"^class[ \t]+{n}\b", text, re.M):
        found.append((m.start(), ("class", "")))
    if m := re.search(rf"^{n}[ \t]*(?::[^=\n]*)?=(?!=)(.*)$", text, re.M):
        rhs = m.group(1)
        found.append((m.start(), ("bool" if _BOOLISH.match(rhs) else "value", rhs.strip())))
    for m in _FROM.finditer(text):
        names = re.findall(r"\b(\w+)(?:\s+as\s+(\w+))?", m.group(3).replace("(", " ").replace(")", " "))
        hit = next((orig for orig, alias in names if orig != "as" and (alias or orig) == name), None)
        if hit:
            found.append((m.start(), ("import", f"{m.group(1)}{m.group(2)}:{hit}")))
            break
    return min(found)[1] if found else None


def imported_kind(read: ReadText, current_rel: str, spec: str) -> str | None:
    """What ``from MODULE import ORIG`` (``spec`` = "MODULE:ORIG" as written in
    ``current_rel``) brings: "function", "class", "bool", "value", or None when this tree
    does not tell."""
    module, _, orig = spec.rpartition(":")
    level = len(module) - len(module.lstrip("."))
    target = absolute_module(current_rel, module.lstrip("."), level)
    where = find_definition(read, target, orig)
    text = read(where) if where else None
    if text is None:
        return None
    kind = binding(text, orig)
    if kind is None or kind[0] == "import":
        return None
    return kind[0]
