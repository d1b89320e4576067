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
import re
from dataclasses import asdict, dataclass, field
from typing import Iterable

from forgepatch.errors import BadInput
from forgepatch.images.platforms import MACHINES, engine_platform, image_platform
from forgepatch.infra.atomic import write_atomic
from forgepatch.paths import cache_dir

# argv[1]: JSON [[name, distribution, import name], ...]; one JSON line out
SCRIPT = ("import json, os, platform, site, sys, sysconfig\n"
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
          "sites = [sysconfig.get_paths()['purelib']] + list(site.getsitepackages())\n"
          "first = next((os.path.realpath(p) for p in sites if p in sys.path and os.path.isdir(p)), None)\n"
          "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(),\n"
          "                  'glibc': platform.libc_ver()[1] if platform.libc_ver()[0] == 'glibc' else None,\n"
          "                  'sglang': ver('sglang'), 'packages': pkgs, 'site': first}))\n")


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
    site: str | None = None  # the site directory packages are installed to (the first one on sys.path)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "BaseFacts":
        pkgs = {k: InstalledPackage(**v) for k, v in (doc.get("packages") or {}).items()}
        return cls(doc["python"], doc["machine"], doc.get("sglang"), pkgs, doc.get("glibc"), doc.get("site"))


@dataclass(frozen=True)
class Wanted:
    """A package the image carries, as the pin has it."""

    name: str  # forgepatch's name (sglang, flashinfer)
    dist: str  # PyPI distribution: what importlib.metadata knows it by
    import_name: str
    version: str | None  # the pin's version of it (None: the source has none)


