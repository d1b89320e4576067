"""The import plan of src/forgepatch (issue 25; docs/architecture.md, Layers): forgepatch's own
modules are imported at module level, where the dependency plan can be read, and the module-level
imports form no cycle. A function-level import of a forgepatch module is allowed only where
ALLOWED says why, and only while that reason holds:

- ``heavy``: the target loads a heavy third-party package (HEAVY) that the importer does not
  load itself;
- ``cycle``: the target imports the importer at module level (fix the direction instead where
  you can: move the function or the fact to the lower module);
- ``cli-root``: the CLI root (``forgepatch.cli``, its ``_state``) keeps off ``forgepatch --help``'s
  path a module --help does not need.

Each such import carries a one-line comment saying why. Modules loaded by name
(``importlib.import_module``) are loaded only at the call sites DYNAMIC names: the command
table (the one place of laziness for ``--help``) and the patch authors' API. The static plan
this test reads off the source is checked against what Python really loads."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# Third-party packages a module counts as heavy for, measured with `python -X importtime -c
# "import X"` (cumulative, ms, on the 2-core test machine): libcst 128, hypothesis 135, docker 86,
# requests 69, git 50, pydantic 49, elftools.elf 38, rich.progress 30, typer 25, filelock 22,
# tomlkit 16; torch only inside images. Cheap beside them: packaging.version 2, platformdirs 2.5,
# zstandard 6, tomllib 3, json 1.
HEAVY = frozenset({"libcst", "hypothesis", "docker", "requests", "git", "pydantic", "elftools", "rich", "typer",
                   "click", "filelock", "tomlkit", "torch"})

# (importer, imported module) -> why the import is inside a function. The one list.
ALLOWED = {
    ("forgepatch.cli._state", "forgepatch.config"): "heavy: pydantic; the CLI root is on --help's path",
    ("forgepatch.cli._state", "forgepatch.patching.library"): "cli-root: --help does not need the patch "
                                                              "library (nor the journal it imports, ~10 ms)",
    ("forgepatch.fork.follow", "forgepatch.config"): "heavy: pydantic (the matrix schema)",
    ("forgepatch.fork.pins", "forgepatch.config"): "heavy: pydantic (the matrix schema); pins edits the TOML "
                                                   "without it",
    ("forgepatch.images.service", "forgepatch.images.ship"): "heavy: pydantic (the build record), only after "
                                                             "a build",
    ("forgepatch.patching.codemods", "forgepatch.patching.codemods.arch_gate"): "heavy: libcst; loading a "
                                                                                "patch names its codemod only",
    ("forgepatch.patching.guard", "forgepatch.patching.codemods.base"): "heavy: libcst, only to check a custom "
                                                                        "codemod",
    ("forgepatch.patching.library", "forgepatch.config"): "heavy: pydantic (the matrix schema)",
    ("forgepatch.patching.scaffold", "forgepatch.patching.engine"): "heavy: libcst (the engine runs an example)",
    ("forgepatch.patching.series", "forgepatch.patching.verify"): "heavy: libcst; load_series needs none",
    ("forgepatch.patching.series", "forgepatch.patching.engine"): "heavy: libcst; load_series needs none",
    ("forgepatch.patching.service", "forgepatch.patching.engine"): "heavy: libcst (the engine runs the examples)",
    ("forgepatch.release.status", "forgepatch.release.integrity"): "heavy: pydantic (the typed ledger), only "
                                                                   "for a checked status",
    ("forgepatch.release.status", "forgepatch.release.ledger"): "heavy: pydantic (the typed ledger), only for "
                                                                "a checked status",
}

# (module, function) -> why it loads modules by name
DYNAMIC = {
    ("forgepatch.cli", "load_commands"): "the command table: a command's module loads when the command runs",
    ("forgepatch.cli", "_click_module"): "click's modules where typer has them (vendored or not)",
    ("forgepatch.patching", "__getattr__"): "the patch authors' API, resolved on first use (PEP 562)",
    ("forgepatch.patching.codemods", "declarative_codemod"): "the edit kinds a declarative patch names (libcst)",
    ("forgepatch.inimage.imported", "one"): "the package a job imported (SGLang, FlashInfer), in an image",
}

CLI_ROOT = {"forgepatch.cli", "forgepatch.cli._state"}
KINDS = ("heavy", "cycle", "cli-root")


class Module:
    def __init__(self, name: str, path: Path) -> None:
        self.name, self.path = name, path
        self.is_package = path.name == "__init__.py"
        self.lines = path.read_text(encoding="utf-8").splitlines()
        self.tree = ast.parse("\n".join(self.lines))
        self.edges: set[str] = set()  # forgepatch modules imported at module level
        self.third: set[str] = set()  # top-level third-party packages imported at module level
        self.lazy: list[tuple[str, ast.stmt, list[str]]] = []  # (function, statement, modules)
        self.dynamic: list[tuple[str, int]] = []  # (function, line) of import_module calls


@lru_cache(maxsize=1)
def plan() -> dict[str, Module]:
    mods = {}
    for path in sorted((SRC / "forgepatch").rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("").parts
        if "data" in rel or rel[-1] == "__main__":
            continue
        name = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
        mods[name] = Module(name, path)
    for mod in mods.values():
        _scan(mod, mod.tree, None, mods)
    return mods


def _targets(mod: Module, node: ast.stmt, mods: dict[str, Module]) -> list[str]:
    """The forgepatch modules an import statement loads (a package only when a name of it that
    is not a submodule is imported)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "forgepatch"]
    if node.level:
        base = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if source.split(".")[0] != "forgepatch":
        return []
    subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in mods]
    return subs + ([source] if len(subs) < len(node.names) else [])


