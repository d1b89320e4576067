"""Patches that are not libcst codemods: ``major-list`` (arch lists in Python files),
``text`` (anchored edits of ``.cu``/``.h``/``.json``/``.toml``/shell files) and
``add-files`` (files shipped next to the patch): the kinds and one runner shared by the
three (``codemods/major_list.py``, ``textpatch.py``, ``addfiles.py``; what their sites work
with is ``filesite.py``, the loader ``patchset.build_file_patch``).
"""

from __future__ import annotations

from forgepatch.patching.addfiles import AddFiles
from forgepatch.patching.codemods.major_list import MajorList
from forgepatch.patching.filesite import FileRun
from forgepatch.patching.model import ApplyResult, PatchResult, SiteResult, Status
from forgepatch.patching.textpatch import TextPatch

# kind name -> its class (a patch's ``codemod = "..."``)
KIND_CLASSES = {"major-list": MajorList, "text": TextPatch, "add-files": AddFiles}
KINDS = tuple(KIND_CLASSES)


def kind_class(name: str):
    if name not in KIND_CLASSES:
        raise ValueError(f"codemod: unknown kind {name!r}")
    return KIND_CLASSES[name]


def run_file_patch(patch, arch, version: str | None, overlay, pristine: bool, result: ApplyResult,
                   live) -> PatchResult:
    """Run a file patch's live sites (``live``: the sites whose ``applies_to`` holds)."""
    run = FileRun(patch, arch, version, overlay, pristine, result)
    kind = patch.codemod
    results = []
    for site in patch.sites:
        if site not in live:
            results.append(SiteResult(site.name, Status.NOT_APPLICABLE,
                                      detail=f"version {version} not in {site.applies_to}"))
            continue
        res = kind.run_site(run, site.name, patch.file_sites[site.name])
        if res.status is Status.DRIFT and not site.required:
            res = SiteResult(site.name, Status.NOT_APPLICABLE, detail=f"optional site: {res.detail}")
        results.append(res)
    return PatchResult(patch.id, patch.summary, Status.worst([s.status for s in results]), results, run.changes)
