"""``forgepatch build`` as a service: every step from the target to the pushed, audited,
recorded image, in one place, so the CLI, the benchmarks and any other caller build the same
image the same way (the CLI only parses, calls :func:`build` and renders).

The steps, in order: the target checked (platform, record path), the engine and the base image
(exit 2 before anything is patched), the registry reachable (``--push``), the base image's
facts (its Python, machine and glibc pick the wheel of the pin; a base of another platform is
read from its files), the series applied and the context assembled (``prepare``), the base's
own copy of each package checked against the pin, the registry asked for the content (``--push``
without ``--force``), the image built, pulled and audited (``--audit``), pushed, recorded.

What a caller shows while it runs comes through :class:`Ui` (the CLI's rich progress; the
default shows nothing).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager

from forgepatch.images.base_facts import check_base, read_base
from forgepatch.images.build import BuildFailed, base_image_id, build_image, connect
from forgepatch.images.platforms import check_base_platform, check_platform, engine_platform, image_platform
from forgepatch.images.prepare import Target, default_context_dir, prepare
from forgepatch.paths import check_output


class Ui:
    """What a caller shows while a build runs; this one shows nothing (benchmarks, tests)."""

    def warning(self, text: str) -> None:
        """A line the user should read (a moving base tag, an image without CUDA libraries)."""

    def task(self, text: str) -> ContextManager[Any]:
        """A step without its own progress events (patching, auditing)."""
        return contextlib.nullcontext()

    def build_progress(self) -> ContextManager[Any]:
        """Around the engine's build: the context's ``event(kind, data)`` sees its stream;
        ``failed(tail)`` is called with the log's last lines when the build fails."""
        return _Silent()

    def transfer_progress(self, ref: str, verb: str) -> ContextManager[Any]:
        """Around a push or pull of ``ref``: ``event(kind, data)`` sees the registry stream."""
        return _Silent()


class _Silent:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def event(self, kind: str, data: dict) -> None:
        return None

    def failed(self, tail: list[str]) -> None:
        return None


@dataclass
class BuildRequest:
    target: Target
    matrix: Any
    patches_dir: Path
    context_dir: Path | None = None
    force: bool = False
    push: bool = False
    record: Path | None = None
    audit: bool = False
    platform: str | None = None


@dataclass
class Built:
    result: Any  # images.build.BuildResult
    summary: Any  # combination.records.AuditSummary | None


def build(req: BuildRequest, ui: Ui | None = None) -> Built:
    """Build (or find) the image of ``req.target``; see the module doc for the steps."""
    from forgepatch.images import ship  # heavy: pydantic (the build record)

    ui = ui or Ui()
    target, platform = req.target, req.platform
    if platform is not None:
        platform = check_platform(platform)
    if req.record is not None:
        check_output(req.record, "--record")
        ship.check_record_path(req.record)
    api = connect()  # fail fast, before patching: engine down / base image missing -> exit 2
    base_id = base_image_id(api, target.base_image)
    base_config = api.inspect_image(base_id)
    if platform is not None:  # the image is of its base's platform: another one is refused here
        check_base_platform(target.base_image, base_config, platform)
    if req.push:  # registry unreachable / credentials refused -> exit 2 before anything is built
        ship.preflight_push(target.repo)
    warning = ship.moving_base(api, target.base_image)
    if warning:
        ui.warning(warning)
    base = read_base(api, target.base_image, base_id)  # its Python, machine, glibc: which wheel it takes
    foreign = image_platform(base_config) != engine_platform(api)  # nothing of it can run here
    with ui.task(f"patching {target.source} for {target.arch.name} and assembling the context"):
        prepared = prepare(target, req.matrix, req.patches_dir, req.context_dir, base=base, copy_only=foreign)
    # the base's own copy of each package must be the release the image carries (another one -> exit 2)
    check_base(api, target.base_image, base_id, target.pin, prepared.packages)
    ctx_dir = req.context_dir or default_context_dir(target.pin, target.arch.name)
    log = ctx_dir.with_name(ctx_dir.name + ".log")
    result = ship.registry_hit(api, prepared.spec) if req.push and not req.force else None
    if result is None:
        with ui.build_progress() as progress:
            try:
                result = build_image(prepared.spec, api=api, force=req.force, on_event=progress.event, log_path=log,
                                     platform=platform)
            except BuildFailed as exc:
                progress.failed(exc.tail)
                raise
    result.apply = prepared.apply
    summary = None
    if req.audit and result.registry_hit:  # the audit reads the image through this engine
        with ui.transfer_progress(result.digest, "pulling") as progress:
            ship.fetch(api, result, progress.event)
    if req.audit:
        with ui.task(f"auditing the CUDA kernels of {result.tags[0]} for {target.arch.name}"):
            summary = ship.audit(api, result, target.arch)
        result.audit = summary.model_dump(mode="json")
        if summary.verdict != "pass":
            raise ship.audit_failure(summary, result.tags[0])
        if not summary.cuda_libraries:  # a base without CUDA libraries runs no GPU kernel: say so
            ui.warning(f"kernel audit of {result.tags[0]}: no CUDA library in the image, no kernel was "
                       f"checked for {target.arch.name} (is the base a CUDA image?)")
    if req.push and not result.registry_hit:
        with ui.transfer_progress(result.tags[0], "pushing") as progress:
            pushed = ship.push(api, result, progress.event)
        result.digest, result.uploaded, result.push_seconds = pushed.digest, pushed.uploaded, pushed.seconds
    if req.record is not None:
        ship.record(req.record, result, summary)
    return Built(result, summary)
