"""Does module M of THIS tree define name N? (regex over source, star-imports followed)."""

from __future__ import annotations

import re
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