def _scan(mod: Module, node: ast.AST, function: str | None, mods: dict[str, Module]) -> None:
    for child in ast.iter_child_nodes(node):
        if function is None and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.dump(child.test):
            for stmt in child.orelse:
                _scan(mod, ast.Module(body=[stmt], type_ignores=[]), None, mods)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            targets = _targets(mod, child, mods)
            if function is None:
                mod.edges.update(targets)
                if isinstance(child, ast.Import):
                    mod.third.update(a.name.split(".")[0] for a in child.names)
                elif not child.level:
                    mod.third.add((child.module or "").split(".")[0])
            elif targets:
                mod.lazy.append((function, child, targets))
            continue
        if isinstance(child, ast.Call) and _loads_by_name(mod, child.func):
            mod.dynamic.append((function or "<module>", child.lineno))
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        _scan(mod, child, inner, mods)


def _loads_by_name(mod: Module, callee: ast.expr) -> bool:
    """``importlib.import_module(...)``, ``import_module(...)`` imported from importlib, or
    ``__import__(...)``."""
    if isinstance(callee, ast.Attribute):
        return callee.attr == "import_module" and isinstance(callee.value, ast.Name) and callee.value.id == "importlib"
    if not isinstance(callee, ast.Name):
        return False
    bound = {a.asname or a.name for node in ast.walk(mod.tree) if isinstance(node, ast.ImportFrom)
             and node.module == "importlib" for a in node.names if a.name == "import_module"}
    return callee.id == "__import__" or callee.id in bound


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def closure(name: str) -> set[str]:
    """Every forgepatch module importing ``name`` loads (its packages included)."""
    mods, seen, todo = plan(), set(), [name]
    while todo:
        for dep in set(mods[todo.pop()].edges) | set(_parents(name)):
            for one in [dep, *_parents(dep)]:
                if one in mods and one not in seen and one != name:
                    seen.add(one)
                    todo.append(one)
    return seen


def heavy(name: str) -> set[str]:
    mods = plan()
    return {p for m in closure(name) | {name} for p in mods[m].third & HEAVY}


def reaches(source: str, target: str) -> bool:
    """``source`` imports ``target`` at module level, directly or through others."""
    mods, seen, todo = plan(), set(), [source]
    while todo:
        for dep in mods[todo.pop()].edges:
            if dep == target:
                return True
            if dep in mods and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return False


def lazy_imports():
    """(importer, target, file:line, the statement's line and the one above) per lazy import."""
    for mod in plan().values():
        for _function, node, targets in mod.lazy:
            for target in targets:
                if target != mod.name:
                    where = f"{mod.path.relative_to(ROOT)}:{node.lineno}"
                    yield mod.name, target, where, mod.lines[node.lineno - 1], mod.lines[node.lineno - 2]


def still_needed(importer: str, target: str, reason: str) -> str | None:
    """Why the entry is stale (None: its reason holds)."""
    kind = reason.split(":")[0]
    if kind not in KINDS:
        return f"reason {reason!r} is not one of {', '.join(KINDS)}"
    if kind == "heavy" and not heavy(target) - heavy(importer):
        return f"{target} loads nothing heavy that {importer} does not load already: import it at module level"
    if kind == "cycle" and not reaches(target, importer):
        return f"{target} no longer imports {importer}: import it at module level"
    if kind == "cli-root" and (importer not in CLI_ROOT or target in closure("forgepatch.cli")):
        return f"{target} is on --help's path anyway, or {importer} is not the CLI root"
    return None


