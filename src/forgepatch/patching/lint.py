"""Gate-coverage lint: arch gates of the same feature that still reject the arch.

"Auto-enable fires, then start-up dies" happens when one gate of a feature accepts the new
arch and another, on the path it routes into, does not. After patching (in memory), this
finds every pure arch gate (an ``or`` of arch predicates) that still rejects the arch in (a) statements naming the feature's markers and (b) same-module functions
called from functions that name them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from forgepatch.arch import Arch
from forgepatch.patching.codemods.arch_gate import SIBLINGS, gated_unit_text, marker_in
from forgepatch.patching.codemods.base import FileContext
from forgepatch.patching.engine import _def_lines, index_functions, parse
from forgepatch.patching.patchset import Patch
from forgepatch.patching.predicates import find_gates


@dataclass
class LintFinding:
    file: str
    line: int | None
    function: str
    gate: str
    reason: str

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.function}: `{self.gate}` {self.reason}"


def lint_tree(read_text, paths: list[str], patches: list[Patch], arch: Arch) -> list[LintFinding]:
    """``read_text(rel)`` reads the PATCHED tree."""
    markers = sorted({m for p in patches for s in p.sites for m in s.markers if re.fullmatch(r"\w+", m)})
    if not markers:
        return []
    needles = [m.encode() for m in markers]
    target = arch.gate_family
    findings: list[LintFinding] = []
    for rel in paths:
        text = read_text(rel)
        if text is None or not any(n in text.encode() for n in needles):
            continue
        findings += _lint_file(text, rel, markers, target, arch, read_text)
    return findings


def _lint_file(text, rel, markers, target, arch, read_text) -> list[LintFinding]:
    names = set(re.findall(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", text, re.M))
    module = parse(text, rel)
    funcs = index_functions(module, names)
    lines = _def_lines(text, names)
    ctx = FileContext(arch, rel, module, False, read_text, {}, {})
    seen: dict[str, int] = {}
    scoped = []
    for node, qual in funcs:
        k = seen[node.name.value] = seen.get(node.name.value, -1) + 1
        ls = lines.get(node.name.value, [])
        scoped.append((node, qual, ls[k] if k < len(ls) else None))
    code = {id(n): module.code_for_node(n) for n, _, _ in scoped}
    routed = set()
    for node, _q, _l in scoped:
        if any(marker_in(code[id(node)], m) for m in markers):
            routed |= {c for c in re.findall(r"(?<![\w.])(?:self\.)?(\w+)\(", code[id(node)]) if c in names}
    out = []
    for node, qual, line in scoped:
        if not any(marker_in(code[id(node)], m) for m in markers) and node.name.value not in routed:
            continue
        ctx.scope(node, line)
        ctx.parents[node.body] = node
        for gate in find_gates(node.body, ctx.parents):
            if gate.kind != "pure" or gate.accepts(target) or not gate.families & set(SIBLINGS):
                continue  # lone predicates are arch-specific by design; mixed ones never widened
            in_unit = any(marker_in(gated_unit_text(gate.node, ctx), m) for m in markers)
            if not in_unit and node.name.value not in routed:
                continue
            why = "names the feature's markers" if in_unit else "is on the path of a feature function"
            out.append(LintFinding(rel, ctx.line(gate.node), qual, ctx.code(gate.node).strip(),
                                   f"rejects {arch.name}: gate {why}"))
    return out
