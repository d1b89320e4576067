"""LibCST's ``CodemodTest`` habit for forgepatch patches: a patch, a ``before``, an ``after``.

:func:`assert_patch` runs the real engine (``run_patches``: the codemod, the self-check and the
per-arch evaluation) on a small in-memory tree and compares the edited file exactly, showing a
unified diff when it differs; ``after=None`` means the file must stay as it was, and ``status``
names the refusal the run must end in (``drift``, ``unverified``, ``review`` ...), nothing written.
A second run over the output must change nothing (idempotence).
"""

from __future__ import annotations

import difflib
import textwrap
from pathlib import Path

# what SGLang's utils module provides, for trees whose sibling predicates are imported from it
UTILS = {"srt/utils.py": "def is_sm90_supported(): ...\ndef is_sm100_supported(): ...\n"
                         "def is_sm120_supported(): ...\ndef is_sm103_supported(): ...\n"}


def patch(toml: str):
    """A Patch from TOML text, read as a patch file named by its ``id`` is (``BadInput`` for a bad one)."""
    import tomllib

    from forgepatch.patching.patchset import _toml_patch

    text = textwrap.dedent(toml)
    return _toml_patch(Path(f"{tomllib.loads(text).get('id', 'case')}.toml"), text.encode())


def assert_patch(toml: str, before: str, after: str | None = None, *, path: str = "srt/case.py",
                 arch: str = "sm120", context: dict[str, str] | None = None, status: str | None = None,
                 version: str | None = None):
    """Run ``toml``'s patch on {path: before} + context for ``arch``; see the module doc."""
    from forgepatch.arch import get_arch
    from forgepatch.patching.engine import run_patches
    from forgepatch.patching.trees import MemoryTree

    before = textwrap.dedent(before).lstrip("\n")
    files = {**UTILS, **(context or {}), path: before}
    the_patch = patch(toml)
    res = run_patches(MemoryTree(files, pristine=True), [the_patch], get_arch(arch), version, evaluate=True)
    got = res.changed.get(path, before)
    if status is not None:
        found = {loc.status.value for p in res.patches for s in p.sites for loc in s.locations}
        found |= {s.status.value for p in res.patches for s in p.sites} | {p.status.value for p in res.patches}
        assert res.drift, f"expected the run to refuse ({status}), it passed:\n{_diff(before, got)}"
        assert status in found, f"expected {status}, got {sorted(found)}: {res.to_json()}"
        return res
    assert not res.drift, f"the run refused: {res.to_json()}"
    want = before if after is None else textwrap.dedent(after).lstrip("\n")
    assert got == want, f"{path} (- expected, + got):\n{_diff(want, got)}"
    if after is not None:
        again = run_patches(MemoryTree({**files, path: got}), [the_patch], get_arch(arch), version)
        assert not again.drift and not again.changed, f"not idempotent: {again.to_json()}"
    return res


def _diff(want: str, got: str) -> str:
    return "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "expected", "got"))
