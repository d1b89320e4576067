"""``forgepatch smoke``, ``forgepatch triage`` and ``forgepatch matrix``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from forgepatch import progress
from forgepatch.cli._options import arch_option, image_option, json_option, markdown_out_option, old_spelling, pin_option, renamed
from forgepatch.cli._state import STATE, console, print_json
from forgepatch.errors import BadInput, Failure
from forgepatch.infra.journal import write_together
from forgepatch.paths import check_output
from forgepatch.smoke import report, service


def _sigterm_interrupts() -> None:
    """SIGTERM (CI cancelling a job) cleans up like Ctrl-C: containers and processes go."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _smoke(
    arch: Optional[str] = arch_option(None, help="Only this arch."),
    pin: Optional[str] = pin_option("Only this pin."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Only this flag profile."),
    runner: str = typer.Option("docker", "--runner", help="docker (one container per job) or local (processes here)."),
    image: Optional[str] = image_option("Image to run ({arch} {pin} {repo} are filled in); default [smoke] image."),
    bisect: Optional[str] = typer.Option(None, "--bisect", help="Find the smallest failing subset of this profile's flag groups."),
    shard: Optional[str] = typer.Option(None, "--shard", help="Run shard I of N of the job list (I/N)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Jobs at once (default: one per GPU)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
    markdown: Optional[Path] = markdown_out_option("Write the Markdown compatibility table to this file."),
    markdown_old: Optional[Path] = old_spelling("--markdown"),
    logs: Optional[Path] = typer.Option(None, "--logs", help="Keep job logs under this directory (default: the cache)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="--bisect: ignore cached results."),
    builds: Optional[List[Path]] = typer.Option(None, "--builds", metavar="FILE", help="Build record(s) (`build --push --record`) or bake file(s) (`bake`, pushed by `docker buildx bake --push`): run each job on the digest built for its arch x pin, pulled if missing."),
    as_json: bool = json_option("One JSON document on stdout."),
) -> None:
    """Launch arch x pin x profile smoke jobs; triage failures by phase and signature."""
    from rich.markup import escape  # job ids, summaries and flags are data, not markup

    markdown = renamed(markdown, markdown_old, "--markdown", "--markdown-out")
    for path, flag in ((junit, "--junit"), (markdown, "--markdown-out")):
        if path is not None:
            check_output(path, flag)  # before any job runs
    _sigterm_interrupts()
    matrix = STATE.matrix(check_patches=False)
    if bisect:
        rep, run_dir = service.bisect(matrix, runner, bisect, arch, pin, image, logs, cache=not no_cache,
                                      patches=STATE.patches())
        if as_json:
            print_json({"bisect": rep.to_dict(), "logs": str(run_dir)})
        else:
            out = console()
            for t in rep.trials:
                flags = " ".join(t.flags) or "(no flags)"
                out.print(f"  {t.outcome:<10} {'cached' if t.cached else 'ran   '}  {escape(flags)}  [dim]{escape(t.summary)}[/dim]")
            out.print(escape(rep.sentence))
            out.print(f"[dim]{rep.launches} launch(es), {rep.tests} subset(s) evaluated; logs in {escape(str(run_dir))}[/dim]")
        return
    out = console(stderr=as_json)

    def live(res) -> None:
        colour = {"pass": "green", "skipped": "yellow"}.get(res.status, "red")
        out.print(f"[{colour}]{res.status:<8}[/{colour}] {escape(res.id)}  {'' if res.status == 'pass' else escape(res.summary)}")

    with _PullProgress(console(stderr=True)) as pulling:
        doc, run_dir = service.smoke(matrix, runner, arch, pin, profile, shard, image, jobs, logs, on_result=live,
                                     patches=STATE.patches(), builds=builds, on_pull=pulling.event)
    results = doc.jobs
    if junit or markdown:  # both or neither, even across a crash (forgepatch.infra.journal)
        write_together({**({junit: report.to_junit(results)} if junit else {}),
                        **({markdown: report.to_markdown(results)} if markdown else {})}, "smoke reports")
    if as_json:
        print_json(doc.to_json())
    else:
        out.print(report.to_markdown(results), markup=False)
        out.print(f"logs: {run_dir}")
    failed = [r for r in results if r.failed and r.required]
    if failed:
        raise Failure(f"{len(failed)} of {len(results)} smoke job(s) failed: " + ", ".join(
            f"{r.id} ({r.summary})" for r in failed[:3]) + (" ..." if len(failed) > 3 else ""))
    required = [r for r in results if r.required]
    if required and all(r.status == "skipped" for r in required):  # e.g. a GPU runner that lost its GPUs
        raise Failure(f"all {len(required)} required smoke job(s) skipped, nothing was tested: "
                      + ", ".join(f"{r.id} ({r.summary})" for r in required[:3]) + (" ..." if len(required) > 3 else ""))


class _PullProgress:
    """``docker pull`` progress of images fetched by digest (stderr; transient; shown only
    while a pull runs)."""

    def __init__(self, con):
        self.con = con
        self.progress = None
        self.layers: dict[str, tuple[int, int]] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def event(self, image: str, data: dict) -> None:
        if not progress.enabled():  # a terminal on stderr and no --json (forgepatch.progress)
            return
        if self.progress is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                     TimeElapsedColumn(), console=self.con, transient=True)
            self.progress.start()
            self.task = self.progress.add_task(f"pulling {image}", total=None)
        detail = data.get("progressDetail") or {}
        if data.get("id") and detail.get("total") and data.get("status") == "Downloading":
            self.layers[data["id"]] = (detail.get("current", 0), detail["total"])
        elif data.get("id") and data.get("status") in ("Download complete", "Pull complete", "Already exists"):
            total = self.layers.get(data["id"], (0, 0))[1]
            self.layers[data["id"]] = (total, total)
        current = sum(c for c, _ in self.layers.values())
        total = sum(t for _, t in self.layers.values()) or None
        self.progress.update(self.task, description=f"pulling {image}", completed=current, total=total)


def _triage(
    logfile: str = typer.Argument(..., help="A log file, or - for stdin."),
    pin: Optional[str] = pin_option("Use this pin's marker overrides from matrix.toml."),
    context: int = typer.Option(3, "--context", min=0, help="Lines shown around the error."),
    as_json: bool = json_option("One JSON document on stdout."),
) -> None:
    """Find the last phase reached and the failure signature in an existing log."""
    markers = STATE.matrix(check_patches=False).pin(pin)[1].markers if pin else None
    t = service.triage(logfile, markers, context)
    if as_json:
        print_json(t.to_dict())
    else:
        out = console()
        out.print(f"log:           {t.log_path} ({t.lines} lines)", markup=False)
        out.print(f"last phase:    {t.last_phase_label or 'none'}" + (f" (line {t.last_phase_lineno})" if t.last_phase_lineno else ""), markup=False)
        if t.signature:
            verdict = "FAILED" if t.failed else "ok; the run progressed past it" if t.evidence else "unverified"
            out.print(f"verdict:       {verdict}", markup=False)
            out.print(f"signature:     {t.label} [{t.signature}]", markup=False)
            if t.failing_phase:
                out.print(f"failing phase: {t.failing_phase}", markup=False)
            if t.error_lineno:
                out.print(f"first error:   line {t.error_lineno}", markup=False)
                for no, line in t.context:
                    mark = ">" if no == t.error_lineno else " "
                    out.print(f"  {mark}{no:>6}  {line}", markup=False, soft_wrap=True)
            if t.also_seen:
                out.print(f"also seen:     {', '.join(t.also_seen)}", markup=False)
            sig = t.to_dict()
            if sig["known_issue"]:
                out.print(f"known issue:   {sig['known_issue']}", markup=False)
            if sig["workaround"]:
                out.print(f"workaround:    {sig['workaround']}", markup=False)
        elif t.evidence:
            out.print(f"verdict:       ok ({t.evidence}); no failure signature found", markup=False)
        else:
            out.print("verdict:       unverified: no failure signature found, and no evidence of health "
                      "(the readiness marker, exit code 0)", markup=False)
        if t.evidence and t.signature:
            out.print(f"evidence:      {t.evidence}", markup=False)
        for n in t.notes:
            count = f" (x{n['count']})" if n.get("count", 1) > 1 else ""
            out.print(f"note:          line {n['lineno']}: {n['label']}{count}" + (f" ({n['advice']})" if n["advice"] else ""),
                      markup=False)
    if t.verdict != "ok":  # unknown is never ok: unverified exits 1 like a failure
        where = f"{t.log_path}:{t.error_lineno}" if t.error_lineno else f"{t.log_path}"
        raise Failure(f"{where}: {t.summary}" + (f" ({t.advice})" if t.advice else ""))


def _matrix(
    fmt: str = typer.Option("github", "--format", help="Output format: github (a strategy.matrix document)."),
    shard: Optional[str] = typer.Option(None, "--shard", help="Only shard I of N (I/N)."),
    by: str = typer.Option("job", "--by", help="One entry per smoke job, or per image (arch x pin)."),
) -> None:
    """Emit the smoke job list as a GitHub Actions matrix (for fan-out across runners)."""
    import json
    import sys

    if fmt != "github":
        raise BadInput(f"--format: {fmt!r} is not supported (github)")
    doc = service.github_matrix(STATE.matrix(check_patches=False), shard, by)
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")


def register(app: typer.Typer) -> None:
    app.command("smoke")(_smoke)
    app.command("triage")(_triage)
    app.command("matrix")(_matrix)
