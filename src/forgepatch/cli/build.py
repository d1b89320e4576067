"""``forgepatch build`` and ``forgepatch bake``."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from forgepatch import progress
from forgepatch.cli._options import arch_list_option, arch_option, json_option, pin_list_option, pin_option, source_option
from forgepatch.cli._state import STATE, console, print_json
from forgepatch.combination.records import AuditSummary
from forgepatch.images.bake import bake_matrix
from forgepatch.images.platforms import check_platform
from forgepatch.images.prepare import resolve_target
from forgepatch.images.service import BuildRequest, build as build_service
from forgepatch.paths import check_output


def register(app: typer.Typer) -> None:
    app.command("build")(build)
    app.command("bake")(bake)


def build(
    arch: str = arch_option(),
    source: Optional[str] = source_option(),
    pin: Optional[str] = pin_option("Pin name for tags/labels (default: matrix default_pin)."),
    base_image: Optional[str] = typer.Option(None, "--base-image", help="Base image (default: arches.<arch>.base_image)."),
    context_dir: Optional[Path] = typer.Option(None, "--context-dir", help="Where to assemble the build context."),
    force: bool = typer.Option(False, "--force", help="Rebuild even if an image with this content hash exists (no layer cache)."),
    push: bool = typer.Option(False, "--push", help="Push the content-addressed tag to the registry of [smoke] image_repo (a no-op when it has that content)."),
    record: Optional[Path] = typer.Option(None, "--record", help="Write/update this build record (image, digest, audit) for `smoke --builds`."),
    audit: bool = typer.Option(False, "--audit", help="Fail the build when a CUDA library of the image has no code for the arch (also arches.<arch>.audit)."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Build for linux/amd64 or linux/arm64 (DGX Spark); the base image must be of it (default: the base's)."),
    as_json: bool = json_option("Print one JSON document on stdout."),
) -> None:
    """Build the per-arch image: every patched package (SGLang, FlashInfer ...) + probe on the base image."""
    platform = check_platform(platform) if platform is not None else None  # a bad flag first (exit 2)
    matrix = STATE.matrix()
    target = resolve_target(matrix, arch, pin=pin, source=source, base_image=base_image)
    audit = audit or matrix.arch(target.arch.name).audit
    req = BuildRequest(target, matrix, STATE.patches(), context_dir, force=force, push=push, record=record,
                       audit=audit, platform=platform)
    result = build_service(req, _CliUi(console(stderr=True))).result
    if as_json:
        print_json(result.to_json())
        return
    out = console()
    state = "cache hit, nothing built" if result.cache_hit else f"built in {result.seconds:.1f}s"
    if result.registry_hit:
        state = "in the registry already, nothing built"
    layers = sum(1 for s in result.steps if s.instruction.split()[0] in ("RUN", "COPY"))
    lines = [f"[bold]{result.tags[0]}[/bold]  ({state})", f"  image   {result.image_id}",
             f"  also    {', '.join(result.tags[1:])}", f"  platform {result.platform}"]
    if not result.cache_hit:
        lines += [f"  layers rebuilt: {len(result.rebuilt_steps)} of {layers}", f"  log     {result.log}"]
    if result.audit:
        lines.append(f"  audit   {AuditSummary.model_validate(result.audit).line()}")
    if push:
        how = "pushed" if result.uploaded else "already in the registry, nothing uploaded"
        lines.append(f"  digest  {result.digest}  ({how})")
    if record is not None:
        lines.append(f"  record  {record}")
    for line in lines:
        out.print(line, soft_wrap=True)


def bake(
    out: Path = typer.Option(Path("docker-bake.json"), "--out", help="Bake file to write ('-': stdout; contexts' paths are then relative to the current directory)."),
    arch: Optional[List[str]] = arch_list_option(help="Only these arches (repeatable; default: all configured)."),
    pin: Optional[List[str]] = pin_list_option("Only these pins (repeatable; default: each arch's pins)."),
    contexts: Optional[Path] = typer.Option(None, "--contexts", help="Where build contexts go (default: <out dir>/bake-contexts)."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Every target for linux/amd64 or linux/arm64 (the bases must be of it)."),
    as_json: bool = json_option("Print the bake document on stdout too."),
) -> None:
    """Write docker-bake.json: one BuildKit target per arch x pin (args, tags, labels, context)."""
    if platform is not None:
        platform = check_platform(platform)

    target = check_output(out, "--out", stdout_ok=True)  # None: stdout
    matrix = STATE.matrix()

    warnings: list[str] = []
    with progress.task("assembling build contexts") as bar:
        doc = bake_matrix(
            matrix, STATE.patches(), target, arches=arch or None, pins=pin or None, contexts_dir=contexts,
            on_target=lambda t: bar.update(f"patching {t.source} for {t.arch.name}"), platform=platform,
            on_warning=warnings.append,
        )
    err = console(stderr=True)
    for line in warnings:
        err.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)
    if as_json or target is None:
        print_json(doc)
        return
    console().print(f"wrote {out} with {len(doc['target'])} targets: {', '.join(doc['target'])}")


def _shown() -> bool:
    """Progress displays follow ``forgepatch.progress``: a terminal on stderr, no --json."""
    return progress.enabled()


class _CliUi:
    """The build service's progress on stderr: warnings, tasks, the build's steps, pushes."""

    def __init__(self, err):
        self.err = err

    def warning(self, text: str) -> None:
        self.err.print(f"warning: {text}", markup=False, highlight=False, soft_wrap=True)

    def task(self, text: str):
        return progress.task(text)  # terminal only, never with --json

    def build_progress(self):
        return _Progress(self.err)

    def transfer_progress(self, ref: str, verb: str):
        return _PushProgress(self.err, ref, verb)


class _Progress:
    """A rich progress display over the build's streamed log (stderr; transient)."""

    def __init__(self, con):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=con, transient=True, disable=not _shown(),
        )
        self.task = self.progress.add_task("sending build context", total=None)
        self.step = "sending build context"

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self.progress.stop()

    def failed(self, tail: list[str]) -> None:
        """The build failed: the display goes, the log's last lines stay on stderr."""
        self.stop()
        for line in tail:
            self.progress.console.print(f"  | {line}", markup=False, highlight=False, soft_wrap=True)

    def event(self, kind: str, data: dict) -> None:
        if kind == "step":
            from rich.markup import escape

            text = " ".join(data["instruction"].split())
            text = escape(text if len(text) <= 60 else text[:57] + "...")
            self.step = f"step {data['number']}: {text}"
            self.progress.update(self.task, total=data["total"], completed=data["number"] - 1, description=self.step)
        elif kind == "log":
            from rich.markup import escape

            self.progress.update(self.task, description=f"{self.step}  [dim]{escape(data['line'][:50])}[/dim]")
        elif kind == "cache-hit":
            self.progress.update(self.task, description="cache hit", total=1, completed=1)


class _PushProgress:
    """Bytes pushed per layer (stderr; transient)."""

    def __init__(self, con, ref: str, verb: str = "pushing"):
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                                 console=con, transient=True, disable=not _shown())
        self.task = self.progress.add_task(f"checking the registry for {ref}", total=None)
        self.layers: dict[str, tuple[int, int]] = {}
        self.ref, self.verb = ref, verb

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def event(self, kind: str, data: dict) -> None:
        if kind in ("push", "pull"):
            detail = data.get("progressDetail") or {}
            if data.get("id") and detail.get("total") and data.get("status") in ("Pushing", "Downloading"):
                self.layers[data["id"]] = (detail.get("current", 0), detail["total"])
            elif data.get("id") and data.get("status") in ("Pushed", "Layer already exists", "Download complete",
                                                           "Pull complete", "Already exists"):
                done = self.layers.get(data["id"], (0, 0))[1]
                self.layers[data["id"]] = (done, done)
            current = sum(c for c, _ in self.layers.values())
            total = sum(t for _, t in self.layers.values()) or None
            self.progress.update(self.task, description=f"{self.verb} {self.ref}", completed=current, total=total)
