"""Smoke results as JUnit XML and a Markdown compatibility table (the JSON document is
``combination.results.SmokeResults``).

Table: one row per arch x pin, one column per profile; a cell is ``pass``, ``skip (why)``, or
``FAIL: <signature> in <phase>`` (a failure no signature names: its exit code and the job's
last output line); ``-`` where that combination is not in the matrix. Below the
table, "Known issues": for each failed job whose signature was posted in a public issue, the
issue and its workaround; then the warnings (note signatures) each job's log carried.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from forgepatch.combination.results import JobResult
from forgepatch.infra.atomic import write_atomic


def cell(r: JobResult) -> str:
    if r.status == "pass":
        return "pass"
    if r.status == "skipped":
        return f"skip ({r.summary.removeprefix('probe: ')})"
    text = r.label or r.summary or r.status  # an error (no label) shows its message
    if r.signature == "exit" and r.error_line:  # no signature: what the job said last
        text = f"{text}: {r.error_line.strip()}"
    text = text.replace("|", "\\|")
    if len(text) > 80:
        text = text[:77] + "..."
    where = f" in {r.failing_phase}" if r.failing_phase else ""
    tag = "TIMEOUT" if r.status == "timeout" else r.status.upper()
    return f"**{tag}**: {text}{where}"


def to_markdown(results: list[JobResult]) -> str:
    profiles: list[str] = []
    rows: dict[tuple[str, str], dict[str, JobResult]] = {}
    for r in results:
        if r.profile not in profiles:
            profiles.append(r.profile)
        rows.setdefault((r.arch, r.pin), {})[r.profile] = r
    lines = ["| arch | pin | " + " | ".join(profiles) + " |", "|---|---|" + "---|" * len(profiles)]
    for (arch, pin), by_prof in rows.items():
        cells = [cell(by_prof[p]) if p in by_prof else "-" for p in profiles]
        lines.append(f"| {arch} | {pin} | " + " | ".join(cells) + " |")
    return "\n".join(lines + advice(results)) + "\n"


def advice(results: list[JobResult]) -> list[str]:
    """Markdown lines: the field knowledge of each failure, then the notes seen (deduplicated)."""
    known = [f"- {r.id}: {r.advice}" for r in results if r.advice]
    notes: dict[str, list[str]] = {}
    for r in results:
        for n in r.notes:
            text = n.get("label", n.get("id", "")) + (f" ({n['advice']})" if n.get("advice") else "")
            notes.setdefault(text, []).append(r.id)
    out = ["", "Known issues:", *known] if known else []
    if notes:
        out += ["", "Notes (warnings in the logs):", *(f"- {text}: {', '.join(ids)}" for text, ids in notes.items())]
    return out


def to_junit(results: list[JobResult], name: str = "forgepatch-smoke") -> str:
    suite = ET.Element("testsuite", name=name, tests=str(len(results)),
                       failures=str(sum(r.status in ("fail", "timeout") for r in results)),
                       errors=str(sum(r.status in ("error", "interrupted") for r in results)),
                       skipped=str(sum(r.status == "skipped" for r in results)),
                       time=f"{sum(r.duration_s for r in results):.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"smoke.{r.arch}.{r.pin}", name=r.profile, time=f"{r.duration_s:.3f}")
        detail = "\n".join(
            [f"last phase: {r.last_phase}", f"failing phase: {r.failing_phase}", f"exit code: {r.exit_code}",
             f"log: {r.log_path}"] + ([r.advice] if r.advice else []) + [f"note: {n.get('label')}" for n in r.notes] + [""]
            + [f"{c['lineno']:>6}  {c['line']}" for c in r.context]
        )
        if r.status in ("fail", "timeout"):
            ET.SubElement(case, "failure", message=r.summary, type=r.signature or r.status).text = detail
        elif r.status in ("error", "interrupted"):
            ET.SubElement(case, "error", message=r.summary, type=r.status).text = detail
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", message=r.summary)
        ET.SubElement(case, "system-out").text = f"log: {r.log_path}"
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_text(path: Path, text: str) -> None:
    """Transactional write: temp file in the same directory, then rename."""
    write_atomic(Path(path), text)
