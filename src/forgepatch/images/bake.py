"""``docker-bake.json``: one BuildKit target per arch x pin, so teams fan builds out.

Each target points at a build context that forgepatch assembled on disk (same layout, args,
labels and content-hash tags as ``forgepatch build``), so ``docker buildx bake -f
docker-bake.json`` on any builder produces the images ``forgepatch build`` would. Groups:
``default`` (every target) and one per arch. The file is also the hand-off to ``smoke``
(``combination.bakefile``): once a builder pushed it, ``smoke --builds docker-bake.json`` runs
the image each target's content tag names in the registry, when its labels are the target's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from forgepatch.arch import ARCHES
from forgepatch.errors import BadInput
from forgepatch.combination import LABEL, LABEL_ARG, content_ref, image_tag
from forgepatch.combination.bakefile import BakeTarget
from forgepatch.images.base_facts import read_base
from forgepatch.images.platforms import check_base_platform
from forgepatch.images.prepare import prepare, resolve_target
from forgepatch.infra.refs import repository
from forgepatch.images.spec import ImageSpec
from forgepatch.infra.atomic import write_atomic
from forgepatch.infra.dockerapi import api as connect

NAME = re.compile(r"^[A-Za-z0-9_-]+$")
TARGET_KEYS = set(BakeTarget.model_fields)


def target_name(spec: ImageSpec) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{spec.pin}-{spec.arch.name}")


def bake_document(specs: list[ImageSpec], out_dir: Path, platform: str | None = None) -> dict[str, Any]:
    """The bake file for ``specs``; contexts are written relative to ``out_dir``; ``platform``
    (``linux/arm64``): every target is built for it."""
    targets: dict[str, Any] = {}
    groups: dict[str, list[str]] = {"default": []}
    for spec in specs:
        name = target_name(spec)
        if name in targets:
            raise BadInput(f"bake: two targets named {name!r}")
        labels = spec.labels()  # no created/base ID: the builder knows those at build time
        targets[name] = BakeTarget(
            context=Path(os.path.relpath(spec.context.root, out_dir)).as_posix(), dockerfile="Dockerfile",
            args=spec.engine_args(labels), tags=[spec.tag, spec.moving_tag], labels=labels, network="none",
            platforms=[platform] if platform else None,
        ).model_dump(mode="json", exclude_none=True)
        groups["default"].append(name)
        groups.setdefault(spec.arch.name, []).append(name)
    return {"group": {g: {"targets": t} for g, t in groups.items()}, "target": targets}


def validate(doc: Any, base_dir: Path) -> list[str]:
    """Structural problems of a bake document (empty list: valid). Checks what BuildKit needs
    (names, contexts holding a Dockerfile, string maps) and forgepatch's own contract."""
    problems: list[str] = []
    if not isinstance(doc, dict) or set(doc) - {"group", "target", "variable"}:
        return ["top level must be an object with 'group' and 'target'"]
    targets = doc.get("target")
    if not isinstance(targets, dict) or not targets:
        return ["'target' must be a non-empty object"]
    for name, t in targets.items():
        where = f"target {name!r}"
        if not NAME.match(name):
            problems.append(f"{where}: name must match {NAME.pattern}")
        if not isinstance(t, dict):
            problems.append(f"{where}: must be an object")
            continue
        if set(t) - TARGET_KEYS:
            problems.append(f"{where}: unknown keys {sorted(set(t) - TARGET_KEYS)}")
        if "platforms" in t and (not isinstance(t["platforms"], list) or not t["platforms"]
                                 or not all(isinstance(p, str) for p in t["platforms"])):
            problems.append(f"{where}: platforms must be a non-empty list of strings")
        ctx = base_dir / str(t.get("context", ""))
        if not (ctx / str(t.get("dockerfile", "Dockerfile"))).is_file():
            problems.append(f"{where}: no Dockerfile in context {t.get('context')!r}")
        for key in ("args", "labels"):
            m = t.get(key)
            if not isinstance(m, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
                problems.append(f"{where}: {key} must map strings to strings")
        args, labels = t.get("args") or {}, t.get("labels") or {}
        arch = labels.get(LABEL["arch"])
        if arch not in ARCHES:
            problems.append(f"{where}: label {LABEL['arch']} {arch!r} is not a known arch")
        else:
            for k, v in ARCHES[arch].build_args().items():
                if args.get(k) != v:
                    problems.append(f"{where}: build arg {k}={args.get(k)!r}, arch registry says {v!r}")
        if not args.get("BASE_IMAGE"):
            problems.append(f"{where}: build arg BASE_IMAGE missing")
        for label, arg in LABEL_ARG.items():
            if label in labels and args.get(arg) != labels[label]:
                problems.append(f"{where}: build arg {arg} disagrees with label {label}")
        tags = t.get("tags")
        digest = labels.get(LABEL["context_hash"], "")
        if not isinstance(tags, list) or not tags or not all(isinstance(x, str) for x in tags):
            problems.append(f"{where}: tags must be a non-empty list of strings")
        elif tags[0] != content_ref(repository(tags[0]), labels.get(LABEL["pin"], ""), str(arch), digest):
            problems.append(f"{where}: first tag {tags[0]!r} is not <repo>:<pin>-<arch>-<hash12>")
    groups = doc.get("group", {})
    if not isinstance(groups, dict) or "default" not in groups:
        problems.append("group 'default' missing")
    else:
        for g, body in groups.items():
            members = body.get("targets") if isinstance(body, dict) else None
            if not isinstance(members, list) or any(m not in targets for m in members):
                problems.append(f"group {g!r}: targets must name defined targets")
        if set(groups["default"].get("targets", [])) != set(targets):
            problems.append("group 'default' must list every target")
    return problems


def write_bake(doc: dict[str, Any], out: Path) -> None:
    """Validate, then write atomically (temp file + rename)."""
    out = Path(out).absolute()
    problems = validate(doc, out.parent)
    if problems:
        raise BadInput(f"bake: invalid document: {problems[0]}")
    try:
        write_atomic(out, json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise BadInput(f"cannot write {out}: {exc.strerror or exc}") from exc


def bake_matrix(
    matrix, patches_dir: Path, out: Path | None, *, arches: list[str] | None = None, pins: list[str] | None = None,
    contexts_dir: Path | None = None, on_target=None, platform: str | None = None, on_warning=None,
) -> dict[str, Any]:
    """Patch and assemble a context for every configured arch x pin, then write the bake file
    (``out`` None: nothing is written, the document's paths are relative to the current
    directory; the caller prints it). A base image the local engine has is read as ``build``
    reads it (its wheel of the pin, its platform = ``platform``); one it lacks is said through
    ``on_warning``: its target overlays the ``.py`` files of this host's wheel."""
    facts: dict[str, Any] = {}

    base = Path(out).absolute().parent if out is not None else Path.cwd()
    contexts = Path(contexts_dir).absolute() if contexts_dir else base / "bake-contexts"
    names = arches or list(matrix.arches)
    specs = []
    for arch_name in names:
        cfg = matrix.arch(arch_name)
        for pin in pins or cfg.pins or list(matrix.pins):
            if cfg.pins is not None and pin not in cfg.pins:
                continue
            target = resolve_target(matrix, arch_name, pin=pin)
            if on_target:
                on_target(target)
            if target.base_image not in facts:
                facts[target.base_image] = local_base(target.base_image, platform)
            if facts[target.base_image] is None and on_warning is not None:
                on_warning(f"bake: base image {target.base_image} is not in the local Docker engine: target "
                           f"{target.pin}-{target.arch.name} overlays the .py files of this host's wheel, not the "
                           f"complete package of the base's wheel (`docker pull {target.base_image}` first)")
            prepared = prepare(target, matrix, patches_dir, contexts / image_tag(target.pin, target.arch.name),
                               base=facts[target.base_image])
            specs.append(prepared.spec)
    if not specs:
        raise BadInput("bake: no arch x pin selected")
    doc = bake_document(specs, base, platform)
    if out is None:
        problems = validate(doc, base)
        if problems:
            raise BadInput(f"bake: invalid document: {problems[0]}")
    else:
        write_bake(doc, out)
    return doc


def local_base(ref: str, platform: str | None):
    """The base image's facts (``base_facts.read_base``) when the local engine has it (its
    platform checked against ``platform``); None when the engine is down or lacks it."""
    try:
        api = connect()
        inspect = api.inspect_image(ref)
    except Exception:  # noqa: BLE001 - no engine, or no such image here: the caller says so
        return None
    if platform is not None:
        check_base_platform(ref, inspect, platform)
    return read_base(api, ref, inspect["Id"])
