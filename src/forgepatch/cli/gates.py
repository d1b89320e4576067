"""``forgepatch gates``: the arch gates of an SGLang tree, or what changed in them between two pins."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from forgepatch import progress
from forgepatch.arch import get_arch
from forgepatch.cli._options import SOURCE_HELP, arch_option, json_option, markdown_option
from forgepatch.cli._state import STATE, console, print_json
from forgepatch.errors import BadInput, Failure
from forgepatch.gates.diff import diff
from forgepatch.gates.jitlists import ADMITS, KEYWORD, UNVERIFIED
from forgepatch.gates.model import NEVER
from forgepatch.gates.rejecting import rejecting
from forgepatch.gates.render import (
    diff_markdown, diff_table, inventory_markdown, inventory_table, jit_lists_table, rejecting_table,
)
from forgepatch.gates.service import package_jit_lists, source_inventory


def register(app: typer.Typer) -> None:
    app.command("gates")(gates)


def gates(
    source: Optional[str] = typer.Option(None, "--source", help=SOURCE_HELP),
    against: Optional[str] = typer.Option(None, "--against", help="A second source: show what changed from --source to it."),
    arch: Optional[str] = arch_option(None, help="With --against: only gates whose verdict for ARCH changed. Alone: gates that never pass on ARCH."),
    as_json: bool = json_option("Print one JSON document."),
    markdown: bool = markdown_option("Print Markdown (for a PR comment)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the inventory memo."),
    rejecting: bool = typer.Option(False, "--rejecting", help="With --arch: what still keeps ARCH out, by feature and file, each with the `patch new` command that starts a patch for it."),
    package: Optional[str] = typer.Option(None, "--package", help="Another package's JIT arch lists (flashinfer: supported_major_versions=[...]); with --arch, whether each admits ARCH's major."),
) -> None:
    """Inventory every arch gate (predicate, capability comparison) with the arches that pass it."""
    if as_json and markdown:
        raise BadInput("gates: --json and --markdown are exclusive")
    arch_name = arch  # the registry name (arch_option)
    if package is not None and package != "sglang":
        if against is not None or rejecting or markdown:
            raise BadInput("gates: --package takes --source, --arch and --json only")
        _jit_lists(source, package, arch_name, as_json)
        return
    if rejecting and (arch_name is None or against is not None):
        raise BadInput("gates: --rejecting needs --arch and no --against")
    from pathlib import Path

    # the default pin, a pin name, the upstream package dir of a git source: the matrix
    needs_matrix = source is None or any(s and not s.startswith("pypi:") and not Path(s).exists() for s in (source, against))
    matrix = STATE.matrix() if needs_matrix else None
    with progress.task(f"reading the gates of {source or 'the default pin'}"):
        old = source_inventory(source, matrix, memo=not no_cache)
    if against is None:
        if rejecting:
            _rejecting(old, arch_name, as_json)
            return
        _inventory(old, arch_name, as_json, markdown)
        return
    with progress.task(f"reading the gates of {against}"):
        new = source_inventory(against, matrix, memo=not no_cache)

    result = diff(old, new, arch_name)
    if as_json:
        print_json(result.to_json())
    elif markdown:
        sys.stdout.write(diff_markdown(result))
    else:
        diff_table(result, console())
    predicates = [p for p in result.predicates
                  if arch_name is None or (arch_name in p.old.arches) != (arch_name in p.new.arches)]
    if result.count("changed") or predicates:
        raise Failure(f"{result.count('changed')} gate(s) and {len(predicates)} predicate(s) changed their arch set "
                      f"from {old.version or old.source} to {new.version or new.source}"
                      + (f" for {arch_name}" if arch_name else ""))


def _inventory(inv, arch_name: str | None, as_json: bool, markdown: bool) -> None:
    selected = [g for g in inv.gates if arch_name is None or g.verdicts.get(arch_name) == NEVER]
    title = f"gates that never pass on {arch_name}" if arch_name else "arch gates"
    if as_json:
        doc = inv.to_json()
        doc["gates"] = [g.to_json() for g in selected]
        doc["arch"] = arch_name
        print_json(doc)
    elif markdown:
        sys.stdout.write(inventory_markdown(inv, selected, title))
    else:
        inventory_table(inv, selected, title, console())


def _jit_lists(source: Optional[str], package: str, arch_name: Optional[str], as_json: bool) -> None:
    matrix = STATE.matrix() if source is None or not source.startswith("pypi:") else None
    with progress.task(f"reading the JIT arch lists of {source or package}"):
        tree, lists = package_jit_lists(source, matrix, package)
    major = get_arch(arch_name).cc[0] if arch_name else None
    shown = [j for j in lists if major is None or j.verdict(major) != ADMITS]
    if as_json:
        counts = {}
        for j in lists:
            if major is not None:
                counts[j.verdict(major)] = counts.get(j.verdict(major), 0) + 1
        print_json({"package": package, "source": tree.label, "version": tree.version, "keyword": KEYWORD,
                    "arch": arch_name, "major": major, "counts": counts, "lists": [j.to_json(major) for j in lists]})
    else:
        title = (f"JIT lists that do not admit {arch_name} (major {major})" if major is not None
                 else f"JIT arch lists ({KEYWORD}=)")
        jit_lists_table(tree.label, shown, major, title, console())
    unknown = [j for j in lists if major is not None and j.verdict(major) == UNVERIFIED]
    if unknown:
        j = unknown[0]
        raise Failure(f"{len(unknown)} JIT list(s) of {tree.label} cannot be evaluated for {arch_name}: "
                      f"{j.file}:{j.line} {j.function} {KEYWORD}={j.code} (not a literal list of ints)")


def _rejecting(inv, arch_name: str, as_json: bool) -> None:
    rows = rejecting(inv, arch_name)
    if as_json:
        print_json({"source": inv.source, "version": inv.version, "arch": arch_name,
                    "rows": [r.to_json() for r in rows], "stats": inv.stats})
    else:
        rejecting_table(rows, arch_name, console())
