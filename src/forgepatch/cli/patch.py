"""``forgepatch patch new | test | list``: write, check and list patches."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forgepatch.cli._options import arch_list_option, arch_option, json_option
from forgepatch.cli._state import STATE, console, print_json
from forgepatch.errors import BadInput
from forgepatch.patching.patchset import load_patches, patch_files
from forgepatch.patching.scaffold import scaffold
from forgepatch.patching.service import accept_examples, example_runs, lock_patches
from forgepatch.paths import SHIPPED_MATRIX

patch_app = typer.Typer(rich_markup_mode=None, help="Write, test and list patches.", no_args_is_help=True)


def patch_new(
    patch_id: str = typer.Argument(..., help="The new patch's id (its file is PATCH_ID.toml)."),
    arch: str = arch_option(),
    source: Optional[str] = typer.Option(None, "--from", help="Where --function is read: pypi:VERSION | "
                                         "git:PATH_OR_URL@REV | DIR | a pin name (default: the default pin)."),
    function: Optional[str] = typer.Option(None, "--function", help="The function holding the gate: the site, and "
                                           "the example taken from the real source."),
    module: Optional[str] = typer.Option(None, "--module", help="Package-relative glob picking one file when "
                                         "several define --function."),
    as_json: bool = json_option("Print what was written as JSON."),
) -> None:
    """Scaffold a declarative patch in ./patches (or --patches DIR), with one example taken
    from a real function (--function NAME [--from SRC]); `patch test PATCH_ID` runs it."""
    pid = patch_id
    library = STATE.patches()

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
              f"\"{pid}\" to [arches.{arch}] patches in matrix.toml, read `forgepatch apply --arch {arch} --diff` and "
              f"accept its edits with `forgepatch apply --arch {arch} --accept` (writes patches/{pid}.lock)",
              markup=False, soft_wrap=True)


def patch_test(
    ids: list[str] = typer.Argument(None, help="Patch ids (default: all)."),
    accept: bool = typer.Option(False, "--accept", help="Write each failing example's current output as its "
                                "`after` (in the patch's .toml) and show the diff."),
    as_json: bool = json_option("Print one row per example and the counts as JSON."),
) -> None:
    """Run the patches' before/after examples (Fixit-style); ends with `N passed, N failed`."""
    pdir = STATE.patches()
    patches = load_patches(pdir, ids or list(patch_files(pdir)))
    runs = example_runs(patches)
    accepted = accept_examples(runs) if accept else []
    if accepted:  # run again from the rewritten files: an accepted `after` must pass (idempotence too)
        runs = example_runs(load_patches(pdir, ids or list(patch_files(pdir))))
    failed = [r for r in runs if r.error is not None]
    passed = len(runs) - len(failed)
    if as_json:
        print_json({"examples": [r.to_json() for r in runs], "passed": passed, "failed": len(failed),
                    "accepted": [{"patch": r.patch.id, "example": r.name, "diff": d} for r, d in accepted]})
    else:
        con = console()
        for r, diff in accepted:
            con.print(f"accepted {r.patch.id}: {r.name}: new `after` written to {r.patch.path}\n{diff}", markup=False)
        for r in runs:
            if r.error:
                con.print(f"FAIL {r.patch.id}: {r.name}\n{r.error}", markup=False)
            else:
                con.print(f"ok   {r.patch.id}: {r.name}", markup=False)
        con.print(f"{passed} passed, {len(failed)} failed" + (f" ({len(accepted)} accepted)" if accepted else ""),
                  markup=False)
    if failed:
        raise typer.Exit(1)


def patch_lock(
    ids: list[str] = typer.Argument(None, help="Patch ids (default: every patch of each arch's series)."),
    arches: list[str] = arch_list_option("Arch whose series runs (repeatable)."),
    sources: list[str] = typer.Option(None, "--source", help="pypi:VERSION | git:PATH_OR_URL@REV | DIR | a pin "
                                      "name (repeatable; default: the default pin)."),
    as_json: bool = json_option("Print one row per arch, source and patch as JSON."),
) -> None:
    """Write or refresh the patches' edit locks (patches/ID.lock): run each arch's series on
    each source and record what each patch changes there as reviewed. Read the diff first
    (`forgepatch apply --diff`); a pin whose series fails for another reason records nothing."""
    if not arches:
        raise BadInput("--arch: give at least one arch whose series to lock")
    matrix = STATE.matrix()
    rows = lock_patches(list(arches), list(sources or [None]), matrix, STATE.patches(), ids or None)
    if as_json:
        print_json([r.to_json() for r in rows])
    else:
        for r in rows:
            what = (f"not recorded: {r.detail}" if r.detail else f"wrote {r.lock}" if r.lock
                    else "lock unchanged")
            typer.echo(f"{r.patch}  {r.arch}@{r.version}  {r.source}  {r.status}  edit set {r.edit_set or '-'}  {what}")
    failed = [r for r in rows if r.detail]
    if failed:
        raise typer.Exit(1)


def patch_list(as_json: bool = json_option()) -> None:
    """List every patch: the shipped ones plus ./patches (or --patches DIR), which add to them
    and override a shipped patch of the same id; ORIGIN says where each comes from."""
    library = STATE.patches()
    patches = load_patches(library, list(patch_files(library)))
    docs = [{"id": p.id, "origin": p.origin, "summary": p.summary, "arches": list(p.arches),
             "applies_to": p.applies_to, "sites": [s.name for s in p.sites], "examples": len(p.examples),
             "file": str(p.path), "package": p.package,
             "kind": getattr(p.codemod, "KIND", None) or ("custom" if str(p.path).endswith(".py") else "arch-gate")}
            for p in patches]
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
    patch_app.command("new")(patch_new)
    patch_app.command("test")(patch_test)
    patch_app.command("lock")(patch_lock)
    patch_app.command("list")(patch_list)
    app.add_typer(patch_app, name="patch")
