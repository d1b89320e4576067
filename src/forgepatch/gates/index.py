"""The definitions an arch condition can refer to, collected from the parsed blocks of a tree:
module-level functions and assignments (``is_sm100_supported = lru_cache(...)(partial(...))``,
``_is_sm100_supported = _is_cuda and is_sm100_supported()``), platform attribute tables
(``_PLATFORM_PROBES = {"is_sm100": "is_sm100_supported", ...}``), class methods and the
``self.X = ...`` assignments of a class."""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass

from forgepatch.gates.bindings import statements
from forgepatch.gates.scan import SourceFile

_IDENT = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Definition:
    name: str
    file: str
    line: int
    node: ast.AST  # FunctionDef, or the assigned expression
    cls: str | None = None


class Index:
    def __init__(self, files: list[SourceFile]):
        self.defs: dict[str, list[Definition]] = {}
        self._aliases: dict[str, str] = {}
        self._methods: dict[tuple[str, str], dict[str, ast.FunctionDef]] = {}
        self._self: dict[tuple[str, str], dict[str, list[ast.expr]]] = {}
        self._platform: dict[str, tuple] | None = None
        self._imports: dict[tuple[str, str], tuple[str, str]] = {}  # (file, local) -> (module, name)
        for src in files:
            self.add(src)

    def add(self, src: SourceFile) -> None:
        self._platform = None
        for block in src.blocks:
            if block.func is not None:  # some statements of a big function: locals, self assignments
                if block.cls is not None:
                    self._self_assignments(src.rel, block.cls, block)
                continue
            for node in block.nodes:
                line = node.lineno + block.line_offset
                if block.cls is not None:
                    self._member(src.rel, block.cls, node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self._define(Definition(node.name, src.rel, line, node))
                elif isinstance(node, ast.ClassDef):
                    for member in node.body:
                        self._member(src.rel, node.name, member)
                elif isinstance(node, ast.ImportFrom):
                    module = absolute_module(src.rel, node.module or "", node.level)
                    for alias in node.names:
                        if alias.name != "*":
                            self._imports[(src.rel, alias.asname or alias.name)] = (module, alias.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name):
                            self._define(Definition(target.id, src.rel, line, node.value))
                    if isinstance(node.value, ast.Dict):
                        self._alias_table(node.value)

    def _define(self, definition: Definition) -> None:
        self.defs.setdefault(definition.name, []).append(definition)

    def _alias_table(self, table: ast.Dict) -> None:
        pairs = []
        for key, value in zip(table.keys, table.values):
            if not (isinstance(key, ast.Constant) and isinstance(value, ast.Constant)
                    and isinstance(key.value, str) and isinstance(value.value, str) and _IDENT.match(value.value)):
                return
            pairs.append((key.value, value.value))
        for key, value in pairs:
            self._aliases.setdefault(key, value)

    def _member(self, file: str, cls: str, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._methods.setdefault((file, cls), {})[node.name] = node
            self._self_assignments(file, cls, node)

    def _self_assignments(self, file: str, cls: str, body_owner) -> None:
        for sub in statements(body_owner):
            if isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.value is not None:
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        self._self.setdefault((file, cls), {}).setdefault(t.attr, []).append(sub.value)

    # -- lookups --------------------------------------------------------------------------
    def resolve(self, name: str, file: str) -> Definition | None:
        """The definition ``name`` refers to from ``file``: the file's own, else the one
        nearest in the package (longest shared directory prefix)."""
        found = self.defs.get(name)
        own = [d for d in found or () if d.file == file]
        if own:
            return own[-1]
        imported = self._imports.get((file, name))
        if imported is not None:  # `from M import orig as name`: M's definition of orig
            for _ in range(4):
                module, orig = imported
                there = [d for d in self.defs.get(orig, ()) if d.file in module_files(module)]
                if there:
                    return there[-1]
                nxt = next((self._imports[(f, orig)] for f in module_files(module) if (f, orig) in self._imports), None)
                if nxt is None:
                    break
                imported = nxt
            name = imported[1]
            found = self.defs.get(name)
        if not found:
            return None
        here = posixpath.dirname(file).split("/")

        def shared(d: Definition) -> int:
            there = posixpath.dirname(d.file).split("/")
            n = 0
            for a, b in zip(here, there):
                if a != b:
                    break
                n += 1
            return n

        return max(found, key=lambda d: (shared(d), -len(d.file), d.file))

    def original_name(self, name: str, file: str) -> str:
        """The name ``name`` was imported as into ``file`` (followed through re-exports)."""
        for _ in range(4):
            imported = self._imports.get((file, name))
            if imported is None:
                return name
            module, name = imported
            file = next((f for f in module_files(module) if (f, name) in self._imports), "")
        return name

    def attribute_alias(self, attr: str) -> str | None:
        """``get_platform().<attr>`` -> the probe it reads: the tree's attribute tables,
        else ``<attr>_supported`` when the tree defines it."""
        if attr in self._aliases:
            return self._aliases[attr]
        if attr.startswith("is_") and f"{attr}_supported" in self.defs:
            return f"{attr}_supported"
        return None

    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def platform_method(self, attr: str) -> tuple[str, ast.FunctionDef, str] | None:
        """A method named ``attr`` of a CUDA platform class (``CudaPlatform.is_blackwell``)."""
        if self._platform is None:
            self._platform = {}
            for (file, cls), methods in sorted(self._methods.items()):
                if "cuda" in cls.lower():
                    for name, node in methods.items():
                        self._platform.setdefault(name, (file, node, cls))
        return self._platform.get(attr)

    def classes(self):
        """((file, class), {attr: [assigned exprs]}) for every class with self assignments."""
        return self._self.items()

    def method(self, file: str, cls: str, name: str):
        return self._methods.get((file, cls), {}).get(name)

    def self_assignments(self, file: str, cls: str, attr: str) -> list[ast.expr]:
        return self._self.get((file, cls), {}).get(attr, [])


def absolute_module(rel: str, module: str, level: int) -> str:
    """The dotted module a (possibly relative) import in file ``rel`` names."""
    if level == 0:
        return module
    parts = ["sglang"] + rel.split("/")[:-1]
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def module_files(module: str) -> tuple[str, ...]:
    """``sglang.srt.utils`` -> the package-relative files that can hold it."""
    parts = module.split(".")
    if parts[0] != "sglang":
        return ()
    base = "/".join(parts[1:])
    return (f"{base}.py", f"{base}/__init__.py") if base else ("__init__.py",)
