"""Edit locks: the edit sets a person reviewed, per patch, per arch and pin.

A patch's lock is ``<patch file stem>.lock`` next to the patch (``patches/<id>.lock``), a
TOML document written by ``forgepatch patch lock`` and ``apply --accept``::

    format = 1
    patch = "sm120-flashinfer-allreduce-fusion"

    [[set]]
    digest = "3f2a9c01d4e5"                 # editset.digest of the edits below
    accepted = ["sm120@0.5.2", "sm121@0.5.2"] # ARCH@VERSION where a person accepted them

    [[set.edit]]
    file = "srt/layers/communicator.py"
    function = "CommunicateWithAllReduceAndLayerNormFn._gather_hidden_states_and_residual"
    within = []
    before = ["if _is_sm90_supported or _is_sm100_supported"]
    after = ["if _is_sm90_supported or _is_sm100_supported or _is_sm120_supported"]

A run of a series on a pin derives each patch's edit set from the trees (``editset``). A
patch that has a lock and whose non-empty edit set equals no set accepted for the arch is
``review`` (exit 1, nothing written, like drift): the difference to the closest locked set
is reported edit by edit. A patch without a lock file is ``review`` as soon as it edits
anything (nobody accepted its edits: ``apply --accept`` or ``forgepatch patch lock`` creates
the lock). An empty edit set (the tree already patched, or upstream already has it) changes
nothing and needs no review.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.errors import BadInput, located
from forgepatch.patching.editset import Edit, canonical, digest, series_edits
from forgepatch.patching.model import Location, SiteResult, Status

LOCK_SUFFIX = ".lock"
FORMAT = 1
EDIT_LOCK_SITE = "edit-lock"  # the pseudo-site that carries a patch's review findings
ACCEPT_HINT = ("read the diff (`apply --diff`), then accept it with `forgepatch apply --accept` "
               "or `forgepatch patch lock`")


def pin_label(arch: str, version: str | None) -> str:
    return f"{arch}@{version or 'unknown'}"


@dataclass
class LockedSet:
    edits: list[Edit]
    accepted: list[str] = field(default_factory=list)  # ARCH@VERSION

    @property
    def digest(self) -> str:
        return digest(self.edits)

    def arches(self) -> set[str]:
        return {a.partition("@")[0] for a in self.accepted}


@dataclass
class Lock:
    path: Path
    patch_id: str
    sets: list[LockedSet] = field(default_factory=list)

    def for_arch(self, arch: str) -> list[LockedSet]:
        return [s for s in self.sets if arch in s.arches()]

    def find(self, arch: str, edits: list[Edit]) -> LockedSet | None:
        d = digest(edits)
        return next((s for s in self.for_arch(arch) if s.digest == d), None)

    def accept(self, arch: str, version: str | None, edits: list[Edit]) -> bool:
        """Record ``edits`` as reviewed on ARCH@VERSION (that pin leaves any other set).
        True if the lock changed. An empty edit set is not recorded."""
        if not edits:
            return False
        label, d = pin_label(arch, version), digest(edits)
        before = [(s.digest, list(s.accepted)) for s in self.sets]
        for s in self.sets:
            if s.digest != d and label in s.accepted:
                s.accepted.remove(label)
        target = next((s for s in self.sets if s.digest == d), None)
        if target is None:
            target = LockedSet(canonical(edits))
            self.sets.append(target)
        if label not in target.accepted:
            target.accepted.append(label)
            target.accepted.sort(key=_pin_order)
        self.sets = [s for s in self.sets if s.accepted]
        self.sets.sort(key=lambda s: _pin_order(s.accepted[0]))
        return before != [(s.digest, list(s.accepted)) for s in self.sets]


def _pin_order(label: str):
    from packaging.version import InvalidVersion, Version

    arch, _, version = label.partition("@")
    try:
        return (0, Version(version), arch)
    except InvalidVersion:
        return (1, version, arch)


def lock_path(patch: Any) -> Path | None:
    path = getattr(patch, "path", None)
    return Path(path).with_suffix(LOCK_SUFFIX) if path is not None else None


def has_lock(patch: Any) -> bool:
    path = lock_path(patch)
    return path is not None and path.is_file()


def read(path: Path, patch_id: str) -> Lock | None:
    """The lock at ``path`` (None when there is none); a malformed one is BadInput naming it."""
    import tomllib

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the edit lock: {exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        raise BadInput(located(path, line, f"not a valid edit lock: {exc}")) from None
    if doc.get("format") != FORMAT:
        raise BadInput(located(path, 1, f"edit lock format {doc.get('format')!r}: expected {FORMAT}"))
    if doc.get("patch") != patch_id:
        raise BadInput(located(path, 1, f"edit lock is for patch {doc.get('patch')!r}, not {patch_id!r}"))
    sets = []
    try:
        for i, s in enumerate(doc.get("set", [])):
            edits = [Edit.from_doc(e) for e in s.get("edit", [])]
            locked = LockedSet(edits, [str(a) for a in s.get("accepted", [])])
            if s.get("digest") not in (None, locked.digest):
                raise BadInput(located(path, None, f"set {i + 1}: digest {s.get('digest')!r} does not match its "
                                       f"edits ({locked.digest}): the lock was edited by hand; refresh it "
                                       f"with `forgepatch patch lock`"))
            sets.append(locked)
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadInput(located(path, None, f"malformed edit lock: {type(exc).__name__}: {exc}")) from None
    return Lock(path, patch_id, sets)


def render(lock: Lock) -> str:
    import tomlkit

    doc = tomlkit.document()
    doc.add(tomlkit.comment(f"forgepatch edit lock of patch {lock.patch_id}: the edit sets a person reviewed, "
                            f"per ARCH@VERSION."))
    doc.add(tomlkit.comment("Written by `forgepatch patch lock` and `forgepatch apply --accept`; review changes "
                            "to it like code."))
    doc["format"] = FORMAT
    doc["patch"] = lock.patch_id
    sets = tomlkit.aot()
    for s in lock.sets:
        t = tomlkit.table()
        t["digest"] = s.digest
        t["accepted"] = _array(s.accepted)
        edits = tomlkit.aot()
        for e in s.edits:
            et = tomlkit.table()
            et["file"] = e.file
            et["function"] = e.function
            et["within"] = _array(e.within)
            et["before"] = _array(e.before)
            et["after"] = _array(e.after)
            edits.append(et)
        t["edit"] = edits
        sets.append(t)
    doc["set"] = sets
    return tomlkit.dumps(doc)


def _array(values) -> Any:
    import tomlkit

    arr = tomlkit.array()
    arr.extend(list(values))
    if len(values) > 1:
        arr.multiline(True)
    return arr


def write(lock: Lock) -> None:
    """Atomically (temp file + rename): a reader sees the old lock or the new one."""
    text = render(lock)
    lock.path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{lock.path.name}.", dir=lock.path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, lock.path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- reviewing a run -----------------------------------------------------------------------
def difference(edits: list[Edit], lock: Lock, arch: str) -> tuple[list[Edit], list[Edit], LockedSet | None]:
    """(edits not in the closest locked set, locked edits not made) against the locked set
    of ``arch`` that shares the most edits with ``edits``."""
    from collections import Counter

    def only_in(these: list[Edit], those: list[Edit]) -> list[Edit]:
        left = Counter(e.key for e in these) - Counter(e.key for e in those)
        out = []
        for e in these:
            if left[e.key] > 0:
                left[e.key] -= 1
                out.append(e)
        return out

    def diff(locked: list[Edit]):
        return only_in(edits, locked), only_in(locked, edits)

    best: tuple[list[Edit], list[Edit], LockedSet | None] = (list(edits), [], None)
    for s in lock.for_arch(arch):
        extra, gone = diff(s.edits)
        if best[2] is None or len(extra) + len(gone) < len(best[0]) + len(best[1]):
            best = (extra, gone, s)
    return best


def review(result: Any, patches: list[Any], texts: Any = None) -> None:
    """Give every patch of ``result`` its edit set, and mark ``review`` each patch whose lock
    accepts no equal set for the arch. ``texts`` is a run of the same series that produced
    file texts, when ``result`` is a status-only scan (drift)."""
    src = texts if texts is not None else result
    sets = series_edits(src.originals, [(p.patch_id, p.changes) for p in src.patches])
    by_id = {p.id: p for p in patches}
    for pres in result.patches:
        edits = sets.get(pres.patch_id, [])
        pres.edits = edits
        pres.edit_set = digest(edits) if edits else None
        patch = by_id.get(pres.patch_id)
        path = lock_path(patch) if patch is not None else None
        if not edits or path is None:
            continue
        lock = read(path, pres.patch_id)
        if lock is not None and lock.find(result.arch, edits) is not None:
            continue
        extra, gone, closest = difference(edits, lock or Lock(path, pres.patch_id), result.arch)
        locations = [Location(Status.REVIEW, e.file, e.line, e.function, f"new edit, not in the lock: {e.describe()}")
                     for e in extra]
        locations += [Location(Status.REVIEW, e.file, None, e.function, f"locked edit not made: {e.describe()}")
                      for e in gone]
        if lock is None:
            detail = (f"no lock ({path.name}): nobody accepted this patch's edits; {len(edits)} edit(s) to review; "
                      f"{ACCEPT_HINT}")
        elif closest is None:
            detail = (f"no edit set of {path.name} is accepted for {result.arch}: {len(edits)} edit(s) to review; "
                      f"{ACCEPT_HINT}")
        else:
            detail = (f"the edit set differs from the one accepted on {', '.join(closest.accepted[-3:])} "
                      f"({len(extra)} new, {len(gone)} gone; {path.name}); {ACCEPT_HINT}")
        pres.sites.append(SiteResult(EDIT_LOCK_SITE, Status.REVIEW, detail=detail, locations=locations))
        pres.status = Status.worst([pres.status, Status.REVIEW])


def accept(result: Any, patches: list[Any]) -> list[Path]:
    """Record every patch's edit set of ``result`` as reviewed on its arch and version (the
    patch's lock is created when it has none); clears the run's ``review`` findings.
    Returns the lock files written."""
    by_id = {p.id: p for p in patches}
    written = []
    for pres in result.patches:
        patch = by_id.get(pres.patch_id)
        path = lock_path(patch) if patch is not None else None
        if path is None or not pres.edits:
            continue
        lock = read(path, pres.patch_id) or Lock(path, pres.patch_id)
        if lock.accept(result.arch, result.version, pres.edits) or not path.exists():
            write(lock)
            written.append(path)
        if any(s.site == EDIT_LOCK_SITE for s in pres.sites):
            pres.sites = [s for s in pres.sites if s.site != EDIT_LOCK_SITE]
            pres.status = Status.worst([s.status for s in pres.sites])
    return written
