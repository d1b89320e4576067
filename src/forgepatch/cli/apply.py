"""``forgepatch apply``, ``forgepatch lint`` and ``forgepatch patch test|list``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from forgepatch.cli._options import arch_option, json_option, pin_option
from forgepatch.cli._state import STATE, console, print_json
from forgepatch.errors import BadInput, Failure
from forgepatch.patching.editset import Edit
from forgepatch.patching.model import INCOMPLETE_HINT, SELF_CHECK_SITE, Status
from forgepatch.patching.service import apply_arch, apply_many, lint_arch, not_run, reverse_arch, series_sources

_STYLE = {"applied": "green", "already-applied": "cyan", "absorbed-upstream": "blue", "ignored": "yellow",
          "not-applicable": "dim", "incomplete": "bold red", "drift": "bold red",
          "review": "bold magenta", "unverified": "bold red", "wrong": "bold red"}
# When nothing is written (--check, --diff, or a failed run) no edit "was applied": say what
# the run would do instead. The word "applied" appears only when files were written.
_UNWRITTEN = {"applied": "would apply", "already-applied": "already patched"}
_WOULD = (("added ", "would add "), ("inserted ", "would insert "), ("defined ", "would define "),
          ("imported ", "would import "))


def _label(status: str, written: bool) -> str:
    return status if written else _UNWRITTEN.get(status, status)


def _detail(detail: str, written: bool) -> str:
    if written:
        return detail
    for done, would in _WOULD:
        if detail.startswith(done):
            return would + detail[len(done):]
    return detail


def _render(run, stderr: bool = False) -> None:
    """One block per patch, one line per place a site touched or judged."""
    from rich.markup import escape

    res = run.result
    written = run.written is not None
    con = console(stderr=stderr)
    con.print(f"[bold]forgepatch apply --arch {res.arch}[/]  source {escape(run.source.label)}  "
              f"version {res.version}  patchset {res.patchset_hash}")
    for p in res.patches:
        con.print(f"[bold]{p.patch_id}[/]  [{_STYLE.get(p.status.value, '')}]{_label(p.status.value, written)}[/]")
        for s in p.sites:
            rows = s.locations or [None]
            for i, loc in enumerate(rows):
                status = (loc.status if loc else s.status).value
                if loc is None:
                    where, detail = "", s.detail
                else:
                    where = f"{loc.file}:{loc.line}" if loc.line else f"{loc.file}"
                    if loc.symbol and loc.symbol != "<module>":
                        where += f" {loc.symbol}"
                    elif loc.symbol or (loc.file or "").endswith(".py"):
                        where += " (module level)"  # (a text patch's or an added file's place has no symbol)
                    detail = (f"`{loc.gate}` " if loc.gate else "") + loc.detail
                name = s.site if i == 0 else ""
                con.print(f"  {name:<22} [{_STYLE.get(status, '')}]{_label(status, written):<17}[/] "
                          f"{escape(where)}  [dim]{escape(_detail(detail, written))}[/]", soft_wrap=True)
            for c in s.candidates:
                con.print(f"      candidate: {escape(c)}", soft_wrap=True)
    con.print(escape(_self_check_line(res)), soft_wrap=True)


def _written(run, src: str, in_place: bool) -> None:
    """What changed and where it is, then what to do next (stdout; only after a write).
    ``src`` is the source flag the user gave (`` --source X`` / `` --pin P`` / empty)."""
    import shlex

    from rich.markup import escape

    res = run.result
    con = console()
    n = len(res.changed)
    files = run.extra.get("files_written")
    shown = _shown(run.written)
    where = escape(str(shown))
    if in_place:
        con.print(f"patched {where} in place: {n} file(s) changed")
    else:
        con.print(f"wrote {where}: a complete copy of the package ({files} files), {n} of them changed:")
    for rel in sorted(res.changed):
        con.print(f"  {escape(str(shown / rel))}", soft_wrap=True)
    arch = res.arch
    if in_place:  # the source is patched now: a diff of it against itself would be empty
        steps = [("check it later", f"forgepatch apply --arch {arch}{src} --check")]
    else:
        steps = [("see the changes as a diff", f"forgepatch apply --arch {arch}{src} --diff")]
    if not in_place:
        steps.append(("use it", f"PYTHONPATH={shlex.quote(str(shown.parent))} python -c 'import sglang'"))
        steps.append(("patch your checkout instead", f"forgepatch apply --arch {arch} --source PATH/TO/sglang --in-place"))
    steps += [("commit it to a fork branch", f"forgepatch fork --arch {arch} --repo PATH/TO/sglang --rev REV"),
              ("build an image", f"forgepatch build --arch {arch}{src}")]
    con.print("next:")
    for what, cmd in steps:
        con.print(f"  {what:<28} {escape(cmd)}", soft_wrap=True)


def _accepted(run) -> None:
    """What ``--accept`` recorded (stderr: it precedes the run's own report)."""
    from rich.markup import escape

    con = console(stderr=True)
    accepted = run.extra.get("accepted", [])
    if not accepted:
        con.print("accept: no lock changed" + (" (the series fails for another reason: nothing accepted)"
                                               if run.result.drift else ""))
    for row in accepted:
        con.print(f"accepted into {escape(row['lock'])} ({row['patch']} on {run.result.arch}@{run.result.version}):")
        for doc in row["edits"]:
            e = Edit.from_doc(doc)
            con.print(f"  {escape(e.file)} {escape(e.function)}: {escape(e.describe())}", soft_wrap=True)


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory when it is under it (shorter to read)."""
    try:
        return path.relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _self_check_line(res) -> str:
    """What the series' own check found, in one line."""
    if not res.verified:
        return "self-check: not run"

    found = [loc for p in res.patches for s in p.sites if s.site == SELF_CHECK_SITE for loc in s.locations]
    bad = [loc for loc in found if loc.status in (Status.INCOMPLETE, Status.UNVERIFIED, Status.WRONG)]
    ignored = [loc for loc in found if loc.status is Status.IGNORED]
    if bad:
        worst = Status.worst([loc.status for loc in bad]).value.upper()
        return f"self-check: {worst}, {len(bad)} finding(s) above; nothing written"
    edits = sum(1 for p in res.patches for s in p.sites if s.site != SELF_CHECK_SITE
                for loc in s.locations if loc.status is Status.APPLIED)
    text = (f"self-check: {edits} edit(s) in {len(res.changed)} file(s), each one reported; " if edits
            else "self-check: no edit needed; ") + f"no gate of the feature still rejects {res.arch}"
    checks = sum(len(getattr(p, "checks", ())) for p in res.patches)
    if checks:
        text += f"; {checks} gate(s) evaluated on every arch, no other arch changed"
    if ignored:
        text += f" ({len(ignored)} left as declared exceptions, see above)"
    for p in res.patches:
        for note in getattr(p, "scope", ()):
            text += f"\n  note: {p.patch_id}: {note}"
    return text


def _failure_message(res) -> str:
    """One line: every drifted site (with candidates) and every incomplete gate."""
    parts = []
    for p in res.patches:
        for s in p.sites:
            if s.status is Status.DRIFT and not any(loc.status is Status.DRIFT for loc in s.locations):
                cands = "; ".join(s.candidates) or "none found"
                parts.append(f"patch {p.patch_id}: site {s.site} not found ({s.detail}); candidates: {cands}")
            for loc in s.locations:
                if loc.status is Status.DRIFT:
                    parts.append(f"patch {p.patch_id}: site {s.site} drifted: {loc}")
                elif loc.status is Status.REVIEW:
                    parts.append(f"patch {p.patch_id}: site {s.site} needs review: {loc.file}: {loc.detail}")
                elif loc.status is Status.INCOMPLETE:
                    gate = f"`{loc.gate}` " if loc.gate else ""
                    detail = loc.detail.replace(f"; {INCOMPLETE_HINT}", "")
                    parts.append(f"patch {p.patch_id} incomplete: {loc.file}:{loc.line}: {loc.symbol}: {gate}{detail}")
                elif loc.status in (Status.UNVERIFIED, Status.WRONG):
                    gate = f"`{loc.gate}` " if loc.gate else ""
                    parts.append(f"{loc.status.value} {loc.file}:{loc.line}: {loc.symbol}: {gate}{loc.detail} "
                                 f"(patch {p.patch_id})")
                elif loc.status is Status.REVIEW:
                    where = f"{loc.file}:{loc.line}" if loc.line else f"{loc.file}"
                    parts.append(f"patch {p.patch_id} review: {where}: {loc.symbol}: {loc.detail}")
            if s.status is Status.REVIEW:
                parts.append(f"patch {p.patch_id} review: {s.detail}")
    if res.incomplete:
        parts.append(INCOMPLETE_HINT)
    return " | ".join(parts)


def _render_many(runs, arch: str, as_json: bool, diff: bool, check: bool, missing: list[str]) -> None:
    """A multi-package run: one block per package (its own patchset), then one verdict."""
    drift = [r for r in runs if r.result.drift]
    if as_json:
        worst = Status.worst([p.status for r in runs for p in r.result.patches])
        status = worst.value if worst.failed else ("changed" if any(r.result.changed for r in runs) else "unchanged")
        print_json({"arch": arch, "status": status, "packages": [r.to_json() for r in runs], "not_run": missing})
    else:
        for r in runs:
            _render(r, stderr=diff)
        if diff:
            typer.echo(b"".join(r.diff for r in runs), nl=False)
        con = console(stderr=diff)
        for pkg in missing:
            con.print(f"note: the {arch} series also patches {pkg}: not run (no --source for it, no pin of it)")
        for r in runs:
            if r.written:
                con.print(f"wrote {_shown(r.written)}: {len(r.result.changed)} file(s) changed ({r.source.package_name})")
        if check and not drift:
            n = sum(len(r.result.changed) for r in runs)
            con.print(f"would change {n} file(s)" if n else "already patched")
    if drift:
        raise Failure(" | ".join(f"{r.source.package_name}: {_failure_message(r.result)}" for r in drift)
                      + " (nothing written, in any package)")
    if check and any(not r.result.in_patched_state for r in runs):
        raise typer.Exit(1)


def _reverse(arch, source, pin, out, in_place, force, accept, only, check, diff, as_json) -> None:
    """``apply --reverse``: parse-level checks, the service, the rendering."""
    from rich.markup import escape

    for flag, given in (("--out", out is not None), ("--in-place", in_place), ("--force", force),
                        ("--accept", accept), ("--patch", bool(only)), ("--pin", pin is not None)):
        if given:
            raise BadInput(f"--reverse: {flag} does not apply (it undoes the newest --in-place apply on --source DIR)")
    if not source:
        raise BadInput("--reverse needs --source DIR: the tree an --in-place apply patched")
    if check and diff:
        raise BadInput("--reverse: --check or --diff, not both")
    run = reverse_arch(arch, list(source), STATE.matrix(), check=check, diff=diff)
    if as_json:
        print_json(run.to_json())
    else:
        con = console(stderr=diff)
        for rev in run.reverses:
            meta = rev.record.meta
            verb = ("reversed" if run.written else "would reverse")
            con.print(f"{verb} the apply --in-place of {meta.get('arch')} ({meta.get('time')}) on "
                      f"{escape(str(_shown(rev.package)))}: {len(rev.restore)} file(s) "
                      f"{'restored' if run.written else 'to restore'}, {len(rev.remove)} "
                      f"{'removed' if run.written else 'to remove'}", soft_wrap=True)
            for rel in sorted(rev.restore):
                con.print(f"  {'restored' if run.written else 'restore'} {escape(rel)}", soft_wrap=True)
            for rel in sorted(rev.remove):
                con.print(f"  {'removed' if run.written else 'remove'} {escape(rel)}", soft_wrap=True)
        if diff:
            typer.echo(run.diff, nl=False)


def apply(
    arch: str = arch_option(),
    source: Optional[List[str]] = typer.Option(None, "--source", metavar="SRC", help=
        "pypi:VERSION | pypi:DIST==VERSION (pypi:flashinfer-python==0.7.2) | git:PATH_OR_URL@REV | DIR | a pin "
        "name; repeat it for each package the series patches (one apply run over all of them)"),
    pin: Optional[str] = pin_option("A pin of matrix.toml: its source (exclusive with --source)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the patched package (complete: every file of the source) as DIR/sglang/... (default forgepatch-out/ARCH)."),
    in_place: bool = typer.Option(False, "--in-place", help="Patch a local directory source in place."),
    force: bool = typer.Option(False, "--force", help="--out: replace DIR/sglang even if DIR holds files forgepatch did not write."),
    check: bool = typer.Option(False, "--check", help="Exit 0 iff already in the patched state; write nothing."),
    diff: bool = typer.Option(False, "--diff", help="Print a unified diff of the changes (per-site status on stderr)."),
    as_json: bool = json_option("Print the result as one JSON document."),
    accept: bool = typer.Option(False, "--accept", help="Record each patch's edit set on this pin in its "
                                "lock (patches/ID.lock) after you read the diff; a `review` status then passes."),
    only: list[str] = typer.Option(None, "--patch", help="Run only this patch of the arch's series "
                                   "(repeatable; series order is kept)."),
    reverse: bool = typer.Option(False, "--reverse", help="Undo the newest --in-place apply on --source DIR "
                                 "exactly (only if the tree still holds what it wrote); with --check/--diff "
                                 "write nothing."),
) -> None:
    """Apply the arch's patch series to an SGLang source; it checks itself before writing."""
    if reverse:
        _reverse(arch, source, pin, out, in_place, force, accept, only, check, diff, as_json)
        return
    if out is not None and in_place:
        raise BadInput("--out and --in-place are mutually exclusive")
    if (check or diff) and (out is not None or in_place):
        raise BadInput("--check/--diff write nothing: drop --out/--in-place")
    if force and (in_place or check or diff):
        raise BadInput("--force only applies to --out")
    matrix = STATE.matrix()
    if out is None and not in_place and not check and not diff:
        out = Path("forgepatch-out") / arch

    sources = series_sources(arch, source, pin, matrix, STATE.patches())
    if len(sources) > 1:
        runs = apply_many(arch, sources, out, matrix, STATE.patches(), in_place=in_place, check=check,
                          diff=diff, force=force, accept=accept, only=list(only) if only else None)
        _render_many(runs, arch, as_json, diff, check,
                     not_run(arch, matrix, STATE.patches(), [r.source.package_name for r in runs]))
        return
    source = sources[0]
    run = apply_arch(arch, source, out, matrix, STATE.patches(), in_place=in_place, check=check, diff=diff,
                     force=force, accept=accept, only=list(only) if only else None)
    missing = not_run(arch, matrix, STATE.patches(), [run.source.package_name]) if matrix is not None else []
    for pkg in missing:  # said, never silently skipped (stderr: stdout stays the diff / the JSON)
        console(stderr=True).print(f"note: the {arch} series also patches {pkg}: not run here "
                                   f"(add --source for it, e.g. --source pypi:DIST==VERSION)")
    if as_json:
        doc = run.to_json()
        if missing:
            doc["not_run"] = missing
        if accept:
            doc["accepted"] = run.extra.get("accepted", [])
        print_json(doc)
    elif diff:
        _render(run, stderr=True)
        typer.echo(run.diff, nl=False)
    else:
        if accept:
            _accepted(run)
        _render(run)
        if run.written:
            import shlex

            _written(run, f" --pin {shlex.quote(pin)}" if pin else f" --source {shlex.quote(source)}" if source else "",
                     in_place)
        if check and not run.result.drift:
            n = len(run.result.changed)
            console().print(f"would change {n} file(s)" if n else "already patched")
    if run.result.drift:
        raise Failure(_failure_message(run.result) + " (nothing written)")
    if check and not run.result.in_patched_state:
        raise typer.Exit(1)

def lint(
    arch: str = arch_option(),
    source: Optional[List[str]] = typer.Option(
        None, "--source", metavar="SRC", help="As for apply; repeat it for each package the series patches."),
    pin: Optional[str] = pin_option("A pin of matrix.toml: its source (exclusive with --source)."),
    as_json: bool = json_option("Print findings as JSON."),
) -> None:
    """After patching (in memory), list gates of the same feature that still reject the arch."""
    from rich.markup import escape

    matrix = STATE.matrix()
    sources = series_sources(arch, source, pin, matrix, STATE.patches())
    runs = [lint_arch(arch, one, matrix, STATE.patches()) for one in sources]  # one per package

    def doc(pid, loc):
        reason, _, rest = loc.detail.partition("; ")
        return {"patch": pid, "file": loc.file, "line": loc.line, "function": loc.symbol, "gate": loc.gate,
                "reason": reason, **({"ignored": rest.removeprefix("ignored: ")} if loc.status is Status.IGNORED else {})}

    docs, total = [], 0
    for result, src, found in runs:
        findings = [(pid, loc) for pid, loc in found if loc.status is Status.INCOMPLETE]
        ignored = [(pid, loc) for pid, loc in found if loc.status is Status.IGNORED]
        total += len(findings)
        docs.append({"arch": arch, "source": src.label, "version": result.version,
                     "findings": [doc(*f) for f in findings], "ignored": [doc(*f) for f in ignored]})
        if len(runs) > 1:
            docs[-1]["package"] = src.package_name
        if not as_json:
            con = console()
            for _pid, loc in findings:
                con.print(f"[red]{escape(str(loc))}[/]", soft_wrap=True)
            for pid, loc in ignored:
                con.print(f"[yellow]ignored by {pid}:[/] {escape(str(loc))}", soft_wrap=True)
            con.print(f"{len(findings)} gate(s) still reject {arch} ({src.label})"
                      + (f"; {len(ignored)} declared exception(s)" if ignored else ""))
    if as_json:
        print_json(docs[0] if len(docs) == 1 else {"arch": arch, "packages": docs})
    failed = [(result, src) for result, src, _ in runs
              if any(p.status is Status.DRIFT or p.status.value == "review" for p in result.patches)]
    if failed:
        raise Failure(" | ".join((f"{src.package_name}: " if len(runs) > 1 else "") + _failure_message(result)
                                 for result, src in failed))
    if total:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)
    app.command("lint")(lint)
