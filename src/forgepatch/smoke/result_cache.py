"""Smoke job results kept on disk by what decides them (policy): the runner, the image, the
command, the flag set and the fingerprint of what ran. Plain ``smoke`` and flag bisection read
it, so a rerun, or a subset ddmin asks for twice, costs no launch."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from forgepatch.combination.results import JobResult
from forgepatch.smoke.jobs import JobSpec
from forgepatch.smoke.report import write_text


class ResultCache:
    """Job results on disk, one JSON file per key (written by rename)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def get(self, key: str) -> JobResult | None:
        path = self.root / f"{key}.json"
        try:
            return JobResult.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def put(self, key: str, result: JobResult) -> None:
        write_text(self.root / f"{key}.json", json.dumps(result.to_dict(), indent=1, default=str))


def cache_key(spec: JobSpec, runner: str, fingerprint: str = "") -> str:
    base = [a for a in spec.command if a not in spec.flags]
    doc = {"runner": runner, "image": spec.image, "fingerprint": fingerprint, "kind": spec.kind, "command": base,
           "flags": sorted(spec.flags), "env": spec.env, "markers": spec.markers, "arch": spec.arch, "pin": spec.pin}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
