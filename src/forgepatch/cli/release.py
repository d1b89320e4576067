"""``forgepatch release``, ``forgepatch verify TAG`` and ``forgepatch status``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from forgepatch.cli._options import arch_option, image_option, json_option, ledger_option, markdown_option, pin_option, repo_option
from forgepatch.cli._state import STATE, console, print_json
from forgepatch.errors import BadInput, Failure
from forgepatch.paths import SHIPPED_MATRIX
from forgepatch.release import evidence
from forgepatch.release.check import Inputs
from forgepatch.release.ledger import Ledger
from forgepatch.release.publish import release
from forgepatch.release.status import checked
from forgepatch.release.verify import verify

DEFAULT_RESULTS = Path("smoke-results.json")
_STYLE = {"released": "green", "recorded": "green", "unchanged": "cyan", "would-release": "yellow",
          "refused": "bold red", "skipped": "dim"}


def _ledger(matrix, explicit: Path | None):
    """``--ledger``, else ``[release] ledger`` relative to matrix.toml's directory (the
    working directory when the shipped default matrix is in use)."""
    if explicit is not None:
        return Ledger(explicit)
    path = Path(matrix.release.ledger)
    if not path.is_absolute():
        cfg = Path(matrix.path).resolve() if matrix.path else None
        base = cfg.parent if cfg and cfg != SHIPPED_MATRIX.resolve() else Path.cwd()
        path = base / path
    return Ledger(path)


def _release(
    arch: Optional[str] = arch_option(None, help="Only this arch."),
    pin: Optional[str] = pin_option("Only this pin."),
    repo: Path = repo_option(Path("."), help="The fork's git repository (holds forgepatch/<arch>/<pin>)."),
    results: Optional[List[Path]] = typer.Option(None, "--results", metavar="FILE", help="Smoke results (`forgepatch smoke --json` output); repeatable. Default ./smoke-results.json."),
    ledger: Optional[Path] = ledger_option(),
    image: Optional[str] = image_option("Release this image (default: the newest one labelled with the arch and pin)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be released; write nothing."),
    as_json: bool = json_option("One JSON document on stdout."),
) -> None:
    """Tag validated combinations: annotated git tag, `validated` image tag, ledger entry."""
    matrix = STATE.matrix()
    if arch is not None:
        matrix.arch(arch)
    if pin is not None:
        matrix.pin(pin)
    book = _ledger(matrix, ledger)
    book.read(required=False)  # a corrupt ledger is bad input before anything else runs
    if not results:
        if not DEFAULT_RESULTS.is_file():
            raise BadInput(f"--results: give the smoke results file(s) (`forgepatch smoke --json > {DEFAULT_RESULTS}`); ./{DEFAULT_RESULTS} does not exist")
        results = [DEFAULT_RESULTS]
    inputs = Inputs(matrix, STATE.patches(), evidence.open_repo(repo), evidence.load_results(list(results)),
                    evidence.docker_api(), image)
    outcomes = release(inputs, book, arch, pin, dry_run)
    if as_json:
        print_json({"dry_run": dry_run, "ledger": str(book.path), "repo": str(inputs.repo.root),
                    "results": [{"path": str(f.path), "sha256": f.sha256} for f in inputs.results],
                    "combinations": [o.to_json() for o in outcomes]})
    else:
        _render(outcomes, book.path, dry_run)
    refused = [o for o in outcomes if o.status == "refused"]
    if refused:
        first = refused[0]
        more = sum(len(o.reasons) for o in refused) - 1
        raise Failure(f"release refused for {first.arch}/{first.pin}: {first.reasons[0].message}"
                      + (f" (+{more} more reason(s){', ' + str(len(refused)) + ' combinations' if len(refused) > 1 else ''})" if more else ""))
    if all(o.status == "skipped" for o in outcomes):
        raise Failure("nothing to release: the results hold no smoke job for any selected arch/pin ("
                      + ", ".join(str(f.path) for f in inputs.results) + ")")


def _render(outcomes, ledger_path: Path, dry_run: bool) -> None:
    from rich.markup import escape

    out = console()
    for o in outcomes:
        style = _STYLE.get(o.status, "")
        head = f"[{style}]{o.status:<13}[/] {o.arch:<6} {escape(o.pin):<10} {escape(o.tag)}"
        comb = o.combination
        if comb is not None and o.status != "refused":
            head += f"  image {comb.image.id[:19]}  profiles {', '.join(comb.profiles)}"
        out.print(head, soft_wrap=True)
        if o.status == "refused":
            for r in o.reasons:
                out.print(f"    {escape(r.message)}", soft_wrap=True)
        elif o.promotion is not None and o.status in ("released", "recorded", "would-release"):
            verb = "would tag" if o.status == "would-release" else "tagged"
            out.print(f"    registry: {verb} {escape(o.promotion.digest_ref)} as {escape(', '.join(o.promotion.tags))}",
                      soft_wrap=True)
    if not dry_run and any(o.status in ("released", "recorded") for o in outcomes):
        out.print(f"[dim]ledger: {escape(str(ledger_path))}[/]")


def _verify(
    tag: str = typer.Argument(..., help="A release tag, e.g. forgepatch/v0.5.23/sm120."),
    repo: Path = repo_option(Path("."), help="The fork's git repository."),
    ledger: Optional[Path] = ledger_option(),
    as_json: bool = json_option("One JSON document on stdout."),
) -> None:
    """Re-check a release: ledger, tag, branch commit, image and results must agree."""
    from rich.markup import escape

    matrix = STATE.matrix(check_patches=False)
    book = _ledger(matrix, ledger)
    report = verify(evidence.open_repo(repo), book, tag, evidence.docker_api, matrix)
    if as_json:
        print_json(report.to_json())
    else:
        out = console()
        for c in report.checks:
            mark = "[green]ok[/]      " if c.ok else "[bold red]MISMATCH[/]"
            out.print(f"{mark} {c.name:<12} {escape(c.detail)}", soft_wrap=True)
    bad = report.mismatch
    if bad:
        raise Failure(f"verify {tag}: {bad.name}: {bad.detail}")


def _status(
    ledger: Optional[Path] = ledger_option(),
    repo: Optional[Path] = repo_option(None, help="The fork's git repository: each entry is checked against its release tag (default: . when it is a git repository)."),
    markdown: bool = markdown_option("Print the table as Markdown."),
    as_json: bool = json_option("One JSON document on stdout."),
) -> None:
    """The compatibility table of released (validated) combinations: pin x arch x profiles.
    The ledger's chain is verified first; a broken one is marked and exits 1."""
    import sys

    matrix = STATE.matrix(check_patches=False)
    book = _ledger(matrix, ledger)
    entries = book.read(required=False)  # before the first release: an empty table, exit 0
    fork = None
    if repo is not None:
        fork = evidence.open_repo(repo)
    else:
        try:
            fork = evidence.open_repo(Path("."))
        except BadInput:
            fork = None  # not in a fork checkout: the hash chain only (said in the output)
    tab, chain = checked(entries, matrix, fork)
    broken = f"LEDGER CHAIN BROKEN: {chain.problem}" if not chain.ok else ""
    if not book.exists():
        chain.notes.append(f"no releases yet ({book.path} does not exist)")
    if as_json:
        print_json({"ledger": str(book.path), "chain": {**chain.to_json(), "notes": chain.notes}, **tab.to_json()})
    elif markdown:
        head = f"> **{broken}** — the table below is not trustworthy\n\n" if broken else ""
        sys.stdout.write(head + tab.to_markdown())
    else:
        from rich.markup import escape
        from rich.table import Table

        title = "validated combinations" + (" [bold red](UNVERIFIED: ledger chain broken)[/]" if broken else "")
        caption = escape(str(book.path)) + "\n" + escape(broken or "chain: " + chain.summary() + "".join(f"; {n}" for n in chain.notes))
        t = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
        t.add_column("pin")
        for arch in tab.arches:
            t.add_column(arch)
        for pin in tab.pins:
            row = []
            for arch in tab.arches:
                cell = tab.cells.get((pin, arch))
                style = "red" if broken else "green"
                row.append("[dim]-[/]" if cell is None else f"[{style}]{escape(', '.join(cell.profiles))}[/]\n[dim]{escape(cell.tag)}[/]")
            t.add_row(escape(pin), *row)
        console().print(t)
    if broken:
        raise Failure(f"status: {book.path}: ledger chain broken: {chain.problem} (see `forgepatch verify`)")


def register(app: typer.Typer) -> None:
    app.command("release")(_release)
    app.command("verify")(_verify)
    app.command("status")(_status)
