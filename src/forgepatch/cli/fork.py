"""``forgepatch pin add/list``, ``fork``, ``drift`` and ``init``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forgepatch.cli._options import (
    arch_option, canonical_arch, image_option, json_option, markdown_option, pin_option, repo_option,
)
from forgepatch.cli._state import STATE, console, print_json
from forgepatch.errors import BadInput, Failure
from forgepatch.fork.blobcache import BlobCache
from forgepatch.fork.drift import render_markdown, render_table, scan
from forgepatch.fork.follow import follow
from forgepatch.fork.fork import fork
from forgepatch.fork.init import init
from forgepatch.fork.pins import add_pin, editable_config, list_pins, pin_base as pin, update_pin
from forgepatch.infra.atomic import write_atomic
from forgepatch.paths import check_path

pin_app = typer.Typer(rich_markup_mode=None, help="Record SGLang pins (PyPI releases or git revisions) in matrix.toml.", no_args_is_help=True)


def pin_add(
    name: str = typer.Argument(..., help="Pin name: a letter or digit, then letters, digits, '.', '_' or '-' (e.g. v0.5.23, nightly-1129)."),
    rev: Optional[str] = typer.Option(None, "--rev", help="A git revision of --repo (SHA, tag, branch); recorded as its full commit SHA with the package version found there."),
    pypi: Optional[str] = typer.Option(None, "--pypi", help="An SGLang release on PyPI (e.g. 0.5.23); the wheel is downloaded once and recorded with its sha256."),
    repo: Optional[Path] = repo_option(None, help="With --rev: the git checkout it is resolved in (default: the current directory); recorded as the pin's repo."),
    as_json: bool = json_option("Print the pin as JSON."),
) -> None:
    """Add a pin to ./matrix.toml (or --config FILE), resolved so builds are reproducible.

    Give exactly one of --rev or --pypi. The file is edited in place (comments kept) and never
    the matrix shipped with forgepatch; an existing pin name is refused.
    """
    config = editable_config(STATE.config_path)
    row = add_pin(config, name, rev=rev, pypi=pypi, repo=repo,
                  record_repo=str(repo) if repo is not None and rev is not None else None)  # recorded: apply --pin finds it
    if as_json:
        print_json(row.to_json())
    else:
        console().print(f"pinned [bold]{row.name}[/] = {row.kind} {row.source} -> {row.resolved} in {config}")


def pin_update(
    name: str = typer.Argument(..., help="The pin to re-resolve."),
    as_json: bool = json_option("Print the pin as JSON."),
) -> None:
    """Re-resolve a pin in ./matrix.toml (or --config FILE): a PyPI pin records the sha256 of
    every wheel of its release again, a git pin its revision and version."""
    config = editable_config(STATE.config_path)
    row = update_pin(config, name)
    if as_json:
        print_json(row.to_json())
    else:
        console().print(f"updated [bold]{row.name}[/] = {row.kind} {row.source} -> {row.resolved} in {config}")


def pin_follow(
    version: Optional[str] = typer.Option(None, "--version", help="Follow this release instead of the newest on PyPI."),
    report: Optional[Path] = typer.Option(None, "--report", help="Write the report (Markdown, a pull request's body) here."),
    as_json: bool = json_option("Print the report as JSON."),
) -> None:
    """Add the newest SGLang release on PyPI (`pip index versions sglang`) as a pin unless one
    names it, check every arch's patches on it, and report (exit 1 when a patch drifts)."""
    config = editable_config(STATE.config_path)
    if report is not None:
        check_path(report, "--report", "new-file")
    rep = follow(config, STATE.patches(), version)
    if report is not None:
        write_atomic(report, rep.markdown())
    if as_json:
        print_json(rep.to_json())
    else:
        console().print(rep.markdown(), markup=False)
    if rep.drift:
        bad = [c.arch for c in rep.checks if c.failed]
        raise Failure(f"pin follow: {rep.pin} (sglang {rep.version}): patches drift on {', '.join(bad)}")


def _arch_argument(ctx, value):
    return value if value is None or ctx.resilient_parsing else canonical_arch(value)


def pin_base(
    arch: str = typer.Argument(..., help="The arch whose base image to pin (arches.<arch>.base_image); sm_120, 12.0 read as sm120.",
                               callback=_arch_argument),
    image: Optional[str] = image_option("Pin this REPO:TAG instead of the configured base."),
    as_json: bool = json_option("Print the result as JSON."),
) -> None:
    """Resolve the arch's base image tag to its registry digest and record repo@sha256:... in
    ./matrix.toml (or --config FILE), comments kept: the same pin and patches then build on
    the same base bytes tomorrow."""
    config = editable_config(STATE.config_path)
    row = pin(config, arch, image)
    if as_json:
        print_json(row.to_json())
    elif row.changed:
        console().print(f"pinned arches.{row.arch}.base_image = {row.digest} (was {row.was}) in {config}", markup=False)
    else:
        console().print(f"arches.{row.arch}.base_image is pinned already: {row.digest}", markup=False)


def pin_list(as_json: bool = json_option("Print the pins as JSON.")) -> None:
    """List the pins of matrix.toml with what they resolve to."""
    rows = list_pins(STATE.matrix(check_patches=False))
    if as_json:
        print_json([r.to_json() for r in rows])
        return
    from rich.table import Table

    table = Table()
    for col in ("pin", "kind", "source", "resolved", "version"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name + (" (default)" if r.default else ""), r.kind, r.source, r.resolved or "[red]unresolved[/]", r.version or "?")
    console().print(table)


