"""``forgepatch results merge``: shard results (``forgepatch smoke --shard I/N --json``) into
one document, the one ``release`` and the reports read.

Jobs of shards of one run (same plan digest) are put back in the unsharded order, so the
merged table is the table an unsharded run prints. A job found in two files must be the same
result in both (the same file given twice is read once); two different results for one job
are refused, naming both: a merge never picks a winner silently.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from forgepatch.combination.results import JobResult, SmokeResults, Source
from forgepatch.errors import BadInput


@dataclass
class Merged:
    doc: SmokeResults
    files: int  # distinct input files
    missing: int | None  # jobs of the plan no input holds (None: inputs of different plans)


def _what(job: JobResult, path: Path) -> str:
    image = f" on image {job.image_id[:19]}" if job.image_id else ""
    when = f", finished {job.finished_at}" if job.finished_at else ""
    return f"{path} says {job.status}{image}{when}"


def merge(paths: list[Path]) -> Merged:
    """Merge results files; BadInput for an unreadable file or conflicting duplicates."""
    if not paths:
        raise BadInput("results merge: give the results files to merge")
    docs: list[tuple[Path, SmokeResults]] = []
    sources: list[Source] = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise BadInput(f"{path}: cannot read results: {exc.strerror}") from None
        sha = hashlib.sha256(data).hexdigest()
        if any(s.sha256 == sha for s in sources):
            continue  # the same file twice
        docs.append((Path(path), SmokeResults.parse(path, data)))
        sources.append(Source(path=str(path), sha256=sha))

    jobs: dict[str, tuple[JobResult, Path]] = {}
    for path, doc in docs:
        for job in doc.jobs:
            seen = jobs.get(job.id)
            if seen is None:
                jobs[job.id] = (job, path)
            elif seen[0].to_dict() != job.to_dict():
                raise BadInput(f"results merge: conflicting results for job {job.id}: {_what(*seen)}; "
                               f"{_what(job, path)} (merge the shards of one smoke run)")
    digests = {doc.plan.digest if doc.plan else None for _, doc in docs}
    one_plan = len(digests) == 1 and None not in digests
    merged = [job for job, _ in jobs.values()]
    if one_plan:
        merged.sort(key=lambda j: (j.index is None, j.index or 0))
    plan = docs[0][1].plan if one_plan else None
    doc = SmokeResults.of(merged, plan=plan, merged_from=sources)
    return Merged(doc, len(docs), plan.jobs - len(merged) if plan else None)
