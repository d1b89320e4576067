"""``forgepatch audit``: can the CUDA kernels an image (or a directory) carries run on an arch?

Every ELF shared object where ``python3`` imports from (an image's Python environments and the
directories their ``.pth`` files add: ``image_files.ImportPaths``; or a directory) is read with
:mod:`forgepatch.images.fatbin`
(headers only); each fatbin (one per compilation unit) is judged by NVIDIA's compatibility
rules from :mod:`forgepatch.arch`. A library passes when each of its fatbins has a SASS
target that runs on the arch or PTX the driver can JIT-compile for it; it has **none** when
no fatbin does (exit 1), it is **partial** when some do and some don't (a warning: libraries
often build Hopper- or Blackwell-only kernels in their own files; ``--strict`` fails it).

Besides cubins, the JIT arch lists of the FlashInfer installed there
(:mod:`forgepatch.images.jit_audit`, evaluated by :mod:`forgepatch.gates.jitlists`): a list
that cannot be evaluated fails the audit (exit 1), lists that do not list the arch's major are
findings with their file:line (a warning, as ``partial``: FlashInfer builds sm100-only modules;
``--strict`` fails them).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable

from forgepatch.arch import Arch, compatibility, target_runs_on
from forgepatch.errors import BadInput
from forgepatch.images.fatbin import Entry, FatbinError, is_elf, read_fatbins, target_sort_key
from forgepatch.images.image_files import ImageFiles, ImportPaths, is_shared_object_name
from forgepatch.images.jit_audit import Collector, JitAudit, judge as judge_jit
from forgepatch.gates.jitlists import REJECTS, UNVERIFIED
from forgepatch.infra import dockerapi
from forgepatch.packages import KNOWN

JIT_PACKAGE = KNOWN["flashinfer"]  # the package whose JIT arch lists the audit reads

SCHEMA = "forgepatch-audit/1"
# library statuses; FAILING ones make the audit exit 1
SASS, PTX_JIT, PARTIAL, NONE, UNREADABLE = "sass", "ptx-jit", "partial", "none", "unreadable"
FAILING = (NONE, UNREADABLE)

Progress = Callable[[str, dict[str, Any]], None]


@dataclass
class LibraryAudit:
    path: str
    size: int
    status: str
    reason: str
    sass: list[str] = field(default_factory=list)
    ptx: list[str] = field(default_factory=list)  # "compute_100 (ISA 9.0)"
    other: list[str] = field(default_factory=list)  # LTO-IR and unknown kinds
    modules: int = 0  # fatbins with kernels (device-link stubs lacking the arch left out)
    usable_modules: int = 0
    stubs: int = 0  # device-link stubs (no kernels) left out
    compressed: dict[str, int] = field(default_factory=dict)  # {"zstd": 3}
    entries: dict[str, int] = field(default_factory=dict)  # entries per target, as cuobjdump counts them
    fatbin_bytes: int = 0  # size of .nv_fatbin
    bytes_read: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class AuditReport:
    arch: str
    cc: tuple[int, int]
    source: dict[str, Any]  # {"kind": "dir"|"image", ...}
    strict: bool = False
    libraries: list[LibraryAudit] = field(default_factory=list)  # CUDA libraries (and unreadable ELF)
    stats: dict[str, Any] = field(default_factory=dict)
    jit: JitAudit | None = None  # FlashInfer's JIT arch lists (absent: said so)

    @property
    def failing(self) -> list[LibraryAudit]:
        bad = FAILING + ((PARTIAL,) if self.strict else ())
        return [lib for lib in self.libraries if lib.status in bad]

    @property
    def jit_failing(self) -> bool:
        """The JIT lists fail the audit: one cannot be evaluated (or the package was not read
        where it is installed); with ``strict``, one does not list the arch's major."""
        bad = (UNVERIFIED, REJECTS) if self.strict else (UNVERIFIED,)
        return self.jit is not None and self.jit.status in bad

    @property
    def ok(self) -> bool:
        return not self.failing and not self.jit_failing

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "arch": self.arch,
            "cc": "%d.%d" % self.cc,
            "source": self.source,
            "verdict": "pass" if self.ok else "fail",
            "exit_code": 0 if self.ok else 1,
            "strict": self.strict,
            "failing": [lib.path for lib in self.failing],
            "libraries": [lib.to_json() for lib in self.libraries],
            "jit": self.jit.to_json() if self.jit is not None else None,
            "stats": self.stats,
        }


