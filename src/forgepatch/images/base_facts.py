"""What a base image already has: its Python version, its platform and the SGLang version
installed in it (read by running ``python3`` in a container of the image, network off; cached by
image ID, which never changes). ``build`` refuses a base whose SGLang is another version than
the pin's: the image would mix two releases' files (configs, compiled ``.so``) unchecked."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from forgepatch.errors import BadInput

SCRIPT = ("import json, platform, sys\n"
          "try:\n    from importlib.metadata import version; v = version('sglang')\n"
          "except Exception:\n    v = None\n"
          "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(), 'sglang': v}))\n")


@dataclass(frozen=True)
class BaseFacts:
    python: str
    machine: str  # x86_64, aarch64
    sglang: str | None  # None: SGLang is not installed in the base

    def to_json(self) -> dict:
        return asdict(self)


def read_base(api, ref: str, image_id: str, python: str = "python3") -> BaseFacts:
    from forgepatch.infra.atomic import write_atomic
    from forgepatch.paths import cache_dir

    memo = cache_dir("base-facts") / f"{image_id.replace(':', '-')}.json"
    try:
        return BaseFacts(**json.loads(memo.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    container = api.create_container(image_id, command=[python, "-c", SCRIPT], entrypoint=[], network_disabled=True,
                                     labels={"forgepatch.base-facts": "1"})
    try:
        api.start(container)
        code = api.wait(container, timeout=120).get("StatusCode")
        out = api.logs(container, stdout=True, stderr=False).decode("utf-8", "replace").strip().splitlines()
    finally:
        api.remove_container(container, force=True)
    try:
        facts = BaseFacts(**json.loads(out[-1]))
    except (IndexError, ValueError, TypeError):
        raise BadInput(f"base image {ref}: cannot read its Python and SGLang ({python} exited {code})") from None
    write_atomic(memo, json.dumps(facts.to_json()))
    return facts


def check_base(api, ref: str, image_id: str, pin: str, version: str | None) -> BaseFacts:
    """BadInput (one line, both versions) when the base's SGLang is another release than the pin's."""
    facts = read_base(api, ref, image_id)
    if facts.sglang is None:
        return facts
    from packaging.version import InvalidVersion, Version

    if version is None:
        raise BadInput(f"base image {ref} has SGLang {facts.sglang} installed, and the source of pin {pin} has no "
                       "version to compare it with: use a base without SGLang, or a source with a version")
    try:
        same = Version(facts.sglang) == Version(version)
    except InvalidVersion:
        same = facts.sglang == version
    if not same:
        raise BadInput(f"base image {ref} has SGLang {facts.sglang} installed, pin {pin} is SGLang {version}: "
                       f"use a base with SGLang {version} (or none)")
    return facts