def read_base(api, ref: str, image_id: str, python: str = "python3",
              packages: Iterable[Wanted] = ()) -> BaseFacts:
    probe = [["sglang", "sglang", "sglang"]] + [[w.name, w.dist, w.import_name] for w in packages if w.name != "sglang"]
    arg = json.dumps(probe, sort_keys=True)
    key = hashlib.sha256((SCRIPT + FILES_READER + arg).encode()).hexdigest()[:12]  # another probe: another record
    memo = cache_dir("base-facts") / f"{image_id.replace(':', '-')}.{key}.json"
    try:
        return BaseFacts.from_json(json.loads(memo.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        pass

    platform = image_platform(api.inspect_image(image_id))
    if platform != engine_platform(api) and platform in MACHINES:  # its python3 would need emulation
        facts = read_files(api, ref, image_id, MACHINES[platform], probe)
        write_atomic(memo, json.dumps(facts.to_json()))
        return facts
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


# -- a base of another platform: read from its files, nothing run ---------------------------
FILES_READER = "files/2"  # the reader's version: part of the facts' cache key
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PYTHON = re.compile(r"(?:^|/)python3(?:\.\d+)?$")
_METADATA = re.compile(r"^(.*/(?:site|dist)-packages)/[^/]+(?:\.dist-info/METADATA|\.egg-info/PKG-INFO|\.egg-info)$")
_INIT = re.compile(r"^(.*/(?:site|dist)-packages)/([A-Za-z_][A-Za-z0-9_]*)/__init__\.py$")
_LIBC = re.compile(r"^(?:usr/)?lib(?:64)?/(?:[^/]+/)?libc(?:\.so\.6|-\d+\.\d+\.so)$")
_GLIBC_TEXT = re.compile(rb"GNU C Library[^\n]*?release version (\d+\.\d+)")
MAX_READ = 16 << 20  # bytes of one file the reader keeps (libc is ~2 MB)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _Tree:
    """What the facts need of an image's file system, from one pass over its exported tar."""

    def __init__(self) -> None:
        self.links: dict[str, str] = {}  # path -> link target (as written)
        self.files: dict[str, bytes | None] = {}  # the paths of interest -> content (None: not read)
        self.sites: set[str] = set()  # directories named site-packages / dist-packages

    def take(self, tar) -> None:
        for member in tar:
            name = member.name.lstrip("./").rstrip("/")
            if member.issym():
                self.links[name] = member.linkname
            elif member.isdir() and name.endswith(("/site-packages", "/dist-packages")):
                self.sites.add(name)
            elif member.isfile() and (_PYTHON.search(name) or _INIT.match(name) or name.endswith("pyvenv.cfg")):
                self.files[name] = None
            elif member.isfile() and (_METADATA.match(name) or _LIBC.match(name)) and member.size <= MAX_READ:
                fh = tar.extractfile(member)
                self.files[name] = fh.read() if fh is not None else None

    def real(self, path: str, depth: int = 0) -> str:
        """``path`` with every symlink of the image resolved (relative, no leading /)."""
        parts, out = [p for p in path.strip("/").split("/") if p], ""
        while parts:
            part = parts.pop(0)
            if part == "..":
                out = out.rpartition("/")[0]
                continue
            if part == ".":
                continue
            here = f"{out}/{part}" if out else part
            if here in self.links and depth < 40:
                target = self.links[here]
                base = "" if target.startswith("/") else out
                here = self.real(f"{base}/{target}", depth + 1)
            out = here
        return out

    def exists(self, path: str) -> bool:
        return self.real(path) in self.files


def _python_version(name: str) -> str | None:
    m = re.search(r"python(3\.\d+)$", name)
    return m.group(1) if m else None


def facts_from_files(tree: _Tree, env_path: str, machine: str, packages) -> BaseFacts:
    """The facts ``SCRIPT`` would print, read off the files: ``python3`` the first one on
    ``PATH`` (symlinks followed to ``python3.X``), its site directories as CPython lays them
    out (a venv's, then the prefix's ``site-packages`` and Debian's ``dist-packages``), each
    package's version from its ``.dist-info/METADATA`` and its directory where ``__init__.py``
    is, glibc from ``libc.so.6``. BadInput when the Python version cannot be read."""
    python_at = next((f"{d.strip('/')}/python3" for d in env_path.split(":") if d
                      and tree.exists(f"{d.strip('/')}/python3")), None)
    if python_at is None:
        raise BadInput("no python3 on the image's PATH")
    real = tree.real(python_at)
    version = _python_version(real)
    if version is None:  # a python3 that is a file itself: its python3.X beside it
        beside = sorted(n for n in tree.files if n.rpartition("/")[0] == real.rpartition("/")[0]
                        and _python_version(n))
        version = _python_version(beside[-1]) if len(beside) == 1 else None
    if version is None:
        raise BadInput(f"cannot tell the version of /{real} without running it")
    venv = python_at.rpartition("/")[0].rpartition("/")[0]
    sites = []
    cfg = f"{venv}/pyvenv.cfg"
    system = True
    if tree.exists(cfg):
        sites.append(f"{venv}/lib/python{version}/site-packages")
        system = False
        data = tree.files.get(tree.real(cfg))
        if data is None or re.search(rb"include-system-site-packages\s*=\s*true", data or b"", re.I):
            system = True
    if system:
        prefix = real.rpartition("/")[0].rpartition("/")[0]
        sites += [f"{prefix}/lib/python{version}/site-packages", f"usr/local/lib/python{version}/dist-packages",
                  "usr/lib/python3/dist-packages", f"usr/lib/python{version}/dist-packages"]
    sites = list(dict.fromkeys(tree.real(s) for s in sites))
    meta: dict[str, dict[str, str]] = {}  # site -> normalised dist -> version
    for name, data in tree.files.items():
        m = _METADATA.match(name)
        if m and data:
            text = data.decode("utf-8", "replace")
            dist = re.search(r"^Name:\s*(\S+)", text, re.M)
            ver = re.search(r"^Version:\s*(\S+)", text, re.M)
            if dist and ver:
                meta.setdefault(tree.real(m.group(1)), {})[_norm(dist.group(1))] = ver.group(1)

    def ver(dist: str) -> str | None:
        return next((meta[s][_norm(dist)] for s in sites if _norm(dist) in meta.get(s, {})), None)

    def where(import_name: str) -> str | None:
        return next(("/" + tree.real(f"{s}/{import_name}") for s in sites if tree.exists(f"{s}/{import_name}/__init__.py")),
                    None)

    glibc = None
    for name, data in sorted(tree.files.items()):
        if _LIBC.match(name):
            m = re.search(r"libc-(\d+\.\d+)\.so$", name)
            found = m.group(1) if m else (_GLIBC_TEXT.search(data or b"") or [None, b""])[1]
            if found:
                glibc = found if isinstance(found, str) else found.decode()
                break
    pkgs = {n: {"version": ver(d), "dir": where(i)} for n, d, i in packages}
    site = next(("/" + s for s in sites if s in tree.sites), None)
    return BaseFacts.from_json({"python": version, "machine": machine, "glibc": glibc, "sglang": ver("sglang"),
                                "packages": pkgs, "site": site})


def read_files(api, ref: str, image_id: str, machine: str, probe) -> BaseFacts:
    """The facts of an image of another platform than the engine's (running its ``python3``
    would need emulation): its file system exported from a created, never started container."""
    import tarfile

    inspect = api.inspect_image(image_id)
    env = dict(e.split("=", 1) for e in (inspect.get("Config") or {}).get("Env") or [] if "=" in e)
    container = api.create_container(image_id, command=["/nonexistent"], entrypoint=[], network_disabled=True,
                                     labels={"forgepatch.base-facts": "1"})
    tree = _Tree()
    try:
        stream = api.export(container)
        with tarfile.open(fileobj=_Stream(stream), mode="r|") as tar:
            tree.take(tar)
    finally:
        api.remove_container(container, force=True)
    try:
        return facts_from_files(tree, env.get("PATH", DEFAULT_PATH), machine, probe)
    except BadInput as exc:
        raise BadInput(f"base image {ref}: cannot read its Python and packages from its files: {exc}") from None


class _Stream:
    """A file object over the engine's chunked export stream (tarfile's stream mode reads it)."""

    def __init__(self, chunks) -> None:
        self.chunks, self.buf = iter(chunks), b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buf) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buf += chunk
        if size < 0:
            out, self.buf = self.buf, b""
        else:
            out, self.buf = self.buf[:size], self.buf[size:]
        return out
