"""``forgepatch apply``, ``forgepatch lint`` and ``forgepatch patch test|list``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forgepatch.cli._state import STATE, console, print_json

_STYLE = {"applied": "green", "already-applied": "cyan", "absorbed-upstream": "blue",
          "not-applicable": "dim", "drift": "bold red"}


def _render(run) -> None:
    """One block per patch, one line per site: status, where, what changed."""
    from rich.markup import escape

    res = run.result
    con = console()
    con.print(f"[bold]forgepatch apply --arch {res.arch}[/]  source {escape(run.source.label)}  "
              f"version {res.version}  patchset {res.patchset_hash}")
    for p in res.patches:
        con.print(f"[bold]{p.patch_id}[/]  [{_STYLE.get(p.status.value, '')}]{p.status.value}[/]")
        for s in p.sites:
            where = f"{s.file}:{s.line}" if s.file else ""
            if s.symbol:
                where += f" {s.symbol}"
            con.print(f"  {s.site:<22} [{_STYLE.get(s.status.value, '')}]{s.status.value:<17}[/] "
                      f"{escape(where)}  [dim]{escape(s.detail)}[/]", soft_wrap=True)
            for c in s.candidates:
                con.print(f"      candidate: {escape(c)}", soft_wrap=True)
    if run.written:
        con.print(f"wrote {run.written} ({len(res.changed)} file(s) changed)")


def _drift_message(res) -> str:
    parts = []
    for p in res.patches:
        for s in p.sites:
            if s.status.value == "drift":
                cands = "; ".join(s.candidates) or "none found"
                parts.append(f"patch {p.patch_id}: site {s.site} not found ({s.detail}); candidates: {cands}")
    return " | ".join(parts)


def register(app: typer.Typer) -> None:
    patch_app = typer.Typer(rich_markup_mode=None, help="Inspect and test patch files.", no_args_is_help=True)
    app.add_typer(patch_app, name="patch")

    @app.command()
    def apply(
        arch: str = typer.Option(..., "--arch", help="Target arch (sm90, sm100, sm103, sm120, sm121)."),
        source: Optional[str] = typer.Option(None, "--source", help="pypi:VERSION | git:PATH_OR_URL@REV | DIR (default: the default pin)."),
        out: Optional[Path] = typer.Option(None, "--out", help="Write the patched package as DIR/sglang/..."),
        in_place: bool = typer.Option(False, "--in-place", help="Patch a local directory source in place."),
        check: bool = typer.Option(False, "--check", help="Exit 0 iff already in the patched state; write nothing."),
        diff: bool = typer.Option(False, "--diff", help="Print a unified diff of the changes."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    ) -> None:
        """Apply the arch's patch series to an SGLang source."""
        from forgepatch.errors import BadInput, Failure
        from forgepatch.patching.service import apply_arch

        if out is not None and in_place:
            raise BadInput("--out and --in-place are mutually exclusive")
        if (check or diff) and (out is not None or in_place):
            raise BadInput("--check/--diff write nothing: drop --out/--in-place")
        matrix = STATE.matrix()
        if out is None and not in_place and not check and not diff:
            out = Path("forgepatch-out") / arch
        run = apply_arch(arch, source, out, matrix, STATE.patches(), in_place=in_place, check=check, diff=diff)
        if as_json:
            print_json(run.to_json())
        elif diff:
            typer.echo(run.diff, nl=False)
        else:
            _render(run)
        if run.result.drift:
            raise Failure(_drift_message(run.result) + " (nothing written)")
        if check and not run.result.in_patched_state:
            raise typer.Exit(1)

    @app.command()
    def lint(
        arch: str = typer.Option(..., "--arch", help="Target arch."),
        source: Optional[str] = typer.Option(None, "--source", help="pypi:VERSION | git:PATH_OR_URL@REV | DIR."),
        as_json: bool = typer.Option(False, "--json", help="Print findings as JSON."),
    ) -> None:
        """After patching (in memory), list gates of the same feature that still reject the arch."""
        from forgepatch.errors import Failure
        from forgepatch.patching.service import lint_arch

        result, src, findings = lint_arch(arch, source, STATE.matrix(), STATE.patches())
        if as_json:
            print_json({"arch": arch, "source": src.label, "version": result.version,
                        "findings": [f.to_json() for f in findings]})
        else:
            con = console()
            for f in findings:
                con.print(f"[red]{f}[/]")
            con.print(f"{len(findings)} gate(s) still reject {arch} ({src.label})")
        if result.drift:
            raise Failure(_drift_message(result))
        if findings:
            raise typer.Exit(1)

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
        """List the patches in the patch directory."""
        from forgepatch.patching.patchset import load_patches, patch_files

        pdir = STATE.patches()
        patches = load_patches(pdir, list(patch_files(pdir)))
        docs = [{"id": p.id, "summary": p.summary, "arches": list(p.arches), "applies_to": p.applies_to,
                 "sites": [s.name for s in p.sites], "examples": len(p.examples), "file": str(p.path)} for p in patches]
        if as_json:
            print_json(docs)
            return
        for d in docs:
            typer.echo(f"{d['id']}  [{', '.join(d['arches'])}]  {d['applies_to'] or 'all versions'}  sites: {', '.join(d['sites'])}  — {d['summary']}")
