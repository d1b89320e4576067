"""``forgepatch pin follow``: keep the pins moving with upstream (Renovate's habit).

Finds the newest SGLang release on PyPI (``pip index versions sglang``: pip's own index
configuration applies), adds it as a pin (``pin add --pypi``: the wheel's sha256 recorded)
unless a pin already names it, runs every arch's patch series over it in memory (the check
``apply``/``drift`` run: applied, already-applied, absorbed upstream, drift, incomplete) and
returns a report a scheduled job can put in a pull request's body.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forgepatch.errors import BadInput
from forgepatch.fork.pins import add_pin
from forgepatch.patching.service import run_arch

PACKAGE = "sglang"


def newest_release(package: str = PACKAGE) -> str:
    """The newest final release of ``package`` the configured index lists (BadInput if pip
    cannot say)."""
    from packaging.version import InvalidVersion, Version

    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if proc.returncode != 0 or line is None:
        last = (proc.stderr.strip().splitlines() or ["no versions listed"])[-1]
        raise BadInput(f"pin follow: `pip index versions {package}` failed: {last}")
    versions = []
    for text in line.split(":", 1)[1].split(","):
        try:
            v = Version(text.strip())
        except InvalidVersion:
            continue
        if not v.is_prerelease and not v.is_devrelease:
            versions.append(v)
    if not versions:
        raise BadInput(f"pin follow: the index lists no final release of {package}")
    return str(max(versions))


@dataclass
class ArchCheck:
    arch: str
    status: str  # the series' worst status (applied, already-applied, ..., drift, incomplete)
    patches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status in ("drift", "incomplete")


@dataclass
class FollowReport:
    version: str
    pin: str
    added: bool  # False: a pin named this release already
    checks: list[ArchCheck]

    @property
    def drift(self) -> bool:
        return any(c.failed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "pin": self.pin, "added": self.added, "drift": self.drift,
                "arches": [{"arch": c.arch, "status": c.status, "patches": c.patches} for c in self.checks]}

    def title(self) -> str:
        verdict = "drift: patches need work" if self.drift else "patches apply"
        return f"forgepatch: pin SGLang {self.version} ({self.pin}): {verdict}"

    def markdown(self) -> str:
        lines = [f"## {self.title()}", "",
                 (f"`forgepatch pin follow` added pin `{self.pin}` (PyPI `sglang=={self.version}`, wheel sha256 recorded)."
                  if self.added else f"Pin `{self.pin}` already names SGLang {self.version}; nothing added."), "",
                 "| arch | patch | status | where |", "|---|---|---|---|"]
        for c in self.checks:
            for p in c.patches or [{"patch": "(no patches)", "status": c.status, "where": ""}]:
                lines.append(f"| {c.arch} | {p['patch']} | {p['status']} | {p['where']} |".replace("\n", " "))
        if self.drift:
            lines += ["", "A patch that drifts or is incomplete must be fixed before this pin can be forked, built "
                      "and released: `forgepatch apply --arch ARCH --pin " + self.pin + "` shows the sites and candidates."]
        return "\n".join(lines) + "\n"


def _where(patch) -> str:
    bad = [s for s in patch.sites if s.status.failed]
    parts = []
    for s in bad or []:
        spot = f"{s.file}:{s.line}" if s.file else "not found"
        parts.append(f"{s.site}: {s.status.value} ({spot}{'; ' + s.detail if s.detail else ''})")
    return "; ".join(parts)


def follow(config: Path, library, version: str | None = None) -> FollowReport:
    """Add the newest release (or ``version``) as a pin of ``config`` unless one names it,
    and check every arch's series on it."""
    from forgepatch.config import load_matrix  # heavy: pydantic (the matrix schema)

    newest = version or newest_release()
    matrix = load_matrix(config, library)
    named = [n for n, p in matrix.pins.items() if p.pypi == newest]
    added = not named
    pin = named[0] if named else f"v{newest}"
    if added:
        if pin in matrix.pins:
            raise BadInput(f"pin follow: a pin named {pin!r} exists in {config} but is not pypi {newest}")
        add_pin(config, pin, pypi=newest)
        matrix = load_matrix(config, library)
    checks = []
    for arch, cfg in matrix.arches.items():
        if not cfg.patches:
            checks.append(ArchCheck(arch, "no patches"))
            continue
        result, _, _, _ = run_arch(arch, f"pypi:{newest}", matrix, library)
        checks.append(ArchCheck(arch, result.status, [
            {"patch": p.patch_id, "status": p.status.value, "where": _where(p)} for p in result.patches]))
    return FollowReport(newest, pin, added, checks)
