"""Build a per-arch image through the Docker engine API (docker SDK, low-level client).

``build_image`` builds from an already-patched package (what tests and benchmarks drive);
``build_arch`` is the CLI's path: resolve the source, run the patch engine, then build_image.
Builds run with network "none", never read the caller's environment into build args (the
SDK's proxy injection is off) and skip work when an image with the same content hash exists.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from forgepatch.combination import LABEL
from forgepatch.infra.dockerapi import api as connect
from forgepatch.infra.dockerapi import repo_digest
from forgepatch.infra.refs import split_tag
from forgepatch.errors import BadInput, Failure
from forgepatch.images.platforms import image_platform
from forgepatch.images.spec import ImageSpec
from forgepatch.infra.atomic import write_atomic
STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
TAIL_LINES = 15

Event = Callable[[str, dict[str, Any]], None]


class BuildFailed(Failure):
    """A failed ``docker build``: the step, the engine's error and the log's last lines."""

    def __init__(self, message: str, step: str | None, tail: list[str], log: Path | None):
        super().__init__(message)
        self.step, self.tail, self.log = step, tail, log


@dataclass
class Step:
    number: int
    total: int
    instruction: str
    cached: bool = False


@dataclass
class BuildResult:
    image_id: str
    tags: list[str]
    content_hash: str
    cache_hit: bool
    seconds: float
    arch: str
    pin: str
    base_image: str
    labels: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    log: Path | None = None
    context: Path | None = None
    apply: dict[str, Any] | None = None  # the patch engine's result, when build_arch ran it
    digest: str | None = None  # registry digest (repo@sha256:...), once pushed or pulled
    uploaded: bool | None = None  # build --push: False when the registry had the content already
    push_seconds: float | None = None
    audit: dict[str, Any] | None = None  # build --audit: the kernel audit's verdict (records.AuditSummary)
    registry_hit: bool = False  # build --push: the registry had this content; nothing built here
    platform: str | None = None  # the image's OS/ARCH (its config's), linux/amd64 or linux/arm64

    @property
    def rebuilt_steps(self) -> list[str]:
        """Instructions the engine executed (not served from its layer cache)."""
        return [s.instruction for s in self.steps if not s.cached and not _is_meta(s.instruction)]

    def to_json(self) -> dict[str, Any]:
        return {
            "image_id": self.image_id,
            "digest": self.digest,
            "uploaded": self.uploaded,
            "push_seconds": None if self.push_seconds is None else round(self.push_seconds, 3),
            "audit": self.audit,
            "registry_hit": self.registry_hit,
            "platform": self.platform,
            "tags": self.tags,
            "tag": self.tags[0],
            "content_hash": self.content_hash,
            "cache_hit": self.cache_hit,
            "seconds": round(self.seconds, 3),
            "arch": self.arch,
            "pin": self.pin,
            "base_image": self.base_image,
            "labels": self.labels,
            "steps": [vars(s) for s in self.steps],
            "rebuilt_steps": self.rebuilt_steps,
            "log": str(self.log) if self.log else None,
            "context": str(self.context) if self.context else None,
            "apply": self.apply,
        }


def _is_meta(instruction: str) -> bool:
    """Instructions that write no layer (the engine appends the LABEL step of ``labels``)."""
    return instruction.split(" ", 1)[0].upper() in ("ARG", "FROM", "ENV", "LABEL")


def base_image_id(api, ref: str) -> str:
    """The local ID of the base image; BadInput when the engine does not have it."""
    from docker.errors import APIError, ImageNotFound

    try:
        return api.inspect_image(ref)["Id"]
    except ImageNotFound as exc:
        raise BadInput(
            f"base image {ref!r} is not in the local Docker engine: `docker pull {ref}` (or build it) "
            "first, or pass --base-image"
        ) from exc
    except APIError as exc:
        raise BadInput(f"base image {ref!r}: {exc.explanation or exc}") from exc


def find_cached(api, spec: ImageSpec, base_id: str) -> str | None:
    """ID of an image built from the same content on the same base, newest first."""
    images = api.images(filters={"label": [f"{LABEL['context_hash']}={spec.content_hash}",
                                           f"{LABEL['base_image_id']}={base_id}"]})
    if not images:
        return None
    return max(images, key=lambda i: i.get("Created", 0))["Id"]


def _tag(api, image_id: str, refs: list[str]) -> None:
    for ref in refs:
        api.tag(image_id, *split_tag(ref), force=True)


def build_image(
    spec: ImageSpec,
    *,
    api=None,
    force: bool = False,
    on_event: Event | None = None,
    log_path: Path | None = None,
    platform: str | None = None,
) -> BuildResult:
    """Build (or find) the image for ``spec``. ``force`` rebuilds without the layer cache.
    ``platform`` (``linux/arm64``): the engine builds for it (the base must be of it)."""
    emit = on_event or (lambda kind, data: None)
    started = time.perf_counter()
    api = api or connect()
    base_id = base_image_id(api, spec.base_image)
    tags = [spec.tag, spec.moving_tag]

    def result(image_id: str, hit: bool, labels: dict[str, str], steps: list[Step]) -> BuildResult:
        inspect = api.inspect_image(image_id)
        return BuildResult(
            image_id, tags, spec.content_hash, hit, time.perf_counter() - started, spec.arch.name, spec.pin,
            spec.base_image, labels, steps, log_path if not hit else None, spec.context.root,
            digest=repo_digest(inspect, spec.repo), platform=image_platform(inspect),
        )

    if not force:
        cached = find_cached(api, spec, base_id)
        if cached:
            _tag(api, cached, tags)
            emit("cache-hit", {"image_id": cached, "tag": spec.tag})
            return result(cached, True, api.inspect_image(cached)["Config"].get("Labels") or {}, [])

    labels = spec.labels(base_id, datetime.now(timezone.utc))
    image_id, steps = _run_build(api, spec, labels, force, emit, log_path, platform)
    check_labels(api, image_id, labels, spec)
    _tag(api, image_id, tags[1:])
    return result(image_id, False, labels, steps)


def check_labels(api, image_id: str, want: dict[str, str], spec: ImageSpec) -> None:
    """The image must carry every label of the contract with the value given: a Dockerfile
    whose LABEL step lacks one (an old copy from ``forgepatch init``) would make an image that
    later stages cannot identify. Failure names the labels; the image is removed."""
    got = (api.inspect_image(image_id).get("Config") or {}).get("Labels") or {}
    wrong = sorted(k for k, v in want.items() if got.get(k) != v)
    if wrong:
        try:
            api.remove_image(image_id, force=True, noprune=False)
        except Exception:  # noqa: BLE001 - the error below is what matters
            pass
        raise Failure(
            f"image build for {spec.arch.name}: the image lacks label(s) {', '.join(wrong)} or carries other "
            f"values; its Dockerfile's LABEL step must read every label's build arg (compare with the shipped "
            f"dockerfiles/Dockerfile)"
        )


def _run_build(api, spec, labels, nocache, emit, log_path, platform=None):
    from docker.errors import APIError, DockerException

    lines: list[str] = []
    steps: list[Step] = []
    image_id = None
    error = None
    partial = ""
    emit("context", {"bytes": spec.context.size, "tag": spec.tag})
    try:
        stream = api.build(
            fileobj=spec.context.tar_chunks(), custom_context=True, tag=spec.tag, rm=True, forcerm=True,
            nocache=nocache, pull=False, buildargs=spec.engine_args(labels), network_mode="none", decode=True,
            use_config_proxy=False, **({"platform": platform} if platform else {}),
        )
        for chunk in stream:
            if "stream" in chunk:
                partial += chunk["stream"]
                *done, partial = partial.split("\n")
                for line in done:
                    _take_line(line.rstrip("\r"), lines, steps, emit)
            if "aux" in chunk and isinstance(chunk["aux"], dict) and chunk["aux"].get("ID"):
                image_id = chunk["aux"]["ID"]
            if "error" in chunk or "errorDetail" in chunk:
                detail = chunk.get("errorDetail") or {}
                error = (detail.get("message") or chunk.get("error") or "unknown error").strip()
    except APIError as exc:
        error = str(exc.explanation or exc)
    except (DockerException, OSError) as exc:
        error = f"lost the Docker engine mid-build: {exc}"
    if partial.strip():
        _take_line(partial.rstrip(), lines, steps, emit)
    if error:
        lines.append(f"ERROR: {error}")
    _write_log(log_path, lines)
    if error or not image_id:
        raise _failure(spec, error or "the engine reported no image ID", steps, lines, log_path)
    return image_id, steps


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NOISE = re.compile(r"^\s*(---> Running in \w+|Removing intermediate container \w+|---> \w+)\s*$")


def _failure(spec, error: str, steps: list[Step], lines: list[str], log_path) -> BuildFailed:
    """One line naming the step and the engine's error; the failing step's output as tail."""
    step = None
    if steps:
        s = steps[-1]
        instruction = " ".join(s.instruction.split())
        step = f"step {s.number}/{s.total} ({instruction[:160] + '...' if len(instruction) > 160 else instruction})"
    error = " ".join(ANSI.sub("", error).split())
    error = re.sub(r"^The command '.*' returned a non-zero code: (\d+)$", r"the command exited with code \1", error)
    start = max((i for i, ln in enumerate(lines) if STEP.match(ln)), default=-1) + 1
    tail = [ANSI.sub("", ln).rstrip() for ln in lines[start:]]
    tail = [ln for ln in tail if ln.strip() and not NOISE.match(ln) and not ln.startswith("ERROR: The command")]
    tail = tail[-TAIL_LINES:]
    last = f"; last output: {tail[-1].strip()}" if tail else ""
    where = f" at {step}" if step else ""
    full = f" (full log: {log_path})" if log_path else ""
    return BuildFailed(f"image build for {spec.arch.name} failed{where}: {error}{last}{full}", step, tail, log_path)


def _take_line(line: str, lines: list[str], steps: list[Step], emit: Event) -> None:
    lines.append(line)
    if m := STEP.match(line):
        steps.append(Step(int(m.group(1)), int(m.group(2)), m.group(3)))
        emit("step", {"number": steps[-1].number, "total": steps[-1].total, "instruction": m.group(3)})
    elif line.strip() == "---> Using cache" and steps:
        steps[-1].cached = True
    elif line.strip():
        emit("log", {"line": line})


def _write_log(path: Path | None, lines: list[str]) -> None:
    if path is None:
        return
    try:
        write_atomic(path, "\n".join(lines) + "\n")
    except OSError:
        pass  # the build's result does not depend on its log
