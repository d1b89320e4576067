"""What a base image already has: its Python version, its platform and, for every package the
image will carry (SGLang, FlashInfer ...), the version installed and the directory Python
imports it from (read by running ``python3`` in a container of the image, network off, with
``importlib``: nothing is imported, no path is guessed; cached by image ID, which never
changes). ``build`` refuses a base whose installed version of a package is another than the
pin's: the image would mix two releases' files (configs, compiled ``.so``, JIT sources)
unchecked. A base without the package takes the pin's whole package."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Iterable

from forgepatch.errors import BadInput

# argv[1]: JSON [[name, distribution, import name], ...]; one JSON line out
SCRIPT = ("import json, os, platform, sys\n"
          "import importlib.util\n"
          "from importlib.metadata import version\n"
          "def ver(dist):\n"
          "    try:\n        return version(dist)\n"
          "    except Exception:\n        return None\n"
          "def where(name):\n"
          "    try:\n        s = importlib.util.find_spec(name)\n"
          "    except Exception:\n        return None\n"
          "    if s is None:\n        return None\n"
          "    if s.origin and os.path.basename(s.origin) == '__init__.py':\n"
          "        return os.path.dirname(os.path.realpath(s.origin))\n"
          "    locs = list(s.submodule_search_locations or [])\n"
          "    return os.path.realpath(locs[0]) if locs else None\n"
          "pkgs = {n: {'version': ver(d), 'dir': where(i)} for n, d, i in json.loads(sys.argv[1])}\n"
          "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(),\n"
          "                  'glibc': platform.libc_ver()[1] if platform.libc_ver()[0] == 'glibc' else None,\n"
          "                  'sglang': ver('sglang'), 'packages': pkgs}))\n")


@dataclass(frozen=True)
class InstalledPackage:
    version: str | None  # None: not installed (no distribution metadata)
    dir: str | None  # where python3 imports it from; None: not importable


@dataclass(frozen=True)
class BaseFacts:
    python: str
    machine: str  # x86_64, aarch64
    sglang: str | None  # None: SGLang is not installed in the base
    packages: dict[str, InstalledPackage] = field(default_factory=dict)  # name -> what the base has
    glibc: str | None = None  # the C library's version (2.36); None: not glibc, or not known

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "BaseFacts":
        pkgs = {k: InstalledPackage(**v) for k, v in (doc.get("packages") or {}).items()}
        return cls(doc["python"], doc["machine"], doc.get("sglang"), pkgs, doc.get("glibc"))


@dataclass(frozen=True)
class Wanted:
    """A package the image carries, as the pin has it."""

    name: str  # forgepatch's name (sglang, flashinfer)
    dist: str  # PyPI distribution: what importlib.metadata knows it by
    import_name: str
    version: str | None  # the pin's version of it (None: the source has none)


def read_base(api, ref: str, image_id: str, python: str = "python3",
              packages: Iterable[Wanted] = ()) -> BaseFacts:
    from forgepatch.infra.atomic import write_atomic
    from forgepatch.paths import cache_dir

    probe = [["sglang", "sglang", "sglang"]] + [[w.name, w.dist, w.import_name] for w in packages if w.name != "sglang"]
    arg = json.dumps(probe, sort_keys=True)
    key = hashlib.sha256((SCRIPT + arg).encode()).hexdigest()[:12]  # another probe: another record
    memo = cache_dir("base-facts") / f"{image_id.replace(':', '-')}.{key}.json"
    try:
        return BaseFacts.from_json(json.loads(memo.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        pass
    container = api.create_container(image_id, command=[python, "-c", SCRIPT, arg], entrypoint=[],
                                     network_disabled=True, labels={"forgepatch.base-facts": "1"})
    try:
        api.start(container)
        code = api.wait(container, timeout=120).get("StatusCode")
        out = api.logs(container, stdout=True, stderr=False).decode("utf-8", "replace").strip().splitlines()
    finally:
        api.remove_container(container, force=True)
    try:
        facts = BaseFacts.from_json(json.loads(out[-1]))
    except (IndexError, ValueError, TypeError, KeyError):
        raise BadInput(f"base image {ref}: cannot read its Python and packages ({python} exited {code})") from None
    write_atomic(memo, json.dumps(facts.to_json()))
    return facts


def check_base(api, ref: str, image_id: str, pin: str, packages: list[Wanted]) -> BaseFacts:
    """BadInput (one line, both versions) when the base's installed version of a package the
    image carries is another release than the pin's; a package the base lacks is fine (the
    image gets the pin's package)."""
    facts = read_base(api, ref, image_id, packages=packages)
    for want in packages:
        have = facts.packages.get(want.name, InstalledPackage(facts.sglang, None) if want.name == "sglang" else None)
        if have is None or have.version is None:
            continue
        _same_version(ref, pin, want, have.version)
    return facts


def _same_version(ref: str, pin: str, want: Wanted, have: str) -> None:
    from packaging.version import InvalidVersion, Version

    what = "SGLang" if want.name == "sglang" else want.dist
    if want.version is None:
        raise BadInput(f"base image {ref} has {what} {have} installed, and the source of pin {pin} has no "
                       f"version to compare it with: use a base without {what}, or a source with a version")
    try:
        same = Version(have) == Version(want.version)
    except InvalidVersion:
        same = have == want.version
    if not same:
        raise BadInput(f"base image {ref} has {what} {have} installed, pin {pin} is {what} {want.version}: "
                       f"use a base with {what} {want.version} (or none)")
