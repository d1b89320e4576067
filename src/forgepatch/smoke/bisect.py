"""Flag bisection: the smallest set of a failing profile's flag groups that still fails.

Delta debugging (Zeller & Hildebrandt's ddmin) over flag groups (``--ep-size 8`` is one
group). A launch "reproduces" the failure when it fails with the same signature as the whole
profile; a different failure (a flag subset the server rejects, say) is *unresolved* and is not
reduced to. Every result is cached by (image, runner, command, flag set), so a rerun, or a
subset ddmin asks for twice, costs no launch (``result_cache``). The report names the culprit set and the
flags it exonerates: "fusion exonerated; EP8 alone fails with CUBLAS_STATUS_EXECUTION_FAILED in
graph capture".
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from typing import Callable

from forgepatch.combination.results import JobResult

# Short names for well-known SGLang flags in the report ({v} is the flag's value).
ALIASES = {
    "--tp-size": "TP{v}",
    "--tp": "TP{v}",
    "--ep-size": "EP{v}",
    "--ep": "EP{v}",
    "--dp-size": "DP{v}",
    "--pp-size": "PP{v}",
    "--enable-nccl-nvls": "NVLS",
    "--enable-flashinfer-allreduce-fusion": "fusion",
    "--disable-cuda-graph": "no CUDA graphs",
    "--enable-dp-attention": "DP attention",
    "--enable-torch-compile": "torch.compile",
    "--speculative-num-draft-tokens": "draft tree budget {v}",
}


def flag_label(group: str) -> str:
    name, _, value = group.strip().partition(" ")
    alias = ALIASES.get(name)
    return alias.format(v=value.strip()) if alias else group.strip()


def split(items: list[str], n: int) -> list[list[str]]:
    """``items`` in ``n`` contiguous chunks, the first ones one larger when uneven."""
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def ddmin(items: list[str], test: Callable[[list[str]], str]) -> list[str]:
    """1-minimal failing subset of ``items`` (``test`` -> "fail" | "pass" | "unresolved");
    ``test(items)`` must be "fail". Order of ``items`` is kept in every subset."""
    c, n = list(items), 2
    while len(c) >= 2:
        chunks = split(c, n)
        for chunk in chunks:
            if test(chunk) == "fail":
                c, n = chunk, 2
                break
        else:
            for chunk in chunks:
                comp = [x for x in c if x not in chunk]
                if len(chunks) > 2 and test(comp) == "fail":
                    c, n = comp, max(n - 1, 2)
                    break
            else:
                if n >= len(c):
                    break
                n = min(len(c), 2 * n)
    return c


@dataclass
class Trial:
    flags: list[str]
    outcome: str  # fail | pass | unresolved
    cached: bool
    summary: str
    log_path: str | None = None


@dataclass
class BisectReport:
    profile: str
    arch: str
    pin: str
    flags: list[str]
    reproduced: bool  # the whole profile failed, so there was something to bisect
    culprits: list[str] = field(default_factory=list)
    exonerated: list[str] = field(default_factory=list)
    signature: str | None = None
    label: str | None = None
    failing_phase: str | None = None
    launches: int = 0  # jobs actually run (cache misses)
    tests: int = 0  # subsets evaluated (cache hits included)
    trials: list[Trial] = field(default_factory=list)

    @property
    def sentence(self) -> str:
        if not self.reproduced:
            return f"profile {self.profile} passes on {self.arch}/{self.pin}: nothing to bisect"
        what = self.label or self.signature or "a failure"
        where = f" in {self.failing_phase}" if self.failing_phase else ""
        names = [flag_label(f) for f in self.culprits]
        if not names:
            head = f"it fails with {what}{where} whatever the flags"
        elif len(names) == 1:
            head = f"{names[0]} alone fails with {what}{where}"
        else:
            head = f"{' + '.join(names)} together fail with {what}{where} (no smaller subset does)"
        exo = ", ".join(flag_label(f) for f in self.exonerated)
        return f"{exo} exonerated; {head}" if exo else head

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["sentence"] = self.sentence
        return doc


def bisect_profile(flags: list[str], launch: Callable[[list[str]], JobResult], key: Callable[[list[str]], str],
                   cache: ResultCache | None, profile: str = "", arch: str = "", pin: str = "") -> BisectReport:
    """Run ddmin over ``flags``; ``launch(subset)`` runs one job; ``key(subset)`` is its cache key."""
    report = BisectReport(profile, arch, pin, list(flags), reproduced=False)
    memo: dict[tuple[str, ...], JobResult] = {}

    def result_for(subset: list[str]) -> tuple[JobResult, bool]:
        k = tuple(sorted(subset))
        if k in memo:
            return memo[k], True
        cached = cache.get(key(subset)) if cache else None
        if cached is not None and cached.status not in ("error", "interrupted"):
            memo[k] = cached
            return cached, True
        res = launch(subset)
        report.launches += 1
        if res.status == "interrupted":
            raise KeyboardInterrupt
        if cache and res.status != "error":
            cache.put(key(subset), res)
        memo[k] = res
        return res, False

    full, cached = result_for(list(flags))
    report.trials.append(Trial(list(flags), "fail" if full.failed else "pass", cached, full.summary, full.log_path))
    report.tests = 1
    if not full.failed:
        return report
    report.reproduced = True
    report.signature, report.label, report.failing_phase = full.signature, full.label, full.failing_phase

    def test(subset: list[str]) -> str:
        res, was_cached = result_for(subset)
        report.tests += 1
        if not res.failed:
            outcome = "pass"
        elif res.signature == full.signature:
            outcome = "fail"
        else:
            outcome = "unresolved"
        report.trials.append(Trial(list(subset), outcome, was_cached, res.summary, res.log_path))
        return outcome

    culprits = ddmin(list(flags), test) if len(flags) > 1 else list(flags)
    report.culprits = culprits
    report.exonerated = [f for f in flags if f not in culprits]
    return report


def subset_id(base: str, subset: list[str]) -> str:
    digest = hashlib.sha1("\n".join(subset).encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", "-".join(flag_label(f) for f in subset))[:40].strip("-") or "none"
    return f"{base}-bisect-{slug}-{digest}"
