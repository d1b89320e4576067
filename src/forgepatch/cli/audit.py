"""``forgepatch audit``: the CUDA targets of every shared object of an image or directory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from forgepatch import progress
from forgepatch.arch import get_arch
from forgepatch.cli._options import ARCH_NAMES, arch_option, image_option, json_option, markdown_option
from forgepatch.cli._state import console, print_json
from forgepatch.errors import BadInput, Failure
from forgepatch.images.audit import audit_dir, audit_image

STYLES = {"sass": "green", "ptx-jit": "cyan", "partial": "yellow", "none": "bold red", "unreadable": "bold red"}


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)


def audit(
    arch: str = arch_option(help=f"The arch the kernels must run on ({ARCH_NAMES}; sm_120 is sm120)."),
    image: Optional[str] = image_option("A local image (name or ID); read through the engine, never run."),
    directory: Optional[Path] = typer.Option(None, "--dir", help="A directory (e.g. a site-packages) read in place."),
    strict: bool = typer.Option(False, "--strict", help="Also fail libraries some of whose fatbins lack code for ARCH."),
    as_json: bool = json_option("Print one JSON document."),
    markdown: bool = markdown_option("Print a Markdown table."),
) -> None:
    """Can the CUDA kernels of every shared object run on ARCH? Exit 1 lists those that cannot."""
    if (image is None) == (directory is None):
        raise BadInput("audit: give exactly one of --image IMAGE or --dir DIR")
    if as_json and markdown:
        raise BadInput("audit: --json and --markdown are exclusive")
    target = get_arch(arch)
    with _Progress() as progress:
        if directory is not None:
            report = audit_dir(directory, target, strict, progress.event)
        else:
            report = audit_image(image, target, strict, progress.event)
    if as_json:
        print_json(report.to_json())
    elif markdown:
        sys.stdout.write(render_markdown(report))
    else:
        render_table(report)
    if not report.ok:
        problems = []
        if report.failing:
            names = ", ".join(lib.path for lib in report.failing[:5])
            more = " ..." if len(report.failing) > 5 else ""
            problems.append(f"{len(report.failing)} CUDA librar{'y has' if len(report.failing) == 1 else 'ies have'} "
                            f"no code for {target.name}: {names}{more}")
        if report.jit_failing:
            problems.append(f"{report.jit.package} JIT lists: {report.jit.reason}")
        raise Failure("; ".join(problems))


def _where(report) -> str:
    src = report.source
    return f"image {src['image']}" if src["kind"] == "image" else f"directory {src['path']}"


def _summary(report) -> str:
    s = report.stats
    gib = s["bytes_total"] / (1 << 30)
    return (f"{s['cuda_libraries']} CUDA librar{'y' if s['cuda_libraries'] == 1 else 'ies'} among "
            f"{s['shared_objects']} shared objects ({gib:.2f} GiB; {s['bytes_read'] / 1024:.0f} KiB of headers read) "
            f"in {s['seconds']:.2f}s")


def _compressed(lib) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(lib.compressed.items())) or "-"


def render_markdown(report) -> str:
    verdict = "pass" if report.ok else "FAIL"
    out = [f"### forgepatch audit: {report.arch} ({verdict}) — {_where(report)}", "",
           "| library | verdict | SASS | PTX | fatbins usable | compressed | reason |", "|---|---|---|---|---|---|---|"]
    for lib in report.libraries:
        status = f"**{lib.status}**" if lib in report.failing else lib.status
        out.append(f"| `{lib.path}` | {status} | {' '.join(lib.sass) or '-'} | {', '.join(lib.ptx) or '-'} | "
                   f"{lib.usable_modules}/{lib.modules} | {_compressed(lib)} | {lib.reason} |")
    out += ["", _summary(report)]
    jit = report.jit
    if jit is not None:
        out += ["", f"**{jit.package} JIT arch lists** ({jit.status}): {jit.reason}"]
        shown = [f for f in jit.lists if f.verdict != "admits"]
        if shown:
            out += ["", "| list | function | majors | verdict |", "|---|---|---|---|"]
            out += [f"| `{f.where}` | {f.function or '-'} | `{f.code}` | {f.verdict} |" for f in shown]
    return "\n".join(out) + "\n"


def render_table(report) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"CUDA code for {report.arch} (sm_{report.cc[0]}{report.cc[1]}) in {_where(report)}"),
                  title_justify="left")
    table.add_column("library", no_wrap=True)
    for col in ("verdict", "SASS", "PTX", "fatbins", "reason"):
        table.add_column(col, overflow="fold")
    for lib in report.libraries:
        style = STYLES.get(lib.status, "")
        table.add_row(escape(lib.path), f"[{style}]{lib.status}[/]", " ".join(lib.sass) or "-",
                      ", ".join(lib.ptx) or "-", f"{lib.usable_modules}/{lib.modules}", escape(lib.reason))
    out = console()
    out.print(table)
    out.print(escape(_summary(report)))
    jit = report.jit
    if jit is not None:
        style = {"admits": "green", "rejects": "yellow", "unverified": "bold red"}.get(jit.status, "dim")
        out.print(f"{jit.package} JIT arch lists: [{style}]{jit.status}[/] " + escape(jit.reason))
        for f in jit.lists:
            if f.verdict != "admits":
                out.print(f"  {f.verdict:<10} " + escape(f"{f.where} {f.function or '-'} {f.code}"))


class _Progress:
    """A rich progress display on stderr, only when progress is on (``forgepatch.progress``)."""

    def __init__(self):
        self.progress = None
        self.task = None

    def __enter__(self) -> "_Progress":
        if progress.enabled():  # stderr is a terminal and no --json
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                     TimeElapsedColumn(), console=console(stderr=True), transient=True)
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()

    def event(self, kind: str, info: dict) -> None:
        if self.progress is None:
            return
        if kind == "start":
            self.task = self.progress.add_task("reading shared objects", total=info.get("bytes"))
        elif kind == "file":
            self.progress.update(self.task, description=f"{Path(info['path']).name[:40]}")
            if self.progress.tasks[0].total is not None:
                self.progress.advance(self.task, info["size"])
        elif kind == "bytes":
            self.progress.advance(self.task, info["n"])
