"""What the in-image code imports (Python's ``ast``): every ``forgepatch`` module must be among
the files the image carries; everything else must be the standard library, torch, or the
SGLang the image holds (the server tier starts it as a process and never imports it)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ALLOWED_THIRD_PARTY = {"torch"}


def imported_modules(path: Path, package_rel: str) -> set[str]:
    """Absolute module names a file imports (anywhere in it, also inside functions)."""
    parts = package_rel.split("/")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - (node.level - 1)]
                mod = ".".join(["forgepatch", *base] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            if mod == "forgepatch" or mod.startswith("forgepatch."):
                names.update(f"{mod}.{a.name}" for a in node.names)
    return names


def image_import_problems(package_dir: Path, files: list[str]) -> list[str]:
    """``file: imports X, which ...`` for every import the image could not satisfy."""
    shipped = set(files)
    problems = []
    for rel in files:
        for name in sorted(imported_modules(package_dir / rel, rel)):
            top = name.split(".")[0]
            if top == "forgepatch":
                sub = name.split(".")[1:]
                cands = ["/".join(sub) + ".py", "/".join(sub + ["__init__.py"])] if sub else ["__init__.py"]
                exists = [c for c in cands if (package_dir / c).is_file()]
                if exists and not set(exists) & shipped:
                    problems.append(f"{rel}: imports {name}, which is not in the image")
            elif top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY:
                problems.append(f"{rel}: imports {name}, which is neither stdlib nor torch")
    return problems
