"""``forgepatch patch new``: scaffold a declarative (arch-gate) patch, with one example taken
from a real function of a real source.

Given ``--function NAME`` (and a source, default the matrix's default pin), the function is
located by name in the source tree (``--module GLOB`` picks one when several files define
it). The patch gets one site (that function, in that file) and one example whose ``before``
is the function as the release has it, with the imports and module constants it uses, and
whose ``context`` holds a stub of each ``sglang`` module it imports from: the names that
module really defines among those the function imports and the arch predicates (so the
example resolves names the way the real tree does). ``after`` is what the arch-gate codemod
makes of it today, for the author to review (the file says so); ``fallback = true`` is set
when the real tree lacks the new predicate (the codemod defines a local helper). Without
``--function`` the file is a skeleton to fill in. The file is written atomically and never
overwrites one.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from forgepatch.arch import ARCHES, get_arch
from forgepatch.errors import BadInput
from forgepatch.infra import journal
from forgepatch.patching.astview import SIBLINGS
from forgepatch.patching.bindings import resolved
from forgepatch.patching.model import FALLBACK_HELPER
from forgepatch.patching.patchset import load_patch
from forgepatch.patching.resolve import absolute_module, find_definition, module_to_paths
from forgepatch.patching.trees import DirTree, MemoryTree
from forgepatch.sources import resolve_source

ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")


@dataclass
class Found:
    rel: str  # package-relative file
    line: int
    qualname: str


@dataclass
class Scaffold:
    path: Path
    text: str
    source: str | None = None
    found: Found | None = None
    changed: bool = False  # the example's `after` differs from `before`
    fallback: bool = False
    notes: list[str] = field(default_factory=list)


def _toml_str(text: str) -> str:
    """A TOML string for ``text``: a multi-line literal when it can be, else a basic string."""
    if "'''" not in text and "\r" not in text:
        return "'''\n" + text + "'''"
    import json

    return json.dumps(text)


def find_functions(tree, name: str) -> list[Found]:
    """Every function or method named ``name`` in ``tree`` (files prefiltered by bytes)."""
    needle = f"def {name}(".encode()
    out = []
    for rel in tree.paths():
        if not rel.endswith(".py"):
            continue
        data = tree.read(rel)
        if needle not in data:
            continue
        try:
            mod = ast.parse(data)
        except SyntaxError:
            continue
        for node in mod.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                out.append(Found(rel, node.lineno, name))
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                        out.append(Found(rel, item.lineno, f"{node.name}.{name}"))
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _segment(lines: list[str], node: ast.AST) -> str:
    start = node.lineno - 1
    if getattr(node, "decorator_list", None):
        start = min(d.lineno for d in node.decorator_list) - 1
    return "".join(lines[start:node.end_lineno])


def snippet(text: str, found: Found) -> tuple[str, list[ast.ImportFrom]]:
    """``before``: the imports and module constants the function uses, then the function (a
    method inside its class header). Also the ``from ... import`` statements kept."""
    mod = ast.parse(text)
    lines = text.splitlines(keepends=True)
    cls_name, _, fn_name = found.qualname.rpartition(".")
    target = holder = None
    for node in mod.body:
        if cls_name and isinstance(node, ast.ClassDef) and node.name == cls_name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.lineno == found.line:
                    target, holder = item, node
        elif not cls_name and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == found.line:
            target = node
    if target is None:
        raise BadInput(f"--function: {found.qualname} not found again in {found.rel}")
    used = _names(target)
    # module constants the function reads, and the constants those read (a few levels)
    assigns: list[ast.stmt] = []
    for _ in range(3):
        for node in mod.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node not in assigns:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bound = {t.id for t in targets if isinstance(t, ast.Name)}
                if bound & used:
                    assigns.append(node)
                    used |= _names(node.value) if node.value is not None else set()
    imports: list[ast.stmt] = []
    froms: list[ast.ImportFrom] = []
    for node in mod.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).split(".")[0] for a in node.names}
            if bound & used:
                imports.append(node)
                if isinstance(node, ast.ImportFrom):
                    froms.append(node)
    parts = []
    if imports:
        parts.append("".join(_segment(lines, n) for n in sorted(imports, key=lambda n: n.lineno)))
    if assigns:
        parts.append("".join(_segment(lines, n) for n in sorted(assigns, key=lambda n: n.lineno)))
    body = _segment(lines, target)
    if holder is not None:
        body = f"class {holder.name}:\n" + body
    parts.append(body)
    return "\n\n".join(p.rstrip("\n") + "\n" for p in parts[:-1]) + ("\n\n" if len(parts) > 1 else "") + parts[-1], froms


def _stub(read, rel: str, module: str, names: list[str], families: list[str]) -> tuple[str, str] | None:
    """A context file standing for ``module`` of the real tree: the names it really provides."""
    paths = module_to_paths(module)
    where = next((p for p in paths if read(p) is not None), None)
    if where is None:
        return None
    out: list[str] = []
    wanted = list(dict.fromkeys(names + [f"is_{f}_supported" for f in families]))
    attrs = set()
    for name in wanted:
        defined = find_definition(read, module, name)
        text = read(defined) if defined else None
        if text is None:
            continue
        kind = resolved(read, defined, text, name)
        kind = kind.kind if kind else "function"
        if kind == "class":
            out.append(f"class {name}: ...")
        elif kind in ("bool", "value"):
            out.append(f"{name} = None")
        else:
            out.append(f"def {name}(*args, **kwargs): ...")
        attrs |= {f"is_{f}" for f in families if re.search(rf"\bis_{f}\b", text)}
    if not out:
        return None
    if attrs and any(n == "get_platform" for n in names):
        out.append(f"PLATFORM_ATTRIBUTES = {tuple(sorted(attrs))!r}  # the real module knows these")
    return where, "\n".join(out) + "\n"


def render(pid: str, arch: str, site: dict | None, example: dict | None, source: str | None) -> str:
    """The patch file's text (an example's arch defaults to the patch's first arch)."""
    lines = [
        f"# {pid}: a declarative arch-gate patch (scaffolded by `forgepatch patch new`).",
        "# Check it with `forgepatch patch test " + pid + "`, then list it under",
        f"# [arches.{arch}] patches in matrix.toml. README: \"Write your own patch\".",
        "",
        f'id = "{pid}"',
        f'summary = "TODO: what this patch enables on {arch}"',
        f'arches = ["{arch}"]',
        "",
        "[[sites]]",
    ]
    if site is None:
        lines += [
            'name = "TODO-site"',
            '# the function(s) holding the gate, by name (several = renames across releases)',
            'functions = ["TODO_function_name"]',
            '# package-relative globs of the files the function lives in (they bind)',
            'modules = ["srt/TODO.py"]',
            "# markers = [\"a_name_the_function_uses\"]   # optional: the site must name one in code",
        ]
    else:
        lines += [
            f'name = "{site["name"]}"',
            f'functions = ["{site["function"]}"]',
            f'modules = ["{site["module"]}"]',
            "# markers = [\"a_name_the_function_uses\"]   # optional: the site must name one in code",
            "# required = false                         # when some releases lack the site",
        ]
    if example is not None:
        lines += [
            "",
            "# One example, taken from the real function. The example's tree is `path` (holding",
            "# `before`) plus the `context` files: stubs of the modules `before` imports from, with",
            "# the names the real tree defines (so names resolve as they do there).",
            "# REVIEW `after`: it is what the codemod makes of `before` today. An example without",
            "# `after` must stay unchanged.",
            "[[examples]]",
            f'name = "{example["name"]}"',
            f'path = "{example["path"]}"',
        ]
        if example.get("fallback"):
            lines.append("# the release lacks the new predicate: the codemod defines a local helper")
            lines.append("fallback = true")
        lines.append("before = " + _toml_str(example["before"]))
        if example.get("after") is not None:
            lines.append("after = " + _toml_str(example["after"]))
        if example.get("context"):
            lines.append("")
            lines.append("[examples.context]")
            for rel, text in example["context"].items():
                lines.append(f'"{rel}" = ' + _toml_str(text))
    return "\n".join(lines) + "\n"