def test_every_function_level_import_of_forgepatch_is_declared():
    undeclared = sorted(f"{where}: {importer} imports {target}" for importer, target, where, _, _ in lazy_imports()
                        if (importer, target) not in ALLOWED)
    assert not undeclared, ("import these at module level (or declare why not in ALLOWED):\n" + "\n".join(undeclared))


def test_every_declared_lazy_import_is_still_needed():
    used = {(importer, target) for importer, target, *_ in lazy_imports()}
    stale = [f"{importer} -> {target}: no such function-level import" for importer, target in ALLOWED
             if (importer, target) not in used]
    stale += [f"{importer} -> {target}: {why}" for (importer, target), reason in ALLOWED.items()
              if (why := still_needed(importer, target, reason))]
    assert not stale, "\n".join(stale)


def test_each_lazy_import_says_why_in_a_comment():
    silent = []
    for importer, target, where, line, above in lazy_imports():
        kind = ALLOWED.get((importer, target), "").split(":")[0]
        comment = line.partition("#")[2] or (above.strip()[1:] if above.strip().startswith("#") else "")
        if not kind or kind not in comment:
            silent.append(f"{where}: {line.strip()}")
    assert not silent, "a lazy import says why (`# heavy: ...`, `# cycle: ...`, `# cli-root: ...`):\n" + "\n".join(silent)


def test_modules_are_loaded_by_name_only_where_declared():
    found = {(mod.name, function) for mod in plan().values() for function, _line in mod.dynamic}
    assert found == set(DYNAMIC), {"undeclared": sorted(found - set(DYNAMIC)), "stale": sorted(set(DYNAMIC) - found)}


def test_module_level_imports_form_no_cycle():
    mods = plan()
    cycles = [f"{name} -> ... -> {name}" for name in mods if reaches(name, name)]
    assert not cycles, cycles


def test_the_planted_cases_are_caught():
    """The checks bite: a cheap import moved into a function is undeclared, and an entry
    whose reason no longer holds is stale."""
    assert still_needed("forgepatch.fork.pins", "forgepatch.errors", "heavy: x") is not None  # errors is cheap
    assert still_needed("forgepatch.release.publish", "forgepatch.release.ledger", "heavy: x") is not None  # both pydantic
    assert still_needed("forgepatch.patching.series", "forgepatch.patching.model", "cycle: x") is not None
    assert still_needed("forgepatch.cli._state", "forgepatch.errors", "cli-root: x") is not None  # loaded by --help
    assert still_needed("forgepatch.patching.series", "forgepatch.patching.engine", "heavy: libcst") is None
    assert still_needed("forgepatch.fork.pins", "forgepatch.config", "because") is not None  # not a reason kind


def test_the_static_plan_is_what_python_loads():
    """Each module imported alone (a forked child per module, nothing imported before) loads
    exactly the heavy packages the static plan says, and every forgepatch module the plan says."""
    names = sorted(plan())
    script = (
        "import json, os, sys\n"
        "out = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.close(r)\n"
        "        __import__(name)\n"
        "        mods = sorted(m for m in sys.modules if m.startswith('forgepatch'))\n"
        "        tops = sorted({m.split('.')[0] for m in sys.modules})\n"
        "        os.write(w, json.dumps([mods, tops]).encode())\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    data = b''\n"
        "    while chunk := os.read(r, 65536):\n"
        "        data += chunk\n"
        "    os.close(r)\n"
        "    os.waitpid(pid, 0)\n"
        "    out[name] = json.loads(data)\n"
        "print(json.dumps(out))\n")
    run = subprocess.run([sys.executable, "-c", script, json.dumps(names)], capture_output=True, text=True, timeout=600,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, check=True)
    loaded = json.loads(run.stdout)
    wrong = []
    for name in names:
        mods, tops = loaded[name]
        if set(tops) & HEAVY != heavy(name):
            wrong.append(f"{name}: loads {sorted(set(tops) & HEAVY)}, the plan says {sorted(heavy(name))}")
        missing = (closure(name) | {name}) - set(mods)
        if missing:
            wrong.append(f"{name}: the plan says it loads {sorted(missing)}, Python did not")
    assert not wrong, "\n".join(wrong)