# -- judging one library ---------------------------------------------------------------
def judge(path: str, size: int, fh: BinaryIO, arch: Arch) -> tuple[LibraryAudit | None, int]:
    """The audit of one ELF file (None when it carries no CUDA device code) and the number
    of bytes read from it."""
    from elftools.common.exceptions import ELFError

    try:
        scan = read_fatbins(fh)
    except (ELFError, FatbinError, OSError, ValueError, KeyError) as exc:  # pyelftools raises several
        return LibraryAudit(path, size, UNREADABLE, f"cannot read it: {' '.join(str(exc).split())}"), 0
    modules = [m for m in scan.modules if m.entries]
    if not modules:
        return None, scan.bytes_read
    entries = [e for m in modules for e in m.entries]
    lib = LibraryAudit(
        path, size, SASS, "", modules=len(modules),
        sass=_targets(e for e in entries if e.kind == "sass"),
        ptx=sorted({f"{e.target} (ISA {e.isa})" for e in entries if e.kind == "ptx"}, key=target_sort_key),
        other=_targets(e for e in entries if not e.loadable),
    )
    for e in entries:
        lib.entries[e.target] = lib.entries.get(e.target, 0) + 1
        if e.compression:
            lib.compressed[e.compression] = lib.compressed.get(e.compression, 0) + 1
    lib.entries = dict(sorted(lib.entries.items(), key=lambda kv: target_sort_key(kv[0])))
    lib.fatbin_bytes = scan.section_bytes
    device = "sm_%d%d" % arch.cc

    def usable(module) -> list[Entry]:
        return [e for e in module.entries if e.loadable and target_runs_on(e.target, arch.cc)]

    # fatbins that define no kernel (device-link stubs, data-only modules) launch nothing:
    # leave them out where they lack the arch
    lacking = [m for m in modules if not usable(m)]
    stubs = [m for m in lacking if all(scan.defines_kernels(e) is False for e in m.entries)]
    if stubs and len(stubs) == len(modules):
        return None, scan.bytes_read
    lacking = [m for m in lacking if m not in stubs]
    lib.modules -= len(stubs)
    lib.stubs = len(stubs)
    jit_only = 0
    covers: dict[str, int] = {}  # target -> fatbins it makes usable
    for module in modules:
        runs = usable(module)
        if runs:
            lib.usable_modules += 1
            jit_only += all(e.kind == "ptx" for e in runs)
            for target in {e.target for e in runs}:
                covers[target] = covers.get(target, 0) + 1
    loadable = lib.sass + [p.split(" ")[0] for p in lib.ptx]
    if lib.usable_modules == 0:
        lib.status = NONE
        lib.reason = compatibility(loadable, arch.cc)[1] if loadable else (
            f"no SASS or PTX, only {', '.join(lib.other)}: nothing the driver can load on {device}")
    elif lacking:
        their = sorted({t for m in lacking for t in m.targets}, key=target_sort_key)
        lib.status = PARTIAL
        lib.reason = (f"{len(lacking)} of {lib.modules} fatbins have no code for {device} "
                      f"(they carry {', '.join(their) or 'nothing loadable'})")
    elif jit_only:
        lib.status = PTX_JIT
        lib.reason = f"{jit_only} of {lib.modules} fatbins run only through PTX JIT-compiled at load ({_covering(covers, lib.modules, device)})"
    else:
        lib.reason = _covering(covers, lib.modules, device)
    lib.bytes_read = scan.bytes_read
    return lib, scan.bytes_read


def _covering(covers: dict[str, int], modules: int, device: str) -> str:
    """'sm_100 runs on sm_103 (444 of 444 fatbins; also sm_103a in 59)': SASS first, most fatbins first."""
    ranked = sorted(covers.items(), key=lambda kv: (-kv[1], not kv[0].startswith("sm_"), target_sort_key(kv[0])))
    (best, n), rest = ranked[0], ranked[1:4]
    how = "runs on" if best.startswith("sm_") else "is JIT-compiled for"
    also = "; also " + ", ".join(f"{t} in {k}" for t, k in rest) if rest else ""
    return f"{best} {how} {device} ({n} of {modules} fatbins{also})"


def _targets(entries: Iterable[Entry]) -> list[str]:
    return sorted({e.target for e in entries}, key=target_sort_key)


