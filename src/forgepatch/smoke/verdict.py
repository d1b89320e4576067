"""The verdict of one smoke job (policy): pass / fail / timeout / skipped / error / interrupted
from what a runner saw (``jobs.RunOutcome``), the monitor's triage and, for a probe, its JSON
document; the image's labels and the imported versions recorded on the result
(``combination.results.JobResult``, the results schema). Every runner's outcome is judged here.
"""

from __future__ import annotations

from forgepatch import utctime
from forgepatch.combination import LABEL
from forgepatch.combination.results import JobResult, Toolchain
from forgepatch.inimage.monitor import extract_json, with_probe_verdict
from forgepatch.smoke.jobs import JobSpec, RunOutcome


def judge(spec: JobSpec, out: RunOutcome, runner: str = "") -> JobResult:
    """Pass / fail / timeout / skipped for one job, with the monitor's findings attached."""
    doc = extract_json(out.stdout) if spec.kind == "probe" else None
    t = with_probe_verdict(out.triage, doc)
    found = (doc or {}).get("toolchain") or t.toolchain
    imported = (doc or {}).get("imported") or t.imported
    labels = out.image_labels
    res = JobResult(
        id=spec.id, arch=spec.arch, pin=spec.pin, profile=spec.profile, kind=spec.kind, status="fail",
        summary="", index=spec.index, flags=list(spec.flags), image=spec.image, runner=runner, signature=t.signature,
        label=t.label, last_phase=t.last_phase, failing_phase=t.failing_phase, error_line=t.error_line,
        error_lineno=t.error_lineno, exit_code=out.exit_code, timed_out=out.timed_out, log_path=out.log_path,
        duration_s=round(out.duration_s, 3), gpu_ids=list(out.gpu_ids), required=spec.required,
        context=[{"lineno": n, "line": s} for n, s in t.context], notes=list(t.notes),
        image_id=out.image_id, image_digest=out.image_digest, patchset=labels.get(LABEL["patchset"]), audit=spec.audit,
        upstream=labels.get(LABEL["upstream"]), engine=labels.get(LABEL["engine"]),
        packages=labels.get(LABEL["packages"]),
        toolchain=Toolchain.model_validate(found) if isinstance(found, dict) else None,
        imported=imported if isinstance(imported, dict) else None,
        finished_at=utctime.iso(),
    )
    seen = {p[0] for p in t.phases}
    if out.error:
        res.status, res.summary = "error", out.error
        return res
    if out.interrupted:
        res.status, res.summary = "interrupted", "interrupted"
        return res
    if spec.kind == "probe":
        res.probe = doc
        res.verdict = (doc or {}).get("verdict")
        if res.verdict == "pass" and out.exit_code == 0:
            res.status = "pass"
        elif res.verdict in ("no-gpu",) and not out.timed_out:
            res.status, res.summary = "skipped", "probe: no GPU visible"
    elif spec.kind == "server":
        if out.exit_code == 0 and not out.timed_out and "answered" in seen:
            res.status = "pass"
    elif out.exit_code == 0 and not out.timed_out:
        res.status = "pass"
    if (out.timed_out or t.signature == "timeout") and res.status != "pass":
        res.status = "timeout"
    if res.status == "pass":
        res.summary = "pass"
        res.signature = res.label = res.failing_phase = res.error_line = res.error_lineno = None
        res.context = []
    elif not res.summary:
        if not res.label:
            res.signature, res.label = ("timeout", "timeout") if out.timed_out else ("exit", f"exit code {out.exit_code}")
        res.summary = res.label + (f" in {res.failing_phase}" if res.failing_phase else "")
        if res.status == "timeout" and res.signature != "timeout":
            res.summary += " (then timed out)"
    return res
