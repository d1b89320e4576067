"""What the probe reports, without torch: check results, tolerances, failure signatures,
device compatibility, the verdict and its exit code, the JSON document and the summary text.

Standard library + ``forgepatch.arch`` only, so all of it is testable on a machine without a GPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from forgepatch import arch as archmod
from forgepatch.inimage.signatures import SIGNATURES

SCHEMA = "forgepatch.probe/1"

PASS, FAIL, INCOMPATIBLE, NO_GPU = "pass", "fail", "incompatible", "no-gpu"
EXIT_CODES = {PASS: 0, FAIL: 1, INCOMPATIBLE: 3, NO_GPU: 3}


@dataclass(frozen=True)
class Tolerance:
    """Element-wise closeness: ``|out - ref| <= atol + rtol * |ref|`` (torch.allclose's rule)."""

    rtol: float
    atol: float

    def allows(self, error: float, ref: float) -> bool:
        if math.isnan(error) or math.isnan(ref):
            return False
        return abs(error) <= self.atol + self.rtol * abs(ref)

    def compare(self, out: Sequence[float], ref: Sequence[float]) -> tuple[bool, float]:
        """(all elements close, max absolute error); a length mismatch is never close."""
        if len(out) != len(ref):
            return False, math.inf
        ok, worst = True, 0.0
        for o, r in zip(out, ref):
            err = abs(o - r)
            if math.isnan(err):
                return False, math.nan
            worst = max(worst, err)
            ok = ok and self.allows(err, r)
        return ok, worst

    def describe(self) -> str:
        return f"|out-ref| <= {self.atol:g} + {self.rtol:g}*|ref|"


# bf16 keeps 8 significant bits (relative spacing 2**-7 = 0.0078); a graph replay runs the same
# kernels as eager mode, so two bf16 roundings of slack are plenty.
BF16_VS_EAGER = Tolerance(rtol=1.6e-2, atol=1e-2)
# Against an fp32 reference the bf16 chain rounds several times: a looser sanity bound that still
# catches garbage (wrong kernel, uninitialised memory, NaN).
BF16_VS_FP32 = Tolerance(rtol=5e-2, atol=5e-2)
# Integer-valued bf16 sums below 256 are exact.
EXACT = Tolerance(rtol=0.0, atol=0.0)


@dataclass
class CheckResult:
    """One check (bmm, mlp, allreduce): status pass | fail | skipped, where it failed and why."""

    name: str
    status: str
    seconds: float = 0.0
    phase: str | None = None
    signature: str | None = None
    detail: str | None = None
    max_error: float | None = None
    tolerance: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    ranks: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        if doc["ranks"] is None:
            del doc["ranks"]
        for key in ("max_error", "seconds"):
            if isinstance(doc[key], float) and not math.isfinite(doc[key]):
                doc[key] = str(doc[key])  # JSON has no NaN/inf
        return doc


def signature_of(text: str) -> str:
    """A short, stable signature for a check's failure: the most telling entry of the
    signature table (``signatures.SIGNATURES``, highest rank, earliest line) the text holds,
    else the last non-empty line (a traceback's ``Type: message``), at most 200 characters."""
    # Search the messages, not the source lines a traceback quotes (indented frame lines).
    messages = [line for line in text.splitlines() if not line.startswith((" ", "\t"))]
    best = None
    for sig in SIGNATURES:
        if sig.note:
            continue  # a warning, not what failed
        rx = sig.compiled()
        for no, line in enumerate(messages):
            m = rx.search(line)
            if m and (best is None or (-sig.rank, no) < (-best[0].rank, best[1])):
                best = (sig, no, m)
                break
    if best is not None:
        return best[0].describe(best[2].groupdict(), long=True)[:200]
    lines = [line.strip() for line in (messages or text.splitlines()) if line.strip()]
    return (lines[-1] if lines else "unknown failure")[:200]


def assess_devices(
    arch_list: Sequence[str],
    devices: Iterable[tuple[str, tuple[int, int]]],
    expected: archmod.Arch | None,
) -> tuple[bool, list[str]]:
    """Can this torch build (``arch_list``) and an image built for ``expected`` run on every
    device? Returns (ok, reasons); a reason per device and per rule, by NVIDIA's rules."""
    ok, reasons = True, []
    for name, cc in devices:
        runs, why = archmod.compatibility(list(arch_list), cc)
        ok = ok and runs
        reasons.append(f"{name}: torch {why}")
        if expected is not None:
            matches, why = archmod.image_targets_device(expected, cc)
            ok = ok and matches
            reasons.append(f"{name}: {why}")
    return ok, reasons


def aggregate_verdict(
    checks: Sequence[CheckResult], *, no_gpu: bool = False, incompatible: bool = False
) -> str:
    """no-gpu beats incompatible beats fail beats pass; skipped checks count for neither, and a
    run where no check passed is not a pass."""
    if no_gpu:
        return NO_GPU
    if incompatible:
        return INCOMPATIBLE
    if any(c.status == FAIL for c in checks):
        return FAIL
    if any(c.status == PASS for c in checks):
        return PASS
    return FAIL


def build_document(
    *,
    verdict: str,
    reason: str,
    versions: dict[str, Any],
    devices: list[dict[str, Any]],
    torch_arch_list: list[str],
    expected_arch: str | None,
    expected_arch_source: str | None,
    compatibility: dict[str, Any] | None,
    settings: dict[str, Any],
    checks: Sequence[CheckResult],
    timings: dict[str, float],
    seconds: float,
    toolchain: dict[str, Any] | None = None,
    imported: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The probe's one JSON document (schema ``forgepatch.probe/1``; ``imported``: the SGLang and
    FlashInfer this process imported, ``inimage.imported``)."""
    return {
        "schema": SCHEMA,
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "reason": reason,
        "expected_arch": expected_arch,
        "expected_arch_source": expected_arch_source,
        "versions": versions,
        "toolchain": toolchain,
        "imported": imported,
        "devices": devices,
        "torch_arch_list": torch_arch_list,
        "compatibility": compatibility,
        "settings": settings,
        "checks": [c.as_dict() for c in checks],
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "seconds": round(seconds, 3),
    }


def _fmt_metrics(metrics: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def format_summary(doc: dict[str, Any]) -> str:
    """A readable plain-text summary of a probe document (no rich: the probe is stdlib-only)."""
    out = [f"forgepatch probe: {doc['verdict'].upper()}  ({doc['seconds']:.2f} s)  {doc['reason']}"]
    v = doc.get("versions") or {}
    if v:
        out.append("  " + "  ".join(f"{k} {v[k]}" for k in v if v[k] is not None))
    for d in doc.get("devices") or []:
        out.append(f"  gpu {d['index']}: {d['name']} (sm_{d['cc'].replace('.', '')}, {d.get('arch') or 'unknown arch'})")
    if doc.get("torch_arch_list"):
        out.append("  torch arch list: " + " ".join(doc["torch_arch_list"]))
    if doc.get("expected_arch"):
        out.append(f"  expected arch: {doc['expected_arch']} (from {doc['expected_arch_source']})")
    comp = doc.get("compatibility")
    if comp and not comp["ok"]:
        out.extend("  incompatible: " + r for r in comp["reasons"])
    for c in doc.get("checks") or []:
        line = f"  [{c['status']:^7}] {c['name']:<10} {c['seconds']:.3f} s"
        if c.get("max_error") is not None:
            line += f"  max_error={c['max_error']:.3g}" if isinstance(c["max_error"], float) else f"  max_error={c['max_error']}"
        if c.get("metrics"):
            line += "  " + _fmt_metrics(c["metrics"])
        out.append(line)
        if c["status"] == FAIL:
            out.append(f"           phase={c.get('phase')} signature={c.get('signature')}")
        for r in c.get("ranks") or []:
            rline = f"           rank {r['rank']}: {r['status']}"
            if r.get("status") == FAIL:
                rline += f" phase={r.get('phase')} signature={r.get('signature')}"
            elif r.get("metrics"):
                rline += "  " + _fmt_metrics(r["metrics"])
            out.append(rline)
    return "\n".join(out)