# -- sources ---------------------------------------------------------------------------
def audit_dir(root: Path, arch: Arch, strict: bool = False, progress: Progress | None = None) -> AuditReport:
    """Audit every ELF shared object under ``root`` (read in place, headers only)."""
    root = Path(root)
    if not root.is_dir():
        raise BadInput(f"--dir: {root} is not a directory")
    started = time.perf_counter()
    files = list(shared_objects(root))
    report = AuditReport(arch.name, arch.cc, {"kind": "dir", "path": str(root)}, strict)
    stats = _new_stats()
    stats["bytes_total"] = sum(size for _, size in files)
    _emit(progress, "start", total=len(files), bytes=stats["bytes_total"])
    for path, size in files:
        _emit(progress, "file", path=str(path.relative_to(root)), size=size)
        try:
            with path.open("rb") as fh:
                if not is_elf(fh.read(4)):
                    continue
                fh.seek(0)
                _add(report, stats, *judge(str(path.relative_to(root)), size, fh, arch))
        except OSError as exc:
            _add(report, stats, LibraryAudit(str(path.relative_to(root)), size, UNREADABLE,
                                             f"cannot read it: {exc.strerror or exc}"), 0)
    report.jit = _jit_of_dir(root, arch)
    stats["seconds"] = round(time.perf_counter() - started, 3)
    report.stats = stats
    report.libraries.sort(key=lambda lib: lib.path)
    return report


def _jit_of_dir(root: Path, arch: Arch) -> JitAudit:
    """The JIT lists of ``root/IMPORT`` (a site-packages, an ``apply --out`` tree), read in place."""
    collector = Collector(JIT_PACKAGE)
    for path in sorted(root.glob("*.dist-info/METADATA")) + sorted((root / JIT_PACKAGE.import_name).rglob("*.py")):
        if collector.keep(path.as_posix()):
            try:
                collector.add(path.as_posix(), path.read_bytes())
            except OSError:
                collector.add(path.as_posix(), None)
    return judge_jit(collector, collector.package_dirs([root.as_posix()]), arch.cc[0], [])


def shared_objects(root: Path):
    """(path, size) of regular files named like shared objects, in a stable order; links
    are not followed (a link's target is read where it lives), hard links are read once."""
    seen: set[tuple[int, int]] = set()
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif is_shared_object_name(entry.name) and entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    yield Path(entry.path), st.st_size


def audit_image(image: str, arch: Arch, strict: bool = False, progress: Progress | None = None, api=None) -> AuditReport:
    """Audit the shared objects where ``image``'s ``python3`` imports from (its Python
    environments and the directories their ``.pth`` files add), and FlashInfer's JIT lists
    there (nothing runs inside)."""
    api = api or dockerapi.api()
    started = time.perf_counter()
    stats = _new_stats()
    with ImageFiles(api, image) as files:
        paths = ImportPaths(files.python_roots())
        report = AuditReport(arch.name, arch.cc, {"kind": "image", "image": image, "image_id": files.image_id,
                                                  "roots": paths.roots}, strict)
        _emit(progress, "start", total=None, roots=paths.roots)

        def streamed(n: int) -> None:
            stats["bytes_streamed"] += n
            _emit(progress, "bytes", n=n)

        collector = Collector(JIT_PACKAGE)
        for member in files.import_members(paths, streamed, collector.keep, collector.add):
            _emit(progress, "file", path=member.path, size=member.size)
            stats["bytes_total"] += member.size
            _add(report, stats, *judge(member.path, member.size, member.fileobj, arch))
        report.source["pth_dirs"] = paths.added
        report.jit = judge_jit(collector, collector.package_dirs(paths.dirs), arch.cc[0], paths.code)
    stats["seconds"] = round(time.perf_counter() - started, 3)
    report.stats = stats
    report.libraries.sort(key=lambda lib: lib.path)
    return report


def _new_stats() -> dict[str, Any]:
    return {"shared_objects": 0, "cuda_libraries": 0, "bytes_total": 0, "bytes_read": 0, "bytes_streamed": 0}


def _add(report: AuditReport, stats: dict[str, Any], lib: LibraryAudit | None, bytes_read: int) -> None:
    stats["shared_objects"] += 1
    stats["bytes_read"] += bytes_read
    if lib is None:
        return
    if lib.status != UNREADABLE:
        stats["cuda_libraries"] += 1
    report.libraries.append(lib)


def _emit(progress: Progress | None, event: str, **info: Any) -> None:
    if progress is not None:
        progress(event, info)
