"""The JIT arch lists of the FlashInfer an image carries (``forgepatch audit``, besides cubins).

FlashInfer JIT-compiles most of its kernels at run time, for the targets its module builders
pick with ``supported_major_versions=[...]``; a builder whose list lacks the device's major has
no target for it (``gates.jitlists``, the one evaluator of those lists). The audit reads them
in the image without running anything in it:

- where ``python3`` would import the package from, statically: each directory of
  ``image_files.ImportPaths`` (the Python environments of the image and the directories their
  ``.pth`` files add, as ``site`` does; the kernel audit reads the same directories) holding
  an ``IMPORT/`` directory; its version from the ``DIST-VERSION.dist-info`` beside it;
- every ``.py`` file of that directory, read with ``gates.jitlists`` (a list that is not a
  literal, or a file that names the keyword but does not parse, is ``unverified``).

The package found in two places (which one is imported is decided by ``sys.path`` order at run
time, not read here), or installed (a dist-info) with no package directory found, is
``unverified`` as well: never an ok without a list read. An image without it says so
(``absent``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from forgepatch.gates.jitlists import ADMITS, KEYWORD, REJECTS, UNVERIFIED, JitList, lists_of_bytes
from forgepatch.packages import Package

ABSENT = "absent"  # the image has no such package: nothing to judge, said so


@dataclass(frozen=True)
class ListFinding:
    """One ``supported_major_versions=`` list of the installed package, judged for the arch."""

    path: str  # absolute path inside the image
    line: int
    function: str  # the enclosing function (Class.method), "" at module level
    majors: tuple[int, ...] | None  # None: not evaluable; (): every arch
    code: str  # the value as written
    verdict: str  # admits | rejects | unverified

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "function": self.function,
                "majors": list(self.majors) if self.majors is not None else None, "code": self.code,
                "verdict": self.verdict}


@dataclass
class JitAudit:
    """The verdict on one package's JIT arch lists in an image."""

    package: str  # forgepatch's name (flashinfer)
    dist: str  # its PyPI distribution (flashinfer-python)
    major: int  # the arch's major the lists are judged for
    status: str  # absent | admits | rejects | unverified (the worst list, or why none was read)
    reason: str
    version: str | None = None  # the dist-info beside the package directory (None: none there)
    dir: str | None = None  # the package directory python3 imports (absolute, in the image)
    lists: list[ListFinding] = field(default_factory=list)

    @property
    def rejecting(self) -> list[ListFinding]:
        return [f for f in self.lists if f.verdict == REJECTS]

    @property
    def unverified(self) -> list[ListFinding]:
        return [f for f in self.lists if f.verdict == UNVERIFIED]

    def to_json(self) -> dict:
        return {"package": self.package, "dist": self.dist, "keyword": KEYWORD, "major": self.major,
                "status": self.status, "reason": self.reason, "version": self.version, "dir": self.dir,
                "counts": {v: sum(f.verdict == v for f in self.lists) for v in (ADMITS, REJECTS, UNVERIFIED)},
                "lists": [f.to_json() for f in self.lists]}


class Collector:
    """Decides which files the audit keeps while it streams where ``python3`` imports from
    (``keep``) and holds them (``add``): the package's ``.py`` files and the ``METADATA`` of
    its dist-info."""

    def __init__(self, package: Package):
        self.package = package
        self.prefix = package.wheel_prefix.lower() + "-"
        self.files: dict[str, bytes | None] = {}

    def keep(self, path: str) -> bool:
        parent, name = posixpath.split(path)
        if name.endswith(".py"):
            return f"/{self.package.import_name}/" in path
        return name == "METADATA" and posixpath.basename(parent).lower().startswith(self.prefix) \
            and parent.endswith(".dist-info")

    def add(self, path: str, data: bytes | None) -> None:
        self.files[path] = data

    def package_dirs(self, roots: list[str]) -> list[str]:
        """The directories ``root/IMPORT`` holding at least one kept ``.py`` file."""
        found = []
        for root in roots:
            top = posixpath.join(root, self.package.import_name) + "/"
            if any(p.startswith(top) and p.endswith(".py") for p in self.files):
                found.append(top.rstrip("/"))
        return found

    def version_beside(self, package_dir: str) -> str | None:
        parent = posixpath.dirname(package_dir)
        for path, data in sorted(self.files.items()):
            if path.endswith("/METADATA") and posixpath.dirname(posixpath.dirname(path)) == parent and data:
                for line in data.decode("utf-8", "replace").splitlines():
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        return None

    def dist_infos(self) -> list[str]:
        return sorted(posixpath.dirname(p) for p in self.files if p.endswith("/METADATA"))


def judge(collector: Collector, package_dirs: list[str], major: int, code_pths: list[str]) -> JitAudit:
    """The verdict on the package's lists, from the files kept (``package_dirs``: every
    directory it was found in)."""
    pkg = collector.package
    audit = JitAudit(pkg.name, pkg.dist, major, ABSENT, "")
    if not package_dirs:
        infos = collector.dist_infos()
        if infos:
            audit.status = UNVERIFIED
            audit.reason = (f"{pkg.dist} is installed ({infos[0]}) but no {pkg.import_name}/ directory was found on "
                            "the image's Python paths" + (f" (a .pth runs code: {code_pths[0]})" if code_pths else "")
                            + f": its {KEYWORD} lists were not read")
        else:
            audit.reason = f"no {pkg.import_name} package found: no JIT list was checked"
        return audit
    if len(package_dirs) > 1:
        audit.status = UNVERIFIED
        audit.reason = (f"{pkg.import_name} is installed in {len(package_dirs)} places ({', '.join(package_dirs)}): "
                        "which one python3 imports is decided at run time, not read here")
        return audit
    audit.dir = top = package_dirs[0]
    audit.version = collector.version_beside(top)
    found: list[JitList] = []
    for path in sorted(p for p in collector.files if p.startswith(top + "/") and p.endswith(".py")):
        data = collector.files[path]
        if data is None:
            found.append(JitList(path, 1, "", None, "<too large to read>"))
            continue
        found += [JitList(path, j.line, j.function, j.majors, j.code) for j in lists_of_bytes(data, path)]
    audit.lists = [ListFinding(j.file, j.line, j.function, j.majors, j.code, j.verdict(major)) for j in found]
    where = f"{pkg.import_name} {audit.version or '(version unknown)'} at {top}"
    if audit.unverified:
        first = audit.unverified[0]
        audit.status = UNVERIFIED
        audit.reason = (f"{len(audit.unverified)} of {len(audit.lists)} {KEYWORD} lists of {where} cannot be "
                        f"evaluated: {first.where} {first.function} {first.code}")
    elif audit.rejecting:
        first = audit.rejecting[0]
        audit.status = REJECTS
        audit.reason = (f"{len(audit.rejecting)} of {len(audit.lists)} {KEYWORD} lists of {where} do not list "
                        f"major {major}: {first.where} {first.function} {first.code}"
                        + (" ..." if len(audit.rejecting) > 1 else ""))
    else:
        audit.status = ADMITS
        audit.reason = (f"all {len(audit.lists)} {KEYWORD} lists of {where} admit major {major}" if audit.lists
                        else f"{where} has no {KEYWORD} list: no JIT module is gated by one")
    return audit
