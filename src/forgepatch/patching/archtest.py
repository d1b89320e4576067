"""An arch test in the file's own idiom: "the device is one of these arches", as an expression.

A set of registry arches is spelled with what the file and its tree already use, narrowest
first:

- the whole family of a predicate (``{sm120, sm121}``: SGLang's ``major == 12``) as the file
  spells its siblings: the module constant ``_is_sm120_supported`` when the file defines it,
  ``get_platform().is_sm120`` when the file uses that idiom and the platform object knows the
  attribute in this tree, else the call ``is_sm120_supported()``;
- one arch that the tree has an exact predicate for (``is_sm120()``, ``is_sm121()`` in
  ``sglang.srt.utils`` from 0.5.20): that call;
- otherwise the compute capability itself,
  ``(torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 3))`` when the
  file imports ``torch``, else a module-level helper ``_forgepatch_is_sm103()`` built from the
  arch registry.

A name the test needs is made resolvable when the module is finished (:func:`provide`):
imported next to the file's own import of a sibling predicate, or from ``sglang.srt.utils``
when this tree defines it there, else defined locally from the registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from forgepatch.arch import ARCHES
from forgepatch.patching.bindings import FUNCTION, IMPORT, binding, resolved
from forgepatch.patching.codemods.arch_gate import (
    ArchGateCodemod, import_module, imported_names, local_helper, module_binds, top_imports,
)
from forgepatch.patching.codemods.base import insert_definition
from forgepatch.patching.model import FALLBACK_HELPER
from forgepatch.patching.resolve import absolute_module, find_definition

UTILS = "sglang.srt.utils"
HELPER_PREFIX = "_forgepatch_is_"


def family_of(arches) -> str | None:
    """The predicate family whose gates admit exactly ``arches`` (``{sm120, sm121}`` ->
    "sm120"; ``{sm100, sm103}`` -> "sm100"), or None."""
    wanted = set(arches)
    for fam in {a.gate_family for a in ARCHES.values()}:
        if {a.name for a in ARCHES.values() if a.gate_family == fam} == wanted:
            return fam
    return None


def check_arches(value, where: str) -> tuple[str, ...]:
    """A TOML ``when``/``exclude`` value: an arch name or a list of them."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) for v in items):
        raise ValueError(f"{where}: expected an arch or a list of arches (known: {', '.join(ARCHES)})")
    for a in items:
        if a not in ARCHES:
            raise ValueError(f"{where}: unknown arch {a!r} (known: {', '.join(ARCHES)})")
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class Need:
    """A name the test uses that the module must bind: ``kind`` is "import" (from
    ``module``), "helper" (defined from the registry for ``arch``) or "constant"."""

    kind: str
    name: str
    module: str = ""
    arch: str = ""


def _tree_defines(ctx, module: str, name: str) -> bool:
    """Does ``module`` of this tree provide ``name`` as a function?"""
    where = find_definition(ctx.read, module, name)
    text = ctx.read(where) if where else None
    if text is None:
        return False
    bound = resolved(ctx.read, where, text, name)
    return bound is None or bound.kind in (FUNCTION, IMPORT)


def _binds(ctx, name: str) -> str | None:
    """The kind this file binds ``name`` to (imports followed through the tree), or None."""
    bound = resolved(ctx.read, ctx.rel, ctx.text, name)
    return bound.kind if bound else None


def _platform_has(ctx, attr: str) -> bool:
    """Does the module that gives this file ``get_platform`` know ``.attr``?"""
    bound = binding(ctx.text, "get_platform")
    if not bound or bound.kind != IMPORT:
        return False
    module, _, orig = bound.detail.rpartition(":")
    level = len(module) - len(module.lstrip("."))
    where = find_definition(ctx.read, absolute_module(ctx.rel, module.lstrip("."), level), orig)
    text = ctx.read(where) if where else None
    return bool(text and re.search(rf"\b{attr}\b", text))


