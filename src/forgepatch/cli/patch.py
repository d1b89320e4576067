"""``forgepatch patch new | test | list``: write, check and list patches."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forgepatch.cli._options import arch_option
from forgepatch.cli._state import STATE, console, print_json

patch_app = typer.Typer(rich_markup_mode=None, help="Write, test and list patches.", no_args_is_help=True)


@patch_app.command("new")
def patch_new(
    patch_id: str = typer.Argument(..., help="The new patch's id (its file is PATCH_ID.toml)."),
    arch: str = arch_option(),
    source: Optional[str] = typer.Option(None, "--from", help="Where --function is read: pypi:VERSION | "
                                         "git:PATH_OR_URL@REV | DIR | a pin name (default: the default pin)."),
    function: Optional[str] = typer.Option(None, "--function", help="The function holding the gate: the site, and "
                                           "the example taken from the real source."),
    module: Optional[str] = typer.Option(None, "--module", help="Package-relative glob picking one file when "
                                         "several define --function."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Scaffold a declarative patch in ./patches (or --patches DIR), with one example taken
    from a real function (--function NAME [--from SRC]); `patch test PATCH_ID` runs it."""
    from forgepatch.patching.scaffold import scaffold

    pid = patch_id
    library = STATE.patches()
    from forgepatch.paths import SHIPPED_MATRIX

    config = STATE.config()
    beside = config.parent / "patches" if config != SHIPPED_MATRIX else Path("patches")
    dest = library.user_dir or STATE.patches_dir or beside
    matrix = STATE.matrix(check_patches=False) if function else None
    made = scaffold(pid, arch, dest, library, source=source, function=function, module=module, matrix=matrix)
    doc = {"written": str(made.path), "id": pid, "arch": arch, "source": made.source,
           "function": made.found.qualname if made.found else None,
           "file": made.found.rel if made.found else None, "line": made.found.line if made.found else None,
           "example_changes": made.changed, "fallback": made.fallback, "notes": made.notes}
    if as_json:
        print_json(doc)
        return
    out = console()
    where = f" from {made.found.qualname} ({made.source} {made.found.rel}:{made.found.line})" if made.found else ""
    out.print(f"wrote {made.path}{where}", markup=False, soft_wrap=True)
    for note in made.notes:
        out.print(f"note: {note}", markup=False, soft_wrap=True)
    out.print(f"next: edit summary (and review the example's `after`), run `forgepatch patch test {pid}`, then add "
              f"\"{pid}\" to [arches.{arch}] patches in matrix.toml and run `forgepatch apply --arch {arch} --check`",
              markup=False, soft_wrap=True)


@patch_app.command("test")
def patch_test(ids: list[str] = typer.Argument(None, help="Patch ids (default: all).")) -> None:
    """Run the patches' before/after examples (Fixit-style)."""
    from forgepatch.patching.patchset import load_patches, patch_files
    from forgepatch.patching.service import run_examples

    pdir = STATE.patches()
    patches = load_patches(pdir, ids or list(patch_files(pdir)))
    con = console()
    failed = 0
    for pid, name, error in run_examples(patches):
        if error:
            failed += 1
            con.print(f"FAIL {pid}: {name}\n{error}", markup=False)
        else:
            con.print(f"ok   {pid}: {name}", markup=False)
    if failed:
        raise typer.Exit(1)


@patch_app.command("list")
def patch_list(as_json: bool = typer.Option(False, "--json")) -> None:
    """List every patch: the shipped ones plus ./patches (or --patches DIR), which add to them
    and override a shipped patch of the same id; ORIGIN says where each comes from."""
    from forgepatch.patching.patchset import load_patches, patch_files

    library = STATE.patches()
    patches = load_patches(library, list(patch_files(library)))
    docs = [{"id": p.id, "origin": p.origin, "summary": p.summary, "arches": list(p.arches),
             "applies_to": p.applies_to, "sites": [s.name for s in p.sites], "examples": len(p.examples),
             "file": str(p.path)} for p in patches]
    if as_json:
        print_json(docs)
        return
    rows = [("ID", "ORIGIN", "ARCHES", "VERSIONS", "SITES", "SUMMARY")] + [
        (d["id"], d["origin"], ",".join(d["arches"]), d["applies_to"] or "all", ",".join(d["sites"]), d["summary"])
        for d in docs]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[5])
    typer.echo(f"patches: {library.describe()}")


def register(app: typer.Typer) -> None:
    app.add_typer(patch_app, name="patch")