def scaffold(pid: str, arch: str, dest_dir: Path, library, *, source: str | None = None, function: str | None = None,
             module: str | None = None, matrix=None) -> Scaffold:
    """Write ``dest_dir/<pid>.toml``; BadInput for a bad id, an existing patch, an unknown function."""
    if not ID_RE.fullmatch(pid):
        raise BadInput(f"patch new: id {pid!r} must be lower-case letters, digits, '-', '.', '_'")
    arch = get_arch(arch).name
    entry = library.files.get(pid)
    if entry is not None:
        where = "a shipped patch" if entry.origin == "shipped" else f"already a patch ({entry.path})"
        raise BadInput(f"patch new: {pid!r} is {where}; pick another id")
    dest_dir = Path(dest_dir)
    path = dest_dir / f"{pid}.toml"
    if path.exists() or (dest_dir / f"{pid}.py").exists():
        raise BadInput(f"patch new: refusing to overwrite {path}")
    if module and not function:
        raise BadInput("--module: only with --function")
    if source and not function:
        raise BadInput("--from: only with --function (the function the example is taken from)")
    result = Scaffold(path, "")
    site = example = None
    if function:
        src = resolve_source(source, matrix)
        tree = DirTree(src.package, pristine=src.pristine)
        result.source = src.label
        found = find_functions(tree, function)
        if module:
            found = [f for f in found if fnmatch.fnmatch(f.rel, module)]
        if not found:
            raise BadInput(f"--function: no function {function!r} in {src.label}"
                           + (f" under --module {module}" if module else ""))
        if len(found) > 1:
            listing = ", ".join(f"{f.qualname} ({f.rel}:{f.line})" for f in found[:8])
            raise BadInput(f"--function: {len(found)} functions named {function!r} in {src.label}: {listing}; "
                           f"pick one with --module GLOB")
        result.found = hit = found[0]
        text = tree.read(hit.rel).decode("utf-8", "replace")
        before, froms = snippet(text, hit)

        def read(rel: str):
            try:
                return tree.read(rel).decode("utf-8", "replace")
            except (OSError, KeyError):
                return None

        families = list(dict.fromkeys([*SIBLINGS, *(a.gate_family for a in ARCHES.values())]))
        context: dict[str, str] = {}
        for imp in froms:
            mod = absolute_module(hit.rel, imp.module or "", imp.level)
            if not mod.startswith("sglang"):
                continue
            stub = _stub(read, hit.rel, mod, [a.name for a in imp.names], families)
            if stub and stub[0] != hit.rel:
                context[stub[0]] = stub[1]
        site = {"name": function.strip("_").replace("_", "-"), "function": function, "module": hit.rel}
        example = {"name": f"{hit.qualname} as in {src.label}", "path": hit.rel, "before": before,
                   "context": context}
        # what the codemod makes of it today (the author reviews it)
        draft = render(pid, arch, site, example, src.label)
        after, fallback = _run_example(draft, path, arch, hit.rel, before, context)
        example["fallback"] = result.fallback = fallback
        if after != before:
            example["after"], result.changed = after, True
        else:
            result.notes.append(f"the arch-gate codemod changes nothing in {hit.qualname} for {arch} (no sm90/sm100 "
                                f"gate it widens): the example says it must stay unchanged")
    result.text = render(pid, arch, site, example, result.source)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # what will be written loads, before it is written
        (Path(tmp) / path.name).write_text(result.text, encoding="utf-8")
        load_patch(Path(tmp) / path.name)
    dest_dir.mkdir(parents=True, exist_ok=True)

    # under the patches directory's lock, through its journal: a crash leaves no temp file
    with journal.open_tree(dest_dir, "patch new", write=True):
        if path.exists() or path.is_symlink():
            raise BadInput(f"patch new: refusing to overwrite {path}")
        journal.commit(dest_dir, {path.name: result.text.encode("utf-8")}, "patch new")
    return result


def _run_example(draft: str, path: Path, arch: str, rel: str, before: str, context: dict) -> tuple[str, bool]:
    """Run the drafted patch on its example tree: (the file after, whether it fell back)."""
    import tempfile

    from forgepatch.patching.engine import run_patches  # heavy: libcst (the engine)

    with tempfile.TemporaryDirectory() as tmp:
        draft_path = Path(tmp) / path.name
        draft_path.write_text(draft, encoding="utf-8")
        patch = load_patch(draft_path)
    files = dict(context)
    files[rel] = before
    res = run_patches(MemoryTree(files), [patch], get_arch(arch), None)
    fell_back = any(FALLBACK_HELPER in loc.detail for p in res.patches for s in p.sites for loc in s.locations)
    return res.changed.get(rel, before), fell_back