def arch_test(arches, ctx) -> tuple[str, list[Need]]:
    """(source of an expression true exactly on ``arches``, the names it needs)."""
    arches = tuple(dict.fromkeys(arches))
    fam = family_of(arches)
    if fam is not None:
        return _family(fam, ctx)
    parts, needs = [], []
    for name in arches:
        code, more = _exact(name, ctx)
        parts.append(code)
        needs += more
    return (parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"), needs


def _family(fam: str, ctx) -> tuple[str, list[Need]]:
    constant, function, attribute = f"_is_{fam}_supported", f"is_{fam}_supported", f"is_{fam}"
    constant_kind = _binds(ctx, constant)
    if constant_kind == "bool":
        return constant, []
    if constant_kind == "function":
        return f"{constant}()", []
    if re.search(r"get_platform\(\)\.is_sm\d+\b", ctx.text) and _platform_has(ctx, attribute):
        return f"get_platform().{attribute}", []
    kind = _binds(ctx, function)
    if kind in ("function", "import"):
        return f"{function}()", []
    return f"{function}()", [Need("import", function, UTILS, fam)]


def _exact(name: str, ctx) -> tuple[str, list[Need]]:
    arch = ARCHES[name]
    exact = f"is_{name}"  # SGLang's exact predicates (is_sm120(), is_sm121())
    kind = _binds(ctx, exact)
    if kind in ("function", "import"):
        return f"{exact}()", []
    if kind is None and _tree_defines(ctx, UTILS, exact):
        return f"{exact}()", [Need("import", exact, UTILS, name)]
    if _binds(ctx, "torch") is not None or re.search(r"^import torch\b", ctx.text, re.M):
        return f"(torch.cuda.is_available() and torch.cuda.get_device_capability() == {arch.cc})", []
    helper = HELPER_PREFIX + name
    return f"{helper}()", [Need("helper", helper, arch=name)]


def helper_source(name: str, arch_name: str) -> str:
    arch = ARCHES[arch_name]
    return (
        f"def {name}() -> bool:\n"
        f'    """forgepatch: is the device {arch.name} (compute capability {arch.cc[0]}.{arch.cc[1]})?"""\n'
        "    import torch\n\n"
        f"    return torch.cuda.is_available() and torch.cuda.get_device_capability() == {arch.cc}\n"
    )


# -- making the names resolvable -------------------------------------------------------------
def record(ctx, needs: list[Need]) -> None:
    """Remember what the module must bind (done once, in :func:`provide`)."""
    pending = ctx.state.setdefault("archtest_needs", {})
    for need in needs:
        pending.setdefault(need.name, need)


def provide(module: cst.Module, ctx) -> cst.Module:
    """Bind every recorded name: the file's own import style first (see the module doc)."""
    for need in ctx.state.get("archtest_needs", {}).values():
        if module_binds(module, need.name):
            continue
        if need.kind == "helper":
            ctx.provided.append(f"defined {need.name}() from the arch registry")
            module = insert_definition(module, helper_source(need.name, need.arch))
            continue
        try:
            module = add_import(module, ctx, need.name, need.module)
        except LookupError:  # this tree lacks the predicate (0.5.3 has no is_sm120_supported)
            ctx.provided.append(f"defined a local {need.name}() {FALLBACK_HELPER}")
            module = insert_definition(module, local_helper(need.name, need.arch))
    return module


def add_import(module: cst.Module, ctx, name: str, source: str = UTILS) -> cst.Module:
    """Import ``name`` the way the file already imports: into an existing ``from M import``
    whose module provides it in this tree (the file's import of ``source`` first), else a new
    ``from source import name`` after the last top-level import; ``ctx.provided`` says which."""
    imports = top_imports(module)
    ordered = sorted(imports, key=lambda si: import_module(si[1], ctx) != source)
    for stmt, imp in ordered:
        names = imported_names(imp)
        if not names or name in names:
            continue
        if _tree_defines(ctx, import_module(imp, ctx), name):
            ctx.provided.append(f"imported {name} next to {names[-1]} (from {import_module(imp, ctx)})")
            return ArchGateCodemod._add_alias(module, stmt, imp, names[-1], name)
    if source and not _tree_defines(ctx, source, name):
        raise LookupError(f"{name} is not defined in {source} in this tree")
    new = cst.parse_statement(f"from {source} import {name}\n")
    body = list(module.body)
    last = max((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)), default=-1)
    ctx.provided.append(f"imported {name} from {source}")
    return module.with_changes(body=body[: last + 1] + [new] + body[last + 1:])


def same_code(a: str, b: str) -> bool:
    """Do two expressions read the same, whitespace and outer parentheses aside?"""
    def norm(s: str) -> str:
        s = " ".join(s.split())
        while s.startswith("(") and s.endswith(")") and _balanced(s[1:-1]):
            s = s[1:-1].strip()
        return s.replace("( ", "(").replace(" )", ")")
    return norm(a) == norm(b)


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0