def fork_cmd(
    arch: str = arch_option(),
    repo: Path = repo_option(..., help="Git checkout of the SGLang fork."),
    rev: Optional[str] = typer.Option(None, "--rev", help="Upstream revision the branch starts at."),
    pin: Optional[str] = pin_option("Pin name for the branch (default: a matrix pin with that SHA, else the short SHA)."),
    as_json: bool = json_option("Print the result as JSON."),
) -> None:
    """Create or refresh branch forgepatch/ARCH/PIN: REV plus one commit per applied patch."""
    # no blob cache here: fork needs the patched text of every file, not only statuses
    result = fork(repo, arch, rev, pin, STATE.matrix(), STATE.patches())
    if as_json:
        print_json(result.to_json())
    else:
        _render_fork(result)
    if result.drift:
        bad = [r for r in [result, *result.packages] if r.status == "drift"]
        where = ", ".join(f"{r.package} {r.upstream[:12]}" for r in bad)
        raise Failure(f"drift on {where}: branch {result.branch} not moved"
                      + (" in any repository" if result.packages else ""))


def _render_fork(result) -> None:
    for one in [result, *result.packages]:
        if result.packages:
            console().print(f"{one.package} ({one.repo}):", markup=False)
        _render_one(one)


def _render_one(result) -> None:
    out = console()
    if result.status == "held":
        out.print(f"  held: {result.branch} not moved (another package drifted)", markup=False)
        return
    if result.status == "drift":
        err = console(stderr=True)
        for p in result.apply.patches:
            for s in p.sites:
                if s.status.value == "drift":
                    cands = ", ".join(s.candidates[:5]) or "none"
                    err.print(f"[red]drift[/] {p.patch_id} site {s.site}: {s.detail or 'not found'}; candidates: {cands}")
                elif s.status.value in ("incomplete", "unverified", "wrong"):  # the series' self-check
                    for loc in s.locations:
                        if loc.status.failed:
                            err.print(f"{loc.status.value} {p.patch_id}: {loc}", style="red", markup=False, soft_wrap=True)
                elif s.status.value == "review":  # the edit set is not one the patch's lock accepts
                    err.print(f"review {p.patch_id}: {s.detail}", style="magenta", markup=False, soft_wrap=True)
                    for loc in s.locations:
                        err.print(f"review {p.patch_id}: {loc}", style="magenta", markup=False, soft_wrap=True)
        return
    for p in result.apply.patches:
        out.print(f"  {p.patch_id}: {p.status.value}")
    for c in result.commits:
        out.print(f"  {c.sha[:12]} {c.patch} ({len(c.files)} file{'s' if len(c.files) != 1 else ''})")
    line = f"{result.status}: {result.branch} -> {result.head[:12] if result.head else '?'} (upstream {result.upstream[:12]})"
    if result.previous_ref:
        line += f"; previous head kept as {result.previous_ref}"
    out.print(line)


def drift_cmd(
    arch: str = arch_option(),
    repo: Path = repo_option(..., help="Git repository holding the revisions."),
    revs: Optional[str] = typer.Option(None, "--revs", help="Comma-separated revisions, reported in this order."),
    since: Optional[str] = typer.Option(None, "--since", help="Walk first-parent history from REV ..."),
    until: Optional[str] = typer.Option(None, "--until", help="... to REV (default HEAD)."),
    every: int = typer.Option(1, "--every", help="With --since: every Nth commit (the newest is always included)."),
    as_json: bool = json_option("Print the report as JSON."),
    markdown: bool = markdown_option("Print the report as Markdown (for a PR comment)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the drift cache."),
    gates: bool = typer.Option(False, "--gates", help="Also report arch gates of the patched features whose arch set changed between revisions (exit 1)."),
    package: str = typer.Option("sglang", "--package", help="Whose part of the series runs: sglang, or another package of matrix.toml (e.g. flashinfer) with --repo its checkout."),
) -> None:
    """Health of every patch of ARCH at many revisions, read from git objects."""
    if as_json and markdown:
        raise BadInput("drift: --json and --markdown are exclusive")
    rev_list = [r.strip() for r in revs.split(",") if r.strip()] if revs else None
    if revs is not None and not rev_list:
        raise BadInput("--revs: no revisions given")

    matrix = STATE.matrix()
    if no_cache:
        report = scan(repo, arch, matrix, STATE.patches(), rev_list, since, every, until, cache=None, gates=gates,
                      package=package)
    else:
        with BlobCache() as cache:
            report = scan(repo, arch, matrix, STATE.patches(), rev_list, since, every, until, cache=cache, gates=gates,
                          package=package)
    if as_json:
        print_json(report.to_json())
    elif markdown:
        import sys

        sys.stdout.write(render_markdown(report))
    else:
        render_table(report, console())
    if report.drift:
        raise Failure(report.summary())
    if report.gates:
        steps = ", ".join(f"{s.old} -> {s.new}" for s in report.gates)
        raise Failure(f"arch gates of the patched features changed: {steps}")


def init_cmd(
    directory: Path = typer.Option(Path("."), "--dir", help="The fork checkout to scaffold."),
    as_json: bool = json_option("Print the files written as JSON."),
) -> None:
    """Scaffold matrix.toml, patches/ and dockerfiles/ (never overwrites a file)."""
    written = init(directory)
    if as_json:
        print_json({"written": [str(p) for p in written]})
    else:
        for p in written:
            console().print(f"wrote {p}")


def register(app: typer.Typer) -> None:
    pin_app.command("add")(pin_add)
    pin_app.command("update")(pin_update)
    pin_app.command("follow")(pin_follow)
    pin_app.command("base")(pin_base)
    pin_app.command("list")(pin_list)
    app.add_typer(pin_app, name="pin")
    app.command("fork")(fork_cmd)
    app.command("drift")(drift_cmd)
    app.command("init")(init_cmd)
